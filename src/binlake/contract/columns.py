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

import hashlib
from dataclasses import replace

from binlake.config import HASH, NULL, ColumnRule, SourceConfig
from binlake.contract.types import FK_ACTIONS, Column, Kind, TableSchema
from binlake.errors import ConfigError


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


def stored_schema(source: SourceConfig, schema: TableSchema, strict: bool = True) -> TableSchema:
    """``schema`` as binlake stores the table: its column rule (``source.columns``) applied."""
    rule = source.column_rule(schema.database, schema.table)
    return apply_to_schema(rule, schema, source.salt_for(rule), strict)


def rule_digest(source: SourceConfig, db: str, table: str) -> str:
    """The ``column_rules`` digest the stored schema of ``db.table`` carries ("" for none)."""
    rule = source.column_rule(db, table)
    return "" if rule is None else rule.digest(source.salt_for(rule))


def apply_to_schema(rule: ColumnRule | None, schema: TableSchema, salt: str = "", strict: bool = True) -> TableSchema:
    """The table as binlake stores it: kept columns only, a ``hash`` column as a string of
    64 hex digits, a ``null`` column nullable; the rule's digest in ``column_rules``."""
    if rule is None:
        return schema
    rule.check(schema.name, tuple(c.name for c in schema.columns), schema.key, strict=strict)
    for fk in schema.foreign_keys:
        # Silver applies the foreign-key actions InnoDB does not log by matching these
        # columns with the parent's key: without their values it would miss them.
        lost = [c for c in fk["columns"] if not rule.keeps(c) or rule.mask.get(c) == NULL]
        if lost and {fk.get("on_delete"), fk.get("on_update")} & set(FK_ACTIONS):
            raise ConfigError(
                f"source.columns[{rule.pattern!r}] drops or nulls {', '.join(lost)} of {schema.name}, "
                f"which its foreign key {fk['name']} acts through: keep the column (or hash it and "
                f"{fk['parent']}'s key with mask_key and the same salt)"
            )
    columns = []
    for c in schema.columns:
        if not rule.keeps(c.name):
            continue
        how = rule.mask.get(c.name)
        if how == HASH:
            c = Column(
                name=c.name,
                kind=Kind.STRING,
                nullable=c.nullable,
                comment=c.comment,
                mysql_type=f"sha256({c.mysql_type})",
            )
        elif how == NULL:
            c = replace(c, nullable=True)
        columns.append(c)
    return replace(schema, columns=tuple(columns), column_rules=rule.digest(salt))


class FlatMasker:
    """The rule applied to row images held flat: the texts of ``n`` rows, row after row, in
    the order of ``names`` (the binlog decoder's bulk form, see ``binlog_source``)."""

    def __init__(self, rule: ColumnRule, salt: str, names: list[str]):
        self.kept = [i for i, c in enumerate(names) if rule.keeps(c)]
        self.names = [names[i] for i in self.kept]
        self.width = len(names)
        self.masks = [(j, rule.mask[names[i]]) for j, i in enumerate(self.kept) if names[i] in rule.mask]
        self.salt = salt

    def apply(self, values: list, n: int) -> list:
        w, kept = self.width, self.kept
        out = [values[r * w + i] for r in range(n) for i in kept] if len(kept) < w else list(values)
        k = len(kept)
        for j, how in self.masks:
            for r in range(n):
                out[r * k + j] = masked_text(how, self.salt, out[r * k + j])
        return out
