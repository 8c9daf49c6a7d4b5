"""Gold's checks: binlake's built-in invariants, natively, and the configured expectations,
through Great Expectations, in one query over the rows a publish checks.

Every table gets the built-in checks (primary key unique and not null, declared NOT NULL
columns, gold's row count equal to silver's live rows). They are aggregates binlake computes
itself: when the table has expectations they ride on the query GE runs anyway
(:mod:`binlake.quality.engine`), otherwise they are the one query; a table without
expectations never imports GE. The expectations (a suite file's, and the ``gold.checks``
shorthand compiled to GE expectations) are validated by GE's Spark execution engine with
``BOOLEAN_ONLY`` results first; only an expectation that failed costs a second query, for its
unexpected values and counts (GE's ``SUMMARY``).

Each check has a severity (docs/architecture.md, "Gold"):

- ``warn``: publish anyway, record the result;
- ``drop``: the rows GE's unexpected condition rejects go to the quarantine table, the rest
  is published (row-level expectations on one column only, :mod:`binlake.quality.suites`);
- ``fail``: nothing in the publish group is published. An expectation GE could not evaluate
  (an exception inside GE) blocks like ``fail``, whatever its severity.

Example::

    >>> plan = table_plan(config, schema)                                  # doctest: +SKIP
    >>> outcome = check_rows(gold_df, plan, table_level=True)              # doctest: +SKIP
    >>> [r.name for r in outcome.results if not r.success]                 # doctest: +SKIP
    ['between(price, 0, 100000)']
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from binlake.config import Config, Severity
from binlake.contract.sql import quote_ident
from binlake.contract.types import Kind, TableSchema
from binlake.quality.suites import Planned, TablePlan, plan_table

NATIVE, GE = "spark", "great_expectations"
ROW_COUNT_EQUALS_SILVER = "row_count_equals_silver"


@dataclass(frozen=True)
class Check:
    """One check on one gold table: a built-in or an expectation."""

    name: str
    kind: str  # a built-in kind, or a GE expectation type
    severity: Severity
    column: str | None = None
    origin: str = "builtin"  # builtin | expectation
    # Its verdict is per row: checked on the rows a publish changes.
    row_level: bool = False
    droppable: bool = False
    planned: Planned | None = None

    @property
    def expectation(self) -> Planned:
        """The planned expectation of a check of ``origin`` expectation."""
        assert self.planned is not None, f"check {self.name} is a built-in, not an expectation"
        return self.planned


@dataclass
class CheckResult:
    name: str
    kind: str
    severity: Severity
    success: bool
    column: str | None = None
    origin: str = "builtin"
    unexpected_count: int | None = None
    observed_value: Any = None
    engine: str = NATIVE
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
    """The outcome of all checks on one table, in check order."""

    table: str
    checks: list[Check] = field(default_factory=list)
    results: list[CheckResult] = field(default_factory=list)
    rows: int = 0  # rows checked
    held_back: int = 0  # of them, rows a failing drop check rejects
    # GE's validation results of this publish (ExpectationSuiteValidationResult objects).
    validations: list = field(default_factory=list)
    # GE's unexpected condition of each droppable expectation, by name (a Spark Column).
    conditions: dict[str, Any] = field(default_factory=dict)
    # Checks left to an observation of the write, by name: their aggregates (Spark Columns),
    # settled by :func:`settle_observed` once the write has run.
    observed: dict[str, Any] = field(default_factory=dict)

    @property
    def blocking(self) -> list[CheckResult]:
        """Failed checks that stop the publish: severity fail, and any check GE could not evaluate."""
        return [
            r
            for r, c in zip(self.results, self.checks)
            if not r.success and (c.severity is Severity.FAIL or r.error is not None)
        ]

    @property
    def dropping(self) -> list[Check]:
        """Drop checks that failed: the rows they reject go to quarantine."""
        return [
            c
            for r, c in zip(self.results, self.checks)
            if not r.success and r.error is None and c.severity is Severity.DROP
        ]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if not r.success and r.error is None and r.severity is Severity.WARN]

    def result(self, kind: str) -> CheckResult | None:
        return next((r for r in self.results if r.kind == kind), None)

    def to_json(self) -> str:
        return json.dumps([r.to_dict() for r in self.results], default=str, separators=(",", ":"))


# ---------------------------------------------------------------------------------------
# What a table is checked with


@dataclass(frozen=True)
class ChecksPlan:
    """Every check of one table: the built-ins and GE's plan of its expectations."""

    table: str
    builtins: tuple[Check, ...]
    expectations: TablePlan
    key: tuple[str, ...]

    @property
    def digest_source(self) -> list:
        return [e.spec.to_json() for e in self.expectations.expectations]

    def checks(self, row_level: bool | None = None) -> list[Check]:
        """The built-ins (with the row-level checks) and the expectations of that level."""
        expectations = [
            _expectation_check(p)
            for p in self.expectations.expectations
            if row_level is None or p.row_level == row_level
        ]
        return (list(self.builtins) if row_level in (None, True) else []) + expectations


def table_plan(config: Config, schema: TableSchema) -> ChecksPlan:
    """The checks ``config`` gives ``schema``'s table; bad expectations raise ConfigError."""
    return ChecksPlan(schema.name, tuple(builtin_checks(schema)), plan_table(config, schema), tuple(schema.key))


def builtin_checks(schema: TableSchema, silver_live_rows: int | None = None) -> list[Check]:
    """The checks every gold table gets: they guard binlake's own guarantees.

    ``row_count_equals_silver``: the rows gold holds plus the rows drop checks hold back equal
    silver's live rows; its result comes from the publish's commit metrics
    (:func:`settle_row_count_equals_silver`)."""
    key = list(schema.key)
    checks = [
        Check(
            f"primary_key_unique({', '.join(key)})",
            "primary_key_unique",
            Severity.FAIL,
            key[0] if len(key) == 1 else None,
            row_level=True,
        )
    ]
    for k in key:
        checks.append(Check(f"primary_key_not_null({k})", "primary_key_not_null", Severity.FAIL, k, row_level=True))
    for c in schema.columns:
        if c.nullable or c.name in key:
            continue
        # A NOT NULL DATE/DATETIME may hold MySQL's zero date, which silver maps to NULL by
        # design (docs/architecture.md, "Types"): that is recorded, not a reason to stop publishing.
        zero_date_capable = c.kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP)
        severity = Severity.WARN if zero_date_capable else Severity.FAIL
        checks.append(Check(f"not_null({c.name})", "not_null", severity, c.name, row_level=True))
    checks.append(row_count_check(silver_live_rows))
    return checks


def row_count_check(silver_live_rows: int | None) -> Check:
    label = "?" if silver_live_rows is None else str(silver_live_rows)
    return Check(f"{ROW_COUNT_EQUALS_SILVER}({label})", ROW_COUNT_EQUALS_SILVER, Severity.FAIL)


def _expectation_check(p: Planned) -> Check:
    return Check(
        p.spec.name,
        p.spec.type,
        p.spec.severity,
        p.spec.kwargs.get("column"),
        origin="expectation",
        row_level=p.row_level,
        droppable=p.droppable,
        planned=p,
    )


def _builtin_aggregates(builtins: Sequence[Check], key: Sequence[str]) -> dict[str, Any]:
    """The built-ins as aggregates over the checked rows, by check name: one pass, and one that
    can ride on GE's own query. A duplicate key counts its rows beyond the first."""
    from pyspark.sql import functions as F

    cols = [F.col(quote_ident(k)) for k in key]
    complete = functools.reduce(lambda a, b: a & b, [c.isNotNull() for c in cols])
    out = {"_rows": F.count(F.lit(1))}
    for c in builtins:
        if c.kind == "primary_key_unique":
            out[c.name] = F.count(F.when(complete, 1)) - F.count_distinct(*cols)
        elif c.kind in ("primary_key_not_null", "not_null"):
            assert c.column is not None, f"check {c.name} is on a column"
            out[c.name] = F.count(F.when(F.col(quote_ident(c.column)).isNull(), 1))
    return out


# ---------------------------------------------------------------------------------------
# Checking


def check_rows(df, plan: ChecksPlan, table_level: bool, observe_columns: bool = False) -> TableChecks:
    """Check ``df`` (the rows a publish reads) with the built-ins and the row-level
    expectations, and with the table-level ones too when ``table_level`` (``df`` is then the
    whole table). One query; a second only for what failed.

    ``observe_columns`` (for a whole-table write of ``df``): when GE has nothing to check, the
    NOT NULL checks of the non-key columns are left to the write (:attr:`TableChecks.observed`,
    :func:`settle_observed`), so the query reads only the key: a table's write reads every
    column anyway, and the key's uniqueness is a distinct count no observation can hold."""
    checks = plan.checks(None if table_level else True)
    outcome = TableChecks(plan.table, checks=checks)
    aggregates = _builtin_aggregates(plan.builtins, plan.key)
    expectations = [c for c in checks if c.planned is not None]
    if expectations:
        from binlake.quality import engine

        with engine.batch_of(df) as batch:
            validation = engine.validate(batch, [c.expectation.config for c in expectations], aggregates)
            values = validation.extra
            ge_results = _settle_expectations(validation, expectations)
            outcome.validations.append(validation.result)
            failing_drops = [c for c in expectations if c.severity is Severity.DROP and not ge_results[c.name].success]
            if failing_drops:
                outcome.conditions = unexpected_conditions(df, [c.expectation for c in failing_drops])
    else:
        if observe_columns:
            outcome.observed = {c.name: aggregates.pop(c.name) for c in plan.builtins if c.kind == "not_null"}
        row = df.agg(*[col.alias(name) for name, col in aggregates.items()]).first()
        values, ge_results = row.asDict(), {}
    outcome.rows = int(values["_rows"] or 0)
    for check in checks:
        if check.origin == "expectation":
            outcome.results.append(ge_results[check.name])
        elif check.kind == ROW_COUNT_EQUALS_SILVER or check.name in outcome.observed:
            outcome.results.append(_result(check, True))  # settled once gold is written
        else:
            outcome.results.append(_counted(check, values))
    outcome.held_back = _held_back(df, outcome)
    return outcome


def check_table(df, plan: ChecksPlan, outcome: TableChecks) -> None:
    """Add the table-level expectations, checked on ``df``: the table as it will be published."""
    expectations = plan.checks(row_level=False)
    if not expectations:
        return
    from binlake.quality import engine

    with engine.batch_of(df) as batch:
        validation = engine.validate(batch, [c.expectation.config for c in expectations])
        results = _settle_expectations(validation, expectations)
    outcome.validations.append(validation.result)
    outcome.checks.extend(expectations)
    outcome.results.extend(results[c.name] for c in expectations)


def recheck_table(df, plan: ChecksPlan, outcome: TableChecks) -> None:
    """Check the table-level expectations again on ``df`` (the table less the rows drop
    checks hold back), replacing their results on the whole checked frame."""
    kept = [(c, r) for c, r in zip(outcome.checks, outcome.results) if c.origin != "expectation" or c.row_level]
    outcome.checks, outcome.results = [c for c, _ in kept], [r for _, r in kept]
    row_level = {c.name for c in outcome.checks}
    for validation in outcome.validations:
        validation.results = [r for r in validation.results if r.expectation_config.meta.get("name") in row_level]
    check_table(df, plan, outcome)


def _settle_expectations(validation, expectations: Sequence[Check]) -> dict[str, CheckResult]:
    """binlake's result of each expectation from GE's (which GE returns in an order of its
    own: matched by the name binlake puts in each expectation's meta), with GE's unexpected
    counts and values (a second query) for the ones that failed."""
    from binlake.quality import engine

    by_name = {_name_of(r): r for r in validation.result.results}
    failed = [r.expectation_config for r in by_name.values() if not r.success and not _raised(r)]
    for d in engine.detail(validation, failed):
        by_name[_name_of(d)] = d
    validation.result.results = list(by_name.values())
    out = {}
    for check in expectations:
        r = by_name[check.name]
        error = _raised(r)
        res = r.result or {}
        out[check.name] = _result(
            check,
            bool(r.success) and error is None,
            unexpected_count=res.get("unexpected_count"),
            observed_value=res.get("observed_value"),
            engine=GE,
            error=error,
        )
    return out


def _name_of(result) -> str:
    return result.expectation_config.meta["name"]


def _raised(r) -> str | None:
    info = r.exception_info or {}
    # GE keys the info by metric when a metric failed, else gives it flat.
    infos = [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, dict)]
    for i in infos:
        if i.get("raised_exception") or i.get("exception_message"):
            message = (i.get("exception_message") or "").strip().splitlines()
            return (message[0] if message else "GE raised an exception")[:300]
    return None


def _counted(check: Check, values: dict[str, Any]) -> CheckResult:
    """A built-in's result from its count of unexpected rows in ``values`` (by check name)."""
    bad = int(values[check.name] or 0)
    return _result(check, bad == 0, unexpected_count=bad)


def _result(check: Check, success: bool, **kw) -> CheckResult:
    return CheckResult(check.name, check.kind, check.severity, success, check.column, check.origin, **kw)


def unexpected_conditions(df, planned: Sequence[Planned]) -> dict[str, Any]:
    """GE's unexpected condition of each droppable expectation (a Column over the table's
    columns, TRUE for a rejected row), by name: resolved from GE's metric graph on a batch of
    ``df``'s columns, without a Spark job."""
    if not planned:
        return {}
    from binlake.quality import engine

    with engine.batch_of(df) as batch:
        return {p.spec.name: engine.unexpected_condition(batch, p.config) for p in planned}


def rejected(conditions: Iterable[Any]):
    """One Column: TRUE for a row any of ``conditions`` rejects (NULL counts as not rejected)."""
    from pyspark.sql import functions as F

    return functools.reduce(lambda a, b: a | b, [F.coalesce(c, F.lit(False)) for c in conditions], F.lit(False))


def _held_back(df, outcome: TableChecks) -> int:
    """Rows of ``df`` a failing drop check rejects: one check's own unexpected count, or one
    more query when several failed (a row may fail more than one)."""
    dropping = outcome.dropping
    if not dropping:
        return 0
    if len(dropping) == 1:
        return int(next(r for r in outcome.results if r.name == dropping[0].name).unexpected_count or 0)
    return df.where(rejected([outcome.conditions[c.name] for c in dropping])).count()


def settle_row_count_equals_silver(
    outcome: TableChecks, silver_live_rows: int, expected_gold_rows: int, gold_rows: int
) -> None:
    """Settle ``row_count_equals_silver`` once gold is written: ``gold_rows`` as Delta's commit
    metrics count them must be what silver's ``silver_live_rows`` less the rows the drop
    checks hold back make (``expected_gold_rows``)."""
    for i, check in enumerate(outcome.checks):
        if check.kind == ROW_COUNT_EQUALS_SILVER:
            named = row_count_check(silver_live_rows)
            outcome.checks[i] = replace(check, name=named.name)
            outcome.results[i] = CheckResult(
                named.name,
                check.kind,
                check.severity,
                gold_rows == expected_gold_rows,
                check.column,
                check.origin,
                observed_value=gold_rows,
            )


def observing(df, outcome: TableChecks, name: str):
    """``df`` with the checks left to its write (:attr:`TableChecks.observed`) as a Spark
    observation, and the observation (None when there are none): the write computes them in
    its own pass over the rows."""
    if not outcome.observed:
        return df, None
    from pyspark.sql import Observation

    observation = Observation(name)
    return df.observe(observation, *[c.alias(n) for n, c in outcome.observed.items()]), observation


def settle_observed(outcome: TableChecks, values: dict[str, Any]) -> None:
    """Settle the checks the write observed, from the observation's ``values`` by check name."""
    for i, check in enumerate(outcome.checks):
        if check.name in outcome.observed:
            outcome.results[i] = _counted(check, values)
    outcome.observed = {}


def quarantine_frame(df, outcome: TableChecks):
    """The rows each failed drop check rejects, one row per (row, check), with the check's name."""
    from pyspark.sql import functions as F

    parts = [df.where(outcome.conditions[c.name]).withColumn("_check", F.lit(c.name)) for c in outcome.dropping]
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def keep_frame(df, outcome: TableChecks):
    """``df`` without the rows any failed drop check rejects."""
    dropping = outcome.dropping
    if not dropping:
        return df
    return df.where(~rejected([outcome.conditions[c.name] for c in dropping]))


def validation_json(outcome: TableChecks) -> dict | None:
    """GE's validation result of the table's expectations in this publish, as GE's JSON: the
    row-level and table-level validations as one suite result."""
    if not outcome.validations:
        return None
    from binlake.quality import engine

    return engine.combined_result(outcome.table, outcome.validations).to_json_dict()


__all__ = [
    "Check",
    "CheckResult",
    "ChecksPlan",
    "TableChecks",
    "builtin_checks",
    "check_rows",
    "check_table",
    "keep_frame",
    "observing",
    "quarantine_frame",
    "recheck_table",
    "rejected",
    "settle_observed",
    "settle_row_count_equals_silver",
    "table_plan",
    "unexpected_conditions",
    "validation_json",
]
