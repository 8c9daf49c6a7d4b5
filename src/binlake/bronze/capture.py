"""Exactly-once binlog capture into the bronze change log.

One capture batch = one Delta commit to ``bronze/changelog`` holding every change between
two transaction boundaries ``[start, end)`` plus one ``op='heartbeat'`` row at ``end``.
The resume position IS the largest heartbeat in the table, so "these events + this resume
offset" are committed atomically by the single Delta commit: a run killed before the commit
leaves no trace and the next run reads ``[start, end)`` again; a run killed after it resumes
at ``end``. Delta idempotent writes (``txnAppId`` / ``txnVersion`` derived from ``start``)
make a second writer that read the same range a no-op. See docs/capture.md.

Example::

    result = run_capture(spark, config)          # up to the position the server reports now
    print(result.summary())
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Sequence

from pyspark.errors import AnalysisException

from binlake import faults
from binlake.bronze.binlog_source import (
    MAX_PARALLEL_FILES,
    SIDE_OPS,
    ReadRange,
    read_dataframe,
)
from binlake.bronze.snapshot import run_snapshot
from binlake.bronze.tables import ensure_bronze_tables, record_schemas
from binlake.config import Config, PurgePolicy, StartupMode
from binlake.contract.lakehouse import (
    CHANGELOG_SCHEMA,
    DATA_OPS,
    DDL_OPS,
    HEARTBEAT_OP,
    RENAMED_INTO_OP,
    Lakehouse,
    heartbeat_row,
    storage_error,
)
from binlake.contract.position import BinlogPosition, file_name
from binlake.contract.types import TableSchema
from binlake.errors import BinlakeError, BinlogPurgedError, SourceConnectionError
from binlake.source.binlog import (
    BinlogFile,
    bytes_between,
    check_not_purged,
    expire_seconds,
    first_event_time,
    list_binlogs,
    position_for_timestamp,
    purge_warning,
    wait_for_server,
)
from binlake.source.catalog import captured_tables
from binlake.source.mysql import connect, master_status

log = logging.getLogger("binlake.capture")

TXN_APP_ID = "binlake-capture"
# How often --continuous asks the server for a new end position when caught up.
POLL_SECONDS = 1.0
# A batch that fails (server restart, dropped connection) is planned and read again.
MAX_ATTEMPTS = 6


@dataclass
class CaptureResult:
    """What one ``binlake capture`` run did."""

    start: BinlogPosition | None = None
    end: BinlogPosition | None = None
    batches: int = 0
    changes: int = 0
    ddl: int = 0
    schemas_recorded: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    resnapshot_tables: list[str] = field(default_factory=list)
    renamed_into: list[str] = field(default_factory=list)
    # (db, table, schema_version) known to be in schema_history: later batches of the run
    # skip the lookup (schema_history only grows, so the set can only be incomplete).
    schemas_known: set = field(default_factory=set, repr=False)

    def summary(self) -> str:
        rate = self.changes / self.seconds if self.seconds > 0 else 0.0
        text = (f"capture: {self.batches} batch(es), {self.changes} row change(s), {self.ddl} DDL/TRUNCATE/DROP/RENAME, "
                f"{self.start} -> {self.end} in {self.seconds:.1f}s ({rate:,.0f} rows/s)")
        if self.resnapshot_tables:
            text += f"; binlog was purged: capture reset and re-snapshotted {', '.join(self.resnapshot_tables)}"
        if self.renamed_into:
            text += f"; snapshotted {', '.join(self.renamed_into)} (another table was renamed into it)"
        for w in self.warnings:
            text += f"\nwarning: {w}"
        return text


# ---------------------------------------------------------------------------------------
# public API


def run_capture(spark, config: Config, continuous: bool = False, progress=None) -> CaptureResult:
    """Capture from the stored resume position up to the server's position at start
    (``continuous=False``, ``--until-now``) or until interrupted (``continuous=True``)."""
    if not isinstance(config, Config):
        raise TypeError("config must be a binlake.config.Config (use load_config)")
    started = time.monotonic()
    lh = Lakehouse(config)
    ensure_bronze_tables(spark, lh)
    result = CaptureResult()
    resume = capture_position(spark, lh)
    with connect(config.source) as conn:
        files = list_binlogs(conn)
        if resume is None:
            resume = _startup_position(spark, config, lh, conn, files)
            log.info("no capture state yet: starting (%s) at %s", config.capture.startup.value, resume)
            # Persist the start at once, so a later run never recomputes it differently.
            _commit(spark, lh, [], resume, resume, [heartbeat_row(resume)], result)
        resume = _ensure_not_purged(spark, config, conn, files, resume, result)
        target = master_status(conn)
    result.start = resume
    try:
        while True:
            resume = _capture_until(spark, config, lh, resume, target, result, progress)
            if not continuous:
                break
            time.sleep(POLL_SECONDS)
            try:
                with connect(config.source) as conn:
                    target = master_status(conn)
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
    warning = _purge_warning(config, resume)
    if warning:
        result.warnings.append(warning)
    return result


def capture_position(spark, lh: Lakehouse) -> BinlogPosition | None:
    """The stored resume position: the largest heartbeat in the change log (None if none)."""
    if not lh.changelog.exists(spark):
        return None
    # The latest commit is normally capture's own, and its tag names the end it committed:
    # the heartbeat of that same commit, the largest one (commits are ordered by their start,
    # see _commit). Reading one commit from the Delta log spares a scan of the whole table.
    # Any other latest commit (OPTIMIZE, a foreign writer) falls back to the scan.
    tagged = _tag_end(lh.changelog.delta(spark).history(1).select("userMetadata").collect())
    if tagged is not None:
        return tagged
    rows = spark.sql(
        f"SELECT binlog_file, pos FROM {lh.changelog.sql} WHERE op = '{HEARTBEAT_OP}' "
        "ORDER BY file_index DESC, pos DESC LIMIT 1"
    ).collect()
    return BinlogPosition(rows[0]["binlog_file"], int(rows[0]["pos"])) if rows else None


def _tag_end(history_rows) -> BinlogPosition | None:
    try:
        tag = json.loads(history_rows[0]["userMetadata"])
        return BinlogPosition.parse(tag["capture_end"])
    except (IndexError, TypeError, ValueError, KeyError):
        return None


def recover_from_purge(spark, config: Config, tables: Sequence[str] | None = None, progress=None):
    """``binlake snapshot --reset-capture``: restart capture at the server's current position
    and re-snapshot ``tables`` (all captured tables when None), since the changes between the
    old resume position and the new one are lost to the change log. Returns the snapshot's
    result."""
    reset_capture(spark, config)
    return run_snapshot(spark, config, tables=tables, fresh=True, progress=progress)


def reset_capture(spark, config: Config) -> BinlogPosition:
    """Restart capture at the server's current position (after a purge); returns it.

    Changes between the old resume position and the new one are lost to the change log:
    re-snapshot the captured tables afterwards (``binlake snapshot --reset-capture`` does).
    """
    lh = Lakehouse(config)
    ensure_bronze_tables(spark, lh)
    old = capture_position(spark, lh)
    with connect(config.source) as conn:
        current = master_status(conn)
    if old is not None and current <= old:
        return old
    result = CaptureResult()
    _commit(spark, lh, [], old or current, current, [heartbeat_row(current, note="reset-capture")], result)
    log.warning("capture reset from %s to %s: re-snapshot the captured tables", old, current)
    return current


def capture_status(spark, config: Config) -> dict:
    """Resume position, server position, lag in bytes, oldest binlog and a purge warning."""
    lh = Lakehouse(config)
    resume = capture_position(spark, lh)
    with connect(config.source) as conn:
        files = list_binlogs(conn)
        server = master_status(conn)
        expiry = expire_seconds(conn)
    out: dict = {
        "resume_file": resume.file if resume else None,
        "resume_pos": resume.pos if resume else None,
        "server_file": server.file,
        "server_pos": server.pos,
        "lag_bytes": bytes_between(files, resume, server) if resume else None,
        "oldest_binlog": files[0].name if files else None,
        "binlog_files": len(files),
        "binlog_expire_seconds": expiry,
        "purge_warning": None,
    }
    if resume is not None:
        closed_at = None
        later = [f for f in files if f.index > resume.file_index]
        if expiry and later:
            closed_at = first_event_time(config.source, config.source.server_id, later[0].name)
        out["purge_warning"] = purge_warning(files, resume, config.capture.purge_warning_files, expiry, closed_at)
    return out


# ---------------------------------------------------------------------------------------
# startup and purge


def _startup_position(spark, config: Config, lh: Lakehouse, conn, files: list[BinlogFile]) -> BinlogPosition:
    mode = config.capture.startup
    if mode is StartupMode.POSITION:
        return BinlogPosition.parse(config.capture.start_position or "")
    if mode is StartupMode.TIMESTAMP:
        when = dt.datetime.fromisoformat((config.capture.start_timestamp or "").replace("Z", "+00:00"))
        return position_for_timestamp(config.source, config.source.server_id, files, when)
    if mode is StartupMode.INITIAL:
        return _initial_position(spark, lh, conn)
    return master_status(conn)


def _initial_position(spark, lh: Lakehouse, conn) -> BinlogPosition:
    """At or before the low watermark of every snapshot chunk, even of chunks being read now.

    A snapshot may run right now: its readers have taken low watermarks whose manifest rows
    are not committed yet. So the server is asked first: a chunk whose plan is not visible
    below takes its low watermark later, at or after ``current``. A visible plan with chunks
    still lacking a manifest row is covered by schema_history: ``_plan`` records its schema
    version (or finds it recorded) before committing the plan, so every position recorded
    for that version lies at or before each low watermark of its chunks. Completed chunks
    are covered by their own low watermarks, read after the open plans, so a chunk that
    completes in between is seen by one query or the other.
    """
    current = master_status(conn)
    candidates = [current]
    if lh.snapshot_plan.exists(spark) and lh.snapshot_chunks.exists(spark) and lh.schema_history.exists(spark):
        rows = spark.sql(
            f"SELECT h.file_index, h.pos FROM {lh.schema_history.sql} h JOIN ("
            f"SELECT DISTINCT p.db, p.`table`, p.schema_version FROM {lh.snapshot_plan.sql} p "
            f"LEFT ANTI JOIN {lh.snapshot_chunks.sql} c ON p.snapshot_id = c.snapshot_id AND p.chunk_id = c.chunk_id"
            ") o ON h.db = o.db AND h.`table` = o.`table` AND h.schema_version = o.schema_version "
            "ORDER BY h.file_index, h.pos LIMIT 1"
        ).collect()
        if rows:
            candidates.append(BinlogPosition(file_name(current.file, int(rows[0]["file_index"])), int(rows[0]["pos"])))
    if lh.snapshot_chunks.exists(spark):
        rows = spark.sql(
            f"SELECT lw_file, lw_pos FROM {lh.snapshot_chunks.sql} ORDER BY lw_file_index, lw_pos LIMIT 1"
        ).collect()
        if rows:
            candidates.append(BinlogPosition(rows[0]["lw_file"], int(rows[0]["lw_pos"])))
    return min(candidates)


def _captured_table_names(config: Config, conn) -> list[str]:
    return [f"{db}.{t}" for db, t in captured_tables(conn, config.source)]


def _ensure_not_purged(spark, config: Config, conn, files, resume: BinlogPosition, result: CaptureResult) -> BinlogPosition:
    try:
        check_not_purged(files, resume, _captured_table_names(config, conn))
        return resume
    except BinlogPurgedError as exc:
        if config.capture.on_purge is not PurgePolicy.RESNAPSHOT:
            raise
        log.warning("%s; capture.on_purge=resnapshot: resetting capture and re-snapshotting", exc)
        new = reset_capture(spark, config)
        run_snapshot(spark, config, tables=exc.tables)
        result.resnapshot_tables = list(exc.tables)
        return new


def _purge_warning(config: Config, resume: BinlogPosition) -> str | None:
    try:
        with connect(config.source) as conn:
            return purge_warning(list_binlogs(conn), resume, config.capture.purge_warning_files, expire_seconds(conn))
    except BinlakeError:
        return None


# ---------------------------------------------------------------------------------------
# batches


def plan_ranges(files: list[BinlogFile], start: BinlogPosition, end: BinlogPosition, max_files: int,
                max_rows: int | None) -> list[ReadRange]:
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
        ranges.append(ReadRange(index=len(ranges), file=f.name, start_pos=s, end_pos=e, last=False))
        if len(ranges) == max_files:
            break
    if ranges:
        last = ranges[-1]
        ranges[-1] = ReadRange(last.index, last.file, last.start_pos, last.end_pos, True, max_rows)
    return ranges


def _capture_until(spark, config: Config, lh: Lakehouse, resume: BinlogPosition, target: BinlogPosition,
                   result: CaptureResult, progress) -> BinlogPosition:
    max_files = max(1, min(MAX_PARALLEL_FILES, spark.sparkContext.defaultParallelism))
    attempts = 0
    task_cm = None
    task = None
    if progress is not None and resume < target:
        task_cm = progress.task("capture", total=max(1, target.file_index - resume.file_index + 1), unit="files")
        task = task_cm.__enter__()
    try:
        while resume < target:
            try:
                with connect(config.source) as conn:
                    files = list_binlogs(conn)
                if not files or resume.file_index < files[0].index:
                    # Purged while capturing (--continuous, or a slow batch): same policy as at start.
                    with connect(config.source) as conn:
                        resume = _ensure_not_purged(spark, config, conn, files, resume, result)
                    continue
                ranges = plan_ranges(files, resume, target, max_files, config.capture.max_batch_rows)
                changes_before = result.changes
                if not ranges:
                    new = _commit(spark, lh, [], resume, target, [heartbeat_row(target)], result)
                else:
                    new = _read_and_commit(spark, config, lh, resume, ranges, result)
                attempts = 0
            except SourceConnectionError:
                attempts += 1
                if attempts >= MAX_ATTEMPTS:
                    raise
                log.warning("capture batch from %s: source unreachable; retrying (%d/%d)", resume, attempts, MAX_ATTEMPTS - 1)
                wait_for_server(config.source, timeout=120)
                continue
            except BinlakeError:
                raise
            except AnalysisException:
                raise  # a planning error, not a transient one: retrying cannot help
            except Exception as exc:  # noqa: BLE001 - server restarts and dropped dumps are retried
                if (refused := storage_error(exc)) is not None:
                    raise refused from exc  # retrying cannot make the lakehouse writable
                attempts += 1
                if attempts >= MAX_ATTEMPTS:
                    raise
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                log.warning("capture batch from %s failed (%s: %s); retrying (%d/%d)", resume,
                            type(exc).__name__, first, attempts, MAX_ATTEMPTS - 1)
                time.sleep(min(2 ** attempts, 10))
                wait_for_server(config.source, timeout=120)
                continue
            if task is not None:
                task.advance(max(0, new.file_index - resume.file_index), items=result.changes - changes_before)
            resume = new
    finally:
        if task_cm is not None:
            task_cm.__exit__(None, None, None)
    return resume


def _read_and_commit(spark, config: Config, lh: Lakehouse, start: BinlogPosition, ranges: list[ReadRange],
                     result: CaptureResult) -> BinlogPosition:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    df = read_dataframe(spark, config.source, ranges).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # One pass builds the cache and returns the few side rows: schema versions, each
        # partition's counts per op and the heartbeat. No aggregation, no shuffle.
        side = (df.where(F.col("op").isin(HEARTBEAT_OP, *SIDE_OPS))
                .select("op", "binlog_file", "file_index", "pos", "ddl", "schema_json").collect())
        counts: dict[str, int] = {}
        for r in side:
            if r["op"] == "stats":
                for op, n in json.loads(r["ddl"]).items():
                    counts[op] = counts.get(op, 0) + n
        beats = [r for r in side if r["op"] == HEARTBEAT_OP]
        if len(beats) != 1:
            raise RuntimeError(f"a capture batch must end with exactly one heartbeat, got {len(beats)}")
        end = BinlogPosition(beats[0]["binlog_file"], int(beats[0]["pos"]))
        schemas = [(TableSchema.from_json(r["schema_json"]), int(r["file_index"]), int(r["pos"]), None)
                   for r in side if r["op"] == "schema"]
        changes = df.where(~F.col("op").isin(*SIDE_OPS)).drop("schema_json")
        if counts.get(RENAMED_INTO_OP):
            renamed = changes.where(F.col("op") == RENAMED_INTO_OP).select("db", "table").distinct().collect()
            _snapshot_renamed_into(spark, config, sorted(f"{r['db']}.{r['table']}" for r in renamed), result)
        return _commit(spark, lh, schemas, start, end, changes, result, counts)
    finally:
        df.unpersist()


def _snapshot_renamed_into(spark, config: Config, names: list[str], result: CaptureResult) -> None:
    """Snapshot the tables another table was renamed into (gh-ost and pt-osc cut-overs).

    The binlog carries no rows for a rename, so the rows now under that name come from a
    snapshot whose chunks start after the rename; silver drops everything older (the
    ``renamed_into`` op truncates). It runs before the batch's commit: a crash in between
    re-reads the batch and plans again, so the need for it can never be lost.
    """
    with connect(config.source) as conn:
        present = {f"{db}.{t}" for db, t in captured_tables(conn, config.source)}
    # A name renamed away again later has a DROP after this point, which empties it.
    targets = [n for n in names if n in present]
    if targets:
        log.info("capture: %s received another table's rows by RENAME: snapshotting", ", ".join(targets))
        run_snapshot(spark, config, tables=targets)
        result.renamed_into = sorted(set(result.renamed_into) | set(targets))


def _commit(spark, lh: Lakehouse, schemas, start: BinlogPosition, end: BinlogPosition, changes,
            result: CaptureResult, counts: dict[str, int] | None = None) -> BinlogPosition:
    """One Delta commit: the batch's changes and its end heartbeat. Returns the resume position."""
    schemas = [s for s in schemas if (s[0].database, s[0].table, s[0].version()) not in result.schemas_known]
    if schemas:
        # Before the change log commit: a crash in between re-reads the batch and records
        # nothing twice (record_schemas skips known versions), while the reverse order could
        # lose a schema version for good.
        result.schemas_recorded += record_schemas(spark, lh, schemas)
        result.schemas_known.update((s[0].database, s[0].table, s[0].version()) for s in schemas)
    if isinstance(changes, list):
        changes = spark.createDataFrame(changes, CHANGELOG_SCHEMA)
    counts = counts or {}
    tag = json.dumps({"capture_start": str(start), "capture_end": str(end), "id": uuid.uuid4().hex})
    # Two writers that read the same start get the same version: Delta keeps the first.
    # A batch that moves past ``start`` gets an odd version, a bare heartbeat at ``start`` an even one.
    version = 2 * _key(start) + (1 if end > start else 0)
    writer = (changes.write.format("delta").mode("append")
              .option("txnAppId", TXN_APP_ID).option("txnVersion", str(version)).option("userMetadata", tag))
    faults.point("capture.before_commit")
    lh.changelog.save(writer)
    faults.point("capture.after_commit")
    last = lh.changelog.delta(spark).history(1).collect()[0]
    if last["userMetadata"] != tag:
        # Another capture process committed this range first; continue from what it stored.
        stored = capture_position(spark, lh)
        log.warning("another capture run committed the batch starting at %s; continuing from %s", start, stored)
        return stored or end
    result.batches += 1
    result.changes += sum(n for op, n in counts.items() if op in DATA_OPS)
    result.ddl += sum(n for op, n in counts.items() if op in DDL_OPS)
    return end


def _key(pos: BinlogPosition) -> int:
    return (pos.file_index << 32) | pos.pos
