"""ROWS events' row images, from bytes straight to canonical texts: the hot loop of capture.

Each column gets one small reader, built once per TABLE_MAP, that takes the value's bytes to
its canonical text (:mod:`binlake.contract.types`) in one step; the texts equal what the
snapshot reads for the same value (``tests/integration/test_binlog_rows.py`` checks every
type against python-mysql-replication's decoding and against a SELECT, edge values included).

Row image layout: per row a NULL bitmap over the image's columns (``ceil(n / 8)`` bytes, bit
i set when the i-th column of the image is NULL), then the non-NULL values back to back. An
image holds the columns its columns-present bitmap names: every column under
``binlog_row_image=FULL``, fewer under MINIMAL or NOBLOB, so a decoder is laid out per bitmap
(:meth:`RowsDecoder.layout`). A PARTIAL_UPDATE_ROWS_EVENT's after images start with the row's
value options and, for partial JSON updates, a bitmap over the table's JSON columns saying
which of them hold a JSON diff instead of a value.
"""

from __future__ import annotations

import base64
import codecs
import datetime as dt
import struct
from collections.abc import Callable
from dataclasses import dataclass

from binlake.contract.types import ZERO_DATE, ZERO_DATETIME, Column, Kind, TableSchema
from binlake.errors import PartialJsonWithoutBeforeError, UnsupportedColumnError
from binlake.source.binlog import table_map as tm
from binlake.source.binlog.wire import read_packed

# A reader takes (event bytes, offset of the value) and returns (text, offset after it).
Reader = Callable[[bytes, int], "tuple[str, int]"]

_EPOCH = dt.datetime(1970, 1, 1)
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
PARTIAL_JSON_UPDATES = 1  # binlog_row_value_options bit of a partial after image


@dataclass(frozen=True)
class Layout:
    """How one image of a ROWS event is laid out: the columns present, in order."""

    names: list[str]
    indexes: list[int]
    readers: list[Reader]
    null_bytes: int


class RowsDecoder:
    """Decodes the row images of one table's ROWS events (one TABLE_MAP's column layout)."""

    def __init__(self, table: tm.TableMap, names: list[str], readers: list[Reader]):
        self.table = table
        self.names = names
        self.readers = readers
        self._all = (1 << len(readers)) - 1
        self._layouts: dict[int, Layout] = {}

    def layout(self, present: int) -> Layout:
        """The layout of images whose columns-present bitmap is ``present``."""
        present &= self._all
        found = self._layouts.get(present)
        if found is None:
            idx = [i for i in range(len(self.readers)) if present >> i & 1]
            found = self._layouts[present] = Layout(
                [self.names[i] for i in idx], idx, [self.readers[i] for i in idx], (len(idx) + 7) // 8
            )
        return found

    def full(self, present: int) -> bool:
        return present & self._all == self._all

    def decode(self, buf: bytes, layouts: list[Layout], outs: list[list]) -> int:
        """Append the value texts of every image in ``buf`` to ``outs``; returns the row count.

        ``layouts`` and ``outs`` have one entry per image of a row: ``[after]`` for a WRITE,
        ``[before]`` for a DELETE, ``[before, after]`` for an UPDATE (its images alternate).
        """
        end = len(buf)
        off = 0
        images = 0
        per_row = len(outs)
        while off < end:
            slot = images % per_row
            append = outs[slot].append
            lay = layouts[slot]
            nb = lay.null_bytes
            nulls = int.from_bytes(buf[off : off + nb], "little")
            off += nb
            if nulls:
                for i, read in enumerate(lay.readers):
                    if nulls >> i & 1:
                        append(None)
                    else:
                        text, off = read(buf, off)
                        append(text)
            else:
                for read in lay.readers:
                    text, off = read(buf, off)
                    append(text)
            images += 1
        if off != end or images % per_row:
            raise ValueError(f"row images do not fill their event ({off} of {end} bytes, {images} images)")
        return images // per_row

    def decode_partial_update(self, buf: bytes, before: Layout, after: Layout, outs: list[list]) -> int:
        """A PARTIAL_UPDATE_ROWS_EVENT's rows: like an UPDATE's, but an after image may hold
        JSON diffs, applied here to the same row's before value (raises
        :class:`~binlake.errors.PartialJsonWithoutBeforeError` when the before image does not have it)."""
        from binlake.source.binlog.jsonb import apply_json_diffs, parse_json_diffs

        json_cols = self.table.json_columns
        raw_json = {i: _raw_json_reader(self.table.columns[i]) for i in json_cols}
        end = len(buf)
        off = 0
        rows = 0
        while off < end:
            # The before image, keeping the JSON columns' bytes for the diffs.
            befores: dict[int, bytes | None] = {}
            nulls = int.from_bytes(buf[off : off + before.null_bytes], "little")
            off += before.null_bytes
            for j, (i, read) in enumerate(zip(before.indexes, before.readers)):
                if nulls >> j & 1:
                    outs[0].append(None)
                    befores[i] = None
                    continue
                if i in raw_json:
                    befores[i], _ = raw_json[i](buf, off)
                text, off = read(buf, off)
                outs[0].append(text)
            options, off = read_packed(buf, off)
            partial: set[int] = set()
            if options & PARTIAL_JSON_UPDATES:
                nb = (len(json_cols) + 7) // 8
                bits = int.from_bytes(buf[off : off + nb], "little")
                off += nb
                partial = {i for k, i in enumerate(json_cols) if bits >> k & 1}
            nulls = int.from_bytes(buf[off : off + after.null_bytes], "little")
            off += after.null_bytes
            for j, (i, read) in enumerate(zip(after.indexes, after.readers)):
                if nulls >> j & 1:
                    outs[1].append(None)
                elif i in partial:
                    diff, off = raw_json[i](buf, off)
                    before_json = befores.get(i)
                    if before_json is None:
                        raise PartialJsonWithoutBeforeError([self.names[i]])
                    outs[1].append(apply_json_diffs(before_json, parse_json_diffs(diff)))
                else:
                    text, off = read(buf, off)
                    outs[1].append(text)
            rows += 1
        if off != end:
            raise ValueError(f"row images do not fill their event ({off} of {end} bytes)")
        return rows


def compile_rows_decoder(table: tm.TableMap, schema: TableSchema) -> RowsDecoder:
    """A decoder for the TABLE_MAP's columns; ``schema`` is the binlake typing of the same
    columns (:func:`binlake.source.binlog.schema.schema_from_table_map`). Raises
    :class:`~binlake.errors.UnsupportedColumnError` for a column it cannot decode."""
    readers = [_reader(raw, col, table.mariadb) for raw, col in zip(table.columns, schema.columns)]
    return RowsDecoder(table, [c.name for c in schema.columns], readers)


def _reader(raw: tm.ColumnDef, col: Column, mariadb: bool) -> Reader:  # noqa: C901 (one branch per MySQL column type)
    t = raw.type
    if t in _INTS:
        fmt, size = _INTS[t]
        return _int_reader(fmt.upper() if raw.unsigned else fmt, size)
    if t == tm.INT24:
        signed = not raw.unsigned

        def read_int24(buf, off):
            return str(int.from_bytes(buf[off : off + 3], "little", signed=signed)), off + 3

        return read_int24
    if t == tm.FLOAT:
        unpack_f = struct.Struct("<f").unpack_from
        return lambda buf, off: (repr(unpack_f(buf, off)[0]), off + 4)
    if t == tm.DOUBLE:
        unpack_d = struct.Struct("<d").unpack_from
        return lambda buf, off: (repr(unpack_d(buf, off)[0]), off + 8)
    if t == tm.NEWDECIMAL:
        return _decimal_reader(raw.precision, raw.decimals)
    if t in (tm.DATE, tm.NEWDATE):
        return _read_date
    if t == tm.DATETIME2:
        return _datetime2_reader(raw.fsp)
    if t == tm.TIMESTAMP2:
        return _timestamp2_reader(raw.fsp)
    if t == tm.TIME2:
        return _time2_reader(raw.fsp)
    if t == tm.DATETIME:
        return _read_old_datetime
    if t == tm.TIMESTAMP:
        return _read_old_timestamp
    if t == tm.TIME:
        return _read_old_time
    if t == tm.YEAR:
        # Stored as an offset from 1900; 0 is the zero year (YEAR 0000), not 1900.
        return lambda buf, off: (str(buf[off] + 1900) if buf[off] else "0", off + 1)
    if t == tm.ENUM and col.kind is Kind.ENUM:
        return _enum_reader(("", *_labels(raw)), raw.pack_size)
    if t == tm.SET and col.kind is Kind.SET:
        return _set_reader(list(_labels(raw)), raw.pack_size)
    if t == tm.BIT and col.kind is Kind.BIT:
        return _bit_reader(raw.bits, (raw.bits + 7) // 8)
    if t in (tm.VARCHAR, tm.VAR_STRING, tm.STRING):
        length_bytes = 2 if raw.max_length > 255 else 1
        return _string_reader(raw, col, length_bytes, raw.max_length if t == tm.STRING else None, mariadb)
    if t in (tm.BLOB, tm.GEOMETRY, tm.VECTOR):
        return _string_reader(raw, col, raw.length_size, None, mariadb)
    if t == tm.JSON:
        return _json_reader(raw)
    raise UnsupportedColumnError(f"column {col.name!r} has binlog type {raw.type_name}, which binlake does not decode")


def _labels(raw: tm.ColumnDef) -> tuple[str, ...]:
    if raw.labels is None:
        raise UnsupportedColumnError(
            f"column {raw.name!r}: the binlog names no {raw.type_name.upper()} labels "
            "(binlog_row_metadata=FULL gives them)"
        )
    return raw.labels


def _int_types() -> dict[int, tuple[str, int]]:
    return {tm.TINY: ("<b", 1), tm.SHORT: ("<h", 2), tm.LONG: ("<i", 4), tm.LONGLONG: ("<q", 8)}


_INTS = _int_types()


def _int_reader(fmt: str, size: int) -> Reader:
    unpack = struct.Struct(fmt).unpack_from

    def read(buf, off):
        return str(unpack(buf, off)[0]), off + size

    return read


def _decimal_reader(precision: int, scale: int) -> Reader:
    """MySQL's packed DECIMAL: groups of 9 digits in 4 bytes, partial groups in fewer.

    The first bit is the sign (set: non-negative); a negative value has every bit inverted.
    Text as ``format(Decimal, 'f')``: no leading zeros, the scale's digits kept.
    """
    intg = precision - scale
    intg_full, intg_rest = divmod(intg, 9)
    frac_full, frac_rest = divmod(scale, 9)
    lead = _DIG2BYTES[intg_rest]
    tail = _DIG2BYTES[frac_rest]
    size = lead + intg_full * 4 + frac_full * 4 + tail
    sign_bit = 1 << (size * 8 - 1)
    ones = (1 << (size * 8)) - 1

    def read(buf, off):
        v = int.from_bytes(buf[off : off + size], "big")
        negative = not v & sign_bit
        v ^= sign_bit
        if negative:
            v ^= ones
        # Peel the fraction groups off the low end, then the integer part stays.
        frac = ""
        if tail:
            frac = f"{v & ((1 << (tail * 8)) - 1):0{frac_rest}d}"
            v >>= tail * 8
        for _ in range(frac_full):
            frac = f"{v & 0xFFFFFFFF:09d}" + frac
            v >>= 32
        whole = 0
        scale9 = 1
        for _ in range(intg_full):
            whole += (v & 0xFFFFFFFF) * scale9
            v >>= 32
            scale9 *= 1_000_000_000
        whole += v * scale9  # the leading partial group (0 when there is none)
        text = f"{whole}.{frac}" if scale else str(whole)
        return ("-" + text if negative else text), off + size

    return read


def _fsp_reader(fsp: int) -> tuple[int, int, int]:
    """(bytes, divisor, multiplier): the fraction is ``int // divisor * multiplier`` microseconds."""
    nbytes = (fsp + 1) // 2
    return nbytes, (10 if fsp % 2 else 1), 10 ** (6 - fsp) if fsp else 1


def _read_date(buf, off):
    v = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16
    year, month, day = v >> 9, (v >> 5) & 15, v & 31
    try:
        return dt.date(year, month, day).isoformat(), off + 3
    except ValueError:
        # Zero and invalid dates (ALLOW_INVALID_DATES) are '0000-00-00', as the snapshot reads them.
        return ZERO_DATE, off + 3


def _datetime_text(year: int, month: int, day: int, hour: int, minute: int, second: int, us: int) -> str:
    try:
        return dt.datetime(year, month, day, hour, minute, second, us).isoformat(" ", "microseconds")
    except ValueError:
        return ZERO_DATETIME


def _datetime2_reader(fsp: int) -> Reader:
    """DATETIME2: 40 bits big-endian (sign, year*13+month, day, hour, minute, second) + fraction."""
    nbytes, div, mul = _fsp_reader(fsp)
    size = 5 + nbytes

    def read(buf, off):
        v = int.from_bytes(buf[off : off + 5], "big")
        us = int.from_bytes(buf[off + 5 : off + size], "big") // div * mul if nbytes else 0
        ym = (v >> 22) & 0x1FFFF
        return _datetime_text(ym // 13, ym % 13, (v >> 17) & 31, (v >> 12) & 31, (v >> 6) & 63, v & 63, us), off + size

    return read


def _read_old_datetime(buf, off):
    """The pre-5.6 DATETIME: YYYYMMDDhhmmss as a little-endian 64-bit integer."""
    v = int.from_bytes(buf[off : off + 8], "little")
    d, t = divmod(v, 1_000_000)
    text = _datetime_text(d // 10000, d // 100 % 100, d % 100, t // 10000, t // 100 % 100, t % 100, 0)
    return text, off + 8


def _timestamp_text(secs: int, us: int) -> str:
    if secs == 0 and us == 0:
        # TIMESTAMP cannot hold the epoch itself; 0 is how the zero value is stored.
        return ZERO_DATETIME
    return (_EPOCH + dt.timedelta(seconds=secs, microseconds=us)).isoformat(timespec="microseconds") + "Z"


def _timestamp2_reader(fsp: int) -> Reader:
    """TIMESTAMP2: seconds since the epoch (32 bits big-endian) + fraction; the UTC instant."""
    nbytes, div, mul = _fsp_reader(fsp)
    size = 4 + nbytes
    unpack = struct.Struct(">i").unpack_from

    def read(buf, off):
        us = int.from_bytes(buf[off + 4 : off + size], "big") // div * mul if nbytes else 0
        return _timestamp_text(unpack(buf, off)[0], us), off + size

    return read


def _read_old_timestamp(buf, off):
    """The pre-5.6 TIMESTAMP: seconds since the epoch, little-endian."""
    return _timestamp_text(int.from_bytes(buf[off : off + 4], "little"), 0), off + 4


def _time_text(negative: bool, hours: int, minutes: int, seconds: int, us: int, fsp: int) -> str:
    text = f"{'-' if negative else ''}{hours:02d}:{minutes:02d}:{seconds:02d}"
    if fsp:
        text += "." + f"{us:06d}"[:fsp]
    return text


def _time2_reader(fsp: int) -> Reader:
    """TIME2 as MySQL's ``my_time_packed_from_binary``: 24-bit offset integer part + fraction.

    Negative values with a fraction store the fraction's complement (binary sort order),
    which python-mysql-replication gets wrong; this follows the server's own code.
    """
    size = 3 + (fsp + 1) // 2

    def read(buf, off):
        if fsp >= 5:
            packed = int.from_bytes(buf[off : off + 6], "big") - 0x800000000000
        else:
            intpart = int.from_bytes(buf[off : off + 3], "big") - 0x800000
            frac = 0
            if fsp:
                flen = size - 3
                frac = int.from_bytes(buf[off + 3 : off + size], "big")
                if intpart < 0 and frac:
                    intpart += 1
                    frac -= 1 << (8 * flen)
                frac *= 10000 if flen == 1 else 100
            packed = (intpart << 24) + frac
        negative = packed < 0
        packed = abs(packed)
        hms, us = packed >> 24, packed & 0xFFFFFF
        return _time_text(negative, (hms >> 12) & 0x3FF, (hms >> 6) & 63, hms & 63, us, fsp), off + size

    return read


def _read_old_time(buf, off):
    """The pre-5.6 TIME: [-]HHMMSS as a signed little-endian 24-bit integer."""
    v = int.from_bytes(buf[off : off + 3], "little", signed=True)
    m = abs(v)
    return _time_text(v < 0, m // 10000, m // 100 % 100, m % 100, 0, 0), off + 3


def _enum_reader(values: tuple[str, ...], size: int) -> Reader:
    # values[0] is '' (the index MySQL stores for an invalid value), then the labels.
    if size == 1:
        return lambda buf, off: (values[buf[off]], off + 1)
    return lambda buf, off: (values[buf[off] | buf[off + 1] << 8], off + 2)


def _set_reader(labels: list[str], size: int) -> Reader:
    def read(buf, off):
        mask = int.from_bytes(buf[off : off + size], "little")
        # Definition order, as encode_value orders a SET; '' is never a member.
        return ",".join(label for i, label in enumerate(labels) if mask >> i & 1 and label), off + size

    return read


def _bit_reader(bits: int, nbytes: int) -> Reader:
    mask = (1 << bits) - 1

    def read(buf, off):
        n = int.from_bytes(buf[off : off + nbytes], "big") & mask
        return str(n - (1 << 64) if n >= 1 << 63 else n), off + nbytes

    return read


def python_encoding(raw: tm.ColumnDef, mariadb: bool) -> str | None:
    """The Python codec of a character column's collation; None for the binary collation.

    A collation id binlake's table does not know is read as UTF-8 (the default character set
    of every current server), strictly: a value that is not UTF-8 stops capture."""
    from pymysqlreplication.constants.CHARSET import charset_by_id

    if raw.collation is None or raw.binary:
        return None
    charset = charset_by_id(raw.collation, "mariadb" if mariadb else "mysql") or charset_by_id(raw.collation)
    encoding = charset.encoding if charset is not None else "utf8"
    try:
        codecs.lookup(encoding)
    except LookupError as exc:
        raise UnsupportedColumnError(
            f"column {raw.name!r} has character set {charset.name if charset else raw.collation}, "
            "which Python cannot decode"
        ) from exc
    return encoding


def _string_reader(
    raw: tm.ColumnDef, col: Column, length_bytes: int, fixed_length: int | None, mariadb: bool
) -> Reader:
    """Length-prefixed bytes: text in the column's charset, or base64 for binary columns."""
    if col.kind is Kind.BINARY:
        # BINARY(n): the binlog drops trailing zero bytes, which a SELECT returns.
        pad = fixed_length if fixed_length is not None and raw.binary else 0
        b64 = base64.b64encode

        def read_binary(buf, off):
            n = int.from_bytes(buf[off : off + length_bytes], "little")
            off += length_bytes
            value = buf[off : off + n]
            if pad:
                value = value.ljust(pad, b"\0")
            return b64(value).decode("ascii"), off + n

        return read_binary
    if col.kind is Kind.STRING:
        encoding = python_encoding(raw, mariadb) or "utf8"

        def read_text(buf, off):
            n = int.from_bytes(buf[off : off + length_bytes], "little")
            off += length_bytes
            return buf[off : off + n].decode(encoding), off + n

        return read_text
    raise UnsupportedColumnError(f"column {col.name!r}: binlog type {raw.type_name} is not {col.kind.value}")


def _raw_json_reader(raw: tm.ColumnDef) -> Callable[[bytes, int], tuple[bytes, int]]:
    size = raw.length_size

    def read(buf, off):
        n = int.from_bytes(buf[off : off + size], "little")
        off += size
        return buf[off : off + n], off + n

    return read


def _json_reader(raw: tm.ColumnDef) -> Reader:
    """MySQL's binary JSON, as the text MySQL returns for the value (MariaDB's JSON is text)."""
    from binlake.source.binlog.jsonb import json_text

    value = _raw_json_reader(raw)

    def read(buf, off):
        data, off = value(buf, off)
        return json_text(data), off

    return read
