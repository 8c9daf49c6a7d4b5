"""MySQL's binary JSON, as binlog row images carry it, turned into the text MySQL returns for it.

A JSON column (column type 245, ``MYSQL_TYPE_JSON``) is stored and logged in MySQL's binary
format (``sql/json_binary.h``): one type byte, then the value. :func:`json_text` renders such
a value exactly as ``SELECT json_col`` and ``CAST(json_col AS CHAR)`` return it
(``Json_wrapper::to_string`` in ``sql-common/json_dom.cc``), so the binlog path and the
snapshot's SELECT give the same text for the same value:

- object members in stored order, which MySQL keeps sorted by key length, then key bytes;
  ``", "`` between members and elements, ``": "`` after a key;
- strings in double quotes, escaping ``"`` ``\\``, ``\\b \\f \\n \\r \\t`` and the other
  control characters up to 0x1f as ``\\u00xx``; everything else (non-ASCII too) as it is;
- integers (int16/32/64, uint16/32/64) in decimal; literals ``true``, ``false``, ``null``;
- doubles as ``my_gcvt`` writes them: the shortest digits that read back as the same double,
  fixed-point while the decimal exponent is between -14 and 15 (or the digits reach past
  the point), ``1e16`` / ``1.5e-16`` otherwise, and ``.0`` added to an integral fixed-point
  value so it stays a double (``1.0``, ``100000000000000.0``);
- opaque values (MySQL types wrapped in JSON): DECIMAL unquoted with its scale (``9.00``);
  DATE, DATETIME, TIMESTAMP and TIME as quoted strings (``"2012-03-18"``,
  ``"2012-03-18 11:30:45.000000"``, ``"87:31:46.654321"``); a VAR_STRING as the string it
  holds; anything else as ``"base64:typeNN:<base64>"`` (NN the MySQL field type, the base64
  broken by ``\\n`` every 76 characters as MySQL's ``base64_encode`` does);
- a top-level scalar as that scalar (a top-level string keeps its quotes).

A value of length 0 is JSON ``null``: MySQL stores an empty value when NULL or DEFAULT is
forced into a NOT NULL JSON column under ``INSERT IGNORE`` or a non-strict ``sql_mode``, and
``Field_json::val_json`` reads it as the JSON null literal (Bug#21437989), so SELECT returns
``null`` (not SQL NULL) for it; row images carry it as it is stored (MySQL bug #98496).

Partial updates. With ``binlog_row_value_options=PARTIAL_JSON``, an UPDATE that changes a
JSON column only through ``JSON_SET``, ``JSON_REPLACE`` and ``JSON_REMOVE`` is logged as a
PARTIAL_UPDATE_ROWS_EVENT whose after image may carry, for that column, a list of changes
instead of the document (``Json_diff_vector::write_binary`` in ``sql/json_diff.cc``): per
change an operation byte (0 replace, 1 insert, 2 remove), a length-encoded JSON path and,
unless it is a remove, a length-encoded binary JSON value. :func:`parse_json_diffs` reads that
list and :func:`apply_json_diffs` applies it to the before image's document with the rules of
MySQL's own replica (``apply_json_diffs`` in ``sql/json_diff.cc``): replace needs the path to
exist; insert needs its parent to exist and adds a member (in MySQL's key order) or an array
element (at the index, clamped to the array's end); remove needs the path to exist. A change
those rules refuse (a path that is not in the document, the whole document, a wildcard)
cannot be applied exactly: :class:`UnsupportedJsonDiff` says which and what to change on
the server. Which JSON columns of an after image hold diffs is the event's "partial bits"
(read by the event parser). The diffs apply to the document in the before image, which
binlake always has (it requires ``binlog_row_image=FULL``; with MINIMAL or NOBLOB the before
image lacks it, and the before value must come as text from elsewhere).

MySQL only: MariaDB's JSON type is an alias for LONGTEXT (with a ``JSON_VALID`` check), so
its binlog carries the text itself and neither this format nor partial updates exist there.

References: MySQL's ``sql/json_binary.h`` (the format), ``json_dom.cc`` (the text form,
``double_quote``), ``strings/dtoa.cc`` (``my_gcvt``), ``strings/decimal.cc``
(``bin2decimal`` / ``decimal2string``), ``mysys/my_time.cc`` (packed temporal values),
``sql/json_path.cc`` and ``sql/json_diff.cc``; go-mysql's ``replication/json_binary.go``,
rust_mysql_common's ``src/binlog/jsonb.rs`` and ``jsondiff.rs``.
"""

from __future__ import annotations

import base64
import enum
import json
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from binlake.errors import JsonDecodeError, UnsupportedJsonDiffError


class JsonDiffOperation(enum.IntEnum):
    """``enum_json_diff_operation`` (``sql/json_diff.h``); the byte that starts each diff."""

    REPLACE = 0
    INSERT = 1
    REMOVE = 2


# A path leg: a member name, or an array cell as (index, counted from the end).
Leg = str | tuple[int, bool]


@dataclass(frozen=True)
class JsonDiff:
    """One logical change to a JSON document: ``operation`` at ``path`` (MySQL's text form of
    the path, e.g. ``$.a[2]`` or ``$."a b"[last-1]``); ``value`` is the new value as binary JSON,
    None for a remove."""

    operation: JsonDiffOperation
    path: str
    value: bytes | None = None

    @cached_property
    def legs(self) -> tuple[Leg, ...]:
        """The path's legs after ``$``."""
        return _parse_path(self)


# Binary JSON type bytes (json_binary.h).
_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0x0, 0x1, 0x2, 0x3
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _DOUBLE, _STRING = range(0x4, 0xD)
_OPAQUE = 0xF

# MySQL field types an opaque value may wrap that do not print as base64 (field_types.h).
_MYSQL_TYPE_TIMESTAMP, _MYSQL_TYPE_DATE, _MYSQL_TYPE_TIME, _MYSQL_TYPE_DATETIME = 7, 10, 11, 12
_MYSQL_TYPE_NEWDECIMAL, _MYSQL_TYPE_VAR_STRING = 246, 253

_LITERALS = {0x0: "null", 0x1: "true", 0x2: "false"}
# Fixed-size scalars stored outside the value entries: (struct format, size).
_NUMBERS = {
    _INT16: ("<h", 2),
    _UINT16: ("<H", 2),
    _INT32: ("<i", 4),
    _UINT32: ("<I", 4),
    _INT64: ("<q", 8),
    _UINT64: ("<Q", 8),
}


@dataclass(frozen=True)
class _Layout:
    """The small (2-byte offsets) or large (4-byte offsets) storage of objects and arrays."""

    offset_size: int
    counts: str  # element count, then size in bytes
    key_entry: str  # key offset, key length
    value_entry: str  # type, then offset or the inlined value
    inlined: frozenset[int]


_SMALL = _Layout(2, "<HH", "<HH", "<BH", frozenset({_LITERAL, _INT16, _UINT16}))
_LARGE = _Layout(4, "<II", "<IH", "<BI", frozenset({_LITERAL, _INT16, _UINT16, _INT32, _UINT32}))


def json_text(value: bytes) -> str:
    """The text MySQL returns for a binary JSON value (the bytes of one JSON column's value in
    a row image, after its length prefix). An empty value is JSON ``null``, as MySQL reads it
    (see the module docstring)."""
    return _render(_read_document(value))


def parse_json_diffs(value: bytes) -> list[JsonDiff]:
    """The diff list of one JSON column in a PARTIAL_UPDATE_ROWS_EVENT after image (the bytes
    after the column's 4-byte length prefix; an empty list when it is empty)."""
    diffs = []
    pos, end = 0, len(value)
    while pos < end:
        start = pos
        op = value[pos]
        if op > JsonDiffOperation.REMOVE:
            raise JsonDecodeError(f"JSON diff operation {op} is none of 0 (replace), 1 (insert), 2 (remove)", pos)
        path, pos = _length_encoded(value, pos + 1, "JSON diff path")
        try:
            path_text = path.decode()
        except UnicodeDecodeError:
            raise JsonDecodeError("JSON diff path is not UTF-8", start + 1) from None
        new_value = None
        if op != JsonDiffOperation.REMOVE:
            new_value, pos = _length_encoded(value, pos, "JSON diff value")
        diff = JsonDiff(JsonDiffOperation(op), path_text, new_value)
        _ = diff.legs  # a path MySQL could not have written fails here, where its bytes are
        diffs.append(diff)
    return diffs


def apply_json_diffs(before: bytes | str, diffs: Sequence[JsonDiff]) -> str:
    """The after value's MySQL text: ``diffs`` applied in order to the before value, given as
    binary JSON (the before image's bytes) or as MySQL's text of it (:func:`json_text`'s
    result or the snapshot's SELECT: members in MySQL's order)."""
    doc = _parse_text(before) if isinstance(before, str) else _read_document(before)
    for diff in diffs:
        _apply(doc, diff)
    return _render(doc)


# Reading binary JSON into a document: a dict (its keys as they are) for an object, a list for
# an array, and for a scalar its MySQL text (a string quoted and escaped).


def _read_document(value: bytes) -> Any:
    if not value:
        return "null"
    if type(value) is not bytes:  # a memoryview or bytearray slice of an event
        value = bytes(value)
    return _read_value(value, value[0], 1, len(value))


def _read_value(buf: bytes, kind: int, pos: int, end: int) -> Any:
    """The value of type ``kind`` stored at ``pos``; ``end`` bounds the enclosing container."""
    if kind <= _LARGE_ARRAY:
        return _read_container(buf, kind, pos, end)
    if kind == _STRING:
        data, _ = _var_length_data(buf, pos, end, "string")
        return _quote(_utf8(data, pos, "string"))
    if kind == _OPAQUE:
        if pos >= end:
            raise JsonDecodeError("opaque value cut short", pos)
        data, _ = _var_length_data(buf, pos + 1, end, "opaque value")
        return _opaque(buf[pos], data, pos)
    if kind == _LITERAL:
        if pos >= end:
            raise JsonDecodeError("literal cut short", pos)
        return _literal(buf[pos], pos)
    if kind == _DOUBLE:
        if pos + 8 > end:
            raise JsonDecodeError("double cut short", pos)
        return _double_text(struct.unpack_from("<d", buf, pos)[0], pos)
    number = _NUMBERS.get(kind)
    if number is None:
        raise JsonDecodeError(f"value of unknown type {kind:#x}", pos)
    fmt, size = number
    if pos + size > end:
        raise JsonDecodeError("integer cut short", pos)
    return str(struct.unpack_from(fmt, buf, pos)[0])


def _read_container(buf: bytes, kind: int, start: int, end: int) -> Any:
    """An object or array whose header starts at ``start``: offsets count from there."""
    layout = _LARGE if kind in (_LARGE_OBJECT, _LARGE_ARRAY) else _SMALL
    is_object = kind in (_SMALL_OBJECT, _LARGE_OBJECT)
    entries_at = start + 2 * layout.offset_size
    if entries_at > end:
        raise JsonDecodeError("object or array header cut short", start)
    count, size = struct.unpack_from(layout.counts, buf, start)
    stop = start + size
    if stop > end:
        raise JsonDecodeError(f"object or array of {size} bytes has only {end - start}", start)
    values_at = entries_at + (count * (layout.offset_size + 2) if is_object else 0)
    header_end = values_at + count * (layout.offset_size + 1)
    if header_end > stop:
        raise JsonDecodeError(f"{count} entries do not fit in an object or array of {size} bytes", start)
    values = [
        _entry_value(buf, t, field, layout, start, header_end, stop)
        for t, field in struct.iter_unpack(layout.value_entry, buf[values_at:header_end])
    ]
    if not is_object:
        return values
    keys = []
    for key_offset, key_length in struct.iter_unpack(layout.key_entry, buf[entries_at:values_at]):
        at = start + key_offset
        if at < header_end or at + key_length > stop:
            raise JsonDecodeError(f"key offset {key_offset} (length {key_length}) outside its object", start)
        keys.append(_utf8(buf[at : at + key_length], at, "key"))
    return dict(zip(keys, values))


def _entry_value(buf: bytes, kind: int, field: int, layout: _Layout, start: int, header_end: int, stop: int) -> Any:
    """The value a value entry holds inline (small scalars) or points at."""
    if kind in layout.inlined:
        if kind == _LITERAL:
            return _literal(field & 0xFF, start)
        if kind == _INT16:
            return _signed16(field)
        if kind == _UINT16:
            return str(field & 0xFFFF)
        if kind == _INT32:
            return str(field - 0x1_0000_0000 if field & 0x8000_0000 else field)
        return str(field)  # _UINT32
    at = start + field
    if at < header_end or at >= stop:
        raise JsonDecodeError(f"value offset {field} outside its object or array", start)
    return _read_value(buf, kind, at, stop)


def _signed16(field: int) -> str:
    """An inlined int16: the entry's low two bytes (all of a small entry, half of a large one)."""
    low = field & 0xFFFF
    return str(low - 0x10000 if low & 0x8000 else low)


def _literal(byte: int, pos: int) -> str:
    text = _LITERALS.get(byte)
    if text is None:
        raise JsonDecodeError(f"unknown literal {byte:#x}", pos)
    return text


def _var_length_data(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes, int]:
    """Data after a variable-length size (7 bits a byte, low bits first, at most 5 bytes)."""
    length, shift, at = 0, 0, pos
    while True:
        if at >= end or at - pos == 5:
            raise JsonDecodeError(f"{what} length cut short", pos)
        byte = buf[at]
        length |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            break
        shift += 7
    if at + length > end:
        raise JsonDecodeError(f"{what} of {length} bytes has only {end - at}", pos)
    return buf[at : at + length], at + length


def _utf8(data: bytes, pos: int, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise JsonDecodeError(f"{what} is not UTF-8", pos) from None


# Scalars in MySQL's text form.


def _double_text(x: float, pos: int) -> str:
    """``my_gcvt(x, MY_GCVT_ARG_DOUBLE, MY_GCVT_MAX_FIELD_WIDTH)`` plus the ``.0`` that
    ``Json_wrapper::to_string`` adds when the result has neither ``.`` nor ``e``.

    dtoa's mode 4 with a field width of 33 or more gives the shortest digits that round-trip
    (Python's ``repr`` digits). my_gcvt writes them fixed-point when that fits the width and
    ``-14 <= decpt <= 15`` (``MAX_DECPT_FOR_F_FORMAT``), or the digits reach past the decimal
    point (``1234567890123456.8``); exponential otherwise, with no ``+`` and no padding."""
    if not math.isfinite(x):
        raise JsonDecodeError(f"double {x} is not a number MySQL stores in JSON", pos)
    digits, decpt = _shortest_digits(abs(x))
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    n = len(digits)
    if decpt >= -14 and (decpt <= 15 or n > decpt):
        if decpt <= 0:
            return f"{sign}0.{'0' * -decpt}{digits}"
        if decpt >= n:
            return f"{sign}{digits}{'0' * (decpt - n)}.0"
        return f"{sign}{digits[:decpt]}.{digits[decpt:]}"
    mantissa = digits[0] + ("." + digits[1:] if n > 1 else "")
    return f"{sign}{mantissa}e{decpt - 1}"


def _shortest_digits(x: float) -> tuple[str, int]:
    """The significant digits of ``repr(x)`` and dtoa's ``decpt``: x = 0.DIGITS * 10**decpt."""
    mantissa, _, exponent = repr(x).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    significant = digits.lstrip("0")
    decpt = len(whole) + int(exponent or 0) - (len(digits) - len(significant))
    significant = significant.rstrip("0")
    return (significant, decpt) if significant else ("0", 1)


def _opaque(field_type: int, data: bytes, pos: int) -> str:
    """A MySQL value wrapped in JSON, as ``wrapper_to_string`` prints it: temporal values in
    quotes, unescaped (they hold nothing to escape), the rest through ``double_quote``."""
    if field_type == _MYSQL_TYPE_NEWDECIMAL:
        return _decimal_text(data, pos)
    if field_type in (_MYSQL_TYPE_DATE, _MYSQL_TYPE_TIME, _MYSQL_TYPE_DATETIME, _MYSQL_TYPE_TIMESTAMP):
        if len(data) < 8:
            raise JsonDecodeError(f"temporal value of {len(data)} bytes, not 8", pos)
        packed = int.from_bytes(data[:8], "little", signed=True)
        if field_type == _MYSQL_TYPE_DATE:
            return f'"{_date_text(packed)}"'
        if field_type == _MYSQL_TYPE_TIME:
            return f'"{_time_text(packed)}"'
        return f'"{_datetime_text(packed)}"'
    if field_type == _MYSQL_TYPE_VAR_STRING:
        # wrapper_to_string prints these as the string they hold (see val_json_func_field_subselect)
        return _quote(_utf8(data, pos, "string in an opaque value"))
    return _quote(f"base64:type{field_type}:{_mysql_base64(data)}")


def _mysql_base64(data: bytes) -> str:
    """MySQL's ``base64_encode``: standard base64 with a newline before every 77th character."""
    encoded = base64.b64encode(data).decode("ascii")
    return "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal_text(data: bytes, pos: int) -> str:
    """``decimal2string`` of the ``bin2decimal`` of a JSON DECIMAL (precision and scale bytes,
    then MySQL's binary decimal: 9-digit groups in 4 big-endian bytes, a shorter group first
    and last, the first bit flipped, and every bit inverted when negative)."""
    if len(data) < 2:
        raise JsonDecodeError("decimal without precision and scale", pos)
    precision, scale = data[0], data[1]
    if scale > precision:
        raise JsonDecodeError(f"decimal scale {scale} above its precision {precision}", pos)
    intg = precision - scale
    groups = [(intg % 9, _DIG2BYTES[intg % 9])] if intg % 9 else []
    groups += [(9, 4)] * (intg // 9)
    int_groups = len(groups)
    groups += [(9, 4)] * (scale // 9)
    if scale % 9:
        groups.append((scale % 9, _DIG2BYTES[scale % 9]))
    size = sum(nbytes for _, nbytes in groups)
    raw = data[2 : 2 + size]
    if len(raw) < size:
        raise JsonDecodeError(f"decimal({precision},{scale}) needs {size} bytes, has {len(raw)}", pos)
    negative = not raw[0] & 0x80
    number = int.from_bytes(raw, "big") ^ (1 << (8 * size - 1))
    if negative:
        number ^= (1 << (8 * size)) - 1
    raw = number.to_bytes(size, "big")
    parts, at = [], 0
    for ndigits, nbytes in groups:
        group = int.from_bytes(raw[at : at + nbytes], "big")
        if group >= 10**ndigits:
            raise JsonDecodeError(f"decimal digit group {group} has more than {ndigits} digits", pos)
        parts.append(str(group).zfill(ndigits))
        at += nbytes
    integer = "".join(parts[:int_groups]).lstrip("0") or "0"
    fraction = "".join(parts[int_groups:])
    if not fraction and integer == "0":
        return "0"  # bin2decimal makes an integral zero a plain zero (decimal_make_zero)
    return ("-" if negative else "") + integer + ("." + fraction if fraction else "")


def _date_text(packed: int) -> str:
    """``TIME_from_longlong_date_packed`` then ``my_date_to_str``."""
    ymd = abs(packed) >> 24 >> 17
    ym = ymd >> 5
    return f"{ym // 13:04d}-{ym % 13:02d}-{ymd % 32:02d}"


def _datetime_text(packed: int) -> str:
    """``TIME_from_longlong_datetime_packed`` then ``my_datetime_to_str`` with 6 decimals."""
    value = abs(packed)
    ymdhms = value >> 24
    ymd, hms = ymdhms >> 17, ymdhms % (1 << 17)
    ym = ymd >> 5
    date = f"{ym // 13:04d}-{ym % 13:02d}-{ymd % 32:02d}"
    return f"{date} {hms >> 12:02d}:{(hms >> 6) % 64:02d}:{hms % 64:02d}.{value % (1 << 24):06d}"


def _time_text(packed: int) -> str:
    """``TIME_from_longlong_time_packed`` then ``my_time_to_str`` with 6 decimals: hours
    zero-padded to two digits, more when they need them."""
    sign = "-" if packed < 0 else ""
    value = abs(packed)
    hms = value >> 24
    return f"{sign}{(hms >> 12) % 1024:02d}:{(hms >> 6) % 64:02d}:{hms % 64:02d}.{value % (1 << 24):06d}"


# Rendering a document as MySQL's text.

_ESCAPES = {c: f"\\u{c:04x}" for c in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"})


def _quote(s: str) -> str:
    """``double_quote``: control characters up to 0x1f, ``"`` and ``\\`` escaped."""
    return '"' + s.translate(_ESCAPES) + '"'


def _render(node: Any) -> str:
    """``Json_wrapper::to_string``: ``", "`` between members and elements, ``": "`` after keys."""
    kind = type(node)
    if kind is str:
        return node
    if kind is dict:
        return "{" + ", ".join([_quote(key) + ": " + _render(value) for key, value in node.items()]) + "}"
    return "[" + ", ".join([_render(value) for value in node]) + "]"


class _Number(str):
    """A number token of JSON text, as written (a DECIMAL ``9.00`` stays ``9.00``)."""


_TEXT_LITERALS = {True: "true", False: "false", None: "null"}


def _parse_text(text: str) -> Any:
    """A document from MySQL's JSON text."""
    try:
        parsed = json.loads(text, parse_int=_Number, parse_float=_Number, parse_constant=_no_constant)
    except ValueError as exc:
        raise JsonDecodeError(f"before value is not JSON text ({exc})") from None
    return _document(parsed)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _document(parsed: Any) -> Any:
    """What json.loads gave, as a document of this module (scalars as their MySQL text)."""
    kind = type(parsed)
    if kind is dict:
        return {key: _document(value) for key, value in parsed.items()}
    if kind is list:
        return [_document(value) for value in parsed]
    if kind is _Number:
        return str(parsed)
    if kind is str:
        return _quote(parsed)
    return _TEXT_LITERALS[parsed]


# Partial updates.


def _length_encoded(buf: bytes, pos: int, what: str) -> tuple[bytes, int]:
    """Data after a length-encoded integer (``net_field_length``)."""
    if pos >= len(buf):
        raise JsonDecodeError(f"{what} length missing", pos)
    first = buf[pos]
    if first < 251:
        length, at = first, pos + 1
    elif first in (252, 253, 254):
        nbytes = {252: 2, 253: 3, 254: 8}[first]
        if pos + 1 + nbytes > len(buf):
            raise JsonDecodeError(f"{what} length cut short", pos)
        length, at = int.from_bytes(buf[pos + 1 : pos + 1 + nbytes], "little"), pos + 1 + nbytes
    else:
        raise JsonDecodeError(f"{what} length starts with {first:#x}", pos)
    if at + length > len(buf):
        raise JsonDecodeError(f"{what} of {length} bytes has only {len(buf) - at}", pos)
    return buf[at : at + length], at + length


_WHITESPACE = " \t\n\v\f\r"  # my_isspace in utf8mb4_bin
_QUOTED_NAME = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NAME_END = re.compile(r"[ \t\n\v\f\r.\[*]")
_DIGITS = re.compile(r"[0-9]+")


def _parse_path(diff: JsonDiff) -> tuple[Leg, ...]:
    """The legs of a diff's path, read as ``parse_path`` (``sql/json_path.cc``) reads it: ``$``,
    then ``.name``, ``."quoted name"`` and ``[N]``, ``[last]``, ``[last-N]`` legs, whitespace
    allowed between tokens. Wildcards, ranges and ``**`` parse in MySQL but a diff never holds
    them and MySQL's replica rejects them."""
    path = diff.path
    i = _skip_space(path, 0)
    if not path.startswith("$", i):
        raise JsonDecodeError(f"JSON diff path {path!r} does not start with $")
    legs: list[Leg] = []
    i = _skip_space(path, i + 1)
    while i < len(path):
        if path[i] == "[":
            leg, i = _parse_cell(diff, i + 1)
        elif path[i] == ".":
            leg, i = _parse_member(diff, i + 1)
        elif path[i] == "*":
            raise UnsupportedJsonDiffError(diff.operation.name, diff.path, "its path has a ** wildcard")
        else:
            raise JsonDecodeError(f"JSON diff path {path!r} has {path[i]!r} where a leg should start")
        legs.append(leg)
        i = _skip_space(path, i)
    return tuple(legs)


def _skip_space(path: str, i: int) -> int:
    while i < len(path) and path[i] in _WHITESPACE:
        i += 1
    return i


def _parse_cell(diff: JsonDiff, i: int) -> tuple[Leg, int]:
    """``[N]``, ``[last]`` or ``[last-N]`` from after the ``[``."""
    path = diff.path
    i = _skip_space(path, i)
    if path.startswith("*", i):
        raise UnsupportedJsonDiffError(diff.operation.name, diff.path, "its path has a [*] wildcard")
    from_end = path.startswith("last", i)
    index = 0
    if from_end:
        i = _skip_space(path, i + 4)
        if path.startswith("-", i):
            i = _skip_space(path, i + 1)
            from_end_digits = _DIGITS.match(path, i)
            if from_end_digits is None:
                raise JsonDecodeError(f"JSON diff path {path!r} has no number after last-")
            index, i = int(from_end_digits.group()), from_end_digits.end()
    else:
        digits = _DIGITS.match(path, i)
        if digits is None:
            raise JsonDecodeError(f"JSON diff path {path!r} has no array index at {i}")
        index, i = int(digits.group()), digits.end()
    if index > 0xFFFF_FFFF:
        raise JsonDecodeError(f"JSON diff path {path!r} has an array index beyond 2^32")
    i = _skip_space(path, i)
    if path.startswith("to", i) and path[i - 1] in _WHITESPACE:
        raise UnsupportedJsonDiffError(diff.operation.name, diff.path, "its path has an array range")
    if not path.startswith("]", i):
        raise JsonDecodeError(f"JSON diff path {path!r} has an unclosed [")
    return (index, from_end), i + 1


def _parse_member(diff: JsonDiff, i: int) -> tuple[Leg, int]:
    """``name`` or ``"quoted name"`` from after the ``.``; MySQL unescapes both as JSON."""
    path = diff.path
    i = _skip_space(path, i)
    if path.startswith("*", i):
        raise UnsupportedJsonDiffError(diff.operation.name, diff.path, "its path has a .* wildcard")
    quoted = _QUOTED_NAME.match(path, i)
    if quoted is not None:
        token, end = quoted.group(), quoted.end()
    else:
        stop = _NAME_END.search(path, i)
        end = stop.start() if stop else len(path)
        token = '"' + path[i:end] + '"'
    try:
        name = json.loads(token)
    except ValueError:
        name = None
    if not isinstance(name, str) or (token == '""' and quoted is None):
        raise JsonDecodeError(f"JSON diff path {path!r} has a bad member name at {i}")
    return name, end


def _apply(doc: Any, diff: JsonDiff) -> None:
    """One diff, applied in place with the checks of MySQL's ``apply_json_diffs``."""
    legs = diff.legs
    if not legs:
        raise UnsupportedJsonDiffError(diff.operation.name, diff.path, "it addresses the whole document")
    parent = _seek(doc, legs[:-1])
    if parent is None:
        raise UnsupportedJsonDiffError(
            diff.operation.name, diff.path, "its parent path is not an object or array in the before value"
        )
    leg = legs[-1]
    op = diff.operation
    if op == JsonDiffOperation.REMOVE:
        slot = _existing_slot(parent, leg)
        if slot is None:
            raise UnsupportedJsonDiffError(
                diff.operation.name, diff.path, "the path to remove is not in the before value"
            )
        del parent[slot]
        return
    if diff.value is None or not diff.value:
        raise JsonDecodeError(f"JSON diff {op.name} {diff.path} has no value")
    value = _read_document(diff.value)
    if op == JsonDiffOperation.REPLACE:
        slot = _existing_slot(parent, leg)
        if slot is None:
            raise UnsupportedJsonDiffError(
                diff.operation.name, diff.path, "the path to replace is not in the before value"
            )
        parent[slot] = value
    elif type(parent) is dict and isinstance(leg, str):
        if leg in parent:
            raise UnsupportedJsonDiffError(
                diff.operation.name, diff.path, "the member to insert is already in the before value"
            )
        parent[leg] = value
        _sort_members(parent)
    elif type(parent) is list and not isinstance(leg, str):
        parent.insert(_array_position(leg, len(parent))[0], value)
    else:
        raise UnsupportedJsonDiffError(
            diff.operation.name, diff.path, "its parent is not the object or array its last leg needs"
        )


def _seek(doc: Any, legs: Sequence[Leg]) -> Any:
    """The container at ``legs`` (``seek_exact_path``: no auto-wrapping), or None."""
    node = doc
    for leg in legs:
        slot = _existing_slot(node, leg)
        if slot is None:
            return None
        node = node[slot]
    return node if type(node) in (dict, list) else None


def _existing_slot(node: Any, leg: Leg) -> Any:
    """The key or list index ``leg`` names in ``node`` if it is there, else None."""
    if type(node) is dict and isinstance(leg, str):
        return leg if leg in node else None
    if type(node) is list and not isinstance(leg, str):
        position, within = _array_position(leg, len(node))
        return position if within else None
    return None


def _array_position(leg: tuple[int, bool], length: int) -> tuple[int, bool]:
    """``Json_array_index``: the position ``[N]`` / ``[last-N]`` names in an array of
    ``length`` (clamped to 0 or the length), and whether it is inside the array."""
    index, from_end = leg
    if from_end:
        return (length - index - 1 if index < length else 0), index < length
    return min(index, length), index < length


def _sort_members(obj: dict[str, Any]) -> None:
    """MySQL's member order (``Json_key_comparator``): key length in bytes, then the bytes."""
    members = sorted(obj.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
    obj.clear()
    obj.update(members)
