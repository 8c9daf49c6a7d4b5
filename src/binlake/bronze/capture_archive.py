"""Capture from a source that is only a binlog archive (``source.archive``): a directory of
binlog files and no server, such as the binlogs a cloud provider lets you download.

It is capture as :mod:`binlake.bronze.capture` does it, from another place: the same batches
(:func:`~binlake.bronze.capture.plan_ranges`), the same reader on executors (each range read
from the archive's file), the same one-Delta-commit-per-batch with its heartbeat, so progress,
resume and exactly-once are the server's. What a server would tell capture comes from the
files instead:

- **where to start**: the archive's first file (``capture.startup: initial``) or
  ``capture.start_position``;
- **where the binlog ends**: the last transaction boundary of the newest file (found by
  reading that file's events capture has not read yet), so a file an archive keeper is still
  writing is read only to its last whole transaction;
- **the server id** on the heartbeats: the one in the files' FORMAT_DESCRIPTION events;
- **the tables' columns and keys**: their TABLE_MAP events (``binlog_row_metadata=FULL``);
  a captured table whose TABLE_MAP lacks them stops capture
  (:class:`~binlake.errors.ArchiveUnreadableError`, see :mod:`binlake.bronze.binlog_plan`).

Nothing is snapshotted: the archive holds the changes its files hold, and the rows a table had
before the first file are in none of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from binlake.bronze.capture_commit import CaptureResult, commit_batch
from binlake.bronze.capture_state import CaptureState, capture_position, capture_state
from binlake.bronze.tables import ensure_bronze_tables
from binlake.config import Config, StartupMode
from binlake.console import QUIET, Console
from binlake.contract.position import BinlogPosition
from binlake.contract.tables import Lakehouse
from binlake.errors import ArchiveSourceError, BinlogArchiveError
from binlake.source.binlog.archive import archive_server_id, is_event_boundary, list_archive
from binlake.source.binlog.boundaries import Boundaries
from binlake.source.binlog.events import STOP, Rotate
from binlake.source.binlog.files import FILE_START, BinlogFile, bytes_between, missing_between
from binlake.source.binlog.stream import archive_stream
from binlake.spark import default_parallelism

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.capture")


@dataclass(frozen=True)
class ArchiveBatches:
    """Capture's range planning and batch read, which the archive's loop shares."""

    plan: Callable[..., list]
    read_and_commit: Callable[..., CaptureState]


# How often --continuous looks for new files in the archive once it has read them all.
POLL_SECONDS = 1.0


def archive_files(directory: str) -> list[BinlogFile]:
    """The archive's binlog files, oldest first, each to be read from the archive."""
    files = [BinlogFile(f.name, f.size, directory) for f in list_archive(directory)]
    if not files:
        raise BinlogArchiveError(
            f"the binlog archive {directory} (source.archive) holds no binlog files: put the files there under "
            "their own names (mysql-bin.000042)"
        )
    series = {f.name.rpartition(".")[0] for f in files}
    if len(series) > 1:
        raise BinlogArchiveError(
            f"the binlog archive {directory} holds the files of several binlogs ({', '.join(sorted(series))}): keep "
            "one server's binlog per directory"
        )
    return files


def archive_end(files: list[BinlogFile], position: BinlogPosition) -> BinlogPosition:
    """The last transaction boundary of the archive at or after ``position``: in its newest
    file, from ``position`` (or the file's start) on."""
    newest = files[-1]
    start = position if position.file_index == newest.index else BinlogPosition(newest.name, FILE_START)
    boundary = start
    boundaries = Boundaries()
    stream = archive_stream(newest.archive or "", start)
    for event in stream:
        if not event.log_pos or stream.pos <= start.pos:
            continue  # the file's FORMAT_DESCRIPTION, read before the position
        ends = boundaries.ends(event)
        if ends or (not boundaries.open and (isinstance(event, Rotate) or event.type == STOP)):
            boundary = BinlogPosition(newest.name, stream.pos)
    return boundary


def run_archive_capture(
    spark: SparkLike, config: Config, batches: ArchiveBatches, continuous: bool = False, console: Console = QUIET
) -> CaptureResult:
    """Capture the archive from the stored resume position to its end (``continuous``: then
    wait for new files until interrupted). ``batches`` are capture's own range planning and
    batch read (handed in: the run loop imports this module, not the other way round)."""

    started = time.monotonic()
    directory = config.source_archive or ""
    lh = Lakehouse(config)
    ensure_bronze_tables(spark, lh)
    result = CaptureResult()
    files = archive_files(directory)
    state = capture_state(spark, lh)
    if state is None:
        start = archive_start(config, files)
        log.info("no capture state yet: starting at %s, in the archive %s", start, directory)
        writer = CaptureState(start, archive_server_id(directory, start.file), None)
        state = commit_batch(spark, lh, [], start, writer, None, result)
    else:
        check_filter(config, state)
    check_resume(directory, files, state)
    result.start = state.position
    try:
        while True:
            state = _capture_until(
                spark, config, lh, state, files, archive_end(files, state.position), result, console, batches
            )
            if not continuous:
                break
            time.sleep(POLL_SECONDS)
            files = archive_files(directory)
    except KeyboardInterrupt:
        if not continuous:
            raise
        log.info("capture interrupted; resume position %s is committed", capture_position(spark, lh))
    result.end = capture_position(spark, lh) or state.position
    result.seconds = time.monotonic() - started
    return result


def archive_status(spark: SparkLike, config: Config) -> dict:
    """``capture_status`` of an archive source: the resume position, the archive's end, the
    bytes between them and the archive's oldest file."""
    lh = Lakehouse(config)
    resume = capture_position(spark, lh)
    files = archive_files(config.source_archive or "")
    end = archive_end(files, resume if resume and resume.file_index == files[-1].index else files[-1].start)
    return {
        "resume_file": resume.file if resume else None,
        "resume_pos": resume.pos if resume else None,
        "server_file": end.file,
        "server_pos": end.pos,
        "lag_bytes": bytes_between(files, resume, end) if resume else None,
        "oldest_binlog": files[0].name,
        "binlog_files": len(files),
        "binlog_expire_seconds": None,
        "purge_warning": None,
    }


def archive_start(config: Config, files: list[BinlogFile]) -> BinlogPosition:
    if config.capture.startup is StartupMode.POSITION:
        return BinlogPosition.parse(config.capture.start_position or "")
    return files[0].start


def check_resume(directory: str, files: list[BinlogFile], state: CaptureState) -> None:
    """The archive holds capture's position, as an event boundary, and every file after it,
    written by the server capture has read."""
    pos = state.position
    gaps = missing_between(files, pos)
    if gaps:
        raise BinlogArchiveError(
            f"the binlog archive {directory} lacks {', '.join(gaps[:3])}{' ...' if len(gaps) > 3 else ''}, which "
            f"capture needs from its position {pos} on: put the files in the archive"
        )
    here = next(f for f in files if f.index == pos.file_index)
    if pos.pos > here.size or not is_event_boundary(directory, here.name, pos.pos):
        raise BinlogArchiveError(
            f"capture's position {pos} is not an event boundary of {here.name} in the archive {directory}: the file "
            "is not the one capture read; restore it, or capture into a new lakehouse"
        )
    writer = archive_server_id(directory, here.name)
    if state.server_id is not None and writer != state.server_id:
        raise BinlogArchiveError(
            f"the archive's {here.name} was written by server {writer}, but capture has read server "
            f"{state.server_id}: point source.archive at that server's binlog files"
        )


def check_filter(config: Config, state: CaptureState) -> None:
    """A table filter that may match tables the last commit's did not: their rows before
    capture's position are in files capture has passed, and an archive source cannot snapshot
    them. A narrower filter (a table excluded) is fine."""
    before = state.table_filter
    if before is None:
        return
    source = config.source
    tables, exclude = set(before.get("tables", ())), set(before.get("exclude", ()))
    if set(source.tables) <= tables and set(source.exclude) >= exclude:
        return
    raise ArchiveSourceError(
        f"source.tables or source.exclude now match more than at capture's last commit ({before}), and an archive "
        "source cannot snapshot the newly matched tables: restore the filter, or capture into a new lakehouse "
        "from the archive's first file"
    )


def _capture_until(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    state: CaptureState,
    files: list[BinlogFile],
    target: BinlogPosition,
    result,
    console: Console,
    batches: ArchiveBatches,
) -> CaptureState:
    from binlake.bronze.binlog_source import MAX_PARALLEL_FILES

    max_files = max(1, min(MAX_PARALLEL_FILES, default_parallelism(spark)))
    total = max(1, target.file_index - state.position.file_index + 1)
    with (console if state.position < target else QUIET).bar("capture", total=total, unit="files") as bar:
        while state.position < target:
            resume, changes = state.position, result.changes
            ranges = batches.plan(files, resume, target, max_files, config.capture.max_batch_rows)
            if ranges:
                state = batches.read_and_commit(spark, config, lh, state, ranges, result)
            else:
                state = commit_batch(
                    spark, lh, [], resume, CaptureState(target, state.server_id, state.gtid), None, result
                )
            bar.advance(max(0, state.position.file_index - resume.file_index), items=result.changes - changes)
    return state
