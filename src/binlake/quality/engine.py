"""Great Expectations, run the way gold needs it: every aggregate of a validation in one query.

GE's Spark execution engine already bundles the aggregate metrics of one domain into one
``df.agg(...)`` (``resolve_metric_bundle``), but it resolves a suite's metrics level by level,
and every column metric depends on ``table.row_count``: a suite of column-map and column
aggregate expectations costs a query for the row count, then one for the aggregates that wait
on it, and sometimes one more. :class:`OneScanEngine` removes the levels. A validation runs
twice over GE's own metric graph:

1. **record**: the graph is resolved without touching data. Metric functions that only build
   Spark expressions (conditions, aggregate partials) and schema metrics run as usual; every
   aggregate is recorded with its domain instead of computed, and stands in as zero; metrics
   that would read data stand in as None. Nothing that is recorded depends on a stand-in's
   value, because aggregate partials only combine conditions and column names.
2. One ``df.agg`` per domain computes everything recorded (plus binlake's own aggregates for
   the same rows, :meth:`OneScanEngine.validate`).
3. **compute**: GE validates for real; every aggregate it asks for is already known. Metrics
   that are not aggregates (a window for uniqueness, quantiles, unexpected value lists) run
   as GE runs them.

The results are GE's own: the same expectations, metrics and ``ExpectationSuiteValidationResult``.

GE is imported only by a process that has a suite to run: the import costs seconds.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

# No usage statistics leave a binlake process (and a closed network would only time out).
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

import great_expectations as gx
from great_expectations.core.expectation_validation_result import ExpectationSuiteValidationResult
from great_expectations.core.metric_function_types import MetricPartialFunctionTypes
from great_expectations.datasource.fluent import SparkDatasource
from great_expectations.execution_engine import SparkDFExecutionEngine
from great_expectations.expectations.expectation_configuration import ExpectationConfiguration
from great_expectations.expectations.registry import get_metric_provider
from great_expectations.validator.metric_configuration import MetricConfiguration
from great_expectations.validator.metrics_calculator import MetricsCalculator

if TYPE_CHECKING:
    from great_expectations.expectations.expectation import ColumnMapExpectation

    from binlake.spark import SparkLike

GE_VERSION = gx.__version__
# Metrics that read the batch's schema, never its rows: safe to resolve while recording.
_SCHEMA_METRICS = ("table.columns", "table.column_types")
_log = logging.getLogger("great_expectations")
_session = None
_lock = threading.Lock()
_context = None


def use_session(spark: SparkLike) -> None:
    """The Spark session every validation runs on (binlake runs one per process)."""
    global _session
    _session = spark


class OneScanEngine(SparkDFExecutionEngine):
    """GE's Spark engine that computes a validation's aggregates in one query per domain."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("spark", _session)
        kwargs["persist"] = False  # one scan: nothing is read twice, so nothing is cached
        super().__init__(*args, **kwargs)
        self._recording = False
        self._recorded: dict[Any, Any] = {}
        self._known: dict[Any, Any] = {}
        self.extra: dict[str, Any] = {}  # binlake's own aggregates of the same rows, by name
        self.extra_values: dict[str, Any] = {}
        self._rows: int | None = None

    def resolve_metrics(self, metrics_to_resolve, metrics=None, runtime_configuration=None):
        if not self._recording:
            return super().resolve_metrics(metrics_to_resolve, metrics, runtime_configuration)
        todo, stand_ins = [], {}
        for m in metrics_to_resolve:
            fn = get_metric_provider(m.metric_name, self)[1]
            bundled = fn is None  # an aggregate: GE computes it from its partial, in a bundle
            if (
                bundled
                or isinstance(getattr(fn, "metric_fn_type", None), MetricPartialFunctionTypes)
                or (m.metric_name in _SCHEMA_METRICS)
            ):
                todo.append(m)
            else:
                stand_ins[m.id] = None  # reads data: waits for the real pass
        resolved = super().resolve_metrics(todo, metrics, runtime_configuration) if todo else {}
        return {**resolved, **stand_ins}

    def resolve_metric_bundle(self, metric_fn_bundle):
        bundle = list(metric_fn_bundle)
        if self._recording:
            for c in bundle:
                self._recorded[c.metric_configuration.id] = c
            return {c.metric_configuration.id: 0 for c in bundle}
        missing = [c for c in bundle if c.metric_configuration.id not in self._known]
        if missing:
            self._known.update(super().resolve_metric_bundle(missing))
        return {c.metric_configuration.id: self._known[c.metric_configuration.id] for c in bundle}

    def prefetch(self) -> None:
        """Compute every recorded aggregate, and binlake's own, in one query per domain.

        A query that fails (an expectation Spark cannot evaluate, such as a regex Java rejects)
        is left to GE, which computes that domain's metrics one by one and reports the failing
        one on its expectation."""
        by_domain: dict[Any, list] = {}
        for c in self._recorded.values():
            by_domain.setdefault(_domain_id(c.compute_domain_kwargs), []).append(c)
        self._recorded.clear()
        plain = next((d for d, cs in by_domain.items() if _plain_domain(cs[0].compute_domain_kwargs)), None)
        for domain, configs in by_domain.items():
            extra = list(self.extra) if domain == plain else []
            df = self.get_domain_records(domain_kwargs=configs[0].compute_domain_kwargs)
            try:
                row = df.agg(*[c.metric_fn for c in configs], *[self.extra[n] for n in extra]).collect()[0]
            except Exception:  # noqa: BLE001 - GE's own path isolates and reports the failure
                continue
            for i, c in enumerate(configs):
                self._known[c.metric_configuration.id] = _json_value(row[i])
                if c.metric_configuration.metric_name == "table.row_count" and domain == plain:
                    self._rows = int(row[i])
            self.extra_values.update({n: row[len(configs) + j] for j, n in enumerate(extra)})
        missing = [n for n in self.extra if n not in self.extra_values]
        if missing:
            # No GE aggregate read the plain rows (or their query failed): binlake's own alone.
            own = self.dataframe.agg(*[self.extra[n].alias(n) for n in missing]).collect()[0]
            self.extra_values.update({n: own[n] for n in missing})

    def row_count(self) -> int | None:
        """The batch's row count, when the validation needed it (every column metric does)."""
        return self._rows

    @contextmanager
    def recording(self) -> Iterator[None]:
        self._recording = True
        level = _log.level
        _log.setLevel(
            logging.DEBUG if os.environ.get("GXDEBUG") else logging.CRITICAL
        )  # stand-ins make some expectations raise: expected, and discarded
        try:
            yield
        finally:
            self._recording = False
            _log.setLevel(level)


def _domain_id(kwargs) -> Any:
    from great_expectations.core.id_dict import IDDict

    return (kwargs if isinstance(kwargs, IDDict) else IDDict(kwargs or {})).to_id()


def _plain_domain(kwargs) -> bool:
    kwargs = dict(kwargs or {})
    return not kwargs.get("row_condition") and not kwargs.get("filter_conditions") and not kwargs.get("ignore_row_if")


def _json_value(value: Any) -> Any:
    from great_expectations.util import convert_to_json_serializable

    return convert_to_json_serializable(data=value)


class BinlakeSparkDatasource(SparkDatasource):
    """GE's Spark datasource on :class:`OneScanEngine`."""

    type: Literal["binlake_spark"] = "binlake_spark"  # type: ignore[assignment]
    execution_engine_override = OneScanEngine


def _get_context():
    global _context
    if _context is None:
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = {"globally": False, "metric_calculations": False}
        _context = context
    return _context


@dataclass
class Validation:
    """One validation of a frame: GE's result, the row count, binlake's own aggregates."""

    result: ExpectationSuiteValidationResult
    rows: int | None
    extra: dict[str, Any]
    engine: OneScanEngine
    batch: Any


@contextmanager
def batch_of(df) -> Iterator[Any]:
    """A GE batch of ``df`` on its own datasource (and engine), removed afterwards: validations
    run in parallel threads and an engine holds one active batch."""
    use_session(df.sparkSession)
    context = _get_context()
    name = f"binlake-{uuid.uuid4().hex[:12]}"
    with _lock:
        source = context.data_sources.add_binlake_spark(name=name)
        asset = source.add_dataframe_asset(name="rows")
        definition = asset.add_batch_definition_whole_dataframe("all")
    try:
        batch = definition.get_batch(batch_parameters={"dataframe": df})
        # Loaded as GE's own Batch.columns() loads it, so metrics resolve before any validation.
        batch.data.execution_engine.batch_manager.load_batch_list(batch_list=[batch])
        yield batch
    finally:
        with _lock:
            context.data_sources.delete(name)


def validate(batch, configs: Sequence[ExpectationConfiguration], extra: dict[str, Any] | None = None) -> Validation:
    """Validate ``configs`` on ``batch``, every aggregate (and ``extra``, binlake's own
    aggregate columns) in one query per domain.

    Map expectations report ``BOOLEAN_ONLY``: their unexpected values would cost a query each.
    The others report GE's ``SUMMARY`` (observed values), which their aggregates already hold."""
    expectations = [c.to_domain_obj() for c in configs]
    engine: OneScanEngine = batch.data.execution_engine
    engine.extra = dict(extra or {})
    with engine.recording():
        batch.validate(_suite(expectations), result_format="BOOLEAN_ONLY")
    engine.prefetch()
    maps = [e for e in expectations if getattr(e, "map_metric", None)]
    others = [e for e in expectations if not getattr(e, "map_metric", None)]
    parts = [batch.validate(_suite(maps), result_format="BOOLEAN_ONLY")] if maps else []
    parts += [batch.validate(_suite(others), result_format="SUMMARY")] if others else []
    result = parts[0] if len(parts) == 1 else combined_result("binlake", parts)
    return Validation(result, engine.row_count(), dict(engine.extra_values), engine, batch)


def _suite(expectations: list) -> Any:
    return gx.ExpectationSuite(name="binlake", expectations=expectations)


def detail(validation: Validation, configs: Sequence[ExpectationConfiguration]) -> list:
    """GE's ``SUMMARY`` results (unexpected counts and values, observed values) of ``configs``:
    the second query, only for what failed."""
    if not configs:
        return []
    suite = _suite([c.to_domain_obj() for c in configs])
    return list(validation.batch.validate(suite, result_format="SUMMARY").results)


def unexpected_condition(batch, config: ExpectationConfiguration):
    """GE's own unexpected-row condition of a row-level expectation on one column, as a Spark
    Column over the batch's columns: TRUE exactly for the rows the expectation rejects. Resolved
    while recording, so no aggregate (the row count it formally depends on) is computed."""
    engine: OneScanEngine = batch.data.execution_engine
    # Row-level expectations on one column are GE's column map expectations.
    expectation = cast("ColumnMapExpectation", config.to_domain_obj())
    with engine.recording():
        deps = expectation.get_validation_dependencies(execution_engine=engine)
        count = deps.get_metric_configuration(f"{expectation.map_metric}.unexpected_count")
        assert count is not None, f"{config.type} has no unexpected_count metric"
        metric = MetricConfiguration(
            metric_name=f"{expectation.map_metric}.condition",
            metric_domain_kwargs=count.metric_domain_kwargs,
            metric_value_kwargs=count.metric_value_kwargs,
        )
        calculator = MetricsCalculator(execution_engine=engine, show_progress_bars=False)
        condition, _, _ = calculator.get_metric(metric)
    engine._recorded.clear()
    return condition


def combined_result(table: str, validations: Sequence[ExpectationSuiteValidationResult]):
    """One suite result of a table's validations in a publish (the changed rows' and the
    table's), as GE would have written it for one run."""
    from great_expectations.validator.validator import calc_validation_statistics

    results = [r for v in validations for r in v.results]
    stats = calc_validation_statistics(results)
    return ExpectationSuiteValidationResult(
        success=stats.success,
        results=results,
        suite_name=table,
        statistics={
            "evaluated_expectations": stats.evaluated_expectations,
            "successful_expectations": stats.successful_expectations,
            "unsuccessful_expectations": stats.unsuccessful_expectations,
            "success_percent": stats.success_percent,
        },
        meta={**(validations[0].meta or {}), "great_expectations_version": GE_VERSION},
    )


def build_data_docs(results: Sequence[tuple[str, str, Any, dict]], out_dir: str) -> str:
    """GE's Data Docs site for stored validation results ``(suite name, run name, run time,
    result JSON)``, built by GE's site builder into ``out_dir``; returns the index page's path."""
    from great_expectations.core.expectation_validation_result import expectationSuiteValidationResultSchema
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    context = gx.get_context(mode="ephemeral")
    context.add_data_docs_site(
        "binlake",
        {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": out_dir},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    for suite, run, at, result in results:
        run_id = RunIdentifier(run_name=run, run_time=at)
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=suite), run_id=run_id, batch_identifier=suite
        )
        loaded = expectationSuiteValidationResultSchema.load(result)
        loaded.meta = {**(loaded.meta or {}), "run_id": run_id}  # the page's run: the publish
        context.validation_results_store.set(key, loaded)
    context.build_data_docs(site_names=["binlake"])
    return os.path.join(out_dir, "index.html")


__all__ = [
    "GE_VERSION",
    "OneScanEngine",
    "Validation",
    "batch_of",
    "build_data_docs",
    "combined_result",
    "detail",
    "unexpected_condition",
    "use_session",
    "validate",
]
