"""The source side of verify as SQL text: chunk assignment and quoting, without a server."""

from __future__ import annotations

import json

from binlake.contract.types import Column, Kind, TableSchema
from binlake.ops.verify_sql import HASH_PART_COLUMNS, chunk_of_sql, chunk_stats_sql, hash_parts, mysql_part_hashes_sql


def _schema(key_kind: Kind, name: str = "id") -> TableSchema:
    return TableSchema("shop", "or`ders", (Column(name, key_kind, bits=32), Column("note", Kind.STRING)), (name,))


def _chunks(*bounds):
    edges = [None, *[json.dumps([b]) for b in bounds], None]
    return [(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def test_sorted_integer_bounds_are_searched_with_each_bound_compared_once():
    sql, params = chunk_of_sql(_schema(Kind.INT), _chunks("10", "20", "30"))
    # Three bounds, one comparison each: a binary search, not a CASE per chunk.
    assert sorted(params) == [10, 20, 30]
    assert sql.count(">= %s") == 3


def test_string_bounds_out_of_byte_order_fall_back_to_the_first_matching_chunk():
    # A case-insensitive collation planned 'a' before 'B'; by bytes 'B' sorts first, so
    # only the first-match CASE (what Spark evaluates on silver) assigns keys the same way.
    sql, params = chunk_of_sql(_schema(Kind.STRING, "word"), _chunks("a", "B"))
    assert sql.count("WHEN") == 4  # the NULL-key guard and one per chunk
    assert params == [b"a", b"a", b"B", b"B"]
    assert "CAST(CONVERT(`word` USING utf8mb4) AS BINARY)" in sql


def test_string_bounds_in_byte_order_are_compared_as_bytes():
    sql, params = chunk_of_sql(_schema(Kind.STRING, "word"), _chunks("B", "a", "\u00c9"))
    # Each bound once: the binary search, comparing UTF-8 bytes.
    assert sorted(params) == [b"B", b"a", "\u00c9".encode()]
    assert "CAST(CONVERT(`word` USING utf8mb4) AS BINARY)" in sql


def test_names_are_quoted_and_values_are_parameters():
    sql, params = chunk_stats_sql(_schema(Kind.INT, "i`d"), _chunks("7"))
    assert "FROM `shop`.`or``ders`" in sql
    assert "`i``d` >= %s" in sql
    assert params == [7]


def _wide(n_columns: int, key: tuple[str, ...]) -> TableSchema:
    columns = tuple(Column(f"c{i}", Kind.INT, bits=32) for i in range(n_columns))
    return TableSchema("shop", "wide", columns, key)


def test_a_wide_row_is_hashed_in_parts_that_each_hold_the_key_and_the_next_columns():
    schema = _wide(40, key=("c5", "c0"))
    parts = [[c.name for c in part] for part in hash_parts(schema)]
    rest = [f"c{i}" for i in range(40) if i not in (0, 5)]
    assert parts == [["c5", "c0", *rest[0:14]], ["c5", "c0", *rest[14:28]], ["c5", "c0", *rest[28:38]]]
    assert all(len(part) <= HASH_PART_COLUMNS for part in parts)


def test_a_narrow_row_is_one_part_and_a_key_wider_than_a_part_still_leaves_room_for_a_column():
    assert [[c.name for c in part] for part in hash_parts(_wide(3, key=("c1",)))] == [["c1", "c0", "c2"]]
    assert [[c.name for c in part] for part in hash_parts(_wide(2, key=("c0", "c1")))] == [["c0", "c1"]]
    wide_key = _wide(20, key=tuple(f"c{i}" for i in range(18)))
    assert [len(part) for part in hash_parts(wide_key)] == [19, 19]


def test_the_parts_are_numbered_and_the_chunk_checksum_sums_every_part():
    schema = _wide(40, key=("c0",))
    hashes = mysql_part_hashes_sql(schema)
    assert [h.count(f"CONCAT_WS(',', '{j}', ") for j, h in enumerate(hashes, 1)] == [1, 1, 1]
    sql, _ = chunk_stats_sql(schema, _chunks("7"))
    assert sql.count("SUM(") == 3
    assert " + SUM(" in sql
