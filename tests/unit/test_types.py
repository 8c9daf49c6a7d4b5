"""The type mapping of docs/architecture.md ("Types") and the canonical text encoding.

The encoding is a contract: the snapshot (pymysql values) and the binlog (python-mysql-
replication values) encode one source value to one text, and the text decodes back to the
value. ``decode`` below is that contract written out from the module docstring of
binlake.contract.types, independently of the encoder.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binlake.contract.types import (
    Column,
    Kind,
    TableSchema,
    column_from_information_schema,
    encode_value,
    format_time,
    parse_labels,
    spark_decode_sql,
)
from binlake.errors import UnsupportedTypeError

settings.register_profile("binlake", max_examples=200, deadline=None)
settings.load_profile("binlake")


# ---------------------------------------------------------------------------------------
# docs/architecture.md, "Types", row by row

MAPPING = [
    # data_type, column_type, precision, scale, expected Spark type
    ("tinyint", "tinyint(4)", None, None, "TINYINT"),
    ("smallint", "smallint(6)", None, None, "SMALLINT"),
    ("mediumint", "mediumint(9)", None, None, "INT"),
    ("int", "int(11)", None, None, "INT"),
    ("bigint", "bigint(20)", None, None, "BIGINT"),
    ("tinyint", "tinyint(3) unsigned", None, None, "SMALLINT"),
    ("smallint", "smallint(5) unsigned", None, None, "INT"),
    ("mediumint", "mediumint(8) unsigned", None, None, "INT"),
    ("int", "int(10) unsigned", None, None, "BIGINT"),
    ("bigint", "bigint(20) unsigned", None, None, "DECIMAL(20,0)"),
    ("bigint", "bigint(20) unsigned zerofill", None, None, "DECIMAL(20,0)"),
    ("decimal", "decimal(10,2)", 10, 2, "DECIMAL(10,2)"),
    ("decimal", "decimal(38,10)", 38, 10, "DECIMAL(38,10)"),
    ("decimal", "decimal(65,30)", 65, 30, "STRING"),
    ("float", "float", None, None, "FLOAT"),
    ("double", "double", None, None, "DOUBLE"),
    ("date", "date", None, None, "DATE"),
    ("datetime", "datetime(6)", None, None, "TIMESTAMP_NTZ"),
    ("timestamp", "timestamp(3)", None, None, "TIMESTAMP"),
    ("time", "time(6)", None, None, "STRING"),
    ("year", "year(4)", None, None, "SMALLINT"),
    ("char", "char(3)", None, None, "STRING"),
    ("varchar", "varchar(255)", None, None, "STRING"),
    ("longtext", "longtext", None, None, "STRING"),
    ("enum", "enum('a','b')", None, None, "STRING"),
    ("set", "set('x','y')", None, None, "STRING"),
    ("json", "json", None, None, "STRING"),
    ("binary", "binary(16)", None, None, "BINARY"),
    ("varbinary", "varbinary(10)", None, None, "BINARY"),
    ("blob", "blob", None, None, "BINARY"),
    ("geometry", "geometry", None, None, "BINARY"),
    ("vector", "vector(3)", None, None, "BINARY"),  # MySQL 9: float32s, little-endian, as stored
    ("point", "point", None, None, "BINARY"),
    ("bit", "bit(1)", 1, None, "BIGINT"),
    ("bit", "bit(64)", 64, None, "BIGINT"),
]


@pytest.mark.parametrize(
    ("data_type", "column_type", "precision", "scale", "spark_type"), MAPPING, ids=[m[1] for m in MAPPING]
)
def test_every_mysql_type_maps_to_the_documented_spark_type(data_type, column_type, precision, scale, spark_type):
    col = column_from_information_schema("c", data_type, column_type, precision, scale, 0)
    assert col.spark_type == spark_type


@pytest.mark.parametrize("data_type", ["uuid", "inet6", "inet4", "xml"])
def test_an_unmapped_type_raises_with_the_fix(data_type):
    with pytest.raises(UnsupportedTypeError) as info:
        column_from_information_schema("c", data_type, data_type)
    assert str(info.value) == (
        f"column 'c' has type '{data_type}', which binlake does not map: exclude the table or cast the column in a view"
    )


def test_enum_and_set_labels_keep_definition_order_and_quotes():
    assert parse_labels("enum('b','a','it''s','x,y')") == ("b", "a", "it's", "x,y")
    col = column_from_information_schema("s", "set", "set('small','medium','large')")
    assert col.labels == ("small", "medium", "large")


def test_the_schema_version_is_the_same_whatever_mysql_spelling_gives_the_same_spark_type():
    a = TableSchema("d", "t", (column_from_information_schema("id", "int", "int(11)"),), ("id",))
    b = TableSchema("d", "t", (column_from_information_schema("id", "int", "int"),), ("id",))
    c = TableSchema("d", "t", (column_from_information_schema("id", "bigint", "bigint"),), ("id",))
    assert a.version() == b.version() != c.version()
    assert TableSchema.from_json(a.to_json()) == a


# ---------------------------------------------------------------------------------------
# The canonical text, decoded back in Python (the contract silver implements in Spark)

_TIME = re.compile(r"^(-?)(\d{2,3}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def decode(col: Column, text: str | None):
    if text is None:
        return None
    k = col.kind
    if k in (Kind.INT, Kind.UINT, Kind.YEAR, Kind.BIT):
        assert re.fullmatch(r"-?\d+", text), text
        return int(text)
    if k is Kind.DECIMAL:
        assert re.fullmatch(r"-?\d+(\.\d+)?", text), f"not fixed-point: {text}"
        return decimal.Decimal(text)
    if k is Kind.FLOAT:
        return struct.unpack("<f", struct.pack("<f", float(text)))[0]
    if k is Kind.DOUBLE:
        return float(text)
    if k is Kind.DATE:
        return None if text.startswith("0000") else dt.date.fromisoformat(text)
    if k is Kind.DATETIME:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}", text), text
        return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")
    if k is Kind.TIMESTAMP:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", text), text
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    if k is Kind.TIME:
        m = _TIME.match(text)
        assert m, text
        sign, h, mi, s, frac = m.groups()
        td = dt.timedelta(hours=int(h), minutes=int(mi), seconds=int(s), microseconds=int((frac or "0").ljust(6, "0")))
        return -td if sign else td
    if k is Kind.BINARY:
        return base64.b64decode(text)
    return text


def col(kind: Kind, **kw) -> Column:
    return Column(name="c", kind=kind, **kw)


INT_RANGES = {
    (Kind.INT, 8): (-(2**7), 2**7 - 1),
    (Kind.INT, 16): (-(2**15), 2**15 - 1),
    (Kind.INT, 24): (-(2**23), 2**23 - 1),
    (Kind.INT, 32): (-(2**31), 2**31 - 1),
    (Kind.INT, 64): (-(2**63), 2**63 - 1),
    (Kind.UINT, 8): (0, 2**8 - 1),
    (Kind.UINT, 16): (0, 2**16 - 1),
    (Kind.UINT, 24): (0, 2**24 - 1),
    (Kind.UINT, 32): (0, 2**32 - 1),
    (Kind.UINT, 64): (0, 2**64 - 1),
}
SPARK_RANGES = {"TINYINT": 2**7, "SMALLINT": 2**15, "INT": 2**31, "BIGINT": 2**63, "DECIMAL(20,0)": 10**20}


@pytest.mark.parametrize(("kind", "bits"), sorted(INT_RANGES, key=lambda kb: (kb[0].value, kb[1])))
@given(data=st.data())
def test_integers_round_trip_and_fit_their_spark_type(kind, bits, data):
    lo, hi = INT_RANGES[(kind, bits)]
    value = data.draw(st.integers(lo, hi) | st.sampled_from([lo, hi]))
    c = col(kind, bits=bits)
    assert decode(c, encode_value(c, value)) == value
    limit = SPARK_RANGES[c.spark_type]
    assert -limit <= value < limit


@given(st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-(10**30), max_value=10**30))
def test_decimals_round_trip_exactly_with_their_scale(value):
    c = col(Kind.DECIMAL, precision=35, scale=4)
    text = encode_value(c, value)
    assert decode(c, text) == value
    assert "E" not in text.upper()


def test_decimal_text_keeps_trailing_zeros_and_never_uses_exponent_form():
    c = col(Kind.DECIMAL, precision=10, scale=2)
    assert encode_value(c, decimal.Decimal("1.50")) == "1.50"
    assert encode_value(c, decimal.Decimal("1E+3")) == "1000"
    assert encode_value(col(Kind.DECIMAL, precision=65, scale=30), decimal.Decimal("1E-30")) == "0." + "0" * 29 + "1"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_doubles_round_trip_bit_for_bit(value):
    c = col(Kind.DOUBLE)
    assert decode(c, encode_value(c, value)) == value


@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_floats_round_trip_as_float32(value):
    c = col(Kind.FLOAT)
    assert decode(c, encode_value(c, value)) == value


def test_a_float_read_as_a_double_encodes_like_the_float32_from_the_binlog():
    # pymysql hands FLOAT columns over as Python floats parsed from text ("0.1"); the
    # binlog carries the float32 bits. Both must give one text.
    c = col(Kind.FLOAT)
    binlog_value = struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert encode_value(c, 0.1) == encode_value(c, binlog_value)


@given(st.dates())
def test_dates_round_trip(value):
    c = col(Kind.DATE)
    assert decode(c, encode_value(c, value)) == value


@given(st.datetimes())
def test_datetimes_round_trip_as_wall_clock(value):
    c = col(Kind.DATETIME, fsp=6)
    assert decode(c, encode_value(c, value)) == value


@given(
    st.datetimes(
        min_value=dt.datetime(1970, 1, 2),
        max_value=dt.datetime(2038, 1, 18),
        timezones=st.sampled_from(
            [dt.timezone.utc, dt.timezone(dt.timedelta(hours=2)), dt.timezone(dt.timedelta(hours=-7, minutes=-30))]
        ),
    )
)
def test_timestamps_round_trip_as_the_same_instant(value):
    c = col(Kind.TIMESTAMP, fsp=6)
    decoded = decode(c, encode_value(c, value))
    assert decoded == value
    # Naive values are the UTC wall clock (snapshot sessions pin time_zone +00:00).
    assert encode_value(c, value.astimezone(dt.timezone.utc).replace(tzinfo=None)) == encode_value(c, value)


@given(st.integers(-(838 * 3600 + 59 * 60 + 59), 838 * 3600 + 59 * 60 + 59), st.integers(0, 999_999))
def test_times_round_trip_up_to_the_mysql_range(seconds, micros):
    value = dt.timedelta(seconds=seconds, microseconds=micros if seconds >= 0 else -micros)
    c = col(Kind.TIME, fsp=6)
    assert decode(c, encode_value(c, value)) == value


def test_time_text_is_signed_hours_minutes_seconds_with_fsp_digits():
    assert format_time(dt.timedelta(hours=-838, minutes=-59, seconds=-59), 0) == "-838:59:59"
    assert format_time(dt.timedelta(seconds=1, microseconds=500_000), 3) == "00:00:01.500"
    assert format_time(dt.time(12, 30, 5), 0) == "12:30:05"
    assert format_time(dt.timedelta(microseconds=-1), 6) == "-00:00:00.000001"


@given(st.binary(max_size=64))
def test_bytes_round_trip_through_base64(value):
    c = col(Kind.BINARY)
    assert decode(c, encode_value(c, value)) == value


@given(st.text(max_size=40))
def test_strings_are_kept_as_they_are(value):
    c = col(Kind.STRING)
    assert encode_value(c, value) == value
    assert encode_value(c, value.encode("utf-8")) == value


# ---------------------------------------------------------------------------------------
# One source value -> one text, from the snapshot and from the binlog


@pytest.mark.parametrize(
    ("column", "snapshot_value", "binlog_value", "text"),
    [
        (col(Kind.BIT, bits=3), b"\x05", "101", "5"),
        (col(Kind.BIT, bits=64), b"\xff" * 8, "1" * 64, "-1"),
        (col(Kind.SET, labels=("small", "medium", "large")), "small,large", {"large", "small"}, "small,large"),
        (col(Kind.SET, labels=("a", "b")), "", set(), ""),
        (col(Kind.ENUM, labels=("x", "y")), "y", "y", "y"),
        (col(Kind.DATE), "0000-00-00", None, "0000-00-00"),
        (
            col(Kind.DATETIME, fsp=0),
            dt.datetime(2026, 1, 2, 3, 4, 5),
            dt.datetime(2026, 1, 2, 3, 4, 5),
            "2026-01-02 03:04:05.000000",
        ),
        (
            col(Kind.TIMESTAMP),
            dt.datetime(2026, 1, 2, 3, 4, 5),
            dt.datetime(2026, 1, 2, 5, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "2026-01-02T03:04:05.000000Z",
        ),
        (col(Kind.TIME, fsp=0), dt.timedelta(hours=-1), dt.timedelta(hours=-1), "-01:00:00"),
        (col(Kind.UINT, bits=64), 18446744073709551615, 18446744073709551615, "18446744073709551615"),
        (col(Kind.YEAR), 2026, 2026, "2026"),
        (col(Kind.JSON), '{"a": [1, "é"]}', {b"a": [1, b"\xc3\xa9"]}, '{"a": [1, "é"]}'),
        (col(Kind.STRING), "naïve", b"na\xc3\xafve", "naïve"),
    ],
    ids=[
        "bit3",
        "bit64",
        "set",
        "set-empty",
        "enum",
        "zero-date",
        "datetime",
        "timestamp",
        "time",
        "ubigint",
        "year",
        "json",
        "string",
    ],
)
def test_snapshot_and_binlog_values_encode_to_one_text(column, snapshot_value, binlog_value, text):
    if column.kind is Kind.DATE and binlog_value is None:
        binlog_value = "0000-00-00"  # a zero date never arrives as SQL NULL from a NOT NULL column
    assert encode_value(column, snapshot_value) == text
    assert encode_value(column, binlog_value) == text


# ---------------------------------------------------------------------------------------
# The Spark decode expressions (their results are checked in the Spark tests)


@pytest.mark.parametrize(
    ("column", "sql"),
    [
        (col(Kind.INT, bits=32), "CAST(x AS INT)"),
        (col(Kind.UINT, bits=64), "CAST(x AS DECIMAL(20,0))"),
        (col(Kind.DECIMAL, precision=65, scale=30), "x"),
        (col(Kind.BINARY), "unbase64(x)"),
        (col(Kind.TIME, fsp=3), "x"),
        (col(Kind.DATETIME), "CASE WHEN x LIKE '0000-%' THEN NULL ELSE CAST(x AS TIMESTAMP_NTZ) END"),
    ],
)
def test_spark_decode_casts_the_text_to_the_mapped_type(column, sql):
    assert spark_decode_sql(column, "x") == sql


def test_zero_dates_decode_to_null_in_spark_sql():
    sql = spark_decode_sql(col(Kind.DATE), "x")
    assert sql.startswith("CASE WHEN x LIKE '0000-%'")
    assert "THEN NULL" in sql
