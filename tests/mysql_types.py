"""Every type of docs/architecture.md, "Types", as a MySQL column, with sample SQL literals per column.

``TYPES`` lists (column name, definition, literals). ``literals[0]`` is the column's edge
value (extremes, zero dates, negative TIME, 4-byte UTF-8), ``literals[1]`` an odd one (zero,
empty, sub-second rounding), the rest ordinary values. Zero dates need ``sql_mode = ''``;
the TIMESTAMP literals are written for a session in ``time_zone = '+05:30'``.

``COLUMNS``, ``EDGE_ROW``, ``NULL_ROW`` and ``ODD_ROW`` build the ``types`` table used by
tests/integration/test_capture_types.py; tests/spark/test_randomized_end_to_end.py mixes the
literals at random. ``FULL_TYPES`` and its two rows are Flink CDC's every-type table, for
tests/integration/test_verify.py.
"""

from __future__ import annotations

TYPES: list[tuple[str, str, list[str]]] = [
    ("ti", "TINYINT", ["-128", "0", "7"]),
    ("si", "SMALLINT", ["-32768", "0", "1234"]),
    ("mi", "MEDIUMINT", ["-8388608", "0", "-77"]),
    ("i", "INT", ["-2147483648", "0", "2147483647"]),
    ("bi", "BIGINT", ["-9223372036854775808", "0", "9223372036854775807"]),
    ("tiu", "TINYINT UNSIGNED", ["255", "0", "128"]),
    ("siu", "SMALLINT UNSIGNED", ["65535", "0", "32768"]),
    ("miu", "MEDIUMINT UNSIGNED", ["16777215", "0", "8388608"]),
    ("iu", "INT UNSIGNED", ["4294967295", "0", "2147483648"]),
    ("biu", "BIGINT UNSIGNED", ["18446744073709551615", "0", "9223372036854775808"]),
    ("d", "DECIMAL(10,2)", ["-99999999.99", "0.00", "12.50"]),
    ("d38", "DECIMAL(38,10)", ["1234567890123456789012345678.0123456789", "0", "-0.0000000001"]),
    (
        "d65",
        "DECIMAL(65,30)",
        [
            "-12345678901234567890123456789012345.123456789012345678901234567890",
            "0.000000000000000000000000000001",
            "1",
        ],
    ),
    ("f", "FLOAT", ["3.14159", "0.48237514495849609375", "-1.5e-7"]),
    ("db", "DOUBLE", ["2.718281828459045", "1e308", "-0.1"]),
    ("dt", "DATE", ["'0000-00-00'", "'2020-00-15'", "'2024-02-29'"]),
    ("dtm", "DATETIME", ["'0000-00-00 00:00:00'", "'1000-01-01 00:00:00'", "'2025-12-31 23:59:59'"]),
    (
        "dtm6",
        "DATETIME(6)",
        ["'2024-02-29 23:59:59.999999'", "'9999-12-31 23:59:59.000001'", "'2001-01-01 00:00:00.5'"],
    ),
    (
        "ts3",
        "TIMESTAMP(3) NULL",
        ["'2024-03-31 01:30:00.123'", "'2038-01-19 03:14:07.999'", "'2024-10-27 02:30:00.001'"],
    ),
    ("ts0", "TIMESTAMP NULL", ["'0000-00-00 00:00:00'", "'1970-01-01 05:30:01'", "'2000-06-15 12:00:00'"]),
    ("tm", "TIME", ["'-838:59:59'", "'838:59:59'", "'12:00:00'"]),
    ("tm6", "TIME(6)", ["'-12:34:56.000001'", "'-00:00:01.25'", "'100:00:00.999999'"]),
    ("y", "YEAR", ["2155", "0", "1901"]),
    ("c", "CHAR(5)", ["'ab'", "''", "'abcde'"]),
    ("vc", "VARCHAR(100)", ["'emoji \U0001f600 \u00fc \u4e2d'", "''", "'trailing space '"]),
    ("tx", "TEXT", ["'text\\nline'", "''", "'tab\\there, quote '' and backslash \\\\'"]),
    ("e", "ENUM('a','b c','it''s')", ["'it''s'", "''", "'b c'"]),
    ("st", "SET('x','y','z')", ["'z,x'", "''", "'y'"]),
    ("j", "JSON", ['\'{"a": [1, 2.5, "x"], "b": null}\'', "'\"str\"'", "'[]'"]),
    ("bn", "BINARY(4)", ["x'00ff0001'", "x'00000000'", "'ab'"]),
    ("vb", "VARBINARY(10)", ["x''", "x'ff'", "x'0a0d00'"]),
    ("bl", "BLOB", ["x'deadbeef'", "x''", "x'00'"]),
    (
        "g",
        "GEOMETRY",
        [
            "ST_GeomFromText('POINT(1 2)')",
            "ST_GeomFromText('LINESTRING(0 0, 1 1)')",
            "ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))')",
        ],
    ),
    ("b1", "BIT(1)", ["b'1'", "b'0'", "b'1'"]),
    (
        "b64",
        "BIT(64)",
        [
            "b'1111111111111111111111111111111111111111111111111111111111111111'",
            "b'0'",
            "b'1000000000000000000000000000000000000000000000000000000000000001'",
        ],
    ),
]

COLUMNS = "id INT PRIMARY KEY, " + ", ".join(f"{name} {definition}" for name, definition, _ in TYPES)


def row(key: int, literals: list[str]) -> str:
    """``(key, literal, ...)``: one VALUES tuple in ``TYPES`` column order."""
    return f"({key}, " + ", ".join(literals) + ")"


EDGE_ROW = row(1, [lits[0] for _, _, lits in TYPES])
NULL_ROW = row(2, ["NULL"] * len(TYPES))
ODD_ROW = row(3, [lits[1] for _, _, lits in TYPES])


# ---------------------------------------------------------------------------------------
# Flink CDC's every-type table: `full_types` of apache/flink-cdc's MySQL connector test
# resources (flink-connector-mysql-cdc/src/test/resources/ddl/column_type_test.sql, Apache
# License 2.0), its CREATE TABLE and its row as they are there, but for one value: MariaDB
# 10.11's ST_GeomFromText reads no parenthesized points in a MULTIPOINT (it returns NULL for
# 'MULTIPOINT((1 1),(2 2))', without a warning), so that one is written 'MULTIPOINT(1 1, 2 2)'.
# FULL_TYPES_ROW_2 is ours: another value in every column (ZEROFILL numbers narrower than
# their display width, a zero FLOAT, all 64 bits set, NULL in VARCHAR(0)).

FULL_TYPES = """CREATE TABLE full_types
(
    id                   SERIAL,
    tiny_c               TINYINT,
    tiny_un_c            TINYINT UNSIGNED,
    tiny_un_z_c          TINYINT UNSIGNED ZEROFILL,
    small_c              SMALLINT,
    small_un_c           SMALLINT UNSIGNED,
    small_un_z_c         SMALLINT UNSIGNED ZEROFILL,
    medium_c             MEDIUMINT,
    medium_un_c          MEDIUMINT UNSIGNED,
    medium_un_z_c        MEDIUMINT UNSIGNED ZEROFILL,
    int_c                INTEGER,
    int_un_c             INTEGER UNSIGNED,
    int_un_z_c           INTEGER UNSIGNED ZEROFILL,
    int11_c              INT(11),
    big_c                BIGINT,
    big_un_c             BIGINT UNSIGNED,
    big_un_z_c           BIGINT UNSIGNED ZEROFILL,
    varchar_c            VARCHAR(255),
    char_c               CHAR(3),
    real_c               REAL,
    float_c              FLOAT,
    float_un_c           FLOAT UNSIGNED,
    float_un_z_c         FLOAT UNSIGNED ZEROFILL,
    double_c             DOUBLE,
    double_un_c          DOUBLE UNSIGNED,
    double_un_z_c        DOUBLE UNSIGNED ZEROFILL,
    decimal_c            DECIMAL(8, 4),
    decimal_un_c         DECIMAL(8, 4) UNSIGNED,
    decimal_un_z_c       DECIMAL(8, 4) UNSIGNED ZEROFILL,
    numeric_c            NUMERIC(6, 0),
    big_decimal_c        DECIMAL(65, 1),
    bit1_c               BIT,
    tiny1_c              TINYINT(1),
    boolean_c            BOOLEAN,
    date_c               DATE,
    time_c               TIME(0),
    datetime3_c          DATETIME(3),
    datetime6_c          DATETIME(6),
    timestamp_c          TIMESTAMP,
    file_uuid            BINARY(16),
    bit_c                BIT(64),
    text_c               TEXT,
    tiny_blob_c          TINYBLOB,
    blob_c               BLOB,
    medium_blob_c        MEDIUMBLOB,
    long_blob_c          LONGBLOB,
    year_c YEAR,
    enum_c               enum('red', 'white') default 'red',
    set_c SET('a', 'b'),
    json_c               JSON,
    point_c              POINT,
    geometry_c           GEOMETRY,
    linestring_c         LINESTRING,
    polygon_c            POLYGON,
    multipoint_c         MULTIPOINT,
    multiline_c          MULTILINESTRING,
    multipolygon_c       MULTIPOLYGON,
    geometrycollection_c GEOMETRYCOLLECTION,
    varchar_len0_c        VARCHAR(0),
    PRIMARY KEY (id)
) DEFAULT CHARSET=utf8"""

FULL_TYPES_ROW_1 = """INSERT INTO full_types
VALUES (DEFAULT, 127, 255, 255, 32767, 65535, 65535, 8388607, 16777215, 16777215, 2147483647,
        4294967295, 4294967295, 2147483647, 9223372036854775807,
        18446744073709551615, 18446744073709551615,
        'Hello World', 'abc', 123.102, 123.102, 123.103, 123.104, 404.4443, 404.4444, 404.4445,
        123.4567, 123.4568, 123.4569, 345.6, 34567892.1, 0, 1, true,
        '2020-07-17', '18:00:22', '2020-07-17 18:00:22.123', '2020-07-17 18:00:22.123456',
        '2020-07-17 18:00:22',
        unhex(replace('651aed08-390f-4893-b2f1-36923e7b7400', '-', '')),
        b'0000010000000100000001000000010000000100000001000000010000000100',
        'text', UNHEX(HEX(16)), UNHEX(HEX(16)), UNHEX(HEX(16)), UNHEX(HEX(16)), 2021,
        'red', 'a,b,a', '{
    "key1": "value1"
  }',
        ST_GeomFromText('POINT(1 1)'),
        ST_GeomFromText('POLYGON((1 1, 2 1, 2 2,  1 2, 1 1))'),
        ST_GeomFromText('LINESTRING(3 0, 3 3, 3 5)'),
        ST_GeomFromText('POLYGON((1 1, 2 1, 2 2,  1 2, 1 1))'),
        ST_GeomFromText('MULTIPOINT(1 1, 2 2)'),
        ST_GeomFromText('MultiLineString((1 1,2 2,3 3),(4 4,5 5))'),
        ST_GeomFromText('MULTIPOLYGON(((0 0, 10 0, 10 10, 0 10, 0 0)), ((5 5, 7 5, 7 7, 5 7, 5 5)))'),
        ST_GeomFromText('GEOMETRYCOLLECTION(POINT(10 10), POINT(30 30), LINESTRING(15 15, 20 20))'),
        '')"""

FULL_TYPES_ROW_2 = """INSERT INTO full_types
VALUES (DEFAULT, -128, 0, 7, -32768, 0, 42, -8388608, 0, 123, -2147483648,
        0, 5, -1, -9223372036854775808,
        0, 9,
        'Hello, second row', 'xy', -0.5, 1.5, 0, 2.5, -1e-300, 1e300, 3.5,
        -1.5, 0.0001, 1.5, -12, -1234567.8, 1, 0, false,
        '1999-12-31', '-838:59:59', '1999-12-31 23:59:59.999', '1999-12-31 23:59:59.000001',
        '1999-12-31 23:59:59',
        unhex('00000000000000000000000000000001'),
        b'1111111111111111111111111111111111111111111111111111111111111111',
        'text, second', x'', x'00', x'ff', x'0102', 1901,
        'white', 'b', '[1, 2]',
        ST_GeomFromText('POINT(0 0)'),
        ST_GeomFromText('POINT(1 2)'),
        ST_GeomFromText('LINESTRING(0 0, 1 1)'),
        ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))'),
        ST_GeomFromText('MULTIPOINT(0 0)'),
        ST_GeomFromText('MultiLineString((0 0, 1 1))'),
        ST_GeomFromText('MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)))'),
        ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1))'),
        NULL)"""
