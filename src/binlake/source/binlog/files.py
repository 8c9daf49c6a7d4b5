"""The source's binlog files: listing, purge detection, timestamp startup, purge forecasting.

Everything here talks to the server through ordinary SQL (``SHOW BINARY LOGS``,
``SHOW GLOBAL VARIABLES``) or a short non-blocking binlog dump. Nothing keeps a dump
connection open after it returns.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import pymysql

from binlake.config import SourceConfig
from binlake.contract.position import BinlogPosition, file_index, file_name
from binlake.errors import BinlogPurgedError
from binlake.source.binlog.boundaries import Boundaries
from binlake.source.binlog.events import Gtid, Query
from binlake.source.binlog.stream import server_stream
from binlake.source.mysql import binary_logs, server_variables

# The first event of every binlog file starts here (after the 4-byte magic number).
FILE_START = 4


@dataclass(frozen=True)
class BinlogFile:
    """A binlog file; ``archive`` is the binlog archive it is read from when the server no
    longer has it (None: on the server)."""

    name: str
    size: int
    archive: str | None = None

    @property
    def index(self) -> int:
        return file_index(self.name)

    @property
    def start(self) -> BinlogPosition:
        return BinlogPosition(self.name, FILE_START)

    @property
    def end(self) -> BinlogPosition:
        return BinlogPosition(self.name, self.size)


def list_binlogs(conn: pymysql.connections.Connection) -> list[BinlogFile]:
    """Every binlog file still on the server, oldest first."""
    files = [BinlogFile(name, size) for name, size in binary_logs(conn)]
    return sorted(files, key=lambda f: f.index)


def with_archive(files: list[BinlogFile], archive: str) -> list[BinlogFile]:
    """``files`` (the server's), preceded by the archive's files of the same series that are
    older than the server's oldest: the binlog as far back as the archive goes."""
    from binlake.source.binlog.archive import list_archive

    base = files[0].name.rpartition(".")[0] if files else None
    oldest = files[0].index if files else None
    kept = [
        BinlogFile(f.name, f.size, archive) for f in list_archive(archive, base) if oldest is None or f.index < oldest
    ]
    return kept + files


def missing_between(files: list[BinlogFile], start: BinlogPosition) -> list[str]:
    """The files from ``start``'s on that ``files`` lacks (a gap between an archive and the
    server, or inside the archive)."""
    if not files:
        return [start.file]
    have = {f.index for f in files}
    return [file_name(start.file, i) for i in range(start.file_index, files[-1].index + 1) if i not in have]


def bytes_between(files: list[BinlogFile], start: BinlogPosition, end: BinlogPosition) -> int:
    """Binlog bytes from ``start`` to ``end`` (0 when ``end`` is not after ``start``), over ``files``."""
    if start >= end:
        return 0
    if start.file_index == end.file_index:
        return end.pos - start.pos
    total = 0
    for f in files:
        if f.index == start.file_index:
            total += max(0, f.size - start.pos)
        elif start.file_index < f.index < end.file_index:
            total += f.size
        elif f.index == end.file_index:
            total += end.pos
    return total


def check_not_purged(files: list[BinlogFile], resume: BinlogPosition, tables: list[str]) -> None:
    """Raise :class:`BinlogPurgedError` when ``resume`` lies in a file the server no longer has."""
    if not files:
        raise BinlogPurgedError(resume.file, "(none)", tables)
    oldest = files[0]
    if resume.file_index < oldest.index or resume.file_index not in {f.index for f in files}:
        raise BinlogPurgedError(resume.file, oldest.name, tables)


def first_event_time(source: SourceConfig, server_id: int, file: str) -> dt.datetime | None:
    """The UTC time of the first real event in ``file`` (its FORMAT_DESCRIPTION event).

    The artificial ROTATE the server sends first has timestamp 0 and is skipped.
    """
    stream = server_stream(source, server_id, BinlogPosition(file, FILE_START))
    try:
        for event in stream:
            if event.timestamp:
                return dt.datetime.fromtimestamp(event.timestamp, dt.timezone.utc)
            if stream.file != file:
                return None
        return None
    finally:
        stream.close()


def position_for_timestamp(
    source: SourceConfig, server_id: int, files: list[BinlogFile], when: dt.datetime
) -> BinlogPosition:
    """The first transaction boundary whose next transaction was written at or after ``when``.

    Binary search over the files' first-event times finds the last file that started at or
    before ``when`` (O(log n) short dumps); one scan of that file finds the boundary.
    Earlier than every file: the oldest file's start. Later than everything: the end.
    """
    if not files:
        raise ValueError("the server has no binlog files")
    if when.tzinfo is None:
        raise ValueError("when must be timezone-aware")
    lo, hi = 0, len(files) - 1
    found = -1
    while lo <= hi:
        mid = (lo + hi) // 2
        started = first_event_time(source, server_id, files[mid].name)
        if started is not None and started <= when:
            found = mid
            lo = mid + 1
        else:
            hi = mid - 1
    if found < 0:
        return files[0].start
    return _scan_for_timestamp(source, server_id, files[found], when)


def _scan_for_timestamp(source: SourceConfig, server_id: int, file: BinlogFile, when: dt.datetime) -> BinlogPosition:
    target = when.timestamp()
    boundary = file.start
    boundaries = Boundaries()
    stream = server_stream(source, server_id, file.start)
    try:
        for event in stream:
            if stream.file != file.name:
                break
            if not event.log_pos:
                continue
            starts_transaction = isinstance(event, Gtid) or (isinstance(event, Query) and event.text.strip() == "BEGIN")
            if starts_transaction and not boundaries.open and event.timestamp >= target:
                return boundary
            if boundaries.ends(event):
                boundary = BinlogPosition(file.name, event.log_pos)
        return boundary
    finally:
        stream.close()


def expire_seconds(conn: pymysql.connections.Connection) -> int | None:
    """The server's binlog expiry in seconds, or None when binlogs never expire by time."""
    v = server_variables(conn, "binlog_expire_logs_seconds", "expire_logs_days")
    seconds = int(float(v.get("binlog_expire_logs_seconds", "0") or 0))
    if seconds > 0:
        return seconds
    days = float(v.get("expire_logs_days", "0") or 0)
    return int(days * 86400) if days > 0 else None


def purge_warning(
    files: list[BinlogFile],
    resume: BinlogPosition,
    warning_files: int,
    expire_after: int | None = None,
    resume_file_closed_at: dt.datetime | None = None,
    now: dt.datetime | None = None,
) -> str | None:
    """A warning text when the resume file is purged or close to being purged, else None.

    Two independent forecasts, both only where the server expires binlogs by itself
    (``expire_after``): by count (the resume file is within ``warning_files`` of the oldest
    file, the next one expiry takes), and by time (the server expires a file
    ``expire_after`` seconds after it was closed; warn once 80% of that has passed). A server
    that never expires its binlogs loses files only to a manual ``PURGE``, which no forecast
    sees coming; warning there would fire on every fresh server, whose resume file is the
    oldest.
    """
    if not files:
        return f"the server lists no binlog files; capture cannot resume at {resume}"
    oldest = files[0]
    if resume.file_index < oldest.index:
        return (
            f"resume file {resume.file} has been purged (oldest on server: {oldest.name}); "
            "run: binlake snapshot --reset-capture"
        )
    if not expire_after:
        return None
    ahead = resume.file_index - oldest.index
    if ahead < warning_files:
        return (
            f"resume file {resume.file} is {ahead} file(s) from the oldest binlog {oldest.name} "
            f"(capture.purge_warning_files={warning_files}): run capture now or raise the server's binlog retention"
        )
    if resume_file_closed_at is not None:
        now = now or dt.datetime.now(dt.timezone.utc)
        age = (now - resume_file_closed_at).total_seconds()
        if age >= 0.8 * expire_after:
            left = max(0, expire_after - age)
            return (
                f"resume file {resume.file} will be expired by the server in about {left / 3600:.1f} h "
                f"(binlog expiry {expire_after / 3600:.1f} h): run capture now"
            )
    return None


def wait_for_server(source: SourceConfig, timeout: float = 60.0) -> None:
    """Block until the source accepts connections again (e.g. after a restart)."""
    from binlake.source.mysql import connect

    deadline = time.monotonic() + timeout
    while True:
        try:
            connect(source).close()
            return
        except Exception:  # keep polling until the deadline
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
