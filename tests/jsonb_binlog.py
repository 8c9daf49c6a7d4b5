"""Test-only: the row images of a MySQL binlog file, as raw column bytes, for tests/unit/test_jsonb.py.

Enough of the v4 binlog format to reach JSON column values in the files under
tests/data/mysql-binlogs: the 19-byte event header, a CRC32 at the end of every event,
TABLE_MAP events (column types and metadata) and the v2 rows events WRITE_ROWS (30),
UPDATE_ROWS (31) and PARTIAL_UPDATE_ROWS (39). Only the column types those files use are
read (INT, VARCHAR, JSON); anything else stops the test. The production event parser lives
in binlake.source.binlog; this one exists so the JSON tests get MySQL's own bytes.

Row image layout (MySQL's rpl_record.h): a NULL bitmap over the image's columns, then the
non-NULL values; an UPDATE has a before and an after image per row; a PARTIAL_UPDATE_ROWS
event puts a "shared image" between them: value_options (length-encoded), and when its bit
1 (PARTIAL_JSON_UPDATES) is set, one bit per JSON column of the table saying whether the
after image holds that column as a list of diffs instead of a document.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).parent / "data" / "mysql-binlogs"

HEADER = 19
FORMAT_DESCRIPTION, QUERY, TABLE_MAP = 15, 2, 19
WRITE_ROWS, UPDATE_ROWS, PARTIAL_UPDATE_ROWS = 30, 31, 39
ROWS_EVENTS = (WRITE_ROWS, UPDATE_ROWS, PARTIAL_UPDATE_ROWS)
LONG, VARCHAR, JSON = 3, 15, 245
IN_USE_FLAG = 0x1  # set on the FORMAT_DESCRIPTION event while the file is open, after its CRC


@dataclass(frozen=True)
class Event:
    pos: int
    type: int
    body: bytes  # between the header and the checksum


@dataclass
class Table:
    name: str
    types: list[int]
    meta: list[int]  # VARCHAR: max bytes; JSON: length-prefix bytes; else 0


@dataclass
class Image:
    """One row image: ``values[i]`` is column i's bytes (None when NULL or not in the image);
    ``partial`` holds the columns logged as JSON diffs."""

    values: dict[int, bytes | None]
    partial: set[int] = field(default_factory=set)


@dataclass
class RowChange:
    event: Event
    table: Table
    before: Image | None
    after: Image | None


def events(path: Path) -> list[Event]:
    data = path.read_bytes()
    assert data[:4] == b"\xfebin", f"{path} is not a binlog file"
    out, pos = [], 4
    while pos < len(data):
        _ts, type_, _server, size, _next, flags = struct.unpack_from("<IBIIIH", data, pos)
        raw = bytearray(data[pos : pos + size])
        if type_ == FORMAT_DESCRIPTION:
            struct.pack_into("<H", raw, 17, flags & ~IN_USE_FLAG)
        assert zlib.crc32(raw[:-4]) == struct.unpack_from("<I", raw, size - 4)[0], f"bad checksum at {pos}"
        out.append(Event(pos, type_, bytes(raw[HEADER:-4])))
        pos += size
    return out


def statements(path: Path) -> list[str]:
    """The SQL of the QUERY events (after the status variables and the database name)."""
    out = []
    for ev in events(path):
        if ev.type == QUERY:
            db_len, status_len = ev.body[8], struct.unpack_from("<H", ev.body, 11)[0]
            out.append(ev.body[13 + status_len + db_len + 1 :].decode())
    return out


def row_changes(path: Path) -> list[RowChange]:
    tables: dict[int, Table] = {}
    out = []
    for ev in events(path):
        if ev.type == TABLE_MAP:
            table_id, table = _table_map(ev.body)
            tables[table_id] = table
        elif ev.type in ROWS_EVENTS:
            out.extend(_rows(ev, tables))
    return out


def _lenenc(buf: bytes, pos: int) -> tuple[int, int]:
    first = buf[pos]
    if first < 251:
        return first, pos + 1
    size = {252: 2, 253: 3, 254: 8}[first]
    return int.from_bytes(buf[pos + 1 : pos + 1 + size], "little"), pos + 1 + size


def _table_map(body: bytes) -> tuple[int, Table]:
    table_id = int.from_bytes(body[:6], "little")
    pos = 8
    pos += 1 + body[pos] + 1  # database name, NUL
    name = body[pos + 1 : pos + 1 + body[pos]].decode()
    pos += 1 + body[pos] + 1
    count, pos = _lenenc(body, pos)
    types = list(body[pos : pos + count])
    _meta_len, pos = _lenenc(body, pos + count)
    meta = []
    for t in types:
        if t == VARCHAR:
            meta.append(struct.unpack_from("<H", body, pos)[0])
            pos += 2
        elif t == JSON:
            meta.append(body[pos])
            pos += 1
        else:
            assert t == LONG, f"column type {t} is not read by this helper"
            meta.append(0)
    return table_id, Table(name, types, meta)


def _bits(buf: bytes, count: int) -> list[bool]:
    return [bool(buf[i // 8] >> (i % 8) & 1) for i in range(count)]


def _rows(ev: Event, tables: dict[int, Table]) -> list[RowChange]:
    body = ev.body
    table = tables[int.from_bytes(body[:6], "little")]
    extra_len = struct.unpack_from("<H", body, 8)[0]
    count, pos = _lenenc(body, 8 + extra_len)
    width = (count + 7) // 8
    first_cols = _bits(body[pos : pos + width], count)
    pos += width
    second_cols = first_cols
    if ev.type != WRITE_ROWS:
        second_cols = _bits(body[pos : pos + width], count)
        pos += width
    out = []
    while pos < len(body):
        before = None
        if ev.type == WRITE_ROWS:
            after, pos = _image(body, pos, table, first_cols, set())
        else:
            before, pos = _image(body, pos, table, first_cols, set())
            partial: set[int] = set()
            if ev.type == PARTIAL_UPDATE_ROWS:
                partial, pos = _shared_image(body, pos, table)
            after, pos = _image(body, pos, table, second_cols, partial)
        out.append(RowChange(ev, table, before, after))
    return out


def _shared_image(body: bytes, pos: int, table: Table) -> tuple[set[int], int]:
    options, pos = _lenenc(body, pos)
    if not options & 1:
        return set(), pos
    json_cols = [i for i, t in enumerate(table.types) if t == JSON]
    width = (len(json_cols) + 7) // 8
    flags = _bits(body[pos : pos + width], len(json_cols))
    return {col for col, on in zip(json_cols, flags) if on}, pos + width


def _image(body: bytes, pos: int, table: Table, cols: list[bool], partial: set[int]) -> tuple[Image, int]:
    present = [i for i, on in enumerate(cols) if on]
    width = (len(present) + 7) // 8
    nulls = _bits(body[pos : pos + width], len(present))
    pos += width
    values: dict[int, bytes | None] = {}
    for col, is_null in zip(present, nulls):
        if is_null:
            values[col] = None
            continue
        t, meta = table.types[col], table.meta[col]
        if t == LONG:
            size, pos = 4, pos
        elif t == VARCHAR:
            prefix = 1 if meta < 256 else 2
            size, pos = int.from_bytes(body[pos : pos + prefix], "little"), pos + prefix
        else:
            size, pos = int.from_bytes(body[pos : pos + meta], "little"), pos + meta
        values[col] = body[pos : pos + size]
        pos += size
    return Image(values, partial & set(present)), pos
