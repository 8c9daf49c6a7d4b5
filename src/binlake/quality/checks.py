"""Gold quality checks: great-expectations on the Spark DataFrame about to be published.

Every table gets the built-in checks (primary key unique and not null, declared NOT NULL
columns, row count equal to silver's live rows) plus its rules from ``gold.checks`` in the
config. Each check has a severity (docs/architecture.md, "Gold"):

- ``warn``: publish anyway, record the result;
- ``drop``: the failing rows go to the quarantine table, the rest is published;
- ``fail``: nothing in the publish group is published.

Great Expectations decides pass/fail and counts unexpected rows. For ``drop`` the same
rule is also a Spark SQL predicate (:attr:`Check.failing_rows`) that selects the rows to
quarantine: GE reports a sample of unexpected values, not the rows themselves, and
collecting millions of keys to the driver to filter them again would not scale. The two
definitions share GE's semantics: NULLs never fail ``between``, ``values`` or ``regex``
(use ``not_null`` for that).

Example::

    >>> checks = table_checks(schema, rules, silver_live_rows=1200)      # doctest: +SKIP
    >>> results = run_checks(gold_df, checks)                             # doctest: +SKIP
    >>> [r.name for r in results if not r.success]                        # doctest: +SKIP
    ['between(price, 0, 100000)']
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from binlake.config import CheckRule, Severity
from binlake.contract.sql import quote_ident
from binlake.contract.types import Kind, TableSchema

ENGINE_GE = "great_expectations"


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
    engine: str = ENGINE_GE
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "severity": self.severity.value, "success": self.success,
            "column": self.column, "origin": self.origin, "unexpected_count": self.unexpected_count,
            "observed_value": self.observed_value, "engine": self.engine, "error": self.error,
        }


@dataclass
class TableChecks:
    """The outcome of all checks on one table."""

    table: str
    results: list[CheckResult] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

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
        return [c for r, c in zip(self.results, self.checks)
                if not r.success and c.severity is Severity.DROP and c.row_level]

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
        conds = ([f"{quote_ident(col)} < {_lit(lo)}"] if lo is not None else []) + ([f"{quote_ident(col)} > {_lit(hi)}"] if hi is not None else [])
        pred = f"{quote_ident(col)} IS NOT NULL AND ({' OR '.join(conds) or 'FALSE'})"
        return Check(f"between({col}, {_fmt(lo)}, {_fmt(hi)})", kind, rule.severity, col,
                     params=(("min_value", lo), ("max_value", hi)), failing_rows=pred)
    if kind == "values":
        values = tuple(rule.values or ())
        listed = ", ".join(_lit(v) for v in values) or "NULL"
        pred = f"{quote_ident(col)} IS NOT NULL AND NOT ({quote_ident(col)} IN ({listed}))"
        return Check(f"values({col}, {list(values)})", kind, rule.severity, col,
                     params=(("value_set", values),), failing_rows=pred)
    if kind == "regex":
        # GE's Spark regex expectation is rlike (a search, Java syntax); so is the predicate.
        pred = f"{quote_ident(col)} IS NOT NULL AND NOT (CAST({quote_ident(col)} AS STRING) RLIKE {_lit(rule.regex)})"
        return Check(f"regex({col}, {rule.regex})", kind, rule.severity, col,
                     params=(("regex", rule.regex),), failing_rows=pred)
    if kind == "not_null":
        return Check(f"not_null({col})", kind, rule.severity, col, failing_rows=f"{quote_ident(col)} IS NULL")
    lo, hi = rule.row_count  # type: ignore[misc]
    return Check(f"row_count({_fmt(lo)}, {_fmt(hi)})", "row_count", rule.severity,
                 params=(("min_value", lo), ("max_value", hi)))


def builtin_checks(schema: TableSchema, silver_live_rows: int) -> list[Check]:
    """The checks every gold table gets: they guard binlake's own guarantees."""
    key = list(schema.key)
    checks: list[Check] = []
    if len(key) == 1:
        checks.append(Check(f"primary_key_unique({key[0]})", "primary_key_unique", Severity.FAIL, key[0], origin="builtin"))
    else:
        checks.append(Check(f"primary_key_unique({', '.join(key)})", "primary_key_unique", Severity.FAIL,
                            origin="builtin", params=(("column_list", tuple(key)),)))
    for k in key:
        checks.append(Check(f"primary_key_not_null({k})", "primary_key_not_null", Severity.FAIL, k, origin="builtin",
                            failing_rows=f"{quote_ident(k)} IS NULL"))
    for c in schema.columns:
        if c.nullable or c.name in key:
            continue
        # A NOT NULL DATE/DATETIME may hold MySQL's zero date, which silver maps to NULL by
        # design (docs/architecture.md, "Types"): that is recorded, not a reason to stop publishing.
        zero_date_capable = c.kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP)
        checks.append(Check(f"not_null({c.name})", "not_null", Severity.WARN if zero_date_capable else Severity.FAIL,
                            c.name, origin="builtin", failing_rows=f"{quote_ident(c.name)} IS NULL"))
    checks.append(Check(f"row_count_equals_silver({silver_live_rows})", "row_count_equals_silver", Severity.FAIL,
                        origin="builtin", params=(("value", silver_live_rows),)))
    return checks


def table_checks(schema: TableSchema, rules: Sequence[CheckRule], silver_live_rows: int) -> list[Check]:
    """Built-in checks followed by the configured rules, in config order."""
    for rule in rules:
        if rule.column is not None and rule.column not in {c.name for c in schema.columns}:
            from binlake.errors import ConfigError

            raise ConfigError(
                f"gold.checks.{schema.name} names column {rule.column!r}, which {schema.name} does not have: "
                f"use one of {', '.join(c.name for c in schema.columns)}"
            )
    return builtin_checks(schema, silver_live_rows) + [rule_check(r) for r in rules]


def _expectation(check: Check):
    import great_expectations.expectations as gxe

    p = dict(check.params)
    k = check.kind
    if k == "primary_key_unique":
        if "column_list" in p:
            return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(p["column_list"]))
        return gxe.ExpectColumnValuesToBeUnique(column=check.column)
    if k in ("primary_key_not_null", "not_null"):
        return gxe.ExpectColumnValuesToNotBeNull(column=check.column)
    if k == "row_count_equals_silver":
        return gxe.ExpectTableRowCountToEqual(value=p["value"])
    if k == "between":
        return gxe.ExpectColumnValuesToBeBetween(column=check.column, min_value=p["min_value"], max_value=p["max_value"])
    if k == "values":
        return gxe.ExpectColumnValuesToBeInSet(column=check.column, value_set=list(p["value_set"]))
    if k == "regex":
        return gxe.ExpectColumnValuesToMatchRegex(column=check.column, regex=p["regex"])
    if k == "row_count":
        return gxe.ExpectTableRowCountToBeBetween(min_value=p["min_value"], max_value=p["max_value"])
    raise AssertionError(k)


_ge_lock = threading.Lock()
_ge_state: dict[str, Any] = {}


def _ge_datasource():
    """One in-memory GE context per process: creating it costs seconds, using it nothing."""
    with _ge_lock:
        if "ds" not in _ge_state:
            # No usage statistics leave this process; no progress bars in job logs.
            os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
            import great_expectations as gx
            from great_expectations.data_context.types.base import (
                DataContextConfig,
                InMemoryStoreBackendDefaults,
                ProgressBarsConfig,
            )

            ctx = gx.get_context(
                mode="ephemeral",
                project_config=DataContextConfig(
                    analytics_enabled=False,
                    progress_bars=ProgressBarsConfig(globally=False),
                    store_backend_defaults=InMemoryStoreBackendDefaults(),
                ),
            )
            _ge_state["ctx"] = ctx
            # GE would persist() every batch and never unpersist it: memory held for the life of
            # the job, and a cached plan can answer for a later read of the same table.
            _ge_state["ds"] = ctx.data_sources.add_spark(name="binlake_gold", persist=False)
            _ge_state["n"] = 0
        _ge_state["n"] += 1
        return _ge_state["ctx"], _ge_state["ds"], _ge_state["n"]


def run_checks(df, checks: Sequence[Check], table: str = "") -> TableChecks:
    """Validate ``df`` with one GE suite holding every check; one result per check, in order."""
    import great_expectations as gx

    outcome = TableChecks(table=table, checks=list(checks))
    if not checks:
        return outcome
    from pyspark import StorageLevel

    ctx, ds, n = _ge_datasource()
    # GE computes every metric with its own Spark job. Reading the frame into the cache once
    # instead of once per metric made seven checks on a small table 3x faster (20 s -> 6 s);
    # MEMORY_AND_DISK spills what does not fit, and the finally below frees it.
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    asset = ds.add_dataframe_asset(name=f"{table or 'table'}_{n}")
    batch_def = asset.add_batch_definition_whole_dataframe("whole")
    suite = gx.ExpectationSuite(name=f"{table or 'table'}_{n}")
    expectations = [_expectation(c) for c in checks]
    for i, e in enumerate(expectations):
        # Results come back in GE's order, and an unsaved suite gives no ids: the index in
        # meta ties each result to its check (and keeps equal rules of different severity apart).
        e.meta = {"binlake_check": i}
        suite.add_expectation(e)
    try:
        batch = batch_def.get_batch(batch_parameters={"dataframe": df})
        validation = batch.validate(suite, result_format="BASIC")
        by_index = {(r.expectation_config.meta or {}).get("binlake_check"): r for r in validation.results}
        for i, check in enumerate(checks):
            r = by_index.get(i)
            if r is None:  # pragma: no cover - GE returns one result per expectation
                outcome.results.append(CheckResult(check.name, check.kind, check.severity, False, check.column,
                                                   check.origin, error="no result from great-expectations"))
                continue
            raised = (r.exception_info or {}).get("raised_exception", False)
            result = r.result or {}
            outcome.results.append(
                CheckResult(
                    check.name, check.kind, check.severity, bool(r.success) and not raised, check.column, check.origin,
                    unexpected_count=result.get("unexpected_count"),
                    observed_value=result.get("observed_value"),
                    error=str((r.exception_info or {}).get("exception_message"))[:300] if raised else None,
                )
            )
    finally:
        ds.delete_asset(asset.name)
        df.unpersist()
    return outcome


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
