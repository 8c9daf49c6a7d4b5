"""The chunk planner: chunks partition the key space exactly, and are bounded in rows."""

from __future__ import annotations

import bisect
import datetime as dt
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binlake.bronze.chunking import (
    Chunk,
    boundary_query,
    choose_arithmetic,
    chunks_from_boundaries,
    key_from_json,
    key_to_json,
    param_value,
    plan_arithmetic,
    plan_by_boundaries,
    range_condition,
    tuple_compare_terms,
)
from binlake.contract.types import Column, Kind

INT = Column("id", Kind.INT, bits=32)
UBIG = Column("id", Kind.UINT, bits=64)
NAME = Column("name", Kind.STRING)


def evaluate_terms(disjuncts, key, bound) -> bool:
    """Evaluate a range_condition expansion in Python, to compare it with tuple order."""
    ops = {
        "=": lambda a, b: a == b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
    }
    return any(all(ops[t.op](key[t.index], bound[t.index]) for t in conj) for conj in disjuncts)


def _contains(chunk: Chunk, key: tuple) -> bool:
    return (chunk.start is None or key >= chunk.start) and (chunk.end is None or key < chunk.end)


def _int_key(c: Chunk, side: str):
    b = getattr(c, side)
    return None if b is None else int(b[0])


def _int_contains(chunk: Chunk, x: int) -> bool:
    lo, hi = _int_key(chunk, "start"), _int_key(chunk, "end")
    return (lo is None or x >= lo) and (hi is None or x < hi)


def _walker(keys: list[tuple], chunk_size: int):
    """next_boundary over a sorted key list, as the boundary query does it in MySQL."""

    def next_boundary(start):
        i = 0 if start is None else bisect.bisect_left(keys, start)
        j = i + chunk_size
        return keys[j] if j < len(keys) else None

    return next_boundary


# --- arithmetic splitting -----------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    lo=st.integers(-(2**63), 2**64 - 1),
    width=st.integers(0, 5000),
    chunk_size=st.integers(1, 700),
    probes=st.lists(st.integers(-50, 5050), max_size=30),
)
def test_arithmetic_chunks_cover_every_integer_exactly_once(lo, width, chunk_size, probes):
    hi = lo + width
    chunks = plan_arithmetic(lo, hi, chunk_size)
    for offset in [*probes, 0, width, -1, width + 1]:
        x = lo + offset
        assert sum(_int_contains(c, x) for c in chunks) == 1, (x, chunks)


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(0, 2**64 - 1), width=st.integers(0, 3000), chunk_size=st.integers(1, 300))
def test_arithmetic_chunks_hold_at_most_chunk_size_distinct_keys_inside_the_range(lo, width, chunk_size):
    hi = lo + width
    for c in plan_arithmetic(lo, hi, chunk_size):
        start = lo if c.start is None else int(c.start[0])
        end = hi + 1 if c.end is None else int(c.end[0])
        assert 0 < end - start <= chunk_size


def test_arithmetic_bounds_near_two_to_the_64_are_exact_decimal_text():
    top = 2**64 - 1
    chunks = plan_arithmetic(top - 9, top, 4)
    assert [(c.start_json, c.end_json) for c in chunks] == [
        (None, f'["{top - 5}"]'),
        (f'["{top - 5}"]', f'["{top - 1}"]'),
        (f'["{top - 1}"]', None),
    ]


def test_one_chunk_when_the_range_fits():
    assert plan_arithmetic(5, 9, 100) == [Chunk(0, None, None)]


@pytest.mark.parametrize(
    ("lo", "hi", "rows", "expected"),
    [
        (1, 1_000_000, 1_000_000, True),  # dense
        (1, 1_000_000, 600_000, True),  # some holes
        (1, 10**12, 1_000_000, False),  # sparse
        (0, 2**64 - 1, 10, False),  # a few huge unsigned keys
        (1, 50, 0, True),  # stale estimate but a tiny range
    ],
)
def test_choose_arithmetic_only_for_dense_keys(lo, hi, rows, expected):
    assert choose_arithmetic(lo, hi, rows, 1000) is expected


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_chunk_size_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match=r"chunk_size must be a positive integer, got "):
        plan_arithmetic(1, 10, bad)


def test_arithmetic_rejects_an_empty_range():
    with pytest.raises(ValueError, match=r"key range is empty: lo=5 > hi=4"):
        plan_arithmetic(5, 4, 10)


# --- boundary walking ---------------------------------------------------------------------

composite_keys = st.lists(st.tuples(st.integers(-3, 3), st.text("abcAB", max_size=3)), unique=True, max_size=120)


@settings(max_examples=200, deadline=None)
@given(
    keys=composite_keys,
    chunk_size=st.integers(1, 25),
    probes=st.lists(st.tuples(st.integers(-5, 5), st.text("abcAB", max_size=3)), max_size=20),
)
def test_boundary_chunks_partition_the_key_space_and_hold_at_most_chunk_size_rows(keys, chunk_size, probes):
    keys = sorted(keys)
    chunks = plan_by_boundaries(_walker(keys, chunk_size))
    # Every existing key, and every key that might be inserted later, is in exactly one chunk.
    for k in keys + probes:
        assert sum(_contains(c, k) for c in chunks) == 1, (k, chunks)
    for c in chunks:
        n = sum(_contains(c, k) for k in keys)
        assert n <= chunk_size
    # Consecutive chunks share their bound; the ends are open.
    assert chunks[0].start is None
    assert chunks[-1].end is None
    assert all(a.end == b.start for a, b in itertools.pairwise(chunks))
    assert [c.chunk_id for c in chunks] == list(range(len(chunks)))
    # No wasted chunks: only the last may be short.
    assert all(sum(_contains(c, k) for k in keys) == chunk_size for c in chunks[:-1])


def test_an_empty_table_is_one_unbounded_chunk():
    assert plan_by_boundaries(lambda start: None) == [Chunk(0, None, None)]


def test_a_boundary_equal_to_its_start_means_the_key_is_not_unique():
    with pytest.raises(ValueError, match=r"boundary query returned its own start \['5'\]: the chunk key is not unique"):
        plan_by_boundaries(lambda start: ("5",))


def test_chunks_from_boundaries_opens_both_ends():
    assert chunks_from_boundaries([("b",), ("d",)]) == [
        Chunk(0, None, ("b",)),
        Chunk(1, ("b",), ("d",)),
        Chunk(2, ("d",), None),
    ]


# --- predicates ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 4), data=st.data())
def test_expanded_predicates_equal_lexicographic_tuple_comparison(n, data):
    key = tuple(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    bound = tuple(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    assert evaluate_terms(tuple_compare_terms(n, ">="), key, bound) == (key >= bound)
    assert evaluate_terms(tuple_compare_terms(n, "<"), key, bound) == (key < bound)


def test_composite_range_condition_uses_the_index_friendly_expanded_form():
    cols = [Column("a", Kind.INT, bits=32), Column("b`x", Kind.STRING)]
    sql, params = range_condition(cols, ("1", "k"), ("3", "m"))
    assert sql == ("((`a` > %s) OR (`a` = %s AND `b``x` >= %s)) AND ((`a` < %s) OR (`a` = %s AND `b``x` < %s))")
    assert params == [1, 1, "k", 3, 3, "m"]


def test_unbounded_range_condition_is_true():
    assert range_condition([INT], None, None) == ("1=1", [])


def test_bound_with_the_wrong_number_of_values_is_refused():
    with pytest.raises(ValueError, match=r"chunk bound \['1', '2'\] has 2 values for 1 key columns"):
        range_condition([INT], ("1", "2"), None)


def test_boundary_query_walks_the_key_index_from_the_start_inclusive():
    sql, params = boundary_query("shop", "or`ders", [UBIG], (str(2**64 - 5),), 1000)
    assert sql == "SELECT `id` FROM `shop`.`or``ders` WHERE ((`id` >= %s)) ORDER BY `id` LIMIT 1 OFFSET 1000"
    # An int parameter: pymysql writes it as a literal, so MySQL never compares via DOUBLE.
    assert params == [2**64 - 5]
    assert isinstance(params[0], int)
    assert boundary_query("s", "t", [INT, NAME], None, 7) == (
        "SELECT `id`, `name` FROM `s`.`t` ORDER BY `id`, `name` LIMIT 1 OFFSET 7",
        [],
    )


@pytest.mark.parametrize(
    ("col", "text", "value"),
    [
        (UBIG, "18446744073709551615", 18446744073709551615),
        (Column("d", Kind.DECIMAL, precision=10, scale=2), "1.50", __import__("decimal").Decimal("1.50")),
        (Column("t", Kind.TIMESTAMP, fsp=6), "2026-01-02T03:04:05.000006Z", "2026-01-02 03:04:05.000006"),
        (Column("dt", Kind.DATETIME, fsp=6), "2026-01-02 03:04:05.000006", "2026-01-02 03:04:05.000006"),
        (Column("b", Kind.BINARY), "AAE=", b"\x00\x01"),
        (Column("e", Kind.ENUM, labels=("x", "y")), "y", 2),
        (NAME, "Ägypten", "Ägypten"),
    ],
)
def test_param_value_turns_canonical_text_into_the_native_value(col, text, value):
    assert param_value(col, text) == value


def test_key_json_round_trips_and_keeps_none_unbounded():
    assert key_to_json(("1", "ä")) == '["1","ä"]'
    assert key_from_json(key_to_json(("1", "ä"))) == ("1", "ä")
    assert key_to_json(None) is None
    assert key_from_json(None) is None
    with pytest.raises(ValueError, match=r"chunk bound '\{\}' is not a JSON array of strings"):
        key_from_json("{}")


def test_chunk_ids_are_not_negative():
    with pytest.raises(ValueError, match=r"chunk_id must be >= 0, got -1"):
        Chunk(-1, None, None)


def test_datetime_keys_walk_like_any_other_key():
    base = dt.datetime(2026, 1, 1)
    keys = sorted((str(base + dt.timedelta(seconds=i * 7)),) for i in range(40))
    chunks = plan_by_boundaries(_walker(keys, 6))
    assert len(chunks) == 7
    assert all(sum(_contains(c, k) for c in chunks) == 1 for k in keys)
