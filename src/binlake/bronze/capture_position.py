"""Where capture reads from: its start, the purge policy, and the source it follows.

The heartbeat names the server the batch was read from and, on MariaDB, the GTID position at
its end (:mod:`binlake.bronze.capture_state`). Before reading, capture checks that the server
is still the one, and that the binlog still holds its position. When the source switched (a
promoted replica) it resumes from the GTID position on the new server in a new source epoch,
whose positions sort after every older one; when it cannot (a reset binlog, no GTID), it stops
with :class:`SourceChangedError` or applies the re-snapshot policy (``capture.on_purge``).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from binlake.bronze.capture_commit import CaptureResult, commit_batch
from binlake.bronze.capture_state import CaptureState, capture_position, capture_state
from binlake.bronze.snapshot import run_snapshot
from binlake.bronze.tables import ensure_bronze_tables
from binlake.config import Config, PurgePolicy, StartupMode
from binlake.contract.position import EPOCH_SHIFT, BinlogPosition, file_name
from binlake.contract.sql import sql
from binlake.contract.tables import Lakehouse
from binlake.errors import BinlakeError, BinlogPurgedError, GtidNotFound, SourceChangedError
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
    with_archive,
)
from binlake.source.catalog import captured_tables
from binlake.source.mysql import connect, is_mariadb, master_status, server_id

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.capture")


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
        return follow_source_state(spark, config, lh, conn, list_binlogs(conn), state, CaptureResult()).position


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
        state = state_at(conn, current.in_epoch(epoch), sid)
    result = CaptureResult()
    start = old.position if old else state.position
    state = commit_batch(spark, lh, [], start, state, None, result, note="reset-capture")
    log.warning(
        "capture reset from %s to %s: re-snapshot the captured tables", old.position if old else None, state.position
    )
    return state.position


def capture_status(spark: SparkLike, config: Config) -> dict:
    """Resume position, server position, lag in bytes, oldest binlog and a purge warning."""
    if config.source.archive is not None:
        from binlake.bronze.capture_archive import archive_status

        return archive_status(spark, config)
    lh = Lakehouse(config)
    resume = capture_position(spark, lh)
    with connect(config.source) as conn:
        files = binlog_files(config, conn)
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


def startup_position(spark: SparkLike, config: Config, lh: Lakehouse, conn, files: list[BinlogFile]) -> BinlogPosition:
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
        statement = sql(
            "SELECT h.file_index, h.pos FROM {history} h JOIN ("
            "SELECT DISTINCT p.db, p.`table`, p.schema_version FROM {plan} p "
            "LEFT ANTI JOIN {chunks} c ON p.snapshot_id = c.snapshot_id AND p.chunk_id = c.chunk_id"
            ") o ON h.db = o.db AND h.`table` = o.`table` AND h.schema_version = o.schema_version "
            "ORDER BY h.file_index, h.pos LIMIT 1",
            history=lh.schema_history.sql,
            plan=lh.snapshot_plan.sql,
            chunks=lh.snapshot_chunks.sql,
        )
        rows = spark.sql(statement).collect()
        if rows:
            index = int(rows[0]["file_index"])
            candidates.append(
                BinlogPosition.from_log(
                    file_name(current.file, index & ((1 << EPOCH_SHIFT) - 1)), index, rows[0]["pos"]
                )
            )
    if lh.snapshot_chunks.exists(spark):
        rows = spark.sql(
            sql(
                "SELECT lw_file, lw_file_index, lw_pos FROM {chunks} ORDER BY lw_file_index, lw_pos LIMIT 1",
                chunks=lh.snapshot_chunks.sql,
            )
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


def binlog_files(config: Config, conn) -> list[BinlogFile]:
    """The binlog capture can read: the server's files and, with ``capture.on_purge:
    archive``, before them the archive's files the server has purged."""
    files = list_binlogs(conn)
    if config.capture.on_purge is PurgePolicy.ARCHIVE and config.archive_dir is not None:
        files = with_archive(files, config.archive_dir)
    return files


def ensure_not_purged(
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
        reset = capture_state(spark, lh)
        assert reset is not None, "reset_capture commits a state"
        return reset


# ---------------------------------------------------------------------------------------
# the source: the same server, the same binlog?


def state_at(conn, position: BinlogPosition, sid: int | None = None) -> CaptureState:
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


def follow_source_state(
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
            return state_at(conn, state.position, sid)
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
            state = commit_batch(spark, lh, [], state.position, new, None, result, note="source-switch")
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
        reset = capture_state(spark, lh)
        assert reset is not None, "reset_capture commits a state"
        return reset
    raise SourceChangedError(
        f"capture cannot go on: {detail}. Recover with: binlake snapshot --reset-capture "
        "(re-snapshots every captured table; or set capture.on_purge: resnapshot to do it automatically)"
    )


def resume_purge_warning(config: Config, resume: BinlogPosition) -> str | None:
    try:
        with connect(config.source) as conn:
            files = binlog_files(config, conn)
            return purge_warning(files, resume, config.capture.purge_warning_files, expire_seconds(conn))
    except BinlakeError:
        return None
