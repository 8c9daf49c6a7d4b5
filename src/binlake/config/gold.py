"""``gold``: the checks of each table (a suite file per pattern, and the shorthand rules compiled
to the same Great Expectations expectations) and the publish groups."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainValidator, ValidationInfo, field_validator, model_validator

from binlake.config.expectations import Expectation, Severity, SuiteFile, read_suite_file
from binlake.config.vocabulary import GROUP_NAME, TABLE_PATTERN, Hint, Text, declared, lower, refuse
from binlake.errors import ConfigError

_PAIR = Hint(invalid="must be a list [min, max] (use null for an open end)")
_KINDS = ("between", "values", "regex", "row_count")


@declared("gold.checks")
class CheckRule:
    """One per-table gold check from the config's shorthand (``gold.checks``): a convenience
    that compiles to one GE expectation (:meth:`expectation`)."""

    severity: Annotated[Severity, BeforeValidator(lower)] = Field(
        Severity.FAIL, description="warn, drop (quarantine the rows) or fail"
    )
    column: Text | None = Field(None, description="The column checked (all kinds but row_count)")
    between: Annotated[tuple[Any, Any], _PAIR] | None = Field(None, description="[min, max], null for an open end")
    values: Annotated[tuple[Any, ...], Hint(invalid="must be a list of allowed values")] | None = Field(
        None, description="The allowed values"
    )
    regex: Text | None = Field(None, description="A regular expression every value matches")
    not_null: bool = Field(False, description="true: no value is null")
    row_count: Annotated[tuple[int | None, int | None], _PAIR] | None = Field(
        None, description="[min, max] rows, null for an open end"
    )

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        if isinstance(value, dict):
            kinds = [k for k in _KINDS if k in value] + (["not_null"] if value.get("not_null") else [])
            if len(kinds) != 1:
                raise refuse("{where} needs exactly one of between, values, regex, not_null, row_count")
            if kinds[0] != "row_count" and not value.get("column"):
                raise refuse(f"{{where}} ({kinds[0]}) needs a column")
        return value

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise refuse(f"{{where}} is not a valid regular expression ({exc}): fix the pattern") from None
        return value

    @property
    def kind(self) -> str:
        for name in _KINDS:
            if getattr(self, name) is not None:
                return name
        return "not_null"

    def expectation(self, where: str) -> Expectation:
        """The GE expectation this rule means, named as the rule always was (``between(price, 0, 100)``)."""
        col = self.column
        if self.kind in ("between", "row_count"):
            pair = self.between if self.kind == "between" else self.row_count
            assert pair is not None, "kind names the rule's field that is set"
            lo, hi = pair
            bounds = {k: v for k, v in (("min_value", lo), ("max_value", hi)) if v is not None}
            if self.kind == "between":
                return Expectation(
                    "expect_column_values_to_be_between",
                    {"column": col, **bounds},
                    self.severity,
                    f"between({col}, {_text(lo)}, {_text(hi)})",
                    where,
                )
            return Expectation(
                "expect_table_row_count_to_be_between",
                bounds,
                self.severity,
                f"row_count({_text(lo)}, {_text(hi)})",
                where,
            )
        if self.kind == "values":
            values = list(self.values or ())
            return Expectation(
                "expect_column_values_to_be_in_set",
                {"column": col, "value_set": values},
                self.severity,
                f"values({col}, {values})",
                where,
            )
        if self.kind == "regex":
            return Expectation(
                "expect_column_values_to_match_regex",
                {"column": col, "regex": self.regex},
                self.severity,
                f"regex({col}, {self.regex})",
                where,
            )
        return Expectation(
            "expect_column_values_to_not_be_null", {"column": col}, self.severity, f"not_null({col})", where
        )


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


def _suite_files(value: Any, info: ValidationInfo) -> tuple[SuiteFile, ...]:
    """gold.expectations: pattern -> suite file path, read (relative to the config file) now."""
    if isinstance(value, tuple) and all(isinstance(s, SuiteFile) for s in value):
        return value
    if not isinstance(value, dict):
        raise ConfigError(
            'gold.expectations must map a "db.table" pattern to an expectation suite file in Great Expectations\' '
            'JSON format, e.g. {"shop.orders": expectations/shop_orders.json}'
        )
    base_dir = (info.context or {}).get("base_dir", ".")
    suites = []
    for pattern, path in value.items():
        where = f"gold.expectations[{pattern!r}]"
        if not isinstance(pattern, str) or not TABLE_PATTERN.match(pattern):
            raise ConfigError(
                f'gold.expectations key {pattern!r} is not a "db.table" pattern such as "shop.orders" or "shop.*"'
            )
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"{where} must be the path of a suite file, e.g. expectations/shop_orders.json")
        suites.append(read_suite_file(pattern, path, base_dir, where))
    return tuple(suites)


@declared("gold")
class GoldConfig:
    checks: Annotated[
        Mapping[
            str,
            Annotated[
                tuple[
                    Annotated[
                        CheckRule,
                        Hint(invalid="must be a mapping such as {column: price, between: [0, 1000], severity: drop}"),
                    ],
                    ...,
                ],
                Hint(invalid="must be a list of rules"),
            ],
        ],
        Hint(invalid='must map "db.table" to a list of rules'),
    ] = Field(
        default_factory=dict,
        description="db.table -> shorthand checks ({column, between|values|regex|not_null|row_count, severity}), "
        "compiled to GE expectations",
    )
    expectations: Annotated[tuple[SuiteFile, ...], PlainValidator(_suite_files), Hint(shown="mapping")] = Field(
        (), description="db.table pattern -> expectation suite file (GE's JSON format); the first match wins"
    )
    groups: Annotated[
        Mapping[str, Annotated[tuple[str, ...], Hint(invalid='must be a non-empty list of "db.table" patterns')]],
        Hint(
            invalid='must map a group name to a list of "db.table" patterns, '
            'e.g. {orders: ["shop.orders", "shop.order_lines"]}'
        ),
    ] = Field(
        default_factory=dict,
        description="Publish groups: name -> db.table patterns published together; default: one per database",
    )

    @field_validator("checks")
    @classmethod
    def _check_tables(cls, value: Mapping[str, Any]) -> Mapping[str, Any]:
        for table in value:
            if not TABLE_PATTERN.match(table):
                raise ConfigError(f"gold.checks key {table!r} is not db.table")
        return value

    @field_validator("groups")
    @classmethod
    def _group_patterns(cls, value: Mapping[str, tuple[str, ...]]) -> Mapping[str, tuple[str, ...]]:
        for name, patterns in value.items():
            if not GROUP_NAME.match(name):
                raise ConfigError(f"gold.groups name {name!r} must be letters, digits, _ . or - (e.g. orders)")
            if not patterns:
                raise ConfigError(f'gold.groups.{name} must be a non-empty list of "db.table" patterns')
            for p in patterns:
                if not TABLE_PATTERN.match(p):
                    raise ConfigError(
                        f'gold.groups.{name} entry {p!r} is not a "db.table" pattern such as "shop.orders"'
                    )
        return value

    def group_of(self, db: str, table: str) -> str:
        """The publish group of ``db.table``: the first configured group with a matching
        pattern, else the group named after its database."""
        name = f"{db}.{table}"
        for group, patterns in self.groups.items():
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                return group
        return db

    def suite_file(self, db: str, table: str) -> SuiteFile | None:
        return next((s for s in self.expectations if s.matches(db, table)), None)

    def suite(self, db: str, table: str) -> tuple[Expectation, ...]:
        """Every expectation gold checks ``db.table`` with: its suite file's, then its
        ``gold.checks`` rules compiled to GE expectations."""
        found = self.suite_file(db, table)
        rules = self.checks.get(f"{db}.{table}", ())
        compiled = tuple(r.expectation(f"gold.checks.{db}.{table}[{i}]") for i, r in enumerate(rules))
        return (found.expectations if found else ()) + compiled
