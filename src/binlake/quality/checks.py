"""Gold quality checks, evaluated by Spark in one pass over the rows about to be published.

Every table gets the built-in checks (primary key unique and not null, declared NOT NULL
columns, gold's row count equal to silver's live rows) plus its rules from ``gold.checks``
in the config. Each check has a severity (docs/architecture.md, "Gold"):

- ``warn``: publish anyway, record the result;
- ``drop``: the failing rows go to the quarantine table, the rest is published;
- ``fail``: nothing in the publish group is published.

A row-level check is one Spark SQL predicate (:attr:`Check.failing_rows`), TRUE exactly for
the rows it rejects: the same predicate counts them and, for ``drop``, selects them for
quarantine. NULLs never fail ``between``, ``values`` or ``regex`` (use ``not_null`` for
that). :func:`run_checks` evaluates every check of a table in one Spark job, whatever their
number: a group-by on the key (for uniqueness) whose groups also sum each predicate's
failing rows. The row-count checks compare counts: ``row_count`` rules the rows gold will
hold (:func:`settle_row_count_rules`), ``row_count_equals_silver`` the rows Delta's commit
says gold holds against what silver's rows make (:func:`settle_row_count_equals_silver`).

Example::

    >>> checks = table_checks(schema, rules)                              # doctest: +SKIP
    >>> outcome = run_checks(gold_df, checks, key=schema.key)             # doctest: +SKIP
    >>> [r.name for r in outcome.results if not r.success]                # doctest: +SKIP
    ['between(price, 0, 100000)']
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from binlake.config import CheckRule, Severity
from binlake.contract.sql import quote_ident
from binlake.contract.types import Kind, TableSchema

ENGINE = "spark"


@dataclass(frozen=True)
class Check:
    """One check on one gold table."""

    name: str
    kind: str
    severity: Severity
    column: str | None = None
    # Built-in checks guard binlake itself; rules come from gold.checks.
    origin: str = "rule"
    params: tuple[tuple[str, Any], ...] = ()
    # Spark SQL predicate that is TRUE exactly for the rows this check rejects (row-level checks).
    failing_rows: str | None = None

    @property
    def row_level(self) -> bool:
        return self.failing_rows is not None


@dataclass
class CheckResult:
    name: str
    kind: str
    severity: Severity
    success: bool
    column: str | None = None
    origin: str = "rule"
    unexpected_count: int | None = None
    observed_value: Any = None
    engine: str = ENGINE
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "severity": self.severity.value,
            "success": self.success,
            "column": self.column,
            "origin": self.origin,
            "unexpected_count": self.unexpected_count,
            "observed_value": self.observed_value,
            "engine": self.engine,
            "error": self.error,
        }


@dataclass
class TableChecks:
    """The outcome of all checks on one table."""

    table: str
    results: list[CheckResult] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    rows: int = 0  # rows checked
    held_back: int = 0  # of them, rows a failing drop check rejects

    @property
    def blocking(self) -> list[CheckResult]:
        """Failed checks that stop the publish: severity fail, and table-level drop (no rows to drop)."""
        out = []
        for r, c in zip(self.results, self.checks):
            if not r.success and (c.severity is Severity.FAIL or (c.severity is Severity.DROP and not c.row_level)):
                out.append(r)
        return out

    @property
    def dropping(self) -> list[Check]:
        """Row-level drop checks that failed: their rows go to quarantine."""
        return [
            c
            for r, c in zip(self.results, self.checks)
            if not r.success and c.severity is Severity.DROP and c.row_level
        ]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if not r.success and r.severity is Severity.WARN]

    def to_json(self) -> str:
        return json.dumps([r.to_dict() for r in self.results], default=str, separators=(",", ":"))


def _lit(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fmt(value: Any) -> str:
    return "null" if value is None else str(value)


def rule_check(rule: CheckRule) -> Check:
    """The check for one ``gold.checks`` rule."""
    kind = rule.kind
    col = rule.column
    if kind == "between":
        lo, hi = rule.between  # type: ignore[misc]
        conds = ([f"{quote_ident(col)} < {_lit(lo)}"] if lo is not None else []) + (
            [f"{quote_ident(col)} > {_lit(hi)}"] if hi is not None else []
        )
        pred = f"{quote_ident(col)} IS NOT NULL AND ({' OR '.join(conds) or 'FALSE'})"
        return Check(
            f"between({col}, {_fmt(lo)}, {_fmt(hi)})",
            kind,
            rule.severity,
            col,
            params=(("min_value", lo), ("max_value", hi)),
            failing_rows=pred,
        )
    if kind == "values":
        values = tuple(rule.values or ())
        listed = ", ".join(_lit(v) for v in values) or "NULL"
        pred = f"{quote_ident(col)} IS NOT NULL AND NOT ({quote_ident(col)} IN ({listed}))"
        return Check(
            f"values({col}, {list(values)})",
            kind,
            rule.severity,
            col,
            params=(("value_set", values),),
            failing_rows=pred,
        )
    if kind == "regex":
        # A search, Java syntax (RLIKE), as the rule has always meant: a match anywhere passes.
        pred = f"{quote_ident(col)} IS NOT NULL AND NOT (CAST({quote_ident(col)} AS STRING) RLIKE {_lit(rule.regex)})"
        return Check(
            f"regex({col}, {rule.regex})", kind, rule.severity, col, params=(("regex", rule.regex),), failing_rows=pred
        )
    if kind == "not_null":
        return Check(f"not_null({col})", kind, rule.severity, col, failing_rows=f"{quote_ident(col)} IS NULL")
    lo, hi = rule.row_count  # type: ignore[misc]
    return Check(
        f"row_count({_fmt(lo)}, {_fmt(hi)})", "row_count", rule.severity, params=(("min_value", lo), ("max_value", hi))
    )


ROW_COUNT_EQUALS_SILVER = "row_count_equals_silver"


def builtin_checks(schema: TableSchema, silver_live_rows: int | None = None) -> list[Check]:
    """The checks every gold table gets: they guard binlake's own guarantees.

    ``row_count_equals_silver``: the rows gold holds plus the rows drop checks hold back equal
    silver's live rows; its result comes from the publish's commit metrics
    (:func:`settle_row_count_equals_silver`), named with ``silver_live_rows`` once that is known."""
    key = list(schema.key)
    checks: list[Check] = []
    if len(key) == 1:
        checks.append(
            Check(f"primary_key_unique({key[0]})", "primary_key_unique", Severity.FAIL, key[0], origin="builtin")
        )
    else:
        checks.append(
            Check(
                f"primary_key_unique({', '.join(key)})",
                "primary_key_unique",
                Severity.FAIL,
                origin="builtin",
                params=(("column_list", tuple(key)),),
            )
        )
    for k in key:
        checks.append(
            Check(
                f"primary_key_not_null({k})",
                "primary_key_not_null",
                Severity.FAIL,
                k,
                origin="builtin",
                failing_rows=f"{quote_ident(k)} IS NULL",
            )
        )
    for c in schema.columns:
        if c.nullable or c.name in key:
            continue
        # A NOT NULL DATE/DATETIME may hold MySQL's zero date, which silver maps to NULL by
        # design (docs/architecture.md, "Types"): that is recorded, not a reason to stop publishing.
        zero_date_capable = c.kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP)
        checks.append(
            Check(
                f"not_null({c.name})",
                "not_null",
                Severity.WARN if zero_date_capable else Severity.FAIL,
                c.name,
                origin="builtin",
                failing_rows=f"{quote_ident(c.name)} IS NULL",
            )
        )
    checks.append(row_count_check(silver_live_rows))
    return checks


def row_count_check(silver_live_rows: int | None) -> Check:
    label = "?" if silver_live_rows is None else str(silver_live_rows)
    return Check(
        f"{ROW_COUNT_EQUALS_SILVER}({label})",
        ROW_COUNT_EQUALS_SILVER,
        Severity.FAIL,
        origin="builtin",
        params=(("value", silver_live_rows),),
    )


def table_checks(schema: TableSchema, rules: Sequence[CheckRule], silver_live_rows: int | None = None) -> list[Check]:
    """Built-in checks followed by the configured rules, in config order."""
    for rule in rules:
        if rule.column is not None and rule.column not in {c.name for c in schema.columns}:
            from binlake.errors import ConfigError

            raise ConfigError(
                f"gold.checks.{schema.name} names column {rule.column!r}, which {schema.name} does not have: "
                f"use one of {', '.join(c.name for c in schema.columns)}"
            )
    return builtin_checks(schema, silver_live_rows) + [rule_check(r) for r in rules]


# The checks whose result needs the publish's row counts, not the rows.
COUNT_KINDS = ("row_count", ROW_COUNT_EQUALS_SILVER)


def run_checks(df, checks: Sequence[Check], table: str = "", key: Sequence[str] = ()) -> TableChecks:
    """Evaluate the row checks and key uniqueness on ``df`` in one Spark job; one result per
    check, in order. The count checks (:data:`COUNT_KINDS`) get a passing placeholder here;
    the publish settles them. ``outcome.rows`` is ``df``'s row count and
    ``outcome.held_back`` how many of its rows a failing drop check rejects."""
    from pyspark.sql import functions as F

    outcome = TableChecks(table=table, checks=list(checks))
    row_checks = [c for c in checks if c.row_level]
    unique = next((c for c in checks if c.kind == "primary_key_unique"), None)
    keys = list(dict(unique.params).get("column_list") or [unique.column]) if unique else list(key)
    flags = [F.expr(f"coalesce(({c.failing_rows}), FALSE)") for c in row_checks]
    drops = [f for f, c in zip(flags, row_checks) if c.severity is Severity.DROP]
    held = functools.reduce(lambda a, b: a | b, drops) if drops else F.lit(False)
    per_row = [F.sum(F.when(f, 1).otherwise(0)).alias(f"_f{i}") for i, f in enumerate(flags)]
    if keys:
        # One group per key: its size finds duplicates, its sums carry the row checks along.
        complete = functools.reduce(lambda a, b: a & b, [F.col(quote_ident(k)).isNotNull() for k in keys])
        groups = df.groupBy(*[F.col(quote_ident(k)) for k in keys]).agg(
            F.count(F.lit(1)).alias("_n"), F.sum(F.when(held, 1).otherwise(0)).alias("_held"), *per_row
        )
        totals = groups.agg(
            F.sum("_n").alias("rows"),
            F.sum("_held").alias("held"),
            F.sum(F.when((F.col("_n") > 1) & complete, F.col("_n")).otherwise(0)).alias("dup"),
            *[F.sum(f"_f{i}").alias(f"_f{i}") for i in range(len(flags))],
        ).first()
    else:
        totals = df.agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.when(held, 1).otherwise(0)).alias("held"),
            F.lit(0).alias("dup"),
            *per_row,
        ).first()
    outcome.rows, outcome.held_back = int(totals["rows"] or 0), int(totals["held"] or 0)
    failing = {c.name: int(totals[f"_f{i}"] or 0) for i, c in enumerate(row_checks)}
    for check in checks:
        if check.kind in COUNT_KINDS:
            outcome.results.append(
                CheckResult(check.name, check.kind, check.severity, True, check.column, check.origin)
            )
            continue
        bad = int(totals["dup"] or 0) if check.kind == "primary_key_unique" else failing[check.name]
        outcome.results.append(
            CheckResult(
                check.name, check.kind, check.severity, bad == 0, check.column, check.origin, unexpected_count=bad
            )
        )
    return outcome


def settle_row_count_rules(outcome: TableChecks, gold_rows: int) -> None:
    """Settle the ``row_count`` rules with the row count gold will hold after this publish."""
    for i, (check, result) in enumerate(zip(outcome.checks, outcome.results)):
        if check.kind == "row_count":
            p = dict(check.params)
            lo, hi = p.get("min_value"), p.get("max_value")
            ok = (lo is None or gold_rows >= lo) and (hi is None or gold_rows <= hi)
            outcome.results[i] = CheckResult(
                check.name, check.kind, check.severity, ok, check.column, check.origin, observed_value=gold_rows
            )


def settle_row_count_equals_silver(
    outcome: TableChecks, silver_live_rows: int, expected_gold_rows: int, gold_rows: int
) -> None:
    """Settle ``row_count_equals_silver`` once gold is written: ``gold_rows`` as Delta's commit
    metrics count them must be what silver's ``silver_live_rows`` less the rows the drop
    checks hold back make (``expected_gold_rows``)."""
    for i, check in enumerate(outcome.checks):
        if check.kind == ROW_COUNT_EQUALS_SILVER:
            named = row_count_check(silver_live_rows)
            outcome.checks[i] = Check(named.name, named.kind, check.severity, origin=check.origin, params=named.params)
            outcome.results[i] = CheckResult(
                named.name,
                check.kind,
                check.severity,
                gold_rows == expected_gold_rows,
                check.column,
                check.origin,
                observed_value=gold_rows,
            )


def quarantine_frame(df, dropping: Sequence[Check]):
    """The rows each failed drop check rejects, one row per (row, check), with the check's name."""
    from functools import reduce

    from pyspark.sql import functions as F

    parts = [df.where(F.expr(c.failing_rows)).withColumn("_check", F.lit(c.name)) for c in dropping]
    return reduce(lambda a, b: a.unionByName(b), parts)


def keep_frame(df, dropping: Sequence[Check]):
    """``df`` without the rows any failed drop check rejects."""
    if not dropping:
        return df
    rejected = " OR ".join(f"coalesce(({c.failing_rows}), FALSE)" for c in dropping)
    return df.where(f"NOT ({rejected})")
