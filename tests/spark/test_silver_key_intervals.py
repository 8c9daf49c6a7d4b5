"""key_intervals: the key intervals a silver MERGE bounds the target by, so that Delta skips
every file between a batch's updated keys and its far-away inserted keys."""

from __future__ import annotations

import itertools
import random
from decimal import Decimal

from binlake.silver.merge import key_intervals


def intervals(spark, values, ddl="k BIGINT", numeric=True, most=16):
    return key_intervals(spark.createDataFrame([(v,) for v in values], ddl), "k", numeric=numeric, most=most)


def test_the_widest_gaps_are_cut_out(spark):
    got = intervals(spark, [1, 2, 3, 1000, 1001, 1_000_000], most=3)
    assert got == [(1, 3), (1000, 1001), (1_000_000, 1_000_000)]


def test_updates_of_recent_rows_and_inserts_far_above_them_give_two_intervals(spark):
    updated = list(range(820_000, 1_000_000, 7))
    inserted = list(range(100_000_000, 100_010_000))
    got = intervals(spark, updated + inserted, most=2)
    assert got == [(820_000, updated[-1]), (100_000_000, 100_009_999)]


def test_every_value_lies_inside_an_interval_even_at_the_ends_of_bigint_and_unsigned_bigint(spark):
    rng = random.Random(7)
    for ddl, low, high, cast in (("k BIGINT", -(2**63), 2**63 - 1, int), ("k DECIMAL(20,0)", 0, 2**64 - 1, Decimal)):
        values = {cast(low), cast(high)} | {cast(rng.randint(low, high)) for _ in range(200)}
        values |= {cast(v) for v in range(5)}
        got = intervals(spark, sorted(values), ddl=ddl, most=6)
        assert len(got) == 6
        assert all(lo <= hi for lo, hi in got)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(got))
        assert all(any(lo <= v <= hi for lo, hi in got) for v in values), ddl


def test_non_numeric_keys_and_single_values_keep_one_min_max_interval(spark):
    assert intervals(spark, ["b", "a", "zz"], ddl="k STRING", numeric=False) == [("a", "zz")]
    assert intervals(spark, [5, 5, 5]) == [(5, 5)]
    assert intervals(spark, [], ddl="k BIGINT") == []


def test_a_small_batch_finds_its_gaps_on_the_driver_with_the_same_result(spark):
    values = [1, 2, 3, 1000, 1001, 1_000_000]
    df = spark.createDataFrame([(v,) for v in values], "k BIGINT")
    assert key_intervals(df, "k", numeric=True, most=3, rows=len(values)) == [
        (1, 3),
        (1000, 1001),
        (1_000_000, 1_000_000),
    ]
    rng = random.Random(11)
    for ddl, cast in (("k BIGINT", int), ("k DECIMAL(20,0)", Decimal)):
        values = sorted({cast(rng.randint(0, 10**12)) for _ in range(300)})
        df = spark.createDataFrame([(v,) for v in values], ddl)
        got = key_intervals(df, "k", numeric=True, most=6, rows=len(values))
        assert len(got) == 6
        assert all(a[1] < b[0] for a, b in itertools.pairwise(got))
        assert all(any(lo <= v <= hi for lo, hi in got) for v in values), ddl
