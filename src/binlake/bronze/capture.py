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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pyspark.errors import AnalysisException

from binlake import faults
from binlake.bronze.binlog_reader import SIDE_OPS, ReadRange
from binlake.bronze.binlog_source import MAX_PARALLEL_FILES, read_dataframe
from binlake.bronze.capture_state import CaptureState, capture_position, capture_state
from binlake.bronze.snapshot import run_snapshot
from binlake.bronze.tables import ensure_bronze_tables, record_schemas
from binlake.config import Config, PurgePolicy, StartupMode
from binlake.console import QUIET, Console
from binlake.contract.changelog import (
    CHANGELOG_SCHEMA,
    DATA_OPS,
    DDL_OPS,
    HEARTBEAT_OP,
    RENAMED_INTO_OP,
    STATEMENT_OP,
    heartbeat_row,
)
from binlake.contract.position import EPOCH_SHIFT, BinlogPosition, file_name
from binlake.contract.tables import Lakehouse
from binlake.contract.types import TableSchema
from binlake.contract.write_errors import storage_error
from binlake.errors import (
    BinlakeError,
    BinlogPurgedError,
    GtidNotFound,
    InternalInvariantError,
    SourceChangedError,
    SourceConnectionError,
    raised_on_worker,
)
from binlake.source import gtid as gtids
from binlake.source.binlog.archive import archive_server_id, is_event_boundary
from binlake.source.binlog.files import (
    BinlogFile,
    bytes_between,
    check_not_purged,
    expire_seconds,
    first_event_time,
    list_binlogs,
    missing_between,
    position_for_timestamp,
    purge_warning,
    wait_for_server,
    with_archive,
)
from binlake.source.catalog import captured_tables
from binlake.source.mysql import connect, is_mariadb, master_status, server_id
from binlake.spark import default_parallelism, require_binlake_on_workers

if TYPE_CHECKING:
    from binlake.spark import SparkLike

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
    # Changes of captured tables the binlog holds as statements or without column names:
    # silver stops those tables until they are re-snapshotted.
    statements: int = 0
    schemas_recorded: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    resnapshot_tables: list[str] = field(default_factory=list)
    renamed_into: list[str] = field(default_factory=list)
    new_tables: list[str] = field(default_factory=list)
    source_switches: list[str] = field(default_factory=list)
    table_changes: dict[str, int] = field(default_factory=dict)  # db.table -> row changes captured
    last_commit_ts: int | None = None  # source commit time of the newest captured row change, in µs
    # (db, table, schema_version) known to be in schema_history: later batches of the run
    # skip the lookup (schema_history only grows, so the set can only be incomplete).
    schemas_known: set = field(default_factory=set, repr=False)

    def summary(self) -> str:
        rate = self.changes / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"capture: {self.batches} batch(es), {self.changes} row change(s), {self.ddl} DDL/TRUNCATE/DROP/RENAME, "
            f"{self.start} -> {self.end} in {self.seconds:.1f}s ({rate:,.0f} rows/s)"
        )
        if self.statements:
            text += (
                f"; {self.statements} change(s) logged as SQL statements or without column names, which silver "
                "cannot apply: binlake silver names the tables to re-snapshot"
            )
        if self.resnapshot_tables:
            text += f"; binlog was purged: capture reset and re-snapshotted {', '.join(self.resnapshot_tables)}"
        for switch in self.source_switches:
            text += f"; {switch}"
        if self.new_tables:
            text += f"; snapshotted {', '.join(self.new_tables)} first (newly matched by source.tables)"
        if self.renamed_into:
            text += f"; snapshotted {', '.join(self.renamed_into)} (another table was renamed into it)"
        for w in self.warnings:
            text += f"\nwarning: {w}"
        return text


# ---------------------------------------------------------------------------------------
# public API


def run_capture(spark: SparkLike, config: Config, continuous: bool = False, console: Console = QUIET) -> CaptureResult:
    """Capture from the stored resume position up to the server's position at start
    (``continuous=False``, ``--until-now``) or until interrupted (``continuous=True``).

    A table that ``source.tables`` / ``exclude`` match now but did not match at capture's
    last commit (an existing table newly included) is snapshotted first, whatever runs
    capture (the bundle's scheduled pipeline included): its older rows are in no change
    record capture kept."""
    if not isinstance(config, Config):
        raise TypeError("config must be a binlake.config.Config (use load_config)")
    started = time.monotonic()
    lh = Lakehouse(config)
    ensure_bronze_tables(spark, lh)
    result = CaptureResult()
    state = capture_state(spark, lh)
    with connect(config.source) as conn:
        files = _binlog_files(config, conn)
        if state is None:
            start = _startup_position(spark, config, lh, conn, files)
            log.info("no capture state yet: starting (%s) at %s", config.capture.startup.value, start)
            # Persist the start at once, so a later run never recomputes it differently.
            state = _commit(spark, lh, [], start, _state_at(conn, start), None, result)
        recorded = state
        state = _follow_source(spark, config, lh, conn, files, state, result)
        state = _ensure_not_purged(spark, config, lh, conn, files, state, result)
        _snapshot_newly_matched(spark, config, lh, conn, recorded, result)
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
                    state = _follow_source(spark, config, lh, conn, _binlog_files(config, conn), state, result)
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
    warning = _purge_warning(config, resume)
    if warning:
        result.warnings.append(warning)
    return result


def follow_source(spark: SparkLike, config: Config) -> BinlogPosition | None:
    """Capture's check of the source on its own: when the source is another server or its
    binlog was reset, record where capture goes on (a GTID switch into a new source epoch),
    apply the re-snapshot policy, or raise :class:`SourceChangedError`. Returns the resume
    position (None before capture's first run)."""
    lh = Lakehouse(config)
    state = capture_state(spark, lh)
    if state is None:
        return None
    with connect(config.source) as conn:
        return _follow_source(spark, config, lh, conn, list_binlogs(conn), state, CaptureResult()).position


def recover_from_purge(spark: SparkLike, config: Config, tables: Sequence[str] | None = None, console: Console = QUIET):
    """``binlake snapshot --reset-capture``: restart capture at the server's current position
    and re-snapshot ``tables`` (all captured tables when None), since the changes between the
    old resume position and the new one are lost to the change log. Returns the snapshot's
    result."""
    reset_capture(spark, config)
    return run_snapshot(spark, config, tables=tables, fresh=True, console=console)


def reset_capture(spark: SparkLike, config: Config) -> BinlogPosition:
    """Restart capture at the server's current position (after a purge, or on a reset or
    foreign source); returns it.

    Changes between the old resume position and the new one are lost to the change log:
    re-snapshot the captured tables afterwards (``binlake snapshot --reset-capture`` does).
    When the server's binlog is not the one capture was reading (another server, numbering
    reset), the new position opens a new source epoch, so the re-snapshot's rows outrank
    every older record.
    """
    lh = Lakehouse(config)
    ensure_bronze_tables(spark, lh)
    old = capture_state(spark, lh)
    with connect(config.source) as conn:
        current = master_status(conn)
        sid = server_id(conn)
        epoch = 0
        if old is not None:
            same = old.server_id in (None, sid) and _position_problem(conn, list_binlogs(conn), old) is None
            epoch = old.position.epoch if same else old.position.epoch + 1
            if same and current.in_epoch(epoch) <= old.position:
                return old.position
        state = _state_at(conn, current.in_epoch(epoch), sid)
    result = CaptureResult()
    start = old.position if old else state.position
    state = _commit(spark, lh, [], start, state, None, result, note="reset-capture")
    log.warning(
        "capture reset from %s to %s: re-snapshot the captured tables", old.position if old else None, state.position
    )
    return state.position


def capture_status(spark: SparkLike, config: Config) -> dict:
    """Resume position, server position, lag in bytes, oldest binlog and a purge warning."""
    lh = Lakehouse(config)
    resume = capture_position(spark, lh)
    with connect(config.source) as conn:
        files = _binlog_files(config, conn)
        server = master_status(conn).in_epoch(resume.epoch if resume else 0)
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


def _startup_position(spark: SparkLike, config: Config, lh: Lakehouse, conn, files: list[BinlogFile]) -> BinlogPosition:
    mode = config.capture.startup
    if mode is StartupMode.POSITION:
        return BinlogPosition.parse(config.capture.start_position or "")
    if mode is StartupMode.TIMESTAMP:
        when = dt.datetime.fromisoformat((config.capture.start_timestamp or "").replace("Z", "+00:00"))
        return position_for_timestamp(config.source, config.source.server_id, files, when)
    if mode is StartupMode.INITIAL:
        return _initial_position(spark, lh, conn)
    return master_status(conn)


def _initial_position(spark: SparkLike, lh: Lakehouse, conn) -> BinlogPosition:
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
            index = int(rows[0]["file_index"])
            candidates.append(
                BinlogPosition.from_log(
                    file_name(current.file, index & ((1 << EPOCH_SHIFT) - 1)), index, rows[0]["pos"]
                )
            )
    if lh.snapshot_chunks.exists(spark):
        rows = spark.sql(
            f"SELECT lw_file, lw_file_index, lw_pos FROM {lh.snapshot_chunks.sql} ORDER BY lw_file_index, lw_pos "
            "LIMIT 1"
        ).collect()
        if rows:
            candidates.append(BinlogPosition.from_log(rows[0]["lw_file"], rows[0]["lw_file_index"], rows[0]["lw_pos"]))
    return min(candidates)


def _check_archive(config: Config, files: list[BinlogFile], state: CaptureState, tables: list[str]) -> None:
    """With files from the archive to read: the binlog has no gap from capture's position on,
    and the archive's files were written by the server capture reads."""
    gaps = missing_between(files, state.position)
    if gaps:
        raise BinlogPurgedError(state.position.file, files[0].name if files else "(none)", tables, missing=gaps)
    archived = next((f for f in files if f.index == state.position.file_index and f.archive), None)
    if archived is None or state.server_id is None:
        return
    writer = archive_server_id(archived.archive or "", archived.name)
    if writer != state.server_id:
        raise SourceChangedError(
            f"the archive's {archived.name} ({archived.archive}) was written by server {writer}, but capture reads "
            f"server {state.server_id}: point capture.archive at this server's binlog archive"
        )


def _captured_table_names(config: Config, conn) -> list[str]:
    return [f"{db}.{t}" for db, t in captured_tables(conn, config.source)]


def _binlog_files(config: Config, conn) -> list[BinlogFile]:
    """The binlog capture can read: the server's files and, with ``capture.on_purge:
    archive``, before them the archive's files the server has purged."""
    files = list_binlogs(conn)
    if config.capture.on_purge is PurgePolicy.ARCHIVE and config.archive_dir is not None:
        files = with_archive(files, config.archive_dir)
    return files


def _ensure_not_purged(
    spark: SparkLike, config: Config, lh: Lakehouse, conn, files, state: CaptureState, result: CaptureResult
) -> CaptureState:
    tables = _captured_table_names(config, conn)
    if config.capture.on_purge is PurgePolicy.ARCHIVE:
        _check_archive(config, files, state, tables)
        return state
    try:
        check_not_purged(files, state.position, tables)
        return state
    except BinlogPurgedError as exc:
        if config.capture.on_purge is not PurgePolicy.RESNAPSHOT:
            raise
        log.warning("%s; capture.on_purge=resnapshot: resetting capture and re-snapshotting", exc)
        reset_capture(spark, config)
        run_snapshot(spark, config, tables=exc.tables)
        result.resnapshot_tables = list(exc.tables)
        resumed = capture_state(spark, lh)
        assert resumed is not None, "reset_capture commits a capture state"
        return resumed


# ---------------------------------------------------------------------------------------
# the source: the same server, the same binlog?


def _state_at(conn, position: BinlogPosition, sid: int | None = None) -> CaptureState:
    """The capture state at ``position`` of the server ``conn`` talks to (one GTID lookup on
    MariaDB, which reads the binlog file up to the position: done once per start or switch,
    later batches carry the GTID position forward themselves)."""
    sid = server_id(conn) if sid is None else sid
    return CaptureState(position, sid, gtids.gtid_at(conn, position) if is_mariadb(conn) else None)


def _position_problem(conn, files, state: CaptureState) -> str | None:
    """Why the server's binlog cannot be the one ``state`` was read from (None: it can).
    A purged file is not a problem here: the purge policy decides about that."""
    pos = state.position
    if not files:
        return None
    newest = files[-1]
    if pos.file_index > newest.index:
        return (
            f"the server's newest binlog is {newest.name}, older than capture's position {pos}: "
            "the binlog was reset or restored"
        )
    here = next((f for f in files if f.index == pos.file_index), None)
    if here is None:
        return None
    if pos.pos > here.size:
        return (
            f"binlog {pos.file} is {here.size} bytes, shorter than capture's position {pos}: "
            "the binlog was reset or restored"
        )
    if pos.pos == here.size:
        return None
    if here.archive is not None:
        # Purged from the server: the archived file itself says whether the position is an
        # event boundary (the server's SHOW BINLOG EVENTS no longer can).
        if not is_event_boundary(here.archive, here.name, pos.pos):
            return f"capture's position {pos} is not an event boundary of {here.name} in the archive {here.archive}"
        return None
    try:
        boundary, gtid = gtids.event_gtid_at(conn, pos)
    except Exception:  # noqa: BLE001 - a server that cannot show its events is not judged by them
        return None
    if not boundary:
        return f"capture's position {pos} is not an event boundary of the server's binlog: it was reset or restored"
    if gtid and state.gtid:
        domain, _, seq = (int(x) for x in gtid.split("-"))
        seen = gtids.parse(state.gtid).get(domain)
        if seen is not None and seq <= seen[1]:
            return (
                f"the transaction at capture's position {pos} is GTID {gtid}, which capture had already read "
                f"(it was at {state.gtid}): the binlog was reset or restored"
            )
    return None


def _follow_source(
    spark: SparkLike, config: Config, lh: Lakehouse, conn, files, state: CaptureState, result: CaptureResult
) -> CaptureState:
    """``state``, or, when the source is another server or a reset binlog, the state capture
    resumes from there (a GTID switch), or the re-snapshot policy's, or a loud stop."""
    sid = server_id(conn)
    if state.server_id is not None and state.server_id != sid:
        problem: str | None = f"the source is now server {sid}, but capture last read server {state.server_id}"
    else:
        problem = _position_problem(conn, files, state)
    if problem is None:
        if state.server_id is None or (state.gtid is None and is_mariadb(conn)):
            # Recorded before binlake kept these: learn them now; the next batch records them.
            return _state_at(conn, state.position, sid)
        return state
    return _switch(spark, config, lh, conn, state, sid, problem, result)


def _switch(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    conn,
    state: CaptureState,
    sid: int,
    problem: str,
    result: CaptureResult,
) -> CaptureState:
    epoch = state.position.epoch + 1
    if state.gtid and is_mariadb(conn):
        try:
            found = gtids.position_after(config.source, config.source.server_id, conn, state.gtid)
        except GtidNotFound as exc:
            detail = f"{problem}; it cannot resume by GTID {state.gtid} there ({exc})"
        else:
            new = CaptureState(found.in_epoch(epoch), sid, state.gtid)
            message = (
                f"{problem}: capture resumed by GTID {state.gtid} at {new.position} "
                f"(source epoch {epoch}, sorting after every earlier position)"
            )
            log.warning("%s", message)
            state = _commit(spark, lh, [], state.position, new, None, result, note="source-switch")
            result.source_switches.append(message)
            return state
    elif state.gtid is None:
        detail = f"{problem}; no GTID position was recorded to resume from (GTID resume needs MariaDB)"
    else:
        detail = f"{problem}; the server is not MariaDB, so it cannot resume by GTID {state.gtid}"
    if config.capture.on_purge is PurgePolicy.RESNAPSHOT:
        log.warning("%s; capture.on_purge=resnapshot: resetting capture and re-snapshotting every table", detail)
        reset_capture(spark, config)
        tables = _captured_table_names(config, conn)
        run_snapshot(spark, config, tables=None, fresh=True)
        result.resnapshot_tables = tables
        result.source_switches.append(f"{detail}: capture reset and every table re-snapshotted")
        resumed = capture_state(spark, lh)
        assert resumed is not None, "reset_capture commits a capture state"
        return resumed
    raise SourceChangedError(
        f"capture cannot go on: {detail}. Recover with: binlake snapshot --reset-capture "
        "(re-snapshots every captured table; or set capture.on_purge: resnapshot to do it automatically)"
    )


def _purge_warning(config: Config, resume: BinlogPosition) -> str | None:
    try:
        with connect(config.source) as conn:
            files = _binlog_files(config, conn)
            return purge_warning(files, resume, config.capture.purge_warning_files, expire_seconds(conn))
    except BinlakeError:
        return None


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
    max_files = max(1, min(MAX_PARALLEL_FILES, default_parallelism(spark)))
    attempts = 0
    files_total = max(1, target.file_index - state.position.file_index + 1)
    # Nothing to read (already at the target) shows no bar.
    with (console if state.position < target else QUIET).bar("capture", total=files_total, unit="files") as bar:
        while state.position < target:
            resume = state.position
            try:
                with connect(config.source) as conn:
                    files = _binlog_files(config, conn)
                    if server_id(conn) != state.server_id:
                        # Switched while capturing (a failover behind the same address).
                        state = _follow_source(spark, config, lh, conn, files, state, result)
                        target = max(target, master_status(conn).in_epoch(state.position.epoch))
                        continue
                if not files or resume.file_index < files[0].index:
                    # Purged while capturing (--continuous, or a slow batch): same policy as at start.
                    with connect(config.source) as conn:
                        state = _ensure_not_purged(spark, config, lh, conn, files, state, result)
                    continue
                ranges = plan_ranges(files, resume, target, max_files, config.capture.max_batch_rows)
                changes_before = result.changes
                if not ranges:
                    # No bytes to read up to the target: the GTID position is unchanged.
                    new = _commit(
                        spark, lh, [], resume, CaptureState(target, state.server_id, state.gtid), None, result
                    )
                else:
                    new = _read_and_commit(spark, config, lh, state, ranges, result)
                attempts = 0
            except SourceConnectionError:
                attempts += 1
                if attempts >= MAX_ATTEMPTS:
                    raise
                log.warning(
                    "capture batch from %s: source unreachable; retrying (%d/%d)", resume, attempts, MAX_ATTEMPTS - 1
                )
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
                log.warning(
                    "capture batch from %s failed (%s: %s); retrying (%d/%d)",
                    resume,
                    type(exc).__name__,
                    first,
                    attempts,
                    MAX_ATTEMPTS - 1,
                )
                time.sleep(min(2**attempts, 10))
                wait_for_server(config.source, timeout=120)
                continue
            bar.advance(max(0, new.position.file_index - resume.file_index), items=result.changes - changes_before)
            state = new
    return state, target


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
            renamed = changes.where(F.col("op") == RENAMED_INTO_OP).select("db", "table").distinct().collect()
            _snapshot_renamed_into(spark, config, sorted(f"{r['db']}.{r['table']}" for r in renamed), result)
        return _commit(spark, lh, schemas, start, end, changes, result, counts)
    finally:
        df.unpersist()


def table_filter(config: Config) -> dict:
    """The table filter capture records with each commit (its tag)."""
    return {"tables": list(config.source.tables), "exclude": list(config.source.exclude)}


def _snapshot_newly_matched(
    spark: SparkLike, config: Config, lh: Lakehouse, conn, state: CaptureState, result: CaptureResult
) -> None:
    """Snapshot the tables the filter matches now and did not at capture's last commit,
    unless a snapshot taken since capture's position already covers them."""
    if state.table_filter is None or state.table_filter == table_filter(config):
        return
    try:
        before = replace(
            config.source, tables=tuple(state.table_filter["tables"]), exclude=tuple(state.table_filter["exclude"])
        )
    except (KeyError, TypeError):
        return
    newly = [(db, t) for db, t in captured_tables(conn, config.source) if not before.captures(db, t)]
    if not newly:
        return
    covered: set = set()
    if lh.snapshot_chunks.exists(spark) and lh.snapshot_plan.exists(spark):
        from pyspark.sql import functions as F

        names = F.lit(False)
        for db, t in newly:
            names = names | ((F.col("db") == db) & (F.col("table") == t))
        # A complete snapshot every chunk of which was read after capture's position holds
        # every row the missed changes could have touched.
        planned = {
            r["snapshot_id"]: r["n"]
            for r in lh.snapshot_plan.read(spark)
            .where(names)
            .groupBy("snapshot_id")
            .agg(F.countDistinct("chunk_id").alias("n"))
            .collect()
        }
        rows = (
            lh.snapshot_chunks.read(spark)
            .where(names)
            .groupBy("db", "table", "snapshot_id")
            .agg(F.countDistinct("chunk_id").alias("n"), F.min(F.struct("lw_file_index", "lw_pos")).alias("lw"))
            .collect()
        )
        covered = {
            (r["db"], r["table"])
            for r in rows
            if r["n"] == planned.get(r["snapshot_id"])
            and (r["lw"]["lw_file_index"], r["lw"]["lw_pos"]) >= state.position.key()
        }
    todo = sorted(f"{db}.{t}" for db, t in newly if (db, t) not in covered)
    if todo:
        log.info("capture: %s newly matched by source.tables: snapshotting first", ", ".join(todo))
        run_snapshot(spark, config, tables=todo)
        result.new_tables = todo


def _snapshot_renamed_into(spark: SparkLike, config: Config, names: list[str], result: CaptureResult) -> None:
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


def _commit(
    spark: SparkLike,
    lh: Lakehouse,
    schemas,
    start: BinlogPosition,
    end: CaptureState,
    changes,
    result: CaptureResult,
    counts: dict[str, int] | None = None,
    note: str | None = None,
) -> CaptureState:
    """One Delta commit: the batch's changes and its end heartbeat (``changes`` None: the
    heartbeat alone). Returns the state capture resumes from."""
    schemas = [s for s in schemas if (s[0].database, s[0].table, s[0].version()) not in result.schemas_known]
    if schemas:
        # Before the change log commit: a crash in between re-reads the batch and records
        # nothing twice (record_schemas skips known versions), while the reverse order could
        # lose a schema version for good.
        result.schemas_recorded += record_schemas(spark, lh, schemas)
        result.schemas_known.update((s[0].database, s[0].table, s[0].version()) for s in schemas)
    if changes is None:
        changes = spark.createDataFrame(
            [heartbeat_row(end.position, note=note, server_id=end.server_id, gtid=end.gtid)], CHANGELOG_SCHEMA
        )
    counts = counts or {}
    tag = json.dumps(
        {"capture_start": str(start), **end.tag(), "filter": table_filter(lh.config), "id": uuid.uuid4().hex}
    )
    # Two writers that read the same start get the same version: Delta keeps the first.
    # A batch that moves past ``start`` gets an odd version, a bare heartbeat at ``start`` an even one.
    version = 2 * _key(start) + (1 if end.position > start else 0)
    writer = (
        changes.write.format("delta")
        .mode("append")
        .option("txnAppId", _txn_app_id(start.epoch))
        .option("txnVersion", str(version))
        .option("userMetadata", tag)
    )
    faults.point("capture.before_commit")
    lh.changelog.save(writer)
    faults.point("capture.after_commit")
    if lh.changelog.newest_commit_info(spark)["userMetadata"] != tag:
        # Another capture process committed this range first; continue from what it stored.
        stored = capture_state(spark, lh)
        log.warning(
            "another capture run committed the batch starting at %s; continuing from %s",
            start,
            stored.position if stored else end.position,
        )
        return stored or end
    result.batches += 1
    result.changes += sum(n for op, n in counts.items() if op in DATA_OPS)
    result.ddl += sum(n for op, n in counts.items() if op in DDL_OPS)
    result.statements += counts.get(STATEMENT_OP, 0)
    return end


def _txn_app_id(epoch: int) -> str:
    """Idempotent-write versions must grow per app id; positions restart in a new epoch."""
    return TXN_APP_ID if epoch == 0 else f"{TXN_APP_ID}-epoch{epoch}"


def _key(pos: BinlogPosition) -> int:
    return (pos.file_index << 32) | pos.pos
