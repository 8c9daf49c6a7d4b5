"""Column rules: which source columns binlake keeps, and which it stores masked.

``source.columns`` maps table patterns (like ``source.tables``) to one rule each::

    source:
      columns:
        "shop.customers": {exclude: [ssn, notes], mask: {email: hash, phone: "null"}}
        "crm.*": {include: [id, name, city]}
      mask_salt: "{{secrets/binlake/mask-salt}}"   # needed by any `hash` mask

- An excluded column (or one an ``include`` list leaves out) is never read into bronze:
  snapshot SELECTs do not name it and capture drops it from the row images before anything
  is written. Key columns cannot be excluded.
- A masked column is stored masked in every layer: ``hash`` is the hex SHA-256 of the salt
  and the canonical text (so equal values still join across tables, unreadable), ``null``
  stores NULL. A masked key column changes what rows join on, so it needs ``mask_key: true``
  in the rule.

The first pattern that matches a table, in the config's order, is its rule. A rule's
:meth:`ColumnRule.digest` is recorded with the table's schema, so a table whose rules change
while it has data is stopped instead of mixing old and new images.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from binlake.contract.types import Column, Kind, TableSchema

HASH, NULL = "hash", "null"
MASKS = (HASH, NULL)


class ColumnRuleError(ValueError):
    """A column rule that does not fit the table it applies to (the config loader and the
    schema readers turn it into a one-line ConfigError or SchemaChangeError)."""


@dataclass(frozen=True)
class ColumnRule:
    pattern: str
    include: tuple[str, ...] | None = None  # None: every column not excluded
    exclude: tuple[str, ...] = ()
    mask: Mapping[str, str] = field(default_factory=dict)  # column -> hash | null
    mask_key: bool = False

    def __post_init__(self) -> None:
        where = f"source.columns[{self.pattern!r}]"
        if self.include is not None and self.exclude:
            raise ColumnRuleError(f"{where} has both include and exclude: keep one of them")
        if self.include is not None and not self.include:
            raise ColumnRuleError(f"{where}.include is empty: list the columns to keep, or drop the rule")
        for column, how in self.mask.items():
            if how not in MASKS:
                raise ColumnRuleError(f"{where}.mask.{column} must be hash or null, got {how!r}")
            if column in self.exclude or (self.include is not None and column not in self.include):
                raise ColumnRuleError(f"{where} masks {column}, which it also drops: keep one of the two")

    def matches(self, db: str, table: str) -> bool:
        return fnmatch.fnmatchcase(f"{db}.{table}", self.pattern)

    def keeps(self, column: str) -> bool:
        return column not in self.exclude and (self.include is None or column in self.include)

    def check(self, name: str, columns: tuple[str, ...], key: tuple[str, ...]) -> None:
        """Raise :class:`ColumnRuleError` when the rule names a column ``name`` lacks, drops a
        key column, or masks one without ``mask_key``."""
        where = f"source.columns[{self.pattern!r}]"
        named = set(self.exclude) | set(self.include or ()) | set(self.mask)
        unknown = sorted(named - set(columns))
        if unknown:
            raise ColumnRuleError(f"{where} names {', '.join(unknown)}, which {name} does not have: "
                                  f"its columns are {', '.join(columns)}")
        dropped = [k for k in key if not self.keeps(k)]
        if dropped:
            raise ColumnRuleError(f"{where} drops key column {', '.join(dropped)} of {name}: binlake needs the key; "
                                  "mask it instead (with mask_key: true) or keep it")
        masked = [k for k in key if k in self.mask]
        if masked and not self.mask_key:
            raise ColumnRuleError(f"{where} masks key column {', '.join(masked)} of {name}: that changes what rows "
                                  "join on; add mask_key: true to the rule if that is intended")

    def digest(self) -> str:
        """A short id of what the rule does, recorded with the table's schema."""
        text = json.dumps({"include": self.include, "exclude": sorted(self.exclude),
                           "mask": dict(sorted(self.mask.items())), "mask_key": self.mask_key}, sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "include": list(self.include) if self.include is not None else None,
                "exclude": list(self.exclude), "mask": dict(self.mask), "mask_key": self.mask_key}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "ColumnRule":
        return ColumnRule(pattern=d["pattern"], include=tuple(d["include"]) if d["include"] is not None else None,
                          exclude=tuple(d["exclude"]), mask=dict(d["mask"]), mask_key=bool(d["mask_key"]))


def rule_for(rules: tuple[ColumnRule, ...], db: str, table: str) -> ColumnRule | None:
    """The first rule whose pattern matches ``db.table``, or None (every column, unmasked)."""
    return next((r for r in rules if r.matches(db, table)), None)


def masked_text(how: str, salt: str, text: str | None) -> str | None:
    """One canonical text as a mask stores it: ``hash`` keeps NULL as NULL."""
    if how == NULL or text is None:
        return None
    return hashlib.sha256((salt + "\x00" + text).encode("utf-8", "surrogateescape")).hexdigest()


def apply_to_image(rule: ColumnRule | None, salt: str, image: dict[str, str | None] | None) -> dict | None:
    """A row image (column -> canonical text) with the rule applied: dropped columns gone,
    masked ones masked. The image is changed in place and returned."""
    if rule is None or image is None:
        return image
    for column in [c for c in image if not rule.keeps(c)]:
        del image[column]
    for column, how in rule.mask.items():
        if column in image:
            image[column] = masked_text(how, salt, image[column])
    return image


def apply_to_schema(rule: ColumnRule | None, schema: TableSchema) -> TableSchema:
    """The table as binlake stores it: kept columns only, a ``hash`` column as a string of
    64 hex digits, a ``null`` column nullable; the rule's digest in ``column_rules``."""
    if rule is None:
        return schema
    rule.check(schema.name, tuple(c.name for c in schema.columns), schema.key)
    columns = []
    for c in schema.columns:
        if not rule.keeps(c.name):
            continue
        how = rule.mask.get(c.name)
        if how == HASH:
            c = Column(name=c.name, kind=Kind.STRING, nullable=c.nullable, comment=c.comment,
                       mysql_type=f"sha256({c.mysql_type})")
        elif how == NULL:
            c = replace(c, nullable=True)
        columns.append(c)
    return replace(schema, columns=tuple(columns), column_rules=rule.digest())
