"""The metrics table (``system/metrics``): what every command run did, for dashboards and alerts.

Each command that reads or writes the lakehouse (snapshot, capture, silver, gold, run,
run --continuous, maintain, verify) appends one row per step it ran (``table`` NULL: the
step as a whole, with its duration and status) and one row per table the step touched: rows
in, changes applied, rows out, the position reached, lag behind the source, check results.
Schema: :data:`binlake.contract.schemas.METRICS_SCHEMA`.

Lag is measured once, when the command ends: the source's binlog end (``SHOW BINARY LOGS``
and the server's position) against the position each step reached. ``lag_seconds`` is 0
when a step is caught up, else an upper bound: now minus the source commit time of the
newest change the step holds (every change it lacks committed later).

Metrics never fail a command: a run whose metrics cannot be written logs a warning and
keeps its own exit code. The continuous mode buffers its loops' rows and appends them at
most every :data:`FLUSH_SECONDS`, so metrics cost it one small commit a minute.

Example (what the bundle's dashboard charts)::

    SELECT date_trunc('minute', started_at) AS t, max(lag_seconds) AS lag
    FROM main.binlake_system.metrics WHERE step = 'capture' AND `table` IS NULL GROUP BY 1
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from binlake.config import Config
from binlake.contract.position import BinlogPosition
from binlake.contract.schemas import METRICS_COMMENT, METRICS_SCHEMA
from binlake.contract.tables import Lakehouse
from binlake.contract.write_errors import with_retry
from binlake.errors import BinlakeError
from binlake.timing import utc_now

if TYPE_CHECKING:
    from binlake.bronze.capture import CaptureResult
    from binlake.bronze.snapshot import SnapshotResult
    from binlake.gold.publish import GoldResult
    from binlake.ops.maintain import MaintainResult
    from binlake.ops.verify import VerifyResult
    from binlake.silver.run import SilverResult
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.metrics")

# The continuous mode appends its buffered rows at most this often (and when it stops).
FLUSH_SECONDS = 60.0
# Environment variable naming the Databricks job run (binlake-job --job-run-id sets it).
JOB_RUN_ENV = "BINLAKE_JOB_RUN_ID"

OK, FAILED, BLOCKED, STOPPED, MISMATCH, INTERRUPTED = "ok", "failed", "blocked", "stopped", "mismatch", "interrupted"

COLUMNS = [c.split()[0].strip("`") for c in METRICS_SCHEMA.split(", ")]


def lag_seconds(now: datetime, newest_change: datetime | None, caught_up: bool | None) -> float | None:
    """Seconds a layer is behind the source: 0 when it holds the server's position
    (``caught_up``), else an upper bound, ``now`` - the source commit time of the newest change
    it holds (every change it lacks committed after that one); None when either is unknown.
    Capture's lag, gold's lag, the metrics table and ``binlake status`` all use this one."""
    if caught_up:
        return 0.0
    if caught_up is None or newest_change is None:
        return None
    return round(max(0.0, (now - newest_change).total_seconds()), 3)


@dataclass(frozen=True)
class SourceHead:
    """The source's binlog end when a command finished, and the files to measure lag over."""

    files: tuple
    position: BinlogPosition
    at: datetime

    def lag_bytes(self, p: BinlogPosition | None) -> int | None:
        from binlake.source.binlog.files import bytes_between

        if p is None:
            return None
        # The server's files are those of the epoch capture follows now (as in capture_status).
        return bytes_between(list(self.files), p, self.position.in_epoch(p.epoch))


def source_head(config: Config) -> SourceHead | None:
    """The source's binlog end now, or None (logged) when the source cannot be asked."""
    from binlake.source.binlog.files import list_binlogs
    from binlake.source.mysql import connect, master_status

    try:
        with connect(config.source) as conn:
            files = tuple(list_binlogs(conn))
            server = master_status(conn)
    except Exception as exc:  # noqa: BLE001 - lag is then unknown, the metrics still written
        log.info("metrics: lag unknown, the source cannot be asked: %s", (str(exc).splitlines() or [""])[0][:200])
        return None
    return SourceHead(files, server, utc_now())


class MetricsRecorder:
    """Collects one command run's rows (:meth:`add`) and appends them (:meth:`flush`)."""

    def __init__(self, config: Config, command: str):
        self.config, self.command = config, command
        self.run_id = uuid.uuid4().hex
        self.job_run_id = os.environ.get(JOB_RUN_ENV) or None
        self.host = socket.gethostname()
        self.rows: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()
        # run --continuous adds rows from its three stages' threads.
        self._lock = threading.Lock()

    def add(
        self,
        step: str,
        outcome: Any = None,
        seconds: float | None = None,
        error: BaseException | None = None,
        started_at: datetime | None = None,
        head: SourceHead | None = None,
    ) -> None:
        """The rows of one step: ``outcome`` is the step's result object (or None when it
        failed before returning one), ``error`` what it raised."""
        base = {
            "run_id": self.run_id,
            "command": self.command,
            "step": step,
            "job_run_id": self.job_run_id,
            "host": self.host,
            "started_at": started_at or utc_now(),
        }
        if outcome is None and isinstance(error, BinlakeError):
            outcome = error.result  # what a blocked gold, a stopped silver or a failed verify did do
        rows = list(_step_rows(step, outcome, head, self.config)) if outcome is not None else []
        step_row = next((r for r in rows if r.get("table") is None), None)
        if step_row is None:
            step_row = {}
            rows.insert(0, step_row)
        step_row["seconds"] = None if seconds is None else round(seconds, 3)
        if error is not None:
            step_row["status"] = (
                INTERRUPTED
                if isinstance(error, KeyboardInterrupt)
                else BLOCKED
                if getattr(error, "blocked", None)
                else FAILED
            )
            step_row["detail"] = _one_line(f"{type(error).__name__}: {error}")
            rows += _blocked_rows(error)
        step_row.setdefault("status", OK)
        with self._lock:
            self.rows += [{**{c: None for c in COLUMNS}, **base, **r} for r in rows]

    def due(self) -> bool:
        """Rows are waiting and the last append is :data:`FLUSH_SECONDS` old."""
        return bool(self.rows) and time.monotonic() - self.last_flush >= FLUSH_SECONDS

    def sample_due(self) -> bool:
        """Nothing was recorded for :data:`FLUSH_SECONDS`: an idle loop records its lag."""
        return not self.rows and time.monotonic() - self.last_flush >= FLUSH_SECONDS

    def flush(self, spark: SparkLike) -> int:
        """Append the collected rows; returns how many. Never raises: a lost metrics row must
        not fail the run it describes."""
        with self._lock:
            rows, self.rows = self.rows, []
            self.last_flush = time.monotonic()
        if not rows:
            return 0
        ref = Lakehouse(self.config).metrics
        try:
            ensure_metrics_table(spark, self.config)
            df = spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], METRICS_SCHEMA)
            with_retry("metrics append", lambda: ref.save(df.write.format("delta").mode("append")))
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning(
                "metrics: %d row(s) not written to %s: %s", len(rows), ref, (str(exc).splitlines() or [""])[0][:200]
            )
            return 0
        return len(rows)


_ready: set[str] = set()


def ensure_metrics_table(spark: SparkLike, config: Config) -> None:
    ref = Lakehouse(config).metrics
    if str(ref) in _ready:
        return
    ref.create_if_missing(spark, METRICS_SCHEMA, comment=METRICS_COMMENT)
    _ready.add(str(ref))


def read_metrics(spark: SparkLike, config: Config, since: datetime | None = None):
    """The metrics table as a DataFrame (rows started at or after ``since``), or None when
    nothing has been recorded yet."""
    from pyspark.sql import functions as F

    ref = Lakehouse(config).metrics
    if not ref.exists(spark):
        return None
    df = ref.read(spark)
    return df.where(F.col("started_at") >= F.lit(since)) if since is not None else df


# ---------------------------------------------------------------------------------------
# The health views: the same SQL feeds `binlake status --html` and the bundle's dashboard.
# ``{metrics}`` is the metrics table, ``{since}`` an SQL timestamp expression.

HEALTH_VIEWS = {
    "capture_lag": (
        "SELECT started_at AS t, lag_seconds, lag_bytes FROM {metrics} "
        "WHERE step = 'capture' AND `table` IS NULL AND lag_seconds IS NOT NULL AND started_at >= {since} ORDER BY t"
    ),
    "gold_lag": (
        "SELECT min(started_at) AS t, publish_group, max(lag_seconds) AS lag_seconds FROM {metrics} "
        "WHERE step = 'gold' AND `table` IS NOT NULL AND status = 'ok' AND lag_seconds IS NOT NULL "
        "AND started_at >= {since} GROUP BY run_id, publish_group ORDER BY t"
    ),
    "rows_per_run": (
        "SELECT min(started_at) AS t, CASE step WHEN 'capture' THEN 'captured' ELSE 'applied to silver' END AS kind, "
        "sum(CASE step WHEN 'capture' THEN rows_in ELSE changes_applied END) AS `rows` FROM {metrics} "
        "WHERE `table` IS NULL AND step IN ('capture', 'silver') AND started_at >= {since} "
        "GROUP BY run_id, step ORDER BY t"
    ),
    "step_seconds": (
        "SELECT min(started_at) AS t, step, sum(seconds) AS seconds FROM {metrics} "
        "WHERE `table` IS NULL AND seconds IS NOT NULL AND started_at >= {since} GROUP BY run_id, step ORDER BY t"
    ),
    "problems": (
        "SELECT started_at, command, step, `table`, publish_group, status, checks_failed, detail FROM {metrics} "
        "WHERE (status IN ('failed', 'blocked', 'stopped', 'mismatch') OR checks_failed > 0) "
        "AND started_at >= {since} ORDER BY started_at DESC LIMIT 50"
    ),
    "stopped_tables": (
        "SELECT `table`, detail AS why, started_at AS since FROM (SELECT *, row_number() OVER "
        "(PARTITION BY `table` ORDER BY started_at DESC) AS n FROM {metrics} WHERE step = 'silver' AND `table` IS "
        "NOT NULL) "
        "WHERE n = 1 AND status = 'stopped' ORDER BY `table`"
    ),
    # What the bundle's lag alert evaluates: per layer (capture, each gold table) the lag last
    # measured plus the time since, an upper bound of the lag now that also grows when binlake
    # stops running and so stops measuring.
    "current_lag": (
        "SELECT max(lag_seconds + timestampdiff(SECOND, started_at, current_timestamp())) AS lag_seconds FROM ("
        "SELECT lag_seconds, started_at, row_number() OVER (PARTITION BY step, `table` ORDER BY started_at DESC) AS n "
        "FROM {metrics} WHERE lag_seconds IS NOT NULL AND started_at >= {since} "
        "AND ((step = 'capture' AND `table` IS NULL) OR (step = 'gold' AND `table` IS NOT NULL))) WHERE n = 1"
    ),
}
"""Each health view's SQL: what the page and the dashboard chart (see their modules), and
what the bundle's lag alert evaluates."""


def health_view(name: str, metrics: str, since: str) -> str:
    """The SQL of health view ``name`` over table ``metrics`` from ``since`` (an SQL expression)."""
    return HEALTH_VIEWS[name].format(metrics=metrics, since=since)


# ---------------------------------------------------------------------------------------
# One step's rows, by the type of its result


def _backfilled(rows: dict[str, int]) -> str | None:
    """A silver table row's detail: the rows each added column's DEFAULT reached."""
    return ("backfilled " + ", ".join(f"{c}: {n} rows" for c, n in sorted(rows.items()))) if rows else None


def _one_line(text: str, limit: int = 500) -> str:
    return " ".join(str(text).split())[:limit]


def _micros_to_dt(us: int | None) -> datetime | None:
    return None if us is None else datetime.fromtimestamp(us / 1_000_000, timezone.utc).replace(tzinfo=None)


def _step_rows(step: str, outcome: Any, head: SourceHead | None, config: Config) -> Iterable[dict[str, Any]]:
    """The rows of one step: the step's own (no ``table``), then one per table, by the type of
    its result (nothing for a type not in :func:`_rows_by_result`)."""
    for kind, rows in _rows_by_result():
        if isinstance(outcome, kind):
            return rows(outcome, head, config)
    return ()


def _rows_by_result() -> tuple[tuple[type, Callable[[Any, SourceHead | None, Config], Iterator[dict[str, Any]]]], ...]:
    """Each step's result type and the function that makes its rows."""
    # Imported when rows are made, not with this module: importing metrics loads no step.
    from binlake.bronze.capture import CaptureResult
    from binlake.bronze.snapshot import SnapshotResult
    from binlake.gold.publish import GoldResult
    from binlake.ops.maintain import MaintainResult
    from binlake.ops.verify import VerifyResult
    from binlake.silver.run import SilverResult

    return (
        (SnapshotResult, _snapshot_rows),
        (CaptureResult, _capture_rows),
        (SilverResult, _silver_rows),
        (GoldResult, _gold_rows),
        (MaintainResult, _maintain_rows),
        (VerifyResult, _verify_rows),
    )


def _snapshot_rows(outcome: SnapshotResult, head: SourceHead | None, config: Config) -> Iterator[dict[str, Any]]:
    yield {
        "rows_in": outcome.rows,
        "detail": f"{len(outcome.tables)} table(s) read, {len(outcome.skipped)} complete",
    }
    for t in outcome.tables:
        yield {
            "table": t.name,
            "status": OK,
            "rows_in": t.rows,
            "detail": f"{t.mode}: {t.chunks_read}/{t.chunks_total} chunks",
        }


def _capture_rows(outcome: CaptureResult, head: SourceHead | None, config: Config) -> Iterator[dict[str, Any]]:
    lag = head.lag_bytes(outcome.end) if head else None
    secs = lag_seconds(head.at, _micros_to_dt(outcome.last_commit_ts), lag == 0) if head and lag is not None else None
    detail = "; ".join(outcome.warnings + [f"source switch: {s}" for s in outcome.source_switches]) or None
    yield {
        "rows_in": outcome.changes,
        "position": str(outcome.end) if outcome.end else None,
        "lag_bytes": lag,
        "lag_seconds": secs,
        "detail": _one_line(detail) if detail else None,
    }
    for name, n in sorted(outcome.table_changes.items()):
        yield {"table": name, "status": OK, "rows_in": n, "publish_group": _group(config, name)}
    for r in outcome.replays:  # online schema change cut-overs: rows replayed, or why it re-snapshotted
        yield {"table": r.cut_over.name, "status": OK, "rows_in": r.rows, "detail": _one_line(r.describe())}


def _silver_rows(outcome: SilverResult, head: SourceHead | None, config: Config) -> Iterator[dict[str, Any]]:
    lag = head.lag_bytes(outcome.applied) if head else None
    yield {
        "rows_in": sum(t.changes + t.snapshot_rows for t in outcome.tables),
        "changes_applied": sum(t.merged for t in outcome.tables),
        "position": str(outcome.applied) if outcome.applied else None,
        "lag_bytes": lag,
        "status": STOPPED if outcome.failed else OK,
        "detail": f"{len(outcome.failed)} table(s) stopped" if outcome.failed else None,
    }
    for t in outcome.tables:
        yield {
            "table": t.name,
            "publish_group": _group(config, t.name),
            "status": STOPPED if t.error else OK,
            "rows_in": t.changes + t.snapshot_rows,
            "changes_applied": t.merged,
            "position": None if t.error else (str(outcome.applied) if outcome.applied else None),
            "lag_bytes": None if t.error else lag,
            "seconds": round(t.seconds, 3),
            "detail": _one_line(t.error) if t.error else _backfilled(t.backfilled),
        }


def _gold_rows(outcome: GoldResult, head: SourceHead | None, config: Config) -> Iterator[dict[str, Any]]:
    groups = outcome.groups or [outcome]
    published = sum(1 for g in groups if g.status == "published")
    yield {
        "rows_out": sum(t.row_count or 0 for g in groups for t in g.tables),
        "detail": f"{published} of {len(groups)} group(s) published",
    }
    for g in groups:
        lag = head.lag_bytes(g.position) if head else None
        newest = datetime.fromisoformat(str(g.source_time)) if g.source_time else None
        secs = lag_seconds(head.at, newest, lag == 0) if head and lag is not None else None
        for t in g.tables:
            failed, warned = _check_counts(t.checks)
            yield {
                "table": t.name,
                "publish_group": g.group,
                "status": OK,
                "rows_out": t.row_count,
                "position": str(g.position),
                "lag_bytes": lag,
                "lag_seconds": secs,
                "checks_failed": failed,
                "checks_warned": warned,
                "seconds": None if t.seconds is None else round(t.seconds, 3),
                "detail": f"{g.status}, {t.mode}",
            }


def _maintain_rows(outcome: MaintainResult, head: SourceHead | None, config: Config) -> Iterator[dict[str, Any]]:
    yield {
        "rows_out": sum(outcome.tombstones_removed.values()) + outcome.changelog_rows_removed,
        "detail": _one_line(outcome.summary().splitlines()[0]),
    }
    for name, n in sorted(outcome.tombstones_removed.items()):
        yield {"table": name, "status": OK, "rows_out": n, "detail": "tombstones removed"}


def _verify_rows(outcome: VerifyResult, head: SourceHead | None, config: Config) -> Iterator[dict[str, Any]]:
    yield {
        "rows_in": sum(t.source_rows for t in outcome.tables),
        "status": OK if outcome.ok else MISMATCH,
        "checks_failed": len(outcome.mismatches),
    }
    for t in outcome.tables:
        yield {
            "table": t.name,
            "status": MISMATCH if t.mismatches else OK,
            "rows_in": t.source_rows,
            "checks_failed": len(t.mismatches),
            "detail": f"{len(t.chunks)} chunk(s) compared",
        }


def _group(config: Config, name: str) -> str | None:
    db, _, table = name.partition(".")
    return config.gold.group_of(db, table) if table else None


def _check_counts(checks: Any) -> tuple[int | None, int | None]:
    """(failed, warned) of a table's checks: a TableChecks, or the JSON a reused publish recorded."""
    if checks is None:
        return None, None
    if hasattr(checks, "blocking"):
        return len(checks.blocking) + len(checks.dropping), len(checks.warnings)
    try:
        results = json.loads(checks) if isinstance(checks, str) else list(checks)
    except (TypeError, ValueError):
        return None, None
    failed = [r for r in results if isinstance(r, dict) and not r.get("success", True)]
    return (
        sum(1 for r in failed if str(r.get("severity", "")).lower() != "warn"),
        sum(1 for r in failed if str(r.get("severity", "")).lower() == "warn"),
    )


def _blocked_rows(error: BaseException) -> list[dict[str, Any]]:
    """One row per table of each publish group a gold run left blocked (``exc.blocked``)."""
    rows = []
    for group, exc in (getattr(error, "blocked", None) or {}).items():
        failed = 1 if type(exc).__name__ == "QualityCheckFailed" else None
        for name in getattr(exc, "tables", None) or []:
            rows.append(
                {
                    "table": name,
                    "publish_group": group,
                    "status": BLOCKED,
                    "checks_failed": failed,
                    "detail": _one_line(f"group {group}: {exc}"),
                }
            )
    return rows


# ---------------------------------------------------------------------------------------
# Recording a whole command


def recorded(spark: SparkLike, config: Config, command: str, run: Any) -> Any:
    """Run ``run()`` (one command) and append its metrics rows, also when it fails; returns
    what ``run()`` returned, or re-raises what it raised."""
    recorder = MetricsRecorder(config, command)
    started, t0 = utc_now(), time.monotonic()
    try:
        result = run()
    except BaseException as exc:
        _record_safely(spark, recorder, config, None, exc, started, time.monotonic() - t0)
        raise
    _record_safely(spark, recorder, config, result, None, started, time.monotonic() - t0)
    return result


def _record_safely(
    spark: SparkLike,
    recorder: MetricsRecorder,
    config: Config,
    result: Any,
    error: BaseException | None,
    started: datetime,
    seconds: float,
) -> None:
    try:
        record_command(recorder, config, result, error, started, seconds)
    except Exception as exc:  # noqa: BLE001 - a metrics bug must not change the command's outcome
        log.warning("metrics: not recorded: %s: %s", type(exc).__name__, (str(exc).splitlines() or [""])[0][:200])
        return
    recorder.flush(spark)


def record_command(
    recorder: MetricsRecorder,
    config: Config,
    result: Any,
    error: BaseException | None,
    started: datetime,
    seconds: float,
) -> None:
    """The rows of one command's outcome: one set per step of a pipeline run."""
    from binlake.errors import SourceConnectionError
    from binlake.ops.pipeline import PipelineResult

    # Maintenance moves no position; a source that just refused a connection would only
    # make the metrics wait for its timeout again.
    needs_head = recorder.command != "maintain" and not isinstance(error, SourceConnectionError)
    head = source_head(config) if needs_head else None
    pipeline = result if isinstance(result, PipelineResult) else getattr(error, "pipeline_result", None)
    if pipeline is None:
        recorder.add(recorder.command, result, seconds, error, started, head)
        return
    at = started
    for s in pipeline.steps:
        recorder.add(s.name, s.result, s.seconds, s.error, at, head)
        at += timedelta(seconds=s.seconds)
