"""Exactly-once binlog capture into the bronze change log.

One capture batch = one Delta commit to ``bronze/changelog`` holding every change between
two transaction boundaries ``[start, end)`` plus one ``op='heartbeat'`` row at ``end``.
The resume position IS the largest heartbeat in the table, so "these events + this resume
offset" are committed atomically by the single Delta commit: a run killed before the commit
leaves no trace and the next run reads ``[start, end)`` again; a run killed after it resumes
at ``end``. Delta idempotent writes (``txnAppId`` / ``txnVersion`` derived from ``start``)
make a second writer that read the same range a no-op. See docs/capture.md.

The heartbeat also names the server the batch was read from and, on MariaDB, the GTID
position at its end (:mod:`binlake.bronze.capture_state`). Before reading, capture checks
that the server is still the one, and that the binlog still holds its position. When the
source switched (a promoted replica) it resumes from the GTID position on the new server in
a new source epoch, whose positions sort after every older one; when it cannot (a reset
binlog, no GTID), it stops with :class:`SourceChangedError` and the re-snapshot recovery.

This module is the run loop and its batches; the commit is
:mod:`binlake.bronze.capture_commit`, positioning and failover
:mod:`binlake.bronze.capture_position`, the snapshots capture starts itself
:mod:`binlake.bronze.capture_new_tables`.

Example::

    result = run_capture(spark, config)          # up to the position the server reports now
    print(result.summary())
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from pyspark.errors import AnalysisException

from binlake.bronze.binlog_reader import SIDE_OPS, ReadRange
from binlake.bronze.binlog_source import MAX_PARALLEL_FILES, read_dataframe
from binlake.bronze.capture_commit import TXN_APP_ID, CaptureResult, commit_batch, table_filter
from binlake.bronze.capture_new_tables import renamed_into, snapshot_newly_matched
from binlake.bronze.capture_position import (
    binlog_files,
    capture_status,
    ensure_not_purged,
    follow_source,
    follow_source_state,
    reset_capture,
    resume_purge_warning,
    startup_position,
    state_at,
)
from binlake.bronze.capture_state import CaptureState, capture_position, capture_state
from binlake.bronze.snapshot import run_snapshot
from binlake.bronze.tables import ensure_bronze_tables
from binlake.config import Config, require_config
from binlake.console import QUIET, Console
from binlake.contract.changelog import HEARTBEAT_OP, RENAMED_INTO_OP
from binlake.contract.position import BinlogPosition
from binlake.contract.tables import Lakehouse
from binlake.contract.types import TableSchema
from binlake.contract.write_errors import storage_error
from binlake.errors import (
    BinlakeError,
    InternalInvariantError,
    SourceConnectionError,
    raised_on_worker,
)
from binlake.source import gtid as gtids
from binlake.source.binlog.files import BinlogFile, wait_for_server
from binlake.source.mysql import connect, master_status, server_id
from binlake.spark import default_parallelism, require_binlake_on_workers

if TYPE_CHECKING:
    from binlake.spark import SparkLike

# The public names of capture, wherever they live.
__all__ = [
    "TXN_APP_ID",
    "CaptureResult",
    "capture_position",
    "capture_status",
    "follow_source",
    "plan_ranges",
    "recover_from_purge",
    "reset_capture",
    "run_capture",
    "table_filter",
]

log = logging.getLogger("binlake.capture")

# How often --continuous asks the server for a new end position when caught up.
POLL_SECONDS = 1.0
# A batch that fails (server restart, dropped connection) is planned and read again.
MAX_ATTEMPTS = 6


# ---------------------------------------------------------------------------------------
# public API


def run_capture(spark: SparkLike, config: Config, continuous: bool = False, console: Console = QUIET) -> CaptureResult:
    """Capture from the stored resume position up to the server's position at start
    (``continuous=False``, ``--until-now``) or until interrupted (``continuous=True``).

    A table that ``source.tables`` / ``exclude`` match now but did not match at capture's
    last commit (an existing table newly included) is snapshotted first, whatever runs
    capture (the bundle's scheduled pipeline included): its older rows are in no change
    record capture kept."""
    require_config(config)
    if config.source.archive is not None:
        # A source that is only binlog files: the same batches, positioned by the files.
        from binlake.bronze.capture_archive import ArchiveBatches, run_archive_capture

        batches = ArchiveBatches(plan=plan_ranges, read_and_commit=_read_and_commit)
        return run_archive_capture(spark, config, batches, continuous=continuous, console=console)
    started = time.monotonic()
    lh = Lakehouse(config)
    ensure_bronze_tables(spark, lh)
    result = CaptureResult()
    state = capture_state(spark, lh)
    with connect(config.source) as conn:
        files = binlog_files(config, conn)
        if state is None:
            start = startup_position(spark, config, lh, conn, files)
            log.info("no capture state yet: starting (%s) at %s", config.capture.startup.value, start)
            # Persist the start at once, so a later run never recomputes it differently.
            state = commit_batch(spark, lh, [], start, state_at(conn, start), None, result)
        recorded = state
        state = follow_source_state(spark, config, lh, conn, files, state, result)
        state = ensure_not_purged(spark, config, lh, conn, files, state, result)
        snapshot_newly_matched(spark, config, lh, conn, recorded, result)
        target = master_status(conn).in_epoch(state.position.epoch)
    result.start = state.position
    resume = state.position
    try:
        while True:
            state, target = _capture_until(spark, config, lh, state, target, result, console)
            resume = state.position
            if not continuous:
                break
            time.sleep(POLL_SECONDS)
            try:
                with connect(config.source) as conn:
                    state = follow_source_state(spark, config, lh, conn, binlog_files(config, conn), state, result)
                    target = master_status(conn).in_epoch(state.position.epoch)
            except SourceConnectionError:
                # A restarting source is waited for; --continuous is meant to outlive it.
                log.warning("source unreachable; waiting for it to come back")
                wait_for_server(config.source, timeout=300)
    except KeyboardInterrupt:
        if not continuous:
            raise
        resume = capture_position(spark, lh) or resume
        log.info("capture interrupted; resume position %s is committed", resume)
    result.end = resume
    result.seconds = time.monotonic() - started
    warning = resume_purge_warning(config, resume)
    if warning:
        result.warnings.append(warning)
    return result


def recover_from_purge(spark: SparkLike, config: Config, tables: Sequence[str] | None = None, console: Console = QUIET):
    """``binlake snapshot --reset-capture``: restart capture at the server's current position
    and re-snapshot ``tables`` (all captured tables when None), since the changes between the
    old resume position and the new one are lost to the change log. Returns the snapshot's
    result."""
    reset_capture(spark, config)
    return run_snapshot(spark, config, tables=tables, fresh=True, console=console)


# ---------------------------------------------------------------------------------------
# batches


def plan_ranges(
    files: list[BinlogFile], start: BinlogPosition, end: BinlogPosition, max_files: int, max_rows: int | None
) -> list[ReadRange]:
    """Cut ``[start, end)`` at file boundaries into at most ``max_files`` partitions.

    When the range spans more files than that, the batch ends at the end of the last
    planned file (a closed file's end is a transaction boundary: its ROTATE event).
    """
    if max_files < 1:
        raise ValueError(f"max_files must be >= 1, got {max_files}")
    ranges: list[ReadRange] = []
    for f in files:
        if not start.file_index <= f.index <= end.file_index:
            continue
        s = start.pos if f.index == start.file_index else 4
        e = end.pos if f.index == end.file_index else f.size
        if s >= e:
            continue
        ranges.append(
            ReadRange(
                index=len(ranges),
                file=f.name,
                start_pos=s,
                end_pos=e,
                last=False,
                epoch=start.epoch,
                archive=f.archive,
            )
        )
        if len(ranges) == max_files:
            break
    if ranges:
        ranges[-1] = replace(ranges[-1], last=True, max_rows=max_rows)
    return ranges


def _capture_until(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    state: CaptureState,
    target: BinlogPosition,
    result: CaptureResult,
    console: Console,
) -> tuple[CaptureState, BinlogPosition]:
    """Batches from ``state`` up to ``target``; returns the state reached and the target
    (a new one when the source switched on the way)."""
    return _CaptureLoop(spark, config, lh, state, target, result).run(console)


class _CaptureLoop:
    """The batches of one capture up to a target: each step follows a source that switched,
    re-positions after a purge, or reads and commits one batch; a step that fails is retried
    or not by the policies of :meth:`retrying`."""

    def __init__(
        self,
        spark: SparkLike,
        config: Config,
        lh: Lakehouse,
        state: CaptureState,
        target: BinlogPosition,
        result: CaptureResult,
    ) -> None:
        self.spark, self.config, self.lh, self.result = spark, config, lh, result
        self.state, self.target = state, target
        self.max_files = max(1, min(MAX_PARALLEL_FILES, default_parallelism(spark)))
        self.attempts = 0  # failed steps in a row

    def run(self, console: Console) -> tuple[CaptureState, BinlogPosition]:
        files_total = max(1, self.target.file_index - self.state.position.file_index + 1)
        # Nothing to read (already at the target) shows no bar.
        with (console if self.state.position < self.target else QUIET).bar(
            "capture", total=files_total, unit="files"
        ) as bar:
            while self.state.position < self.target:
                resume, changes_before = self.state.position, self.result.changes
                try:
                    committed = self.step()
                except Exception as exc:  # server restarts and dropped dumps are retried
                    self.attempts += 1
                    if not self.retrying(exc, resume):
                        raise
                    continue
                if committed:
                    self.attempts = 0
                    bar.advance(
                        max(0, self.state.position.file_index - resume.file_index),
                        items=self.result.changes - changes_before,
                    )
        return self.state, self.target

    def step(self) -> bool:
        """One step toward the target; whether it committed a batch."""
        spark, config, lh, state, result = self.spark, self.config, self.lh, self.state, self.result
        resume = state.position
        with connect(config.source) as conn:
            files = binlog_files(config, conn)
            if server_id(conn) != state.server_id:
                # Switched while capturing (a failover behind the same address).
                self.state = follow_source_state(spark, config, lh, conn, files, state, result)
                self.target = max(self.target, master_status(conn).in_epoch(self.state.position.epoch))
                return False
        if not files or resume.file_index < files[0].index:
            # Purged while capturing (--continuous, or a slow batch): same policy as at start.
            with connect(config.source) as conn:
                self.state = ensure_not_purged(spark, config, lh, conn, files, state, result)
            return False
        ranges = plan_ranges(files, resume, self.target, self.max_files, config.capture.max_batch_rows)
        if not ranges:
            # No bytes to read up to the target: the GTID position is unchanged.
            after = CaptureState(self.target, state.server_id, state.gtid)
            self.state = commit_batch(spark, lh, [], resume, after, None, result)
        else:
            self.state = _read_and_commit(spark, config, lh, state, ranges, result)
        return True

    def retrying(self, exc: Exception, resume: BinlogPosition) -> bool:
        """Whether the step from ``resume`` that failed with ``exc`` is tried again (once the
        source answers again); raises when the lakehouse cannot be written."""
        attempts, source = self.attempts, self.config.source
        if isinstance(exc, SourceConnectionError):
            if attempts >= MAX_ATTEMPTS:
                return False
            log.warning(
                "capture batch from %s: source unreachable; retrying (%d/%d)", resume, attempts, MAX_ATTEMPTS - 1
            )
            wait_for_server(source, timeout=120)
            return True
        if isinstance(exc, BinlakeError | AnalysisException):
            return False  # binlake's own verdict, or a planning error: retrying cannot help
        if (refused := storage_error(exc)) is not None:
            raise refused from exc  # retrying cannot make the lakehouse writable
        if attempts >= MAX_ATTEMPTS:
            return False
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        log.warning(
            "capture batch from %s failed (%s: %s); retrying (%d/%d)",
            resume,
            type(exc).__name__,
            first,
            attempts,
            MAX_ATTEMPTS - 1,
        )
        time.sleep(min(2**attempts, 10))
        wait_for_server(source, timeout=120)
        return True


def _read_and_commit(
    spark: SparkLike, config: Config, lh: Lakehouse, state: CaptureState, ranges: list[ReadRange], result: CaptureResult
) -> CaptureState:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    start = state.position
    require_binlake_on_workers(spark)  # the binlog is read by binlake code on the Spark side
    df = read_dataframe(spark, config.source, ranges).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # One pass builds the cache and returns the few side rows: schema versions, each
        # partition's counts per op and last GTIDs, and the heartbeat. No aggregation, no shuffle.
        try:
            side = (
                df.where(F.col("op").isin(HEARTBEAT_OP, *SIDE_OPS))
                .select("op", "binlog_file", "file_index", "pos", "ddl", "schema_json", "gtid")
                .collect()
            )
        except Exception as exc:
            # A reader's own error (an event it cannot decode) stops capture as itself:
            # reading the range again would meet the same event.
            if (raised := raised_on_worker(exc)) is not None:
                raise raised from exc
            raise
        counts: dict[str, int] = {}
        gtid = state.gtid
        for r in sorted((r for r in side if r["op"] == "stats"), key=lambda r: (r["file_index"], r["pos"])):
            stats = json.loads(r["ddl"])
            for op, n in stats["ops"].items():
                counts[op] = counts.get(op, 0) + n
            for name, n in stats["tables"].items():
                result.table_changes[name] = result.table_changes.get(name, 0) + n
            if stats["last_ts"] is not None:
                result.last_commit_ts = max(result.last_commit_ts or 0, stats["last_ts"])
            for name, n in stats.get("ignored", {}).items():
                result.warnings.append(
                    f"capture passed over {n} {name} event(s) in {r['binlog_file']}: binlake does not know the type "
                    "and the server marked it ignorable"
                )
            gtid = gtids.advance(gtid, r["gtid"])
        beats = [r for r in side if r["op"] == HEARTBEAT_OP]
        if len(beats) != 1:
            raise InternalInvariantError(
                f"a capture batch from {start} must end with exactly one heartbeat, got {len(beats)}: a bug in "
                "binlake's binlog reader, nothing of the batch was committed; report it with the log"
            )
        end = CaptureState(
            BinlogPosition.from_log(beats[0]["binlog_file"], beats[0]["file_index"], beats[0]["pos"]),
            state.server_id,
            gtid,
        )
        schemas = [
            (TableSchema.from_json(r["schema_json"]), int(r["file_index"]), int(r["pos"]), None)
            for r in side
            if r["op"] == "schema"
        ]
        changes = df.where(~F.col("op").isin(*SIDE_OPS)).drop("schema_json")
        # The heartbeat names the server and the GTID position at the batch's end.
        beat = F.col("op") == HEARTBEAT_OP
        changes = changes.withColumn("gtid", F.when(beat, F.lit(end.gtid)).otherwise(F.col("gtid"))).withColumn(
            "server_id", F.when(beat, F.lit(end.server_id).cast("bigint")).otherwise(F.col("server_id"))
        )
        if counts.get(RENAMED_INTO_OP):
            renamed = [
                r.asDict()
                for r in changes.where(F.col("op") == RENAMED_INTO_OP)
                .select("db", "table", "binlog_file", "file_index", "pos", "ddl")
                .collect()
            ]
            renamed_into(spark, config, lh, changes, [s[0] for s in schemas], renamed, result)
        return commit_batch(spark, lh, schemas, start, end, changes, result, counts)
    finally:
        df.unpersist()
