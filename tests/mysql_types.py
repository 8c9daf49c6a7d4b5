"""Every type of docs/architecture.md, "Types", as a MySQL column, with sample SQL literals per column.

``TYPES`` lists (column name, definition, literals). ``literals[0]`` is the column's edge
value (extremes, zero dates, negative TIME, 4-byte UTF-8), ``literals[1]`` an odd one (zero,
empty, sub-second rounding), the rest ordinary values. Zero dates need ``sql_mode = ''``;
the TIMESTAMP literals are written for a session in ``time_zone = '+05:30'``.

``COLUMNS``, ``EDGE_ROW``, ``NULL_ROW`` and ``ODD_ROW`` build the ``types`` table used by
tests/integration/test_capture_types.py; tests/spark/test_randomized_end_to_end.py mixes the
literals at random.
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
