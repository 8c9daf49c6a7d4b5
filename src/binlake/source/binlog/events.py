"""Binlog events, as MySQL (5.6 to 9.x) and MariaDB (10.x, 11.x) write them.

One parser for every place events come from: a server's binlog dump (:mod:`.dump`) and
binlog files in an archive (:mod:`.archive`). An event is a 19-byte header (timestamp,
type, server id, size, end position, flags), a body, and, when the binlog has checksums,
a CRC32 of both. :class:`EventParser` keeps what decoding needs across events: the format
description (checksums, post-header lengths, the server's kind) and the table maps.

Every event type either means something to capture (rows, their table maps, transaction
boundaries, DDL and statements, GTIDs, file changes), or provably changes nothing capture
reads (:class:`Passive`: heartbeats, statement contexts such as INTVAR, the statement text of
ROWS_QUERY and ANNOTATE_ROWS, GTID lists), or stops capture with :class:`~binlake.errors.UnsupportedEventError`:
an event binlake cannot decode is never skipped. The one exception is the format's own: an
unknown type with the ignorable flag set, which the server marks as safe to skip for a reader
that does not know it; the parser returns it as :class:`Passive` with ``unknown`` set so that
the reader can say so.

``TRANSACTION_PAYLOAD_EVENT`` (MySQL 8.0.20+, ``binlog_transaction_compression=ON``) holds a
whole transaction's events, zstd-compressed, without checksums and with end positions of 0;
:class:`TransactionPayload` carries them parsed, in order.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from binlake.errors import TableMapError, TruncatedEventError, UnsupportedEventError
from binlake.source.binlog.table_map import TableMap, parse_table_map
from binlake.source.binlog.wire import Reader, read_packed

if TYPE_CHECKING:
    from typing import TypeAlias

    # An event's common header fields, in Event's order: type, timestamp, server id, log pos, flags.
    Head: TypeAlias = tuple[int, int, int, int, int]

HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server id, event size, end position, flags
HEADER_SIZE = HEADER.size
CHECKSUM_SIZE = 4
# The binlog file's first four bytes.
MAGIC = b"\xfebin"

# Header flags.
IN_USE_FLAG = 0x1  # FORMAT_DESCRIPTION of a binlog file the server has not closed
ARTIFICIAL_FLAG = 0x20  # made up by the server for the dump (the first ROTATE), not in the file
IGNORABLE_FLAG = 0x80  # a reader that does not know the type may skip the event

# Event types (MySQL's Log_event_type, MariaDB's additions from 160).
QUERY, STOP, ROTATE, INTVAR = 2, 3, 4, 5
RAND, USER_VAR, FORMAT_DESCRIPTION, XID = 13, 14, 15, 16
BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY, TABLE_MAP = 17, 18, 19
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
INCIDENT, HEARTBEAT, IGNORABLE, ROWS_QUERY = 26, 27, 28, 29
WRITE_ROWS, UPDATE_ROWS, DELETE_ROWS = 30, 31, 32
GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS = 33, 34, 35
TRANSACTION_CONTEXT, VIEW_CHANGE, XA_PREPARE = 36, 37, 38
PARTIAL_UPDATE_ROWS, TRANSACTION_PAYLOAD, HEARTBEAT_V2, GTID_TAGGED = 39, 40, 41, 42
MARIADB_ANNOTATE_ROWS, MARIADB_BINLOG_CHECKPOINT, MARIADB_GTID, MARIADB_GTID_LIST = 160, 161, 162, 163
MARIADB_START_ENCRYPTION, MARIADB_QUERY_COMPRESSED = 164, 165

TYPE_NAMES = {
    1: "START_EVENT_V3",
    QUERY: "QUERY_EVENT",
    STOP: "STOP_EVENT",
    ROTATE: "ROTATE_EVENT",
    INTVAR: "INTVAR_EVENT",
    6: "LOAD_EVENT",
    7: "SLAVE_EVENT",
    8: "CREATE_FILE_EVENT",
    9: "APPEND_BLOCK_EVENT",
    10: "EXEC_LOAD_EVENT",
    11: "DELETE_FILE_EVENT",
    12: "NEW_LOAD_EVENT",
    RAND: "RAND_EVENT",
    USER_VAR: "USER_VAR_EVENT",
    FORMAT_DESCRIPTION: "FORMAT_DESCRIPTION_EVENT",
    XID: "XID_EVENT",
    BEGIN_LOAD_QUERY: "BEGIN_LOAD_QUERY_EVENT",
    EXECUTE_LOAD_QUERY: "EXECUTE_LOAD_QUERY_EVENT",
    TABLE_MAP: "TABLE_MAP_EVENT",
    20: "PRE_GA_WRITE_ROWS_EVENT",
    21: "PRE_GA_UPDATE_ROWS_EVENT",
    22: "PRE_GA_DELETE_ROWS_EVENT",
    WRITE_ROWS_V1: "WRITE_ROWS_EVENT_V1",
    UPDATE_ROWS_V1: "UPDATE_ROWS_EVENT_V1",
    DELETE_ROWS_V1: "DELETE_ROWS_EVENT_V1",
    INCIDENT: "INCIDENT_EVENT",
    HEARTBEAT: "HEARTBEAT_LOG_EVENT",
    IGNORABLE: "IGNORABLE_LOG_EVENT",
    ROWS_QUERY: "ROWS_QUERY_LOG_EVENT",
    WRITE_ROWS: "WRITE_ROWS_EVENT",
    UPDATE_ROWS: "UPDATE_ROWS_EVENT",
    DELETE_ROWS: "DELETE_ROWS_EVENT",
    GTID: "GTID_LOG_EVENT",
    ANONYMOUS_GTID: "ANONYMOUS_GTID_LOG_EVENT",
    PREVIOUS_GTIDS: "PREVIOUS_GTIDS_LOG_EVENT",
    TRANSACTION_CONTEXT: "TRANSACTION_CONTEXT_EVENT",
    VIEW_CHANGE: "VIEW_CHANGE_EVENT",
    XA_PREPARE: "XA_PREPARE_LOG_EVENT",
    PARTIAL_UPDATE_ROWS: "PARTIAL_UPDATE_ROWS_EVENT",
    TRANSACTION_PAYLOAD: "TRANSACTION_PAYLOAD_EVENT",
    HEARTBEAT_V2: "HEARTBEAT_LOG_EVENT_V2",
    GTID_TAGGED: "GTID_TAGGED_LOG_EVENT",
    MARIADB_ANNOTATE_ROWS: "ANNOTATE_ROWS_EVENT",
    MARIADB_BINLOG_CHECKPOINT: "BINLOG_CHECKPOINT_EVENT",
    MARIADB_GTID: "GTID_EVENT (MariaDB)",
    MARIADB_GTID_LIST: "GTID_LIST_EVENT",
    MARIADB_START_ENCRYPTION: "START_ENCRYPTION_EVENT",
    MARIADB_QUERY_COMPRESSED: "QUERY_COMPRESSED_EVENT",
    166: "WRITE_ROWS_COMPRESSED_EVENT_V1",
    167: "UPDATE_ROWS_COMPRESSED_EVENT_V1",
    168: "DELETE_ROWS_COMPRESSED_EVENT_V1",
    169: "WRITE_ROWS_COMPRESSED_EVENT",
    170: "UPDATE_ROWS_COMPRESSED_EVENT",
    171: "DELETE_ROWS_COMPRESSED_EVENT",
}

ROWS_KINDS = {
    WRITE_ROWS_V1: "insert",
    UPDATE_ROWS_V1: "update",
    DELETE_ROWS_V1: "delete",
    WRITE_ROWS: "insert",
    UPDATE_ROWS: "update",
    DELETE_ROWS: "delete",
    PARTIAL_UPDATE_ROWS: "update",
}
_ROWS_V2 = frozenset({WRITE_ROWS, UPDATE_ROWS, DELETE_ROWS, PARTIAL_UPDATE_ROWS})

# Events that change nothing capture reads: the context of statement-format statements
# (the statement itself is the QUERY after them), heartbeats, group-replication bookkeeping,
# the texts of ROWS_QUERY / ANNOTATE_ROWS (the rows follow as ROWS events), GTID lists, the
# file's end, and the data of LOAD DATA (its statement is the EXECUTE_LOAD_QUERY after it).
_PASSIVE = frozenset(
    {
        STOP,
        INTVAR,
        RAND,
        USER_VAR,
        BEGIN_LOAD_QUERY,
        HEARTBEAT,
        HEARTBEAT_V2,
        IGNORABLE,
        ROWS_QUERY,
        PREVIOUS_GTIDS,
        TRANSACTION_CONTEXT,
        VIEW_CHANGE,
        MARIADB_ANNOTATE_ROWS,
        MARIADB_BINLOG_CHECKPOINT,
        MARIADB_GTID_LIST,
    }
)

_COMPRESSED = "the server compresses binlog events (log_bin_compress=ON): SET GLOBAL log_bin_compress=OFF"
# What to do about the events binlake refuses.
_REFUSED = {
    MARIADB_START_ENCRYPTION: "the binlog file is encrypted (encrypt_binlog=ON): read it from the server",
    **dict.fromkeys(range(MARIADB_QUERY_COMPRESSED, 172), _COMPRESSED),
    INCIDENT: "the server logged an incident: changes may be missing from the binlog; re-snapshot the tables "
    "(binlake snapshot --reset-capture)",
}

PAYLOAD_ZSTD, PAYLOAD_NONE = 0, 255


def type_name(event_type: int) -> str:
    return TYPE_NAMES.get(event_type, f"event type {event_type}")


@dataclass(slots=True)
class Event:
    type: int
    timestamp: int
    server_id: int
    log_pos: int  # the end position: where the next event starts; 0 inside a payload or artificial
    flags: int

    @property
    def name(self) -> str:
        return type_name(self.type)


@dataclass(slots=True)
class FormatDescription(Event):
    server_version: str = ""
    checksum: bool = False
    post_header: bytes = b""

    @property
    def mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()


@dataclass(slots=True)
class Rotate(Event):
    next_file: str = ""
    position: int = 4


@dataclass(slots=True)
class Query(Event):
    """A statement: DDL, BEGIN/COMMIT, or statement-format DML (``load``: LOAD DATA's)."""

    schema: str = ""
    text: str = ""
    load: bool = False


@dataclass(slots=True)
class Xid(Event):
    pass


@dataclass(slots=True)
class XaPrepare(Event):
    """The end of an XA transaction's branch in the binlog (its rows came before it); its
    XA COMMIT or XA ROLLBACK is a statement later."""


@dataclass(slots=True)
class Gtid(Event):
    """A transaction's GTID: MySQL's ``uuid:gno`` or ``uuid:tag:gno`` (None when anonymous),
    MariaDB's ``domain-server-sequence``."""

    gtid: str | None = None
    mariadb: bool = False
    standalone: bool = False  # MariaDB: no COMMIT/XID follows (DDL)


@dataclass(slots=True)
class TableMapEvent(Event):
    """A TABLE_MAP; ``table_map`` is None when binlake cannot read its columns (``error``
    says why), which matters only if the table is captured."""

    table_map: TableMap | None = None
    table_id: int = 0
    schema: str = ""
    table: str = ""
    error: str | None = None


@dataclass(slots=True)
class Rows(Event):
    """A WRITE, UPDATE, DELETE or PARTIAL_UPDATE ROWS event: its row images still as bytes.

    ``present`` and ``present_after`` are the columns-present bitmaps (bit i: column i) of the
    before and after images (one image for WRITE and DELETE: ``present``)."""

    kind: str = ""
    table_id: int = 0
    table: TableMap | None = None  # None: no TABLE_MAP for the id came before
    column_count: int = 0
    present: int = 0
    present_after: int | None = None
    body: bytes = b""

    @property
    def partial_json(self) -> bool:
        return self.type == PARTIAL_UPDATE_ROWS


@dataclass(slots=True)
class TransactionPayload(Event):
    events: list[Event] = field(default_factory=list)


@dataclass(slots=True)
class Passive(Event):
    """An event that changes nothing capture reads; ``unknown``: a type binlake does not know
    that the server marked ignorable."""

    unknown: bool = False


class EventParser:
    """Parses one stream's events in order; ``checksum``: the stream's events end with a CRC32
    before its FORMAT_DESCRIPTION says so (a server dump's first, artificial, ROTATE)."""

    def __init__(self, checksum: bool = False):
        self.checksum = checksum
        self.format: FormatDescription | None = None
        self.tables: dict[int, TableMap] = {}
        # The parser of each type's body: (event bytes, end of body, header fields, inner).
        self._bodies: dict[int, Callable[[bytes, int, Head, bool], Event]] = {
            **dict.fromkeys(ROWS_KINDS, self._rows),
            TABLE_MAP: self._table_map,
            QUERY: self._query,
            EXECUTE_LOAD_QUERY: self._query,
            XID: lambda raw, end, head, inner: Xid(*head),
            XA_PREPARE: lambda raw, end, head, inner: XaPrepare(*head),
            GTID: _mysql_gtid,
            ANONYMOUS_GTID: _mysql_gtid,
            GTID_TAGGED: _tagged_gtid,
            MARIADB_GTID: _mariadb_gtid,
            ROTATE: _rotate,
            TRANSACTION_PAYLOAD: self._payload,
        }

    @property
    def mariadb(self) -> bool:
        return self.format is not None and self.format.mariadb

    def parse(self, raw: bytes, inner: bool = False) -> Event:
        """One event from its bytes (header included). ``inner``: from a transaction payload,
        whose events carry no checksum."""
        if len(raw) < HEADER_SIZE:
            raise TruncatedEventError(f"an event of {len(raw)} bytes is shorter than its header")
        timestamp, etype, server_id, size, log_pos, flags = HEADER.unpack_from(raw)
        if size != len(raw):
            raise TruncatedEventError(f"{type_name(etype)} says it has {size} bytes but {len(raw)} arrived")
        head = (etype, timestamp, server_id, log_pos, flags)
        if etype == FORMAT_DESCRIPTION:
            return self._format_description(raw, head)
        if self.checksum and not inner:
            body_end = size - CHECKSUM_SIZE
            if zlib.crc32(raw[:body_end]) != int.from_bytes(raw[body_end:], "little"):
                raise TruncatedEventError(f"{type_name(etype)}: checksum mismatch (the event is corrupt)")
        else:
            body_end = size
        parse_body = self._bodies.get(etype)
        if parse_body is not None:
            return parse_body(raw, body_end, head, inner)
        if etype in _PASSIVE:
            return Passive(*head)
        if etype in _REFUSED:
            raise UnsupportedEventError(type_name(etype), _REFUSED[etype])
        if flags & IGNORABLE_FLAG:
            return Passive(*head, unknown=True)
        raise UnsupportedEventError(
            type_name(etype),
            "binlake does not decode this event type and the server did not mark it ignorable: "
            "report it with the server's version, or exclude its source from capture",
        )

    def _post_header_length(self, etype: int, default: int) -> int:
        if self.format is None or not self.format.post_header or etype > len(self.format.post_header):
            return default
        return self.format.post_header[etype - 1]

    def _format_description(self, raw: bytes, head: Head) -> FormatDescription:
        r = Reader(raw, HEADER_SIZE)
        r.u16()  # binlog version (4 since MySQL 5.0)
        version = r.bytes(50).split(b"\0", 1)[0].decode("ascii", "replace")
        r.u32()  # created
        r.u8()  # common header length (19)
        rest = r.rest()
        checksum = False
        if _has_checksum_field(version):
            # The checksum algorithm (0 off, 1 CRC32) follows the post-header lengths, then
            # the event's own checksum field (written whatever the algorithm).
            alg = rest[-CHECKSUM_SIZE - 1]
            if alg not in (0, 1):
                raise UnsupportedEventError(
                    type_name(FORMAT_DESCRIPTION), f"binlog checksum algorithm {alg} is unknown"
                )
            checksum = alg == 1
            # A file still being written has LOG_EVENT_BINLOG_IN_USE_F set in its
            # FORMAT_DESCRIPTION's flags; the checksum was taken before the flag was.
            signed = raw[:17] + (head[4] & ~IN_USE_FLAG).to_bytes(2, "little") + raw[19:-CHECKSUM_SIZE]
            if checksum and zlib.crc32(signed) != int.from_bytes(raw[-CHECKSUM_SIZE:], "little"):
                raise TruncatedEventError("FORMAT_DESCRIPTION_EVENT: checksum mismatch (the event is corrupt)")
            rest = rest[: -CHECKSUM_SIZE - 1]
        fde = FormatDescription(*head, server_version=version, checksum=checksum, post_header=rest)
        self.checksum = checksum
        self.format = fde
        return fde

    def _query(self, raw: bytes, end: int, head: Head, inner: bool = False) -> Query:
        etype = head[0]
        post = self._post_header_length(etype, 13 if etype == QUERY else 26)
        off = HEADER_SIZE
        db_len = raw[off + 8]
        status_len = int.from_bytes(raw[off + 11 : off + 13], "little")
        off += post + status_len
        schema = raw[off : off + db_len].decode("utf-8", "surrogateescape")
        text = raw[off + db_len + 1 : end].decode("utf-8", "replace")
        return Query(*head, schema=schema, text=text, load=etype == EXECUTE_LOAD_QUERY)

    def _table_map(self, raw: bytes, end: int, head: Head, inner: bool = False) -> TableMapEvent:
        id_size = 6 if self._post_header_length(TABLE_MAP, 8) == 8 else 4
        try:
            tm = parse_table_map(Reader(raw[:end], HEADER_SIZE), id_size, self.mariadb)
        except TableMapError as exc:
            if exc.table_id is None:
                raise
            self.tables.pop(exc.table_id, None)
            return TableMapEvent(
                *head, table_id=exc.table_id, schema=exc.schema or "", table=exc.table or "", error=str(exc)
            )
        self.tables[tm.table_id] = tm
        return TableMapEvent(*head, table_map=tm, table_id=tm.table_id, schema=tm.schema, table=tm.table)

    def _rows(self, raw: bytes, end: int, head: Head, inner: bool = False) -> Rows:
        etype = head[0]
        off = HEADER_SIZE
        table_id = int.from_bytes(raw[off : off + 6], "little")
        off += 8  # table id, flags
        if etype in _ROWS_V2:
            off += int.from_bytes(raw[off : off + 2], "little")  # extra data, its length included
        count, off = read_packed(raw, off)
        nbytes = (count + 7) // 8
        present = int.from_bytes(raw[off : off + nbytes], "little")
        off += nbytes
        kind = ROWS_KINDS[etype]
        present_after = None
        if kind == "update":
            present_after = int.from_bytes(raw[off : off + nbytes], "little")
            off += nbytes
        return Rows(
            *head,
            kind=kind,
            table_id=table_id,
            table=self.tables.get(table_id),
            column_count=count,
            present=present,
            present_after=present_after,
            body=raw[off:end],
        )

    def _payload(self, raw: bytes, end: int, head: Head, inner: bool = False) -> TransactionPayload:
        if inner:
            raise UnsupportedEventError(
                type_name(TRANSACTION_PAYLOAD), "a transaction payload inside a transaction payload"
            )
        off = HEADER_SIZE
        size = algorithm = uncompressed = None
        while off < end:
            ftype, off = read_packed(raw, off)
            if ftype == 0:  # the end of the header: the payload follows
                break
            length, off = read_packed(raw, off)
            value, _ = read_packed(raw, off)
            if ftype == 1:
                size = value
            elif ftype == 2:
                algorithm = value
            elif ftype == 3:
                uncompressed = value
            off += length  # fields binlake does not know are skipped whole
        if size is None or algorithm is None or off + size > end:
            raise TruncatedEventError("TRANSACTION_PAYLOAD_EVENT: its header lacks the payload size or compression")
        data = raw[off : off + size]
        if algorithm == PAYLOAD_ZSTD:
            data = _zstd_decompress(data, uncompressed)
        elif algorithm != PAYLOAD_NONE:
            raise UnsupportedEventError(type_name(TRANSACTION_PAYLOAD), f"compression type {algorithm} is unknown")
        events = []
        pos = 0
        while pos < len(data):
            if len(data) - pos < HEADER_SIZE:
                raise TruncatedEventError("TRANSACTION_PAYLOAD_EVENT: an inner event is cut short")
            inner_size = HEADER.unpack_from(data, pos)[3]
            events.append(self.parse(data[pos : pos + inner_size], inner=True))
            pos += inner_size
        return TransactionPayload(*head, events=events)


def _has_checksum_field(version: str) -> bool:
    """Servers from MySQL 5.6.1 (and every MariaDB 10) write the checksum algorithm."""
    digits = []
    for part in version.split("-", 1)[0].split(".")[:3]:
        num = "".join(ch for ch in part if ch.isdigit())
        digits.append(int(num or 0))
    return tuple(digits) >= (5, 6, 1)


def _zstd_decompress(data: bytes, size: int | None) -> bytes:
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size or 0)
    except zstandard.ZstdError as exc:
        raise TruncatedEventError(f"TRANSACTION_PAYLOAD_EVENT: zstd cannot decompress it ({exc})") from exc


def _rotate(raw: bytes, end: int, head: Head, inner: bool) -> Rotate:
    position = int.from_bytes(raw[HEADER_SIZE : HEADER_SIZE + 8], "little")
    name = raw[HEADER_SIZE + 8 : end].decode("utf-8", "surrogateescape")
    if name == "" or "\0" in name:
        raise TruncatedEventError("ROTATE_EVENT names no file")
    return Rotate(*head, next_file=name, position=position)


def _mariadb_gtid(raw: bytes, end: int, head: Head, inner: bool) -> Gtid:
    seq, domain, gflags = struct.unpack_from("<QIB", raw, HEADER_SIZE)
    return Gtid(*head, gtid=f"{domain}-{head[2]}-{seq}", mariadb=True, standalone=bool(gflags & 1))


def _mysql_gtid(raw: bytes, end: int, head: Head, inner: bool) -> Gtid:
    off = HEADER_SIZE + 1  # flags
    sid = uuid.UUID(bytes=raw[off : off + 16])
    gno = int.from_bytes(raw[off + 16 : off + 24], "little")
    return Gtid(*head, gtid=None if head[0] == ANONYMOUS_GTID else f"{sid}:{gno}")


def _tagged_gtid(raw: bytes, end: int, head: Head, inner: bool) -> Gtid:
    """MySQL 8.3+'s tagged GTID (``uuid:tag:gno``), in MySQL's serialization format: a
    version byte, the payload size and the last non-ignorable field id, then (field id,
    value) pairs in id order. The three fields binlake needs come first (ids 1-3)."""
    buf = raw[HEADER_SIZE:end]
    if not buf or buf[0] != 2:
        raise UnsupportedEventError(
            type_name(GTID_TAGGED), f"serialization version {buf[0] if buf else None} is unknown"
        )
    off = 1
    _, off = _varlen(buf, off)  # payload size
    _, off = _varlen(buf, off)  # last non-ignorable field
    sid = tag = gno = None
    while off < len(buf) and (sid is None or gno is None or tag is None):
        fid, off = _varlen(buf, off)
        if fid == 0:  # flags
            _, off = _varlen(buf, off)
        elif fid == 1:
            raw_sid = bytearray()
            for _ in range(16):
                byte, off = _varlen(buf, off)
                raw_sid.append(byte)
            sid = uuid.UUID(bytes=bytes(raw_sid))
        elif fid == 2:
            value, off = _varlen(buf, off)
            gno = value >> 1 if not value & 1 else -(value >> 1) - 1  # signed: zigzag
        elif fid == 3:
            n, off = _varlen(buf, off)
            tag = buf[off : off + n].decode("utf-8")
            off += n
        else:
            break  # a later field: sid, gno and tag are all there is to read, or absent
    if sid is None or gno is None:
        raise TruncatedEventError("GTID_TAGGED_LOG_EVENT lacks its source id or number")
    return Gtid(*head, gtid=f"{sid}:{tag}:{gno}" if tag else f"{sid}:{gno}")


def _varlen(buf: bytes, off: int) -> tuple[int, int]:
    """An unsigned integer of MySQL's serialization format: the first byte's trailing one
    bits count the extra bytes; 0xFF is followed by 8 raw bytes."""
    first = buf[off]
    if first == 0xFF:
        return int.from_bytes(buf[off + 1 : off + 9], "little"), off + 9
    n = 1
    while first >> (n - 1) & 1:
        n += 1
    return int.from_bytes(buf[off : off + n], "little") >> n, off + n
