"""A binlog archive: binlog files kept in a directory, read as the server's binlog is read.

What ``mysqlbinlog --read-from-remote-server --raw --stop-never`` (MariaDB:
``mariadb-binlog``) keeps, or the binlog files a cloud provider lets you download: each file
as the server wrote it, under its own name (``mysql-bin.000042``). The directory may be a
local path or a Unity Catalog volume (``/Volumes/...``), which Spark tasks see as files.

An archive keeper may be writing the newest file while binlake reads it: an event cut short
at the end of the newest file ends the read there, as the end of a server's binlog does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from binlake.contract.position import BinlogPosition, file_index
from binlake.errors import BinlogArchiveError
from binlake.source.binlog.events import FORMAT_DESCRIPTION, HEADER, HEADER_SIZE, MAGIC, ROTATE


@dataclass(frozen=True)
class ArchivedFile:
    name: str
    size: int

    @property
    def index(self) -> int:
        return file_index(self.name)


def list_archive(directory: str, base: str | None = None) -> list[ArchivedFile]:
    """The binlog files in ``directory`` (of the series ``base``, e.g. ``mysql-bin``), oldest first."""
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise BinlogArchiveError(f"cannot list the binlog archive {directory}: {exc.strerror or exc}") from exc
    out = []
    for name in names:
        stem, _, suffix = name.rpartition(".")
        if not suffix.isdigit() or not stem or (base is not None and stem != base):
            continue
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            out.append(ArchivedFile(name, os.path.getsize(path)))
    return sorted(out, key=lambda f: f.index)


def archive_server_id(directory: str, name: str) -> int:
    """The server id of the server that wrote an archived file (its FORMAT_DESCRIPTION's)."""
    path = os.path.join(directory, name)
    with open(path, "rb") as fh:
        head = fh.read(4 + HEADER_SIZE)
    if head[:4] != MAGIC or len(head) < 4 + HEADER_SIZE:
        raise BinlogArchiveError(f"{path} is not a binlog file (no binlog magic number)")
    return HEADER.unpack_from(head, 4)[2]


def is_event_boundary(directory: str, name: str, pos: int) -> bool:
    """True when an event of the archived file starts at ``pos`` (or the file ends there):
    the event sizes in the headers are followed from the first event, one header read each."""
    path = os.path.join(directory, name)
    off = 4
    with open(path, "rb") as fh:
        while off < pos:
            fh.seek(off)
            head = fh.read(HEADER_SIZE)
            if len(head) < HEADER_SIZE:
                return False
            size = HEADER.unpack_from(head)[3]
            if size < HEADER_SIZE:
                return False
            off += size
    return off == pos


class ArchiveFiles:
    """``(file, event bytes)`` from ``start`` through the archive's files in order: the
    starting file's FORMAT_DESCRIPTION first (decoding needs it), then every event from the
    position on, then the next files whole, until the archive ends."""

    def __init__(self, directory: str, start: BinlogPosition):
        self.directory = directory
        self.start = start
        self.base = start.file.rpartition(".")[0]

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        files = [f for f in list_archive(self.directory, self.base) if f.index >= file_index(self.start.file)]
        if not files or files[0].name != self.start.file:
            raise BinlogArchiveError(f"the binlog archive {self.directory} does not hold {self.start.file}")
        newest = files[-1].name
        for f in files:
            yield from self._file(f.name, self.start.pos if f.name == self.start.file else None, f.name == newest)

    def _file(self, name: str, start: int | None, newest: bool) -> Iterator[tuple[str, bytes]]:
        path = os.path.join(self.directory, name)
        with open(path, "rb") as fh:
            if fh.read(4) != MAGIC:
                raise BinlogArchiveError(f"{path} is not a binlog file (no binlog magic number)")
            first = _read_event(fh, path, newest)
            if first is None:
                return
            if first[4] != FORMAT_DESCRIPTION:
                raise BinlogArchiveError(f"{path} does not start with a FORMAT_DESCRIPTION_EVENT")
            yield name, first
            if start is not None and start > fh.tell():
                fh.seek(start)
                if fh.tell() != start or start > os.path.getsize(path):
                    raise BinlogArchiveError(f"{path} ends before position {start}")
            while True:
                event = _read_event(fh, path, newest)
                if event is None:
                    return
                yield name, event
                if event[4] == ROTATE:
                    return  # the file's last event


def _read_event(fh, path: str, newest: bool) -> bytes | None:
    head = fh.read(HEADER_SIZE)
    if not head:
        return None
    size = HEADER.unpack_from(head)[3] if len(head) == HEADER_SIZE else 0
    body = fh.read(size - HEADER_SIZE) if size >= HEADER_SIZE else b""
    if len(head) < HEADER_SIZE or len(body) < size - HEADER_SIZE:
        if newest:
            return None  # being written: the read ends before the event cut short
        raise BinlogArchiveError(f"{path} ends inside an event at position {fh.tell() - len(head) - len(body)}")
    return head + body
