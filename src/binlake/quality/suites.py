"""A table's expectations made ready for Great Expectations, and every bad one refused in one line.

The config holds what users wrote (:class:`binlake.config.Expectation`: a suite file's
expectations, the ``gold.checks`` shorthand compiled to the same form). Before a publish or in
``preflight``, :func:`plan_table` checks them against GE and the table's stored columns and
sorts them:

- **row-level**: the verdict on a row depends on that row alone (a column-map expectation
  whose Spark condition is a plain predicate, without ``mostly``). An incremental publish
  checks these on the changed rows only: an unchanged row passed them when it was published.
  Only these can ``drop``: the rows GE's unexpected condition rejects are quarantined.
- **table-level**: everything else (row counts, means, distinct counts, uniqueness, which
  GE computes with a window, ``mostly``): checked on the table as it will be published.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from binlake.config import Config, Expectation, Severity
from binlake.contract.types import TableSchema
from binlake.errors import ConfigError


@dataclass(frozen=True)
class Planned:
    """One expectation, checked against GE and the table, with GE's configuration."""

    spec: Expectation
    config: Any  # great_expectations ExpectationConfiguration
    row_level: bool
    # Its unexpected rows can be quarantined: row-level, one column, no row_condition.
    droppable: bool


@dataclass(frozen=True)
class TablePlan:
    """What gold checks on one table with Great Expectations (the built-ins are native)."""

    table: str
    expectations: tuple[Planned, ...] = ()

    @property
    def row_level(self) -> tuple[Planned, ...]:
        return tuple(p for p in self.expectations if p.row_level)

    @property
    def table_level(self) -> tuple[Planned, ...]:
        return tuple(p for p in self.expectations if not p.row_level)

    @property
    def drops(self) -> tuple[Planned, ...]:
        return tuple(p for p in self.expectations if p.spec.severity is Severity.DROP)


def plan_table(config: Config, schema: TableSchema) -> TablePlan:
    """The expectations ``config`` declares for ``schema``'s table, checked and sorted; a table
    without any gets an empty plan and GE is not imported."""
    name = schema.name
    db, _, table = name.partition(".")
    specs = config.gold.suite(db, table)
    if not specs:
        return TablePlan(name)
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"{name} has two expectations named {twice[0]!r} (its suite file and gold.checks): "
            "give one of them another meta.name"
        )
    return TablePlan(name, tuple(_plan(spec, schema) for spec in specs))


def _plan(spec: Expectation, schema: TableSchema) -> Planned:
    from great_expectations.expectations.expectation import ColumnMapExpectation
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    columns = [c.name for c in schema.columns]
    missing = [c for c in spec.columns if c not in columns]
    if missing:
        raise ConfigError(
            f"{spec.where} ({spec.type}) names column {missing[0]!r}, which {schema.name} does not have "
            f"(or source.columns drops): use one of {', '.join(columns)}"
        )
    _known_type(spec)
    config = ExpectationConfiguration(type=spec.type, kwargs=dict(spec.kwargs), meta=spec.to_json()["meta"])
    try:
        expectation = config.to_domain_obj()
    except Exception as exc:  # noqa: BLE001 - GE reports bad kwargs as pydantic or its own errors
        raise ConfigError(f"{spec.where} ({spec.type}): GE rejects its kwargs: {_first_line(exc)}") from None
    mostly = getattr(expectation, "mostly", 1)
    row_level = _map_condition(expectation) and (mostly is None or float(mostly) >= 1.0)
    droppable = row_level and isinstance(expectation, ColumnMapExpectation) and not spec.kwargs.get("row_condition")
    if spec.severity is Severity.DROP and not droppable:
        raise ConfigError(
            f"{spec.where} ({spec.type}): severity drop quarantines the rows a condition on one column rejects, "
            "and this expectation has none (a table-level check, mostly, or row_condition): use warn or fail"
        )
    return Planned(spec, config, row_level, droppable)


def _known_type(spec: Expectation) -> None:
    from great_expectations.expectations.registry import (
        get_expectation_impl,
        list_registered_expectation_implementations,
    )

    try:
        get_expectation_impl(spec.type)
    except Exception:  # noqa: BLE001 - GE raises its own not-found error
        close = difflib.get_close_matches(spec.type, list_registered_expectation_implementations(), n=1)
        hint = f": did you mean {close[0]}?" if close else ": see GE's expectation gallery for the types"
        raise ConfigError(f"{spec.where}: unknown expectation type {spec.type!r}{hint}") from None


def _map_condition(expectation) -> bool:
    """True if GE's Spark engine evaluates the expectation as a per-row predicate."""
    from great_expectations.core.metric_function_types import MetricPartialFunctionTypes
    from great_expectations.expectations.registry import get_metric_provider

    from binlake.quality.engine import OneScanEngine

    metric = getattr(expectation, "map_metric", None)
    if not metric:
        return False
    try:
        # The registry looks providers up by the engine's type; no engine (or session) is built.
        fn = get_metric_provider(f"{metric}.condition", OneScanEngine.__new__(OneScanEngine))[1]
    except Exception:  # noqa: BLE001 - no Spark condition: GE computes it some other way
        return False
    return getattr(fn, "metric_fn_type", None) is MetricPartialFunctionTypes.MAP_CONDITION_FN


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:3])[:300] or type(exc).__name__


__all__ = ["Planned", "TablePlan", "plan_table"]
