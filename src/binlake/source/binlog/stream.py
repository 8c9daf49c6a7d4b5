"""One binlog's events in order, parsed, from a server's dump or from an archive.

:class:`EventStream` is the one decode path both sources share: it parses each event
(:class:`~binlake.source.binlog.events.EventParser`) and knows the file and end position the
stream is at. An event it cannot decode stops the stream with
:class:`~binlake.errors.BinlogDecodeError`, naming the event, where it starts and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from binlake.config import SourceConfig
from binlake.contract.position import BinlogPosition
from binlake.errors import BinlogDecodeError, BinlogReadError
from binlake.source.binlog.archive import ArchiveFiles
from binlake.source.binlog.dump import ServerDump
from binlake.source.binlog.events import Event, EventParser, Rotate


class EventStream:
    """Parsed events of ``raw`` (``(file, event bytes)`` pairs) from ``start``. ``file`` and
    ``pos`` are where the stream is: the file of the last event and the end position of the
    last event that has one (artificial events and events inside a payload have none)."""

    def __init__(
        self,
        raw: Iterable[tuple[str, bytes]],
        start: BinlogPosition,
        checksum: bool,
        close: Callable[[], None] | None = None,
    ):
        self.raw = raw
        self.parser = EventParser(checksum)
        self.file = start.file
        self.pos = start.pos
        self._close = close

    def __iter__(self) -> Iterator[Event]:
        parser = self.parser
        for file, data in self.raw:
            if file != self.file:
                self.file, self.pos = file, 4
            try:
                event = parser.parse(data)
            except (BinlogReadError, ValueError) as exc:
                raise BinlogDecodeError(f"binlake cannot read the binlog event at {file}:{self.pos}: {exc}") from exc
            if isinstance(event, Rotate) and event.log_pos:
                # Table ids are the server's, per process; a real ROTATE may follow a restart.
                parser.tables.clear()
            if event.log_pos:
                self.pos = event.log_pos
            yield event

    def close(self) -> None:
        if self._close is not None:
            self._close()


def server_stream(source: SourceConfig, server_id: int, start: BinlogPosition) -> EventStream:
    """The server's binlog from ``start`` to its current end (a non-blocking dump)."""
    dump = ServerDump(source, server_id, start)
    return EventStream(dump, start, dump.checksum, dump.close)


def archive_stream(directory: str, start: BinlogPosition) -> EventStream:
    """The archive's binlog files from ``start`` to the end of the newest one."""
    return EventStream(ArchiveFiles(directory, start), start, checksum=False)
