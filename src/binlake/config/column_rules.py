"""``source.columns``: a column rule, its keys (``include``, ``exclude``, ``mask``, ``mask_key``)
and what it does: which columns it keeps and masks, the checks against a table's key, and the
digest recorded with the table's schema. What the rules mean for the stored rows is
:mod:`binlake.contract.columns`."""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from binlake.config.vocabulary import ColumnNames, Flag, Hint, declared, text_or_number
from binlake.errors import ConfigError

HASH, NULL = "hash", "null"
MASKS = (HASH, NULL)


def _mask(value: Any) -> Any:
    # YAML reads an unquoted null as None: that is the null mask too.
    if not isinstance(value, dict):
        return value
    return {c: NULL if how is None else text_or_number(how) for c, how in value.items()}


@declared("source.columns")
class ColumnRule:
    """Which columns of the tables ``pattern`` matches binlake keeps and masks (the first
    matching rule applies)."""

    pattern: Annotated[str, Hint(not_a_key=True)] = Field(description="The db.table pattern the rule applies to")
    include: ColumnNames | None = Field(None, description="Keep only these columns (not with exclude)")
    exclude: ColumnNames = Field((), description="Drop these columns (not with include)")
    mask: Annotated[
        Mapping[str, str],
        BeforeValidator(_mask),
        Hint(invalid="must map column names to hash or null, e.g. {email: hash}"),
    ] = Field(default_factory=dict, description="column: hash (salted SHA-256) or null, stored instead of the value")
    mask_key: Flag = Field(False, description="Allow masking a key column (with hash)")

    @model_validator(mode="after")
    def _consistent(self) -> ColumnRule:
        self.check_consistent()
        return self

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ColumnRule:
        return ColumnRule(
            pattern=d["pattern"],
            include=tuple(d["include"]) if d["include"] is not None else None,
            exclude=tuple(d["exclude"]),
            mask=dict(d["mask"]),
            mask_key=bool(d["mask_key"]),
        )

    @property
    def where(self) -> str:
        return f"source.columns[{self.pattern!r}]"

    def check_consistent(self) -> None:
        """Raise ConfigError when the rule contradicts itself."""
        where = self.where
        if self.include is not None and self.exclude:
            raise ConfigError(f"{where} has both include and exclude: keep one of them")
        if self.include is not None and not self.include:
            raise ConfigError(f"{where}.include is empty: list the columns to keep, or drop the rule")
        for column, how in self.mask.items():
            if how not in MASKS:
                raise ConfigError(f"{where}.mask.{column} must be hash or null, got {how!r}")
            if column in self.exclude or (self.include is not None and column not in self.include):
                raise ConfigError(f"{where} masks {column}, which it also drops: keep one of the two")

    def matches(self, db: str, table: str) -> bool:
        return fnmatch.fnmatchcase(f"{db}.{table}", self.pattern)

    @property
    def hashes(self) -> bool:
        """True if the rule has a ``hash`` mask (and so needs the salt)."""
        return HASH in self.mask.values()

    def keeps(self, column: str) -> bool:
        return column not in self.exclude and (self.include is None or column in self.include)

    def check(self, name: str, columns: tuple[str, ...], key: tuple[str, ...], strict: bool = True) -> None:
        """Raise ConfigError when the rule drops a key column or masks one without
        ``mask_key``, or (``strict``) names a column ``name`` lacks. Capture is not strict: a
        column the rule names may be dropped from the source later, which hides nothing."""
        where = self.where
        named = set(self.exclude) | set(self.include or ()) | set(self.mask)
        unknown = sorted(named - set(columns))
        if unknown and strict:
            raise ConfigError(
                f"{where} names {', '.join(unknown)}, which {name} does not have: its columns are {', '.join(columns)}"
            )
        dropped = [k for k in key if not self.keeps(k)]
        if dropped:
            raise ConfigError(
                f"{where} drops key column {', '.join(dropped)} of {name}: binlake needs the key; "
                "mask it instead (with mask_key: true) or keep it"
            )
        nulled = [k for k in key if self.mask.get(k) == NULL]
        if nulled:
            raise ConfigError(
                f"{where} masks key column {', '.join(nulled)} of {name} with null, which would give "
                "every row the same key: use hash (with mask_key: true) or keep it"
            )
        masked = [k for k in key if k in self.mask]
        if masked and not self.mask_key:
            raise ConfigError(
                f"{where} masks key column {', '.join(masked)} of {name}: that changes what rows "
                "join on; add mask_key: true to the rule if that is intended"
            )

    def digest(self, salt: str = "") -> str:
        """A short id of what the rule does, recorded with the table's schema: a new salt
        changes every hash, so it changes the digest too (through a one-way fingerprint)."""
        salt_id = hashlib.sha256(("binlake mask salt\x00" + salt).encode()).hexdigest()[:16] if self.hashes else ""
        text = json.dumps(
            {
                "include": self.include,
                "exclude": sorted(self.exclude),
                "mask": dict(sorted(self.mask.items())),
                "mask_key": self.mask_key,
                "salt": salt_id,
            },
            sort_keys=True,
        )
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "include": list(self.include) if self.include is not None else None,
            "exclude": list(self.exclude),
            "mask": dict(self.mask),
            "mask_key": self.mask_key,
        }
