"""key_range_predicate: [start, end) over typed keys, lexicographic for composite keys."""

from __future__ import annotations

import re

import pytest
from bronze_fixtures import col, table  # tests/spark/bronze_fixtures.py

from binlake.contract.types import Kind
from binlake.silver.ranges import key_range_predicate, reconcile_range_predicate

COMPOSITE = table("shop.c", [col("a"), col("b", Kind.STRING), col("x", Kind.STRING)], key=("a", "b"))
SINGLE = table("shop.s", [col("id", Kind.DECIMAL, precision=20), col("x", Kind.STRING)])


def keys(spark, schema, rows, ddl, start, end):
    df = spark.createDataFrame(rows, ddl)
    return sorted(tuple(r) for r in df.where(key_range_predicate(schema, start, end)).select(*schema.key).collect())


def test_composite_keys_compare_lexicographically(spark):
    rows = [(1, "z"), (2, "a"), (2, "m"), (2, "z"), (3, "a"), (4, "a")]
    got = keys(spark, COMPOSITE, rows, "a INT, b STRING", '["2", "m"]', '["3", "a"]')
    assert got == [(2, "m"), (2, "z")]


def test_null_bounds_are_unbounded_and_numbers_compare_as_numbers(spark):
    from decimal import Decimal

    rows = [(Decimal(9),), (Decimal(10),), (Decimal(100),)]
    assert keys(spark, SINGLE, rows, "id DECIMAL(20,0)", None, '["100"]') == [(Decimal(9),), (Decimal(10),)]
    assert keys(spark, SINGLE, rows, "id DECIMAL(20,0)", ["10"], None) == [(Decimal(10),), (Decimal(100),)]
    assert keys(spark, SINGLE, rows, "id DECIMAL(20,0)", None, None) == [(Decimal(9),), (Decimal(10),), (Decimal(100),)]


def test_prefix_bound_on_a_composite_key(spark):
    rows = [(1, "z"), (2, "a"), (3, "a")]
    assert keys(spark, COMPOSITE, rows, "a INT, b STRING", '["2"]', '["3"]') == [(2, "a")]


def test_reconciliation_range_is_also_case_folded_for_string_keys(spark):
    t = table("shop.s", [col("k", Kind.STRING)], key=("k",))
    df = spark.createDataFrame([("B",), ("b",), ("c",)], "k STRING")
    # Binary order puts "B" before "a"; a case-insensitive MySQL collation puts it in [a, c).
    assert sorted(r[0] for r in df.where(key_range_predicate(t, '["a"]', '["c"]')).collect()) == ["b"]
    assert sorted(r[0] for r in df.where(reconcile_range_predicate(t, '["a"]', '["c"]')).collect()) == ["b"]
    assert sorted(r[0] for r in df.where(reconcile_range_predicate(t, '["A"]', '["c"]')).collect()) == ["B", "b"]


def test_reconciliation_range_also_agrees_with_upper_case_order(spark):
    t = table("shop.s", [col("k", Kind.STRING)], key=("k",))
    df = spark.createDataFrame([("Ab",), ("__",), ("a_",)], "k STRING")
    # utf8mb4_general_ci weighs by upper case: "__" sorts after every letter, so MySQL puts it
    # in [b, ...); binary and lower-case order both put it before "b".
    assert sorted(r[0] for r in df.where(key_range_predicate(t, None, '["b"]')).collect()) == ["Ab", "__", "a_"]
    assert sorted(r[0] for r in df.where(reconcile_range_predicate(t, None, '["b"]')).collect()) == ["Ab", "a_"]


def test_argument_checks_have_exact_messages():
    with pytest.raises(ValueError, match=r"start_key has 3 values but shop.c has 2 key column\(s\) \['a', 'b'\]"):
        key_range_predicate(COMPOSITE, '["1", "a", "x"]', None)
    with pytest.raises(ValueError, match="end_key must be a JSON array of canonical key texts or None, got 'nope'"):
        key_range_predicate(COMPOSITE, None, "nope")
    with pytest.raises(TypeError, match=re.escape("schema must be a binlake.contract.types.TableSchema, got str")):
        key_range_predicate("shop.c", None, None)
