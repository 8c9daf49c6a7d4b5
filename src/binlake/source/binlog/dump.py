"""A server's binlog, read as a replica reads it: one binlog dump from a position.

The dump is MySQL's ``COM_BINLOG_DUMP`` over an ordinary client connection: the server sends
an artificial ROTATE naming the file, that file's FORMAT_DESCRIPTION, then every event from
the position on, moving to the next file after each ROTATE; non-blocking, it ends with an EOF
packet at the binlog's current end. The connection first says that it reads checksummed
events (``@master_binlog_checksum``) and, for MariaDB, that it understands GTID events
(``@mariadb_slave_capability=4``; MySQL ignores the variable).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from typing import Any

import pymysql

from binlake.config import SourceConfig
from binlake.contract.position import BinlogPosition
from binlake.source.binlog.events import CHECKSUM_SIZE, HEADER_SIZE, ROTATE
from binlake.source.mysql import connection_kwargs

COM_BINLOG_DUMP = 0x12
BINLOG_DUMP_NON_BLOCK = 0x01


def stream_settings(source: SourceConfig) -> dict[str, Any]:
    """pymysql settings for a binlog dump connection (no default database)."""
    kwargs = connection_kwargs(source)
    kwargs.pop("database", None)
    return kwargs


class ServerDump:
    """``(file, event bytes)`` from ``start`` to the end of the server's binlog (or on, with
    ``blocking``); ``checksum`` is whether events end with a CRC32. Close it when done."""

    def __init__(self, source: SourceConfig, server_id: int, start: BinlogPosition, blocking: bool = False):
        self.start = start
        self.conn = pymysql.connect(**stream_settings(source))
        with self.conn.cursor() as cur:
            cur.execute("SELECT @@global.binlog_checksum")
            row = cur.fetchone()
            self.checksum = row is not None and str(row[0]).upper() != "NONE"
            if self.checksum:
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @mariadb_slave_capability = 4")
        name = start.file.encode()
        command = struct.pack("<BIHI", COM_BINLOG_DUMP, start.pos, 0 if blocking else BINLOG_DUMP_NON_BLOCK, server_id)
        payload = command + name
        # pymysql's own packet writer: a 3-byte length and sequence id 0, then the payload.
        self.conn._write_bytes(struct.pack("<I", len(payload))[:3] + b"\0" + payload)
        self.conn._next_seq_id = 1

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        file = self.start.file
        while True:
            packet = self.conn._read_packet()  # raises the server's error as pymysql's
            if packet.is_eof_packet():
                return
            data = packet.get_all_data()
            if data[:1] != b"\0":
                continue
            event = data[1:]
            if len(event) >= HEADER_SIZE and event[4] == ROTATE:
                end = len(event) - (CHECKSUM_SIZE if self.checksum else 0)
                yield file, event
                # The server sends the next file's events after a ROTATE (the artificial
                # one first names the file the dump starts in).
                file = event[HEADER_SIZE + 8 : end].decode("utf-8", "surrogateescape")
                continue
            yield file, event

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dump the server already ended
            self.conn.close()
