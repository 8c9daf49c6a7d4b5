"""Binlog row images straight from bytes to canonical texts: the hot loop of capture.

python-mysql-replication decodes every value into a Python object (``datetime``,
``Decimal``, a set of labels ...) through a long chain of type tests per column, and binlake
then turns that object into its canonical text (:func:`binlake.contract.types.encode_value`).
That pair costs about 30 us per row of six columns, which is more than a bare
python-mysql-replication loop spends on the whole row; on a two-core machine capture could
then never keep pace with that loop however well Spark parallelises the files.

Here each column gets one small reader, built once per TABLE_MAP, that takes the value's
bytes to the canonical text in one step (about 5x faster than the library's decoding alone).
The texts MUST equal what the library path gives (``encode_image`` of the decoded values,
quirk fixes included), and with it the snapshot's texts: ``tests/integration/
test_binlog_rows.py`` compares both paths on every type, edge values included.

:func:`compile_rows_decoder` returns None when a table has a column this module does not
handle (JSON, GEOMETRY, pre-MySQL-5.6 temporal formats, a charset Python does not know, a
missing column name); the caller then uses the library for that table's events.

Row image layout (FULL image): per row a NULL bitmap of ``ceil(columns / 8)`` bytes, bit i
set when column i is NULL, then the non-NULL values back to back.
"""

from __future__ import annotations

import base64
import codecs
import datetime as dt
import struct
from collections.abc import Callable
from typing import Any

from binlake.contract.types import ZERO_DATE, ZERO_DATETIME, Column, Kind, TableSchema

# A reader takes (event bytes, offset of the value) and returns (text, offset after it).
Reader = Callable[[bytes, int], "tuple[str, int]"]

_EPOCH = dt.datetime(1970, 1, 1)
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


class RowsDecoder:
    """Decodes the row images of one table's ROWS events (one TABLE_MAP's column layout)."""

    def __init__(self, names: list[str], readers: list[Reader]):
        self.names = names
        self.readers = readers
        self._null_bytes = (len(readers) + 7) // 8
        self._all = (1 << len(readers)) - 1

    def full_image(self, present: bytes) -> bool:
        """True when the columns-present bitmap names every column (binlog_row_image=FULL)."""
        return int.from_bytes(present, "little") & self._all == self._all

    def decode(self, buf: bytes, outs: list[list]) -> int:
        """Append the value texts of every image in ``buf`` to ``outs``; returns the row count.

        ``outs`` has one list per image of a row: ``[after]`` for a WRITE, ``[before]`` for a
        DELETE, ``[before, after]`` for an UPDATE (its images alternate).
        """
        readers = self.readers
        nb = self._null_bytes
        end = len(buf)
        off = 0
        images = 0
        per_row = len(outs)
        while off < end:
            append = outs[images % per_row].append
            nulls = int.from_bytes(buf[off : off + nb], "little")
            off += nb
            if nulls:
                for i, read in enumerate(readers):
                    if nulls >> i & 1:
                        append(None)
                    else:
                        text, off = read(buf, off)
                        append(text)
            else:
                for read in readers:
                    text, off = read(buf, off)
                    append(text)
            images += 1
        if off != end or images % per_row:
            raise ValueError(f"row images do not fill their event ({off} of {end} bytes, {images} images)")
        return images // per_row


def compile_rows_decoder(table_map_columns: list[Any], schema: TableSchema) -> RowsDecoder | None:
    """A decoder for the TABLE_MAP's columns, or None when one of them needs the library."""
    readers = []
    for raw, col in zip(table_map_columns, schema.columns):
        if not raw.name:
            return None
        read = _reader(raw, col)
        if read is None:
            return None
        readers.append(read)
    if len(readers) != len(table_map_columns):
        return None
    return RowsDecoder([c.name for c in schema.columns], readers)


def _reader(raw: Any, col: Column) -> Reader | None:  # noqa: C901 (one branch per MySQL column type)
    from pymysqlreplication.constants import FIELD_TYPE as T

    t = raw.type
    if t in _INTS:
        fmt, size = _INTS[t]
        return _int_reader(fmt.upper() if raw.unsigned else fmt, size)
    if t == T.INT24:
        signed = not raw.unsigned

        def read_int24(buf, off):
            return str(int.from_bytes(buf[off : off + 3], "little", signed=signed)), off + 3

        return read_int24
    if t == T.FLOAT:
        unpack_f = struct.Struct("<f").unpack_from
        return lambda buf, off: (repr(unpack_f(buf, off)[0]), off + 4)
    if t == T.DOUBLE:
        unpack_d = struct.Struct("<d").unpack_from
        return lambda buf, off: (repr(unpack_d(buf, off)[0]), off + 8)
    if t == T.NEWDECIMAL:
        return _decimal_reader(raw.precision, raw.decimals)
    if t == T.DATE:
        return _read_date
    if t == T.DATETIME2:
        return _datetime2_reader(raw.fsp)
    if t == T.TIMESTAMP2:
        return _timestamp2_reader(raw.fsp)
    if t == T.TIME2:
        return _time2_reader(raw.fsp)
    if t == T.YEAR:
        # Stored as an offset from 1900; 0 is the zero year (YEAR 0000), not 1900.
        return lambda buf, off: (str(buf[off] + 1900) if buf[off] else "0", off + 1)
    if t == T.ENUM and raw.enum_values is not None and col.kind is Kind.ENUM:
        return _enum_reader(list(raw.enum_values), raw.size)
    if t == T.SET and raw.set_values is not None and col.kind is Kind.SET:
        return _set_reader(list(raw.set_values), raw.size)
    if t == T.BIT and col.kind is Kind.BIT:
        return _bit_reader(raw.bits, raw.bytes)
    if t in (T.VARCHAR, T.STRING):
        return _string_reader(raw, col, 2 if raw.max_length > 255 else 1, raw.max_length if t == T.STRING else None)
    if t == T.BLOB:
        return _string_reader(raw, col, raw.length_size, None)
    return None  # JSON, GEOMETRY, DATETIME/TIME/TIMESTAMP without fsp metadata, old DECIMAL


def _int_types() -> dict[int, tuple[str, int]]:
    from pymysqlreplication.constants import FIELD_TYPE as T

    return {T.TINY: ("<b", 1), T.SHORT: ("<h", 2), T.LONG: ("<i", 4), T.LONGLONG: ("<q", 8)}


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


def _datetime2_reader(fsp: int) -> Reader:
    """DATETIME2: 40 bits big-endian (sign, year*13+month, day, hour, minute, second) + fraction."""
    nbytes, div, mul = _fsp_reader(fsp)
    size = 5 + nbytes

    def read(buf, off):
        v = int.from_bytes(buf[off : off + 5], "big")
        us = int.from_bytes(buf[off + 5 : off + size], "big") // div * mul if nbytes else 0
        ym = (v >> 22) & 0x1FFFF
        try:
            value = dt.datetime(ym // 13, ym % 13, (v >> 17) & 31, (v >> 12) & 31, (v >> 6) & 63, v & 63, us)
        except ValueError:
            return ZERO_DATETIME, off + size
        return value.isoformat(" ", "microseconds"), off + size

    return read


def _timestamp2_reader(fsp: int) -> Reader:
    """TIMESTAMP2: seconds since the epoch (32 bits big-endian) + fraction; the UTC instant."""
    nbytes, div, mul = _fsp_reader(fsp)
    size = 4 + nbytes
    unpack = struct.Struct(">i").unpack_from

    def read(buf, off):
        secs = unpack(buf, off)[0]
        us = int.from_bytes(buf[off + 4 : off + size], "big") // div * mul if nbytes else 0
        if secs == 0 and us == 0:
            # TIMESTAMP cannot hold the epoch itself; 0 is how the zero value is stored.
            return ZERO_DATETIME, off + size
        value = _EPOCH + dt.timedelta(seconds=secs, microseconds=us)
        return value.isoformat(timespec="microseconds") + "Z", off + size

    return read


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
        sign = "-" if packed < 0 else ""
        packed = abs(packed)
        hms, us = packed >> 24, packed & 0xFFFFFF
        text = f"{sign}{(hms >> 12) & 0x3FF:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
        if fsp:
            text += "." + f"{us:06d}"[:fsp]
        return text, off + size

    return read


def _enum_reader(values: list[str], size: int) -> Reader:
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


def _string_reader(raw: Any, col: Column, length_bytes: int, fixed_length: int | None) -> Reader | None:
    """Length-prefixed bytes: text in the column's charset, or base64 for binary columns."""
    encoding = None
    if raw.character_set_name is not None:
        from pymysqlreplication.row_event import RowsEvent

        encoding = RowsEvent.charset_to_encoding(raw.character_set_name)
        try:
            codecs.lookup(encoding)
        except LookupError:
            encoding = None  # the library hands such values (the 'binary' charset) over as bytes
    if col.kind is Kind.BINARY and raw.character_set_name is not None and encoding is None:
        # BINARY(n): the binlog drops trailing zero bytes, which a SELECT returns.
        pad = fixed_length if fixed_length is not None and getattr(raw, "collation_name", None) == "binary" else 0
        b64 = base64.b64encode

        def read_binary(buf, off):
            n = int.from_bytes(buf[off : off + length_bytes], "little")
            off += length_bytes
            value = buf[off : off + n]
            if pad:
                value = value.ljust(pad, b"\0")
            return b64(value).decode("ascii"), off + n

        return read_binary
    if col.kind is Kind.STRING and encoding is not None:

        def read_text(buf, off):
            n = int.from_bytes(buf[off : off + length_bytes], "little")
            off += length_bytes
            return buf[off : off + n].decode(encoding), off + n

        return read_text
    return None
