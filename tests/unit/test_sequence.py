"""The change sequence: unique and totally ordered by (file index, position, row)."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from binlake.contract.position import BinlogPosition, file_index, file_name

positions = st.builds(
    lambda i, p: BinlogPosition(f"mysql-bin.{i:06d}", p),
    st.integers(min_value=1, max_value=999_999),
    st.integers(min_value=4, max_value=2**40),
)


@given(positions, positions)
def test_positions_order_by_file_index_then_byte_position(a, b):
    assert (a < b) == ((a.file_index, a.pos) < (b.file_index, b.pos))
    assert (a == b) == ((a.file, a.pos) == (b.file, b.pos))


# Few numbers and offsets under two base names (a server whose log_bin basename changed), so
# positions that differ only in the base name are drawn often.
renamed_positions = st.builds(
    lambda base, i, p, e: BinlogPosition(f"{base}.{i:06d}", p, e),
    st.sampled_from(["mysql-bin", "db1-bin"]),
    st.integers(min_value=1, max_value=3),
    st.integers(min_value=4, max_value=6),
    st.integers(min_value=0, max_value=1),
)


@given(renamed_positions, renamed_positions)
def test_equality_and_order_agree_whatever_the_base_name(a, b):
    # Exactly one of a < b, a == b, b < a: what sorted(), min() and max() rely on.
    assert [a < b, a == b, b < a].count(True) == 1
    assert (a <= b) == (a < b or a == b)
    assert (a >= b) == (b < a or a == b)
    # The base name only breaks a tie: epoch, file number and offset decide first.
    if (a.epoch, a.file_index, a.pos) != (b.epoch, b.file_index, b.pos):
        assert (a < b) == ((a.epoch, a.file_index, a.pos) < (b.epoch, b.file_index, b.pos))


def test_two_files_with_one_number_are_distinct_and_ordered():
    a, b = BinlogPosition("mysql-bin.000003", 4), BinlogPosition("db1-bin.000003", 4)
    assert a != b
    assert (a < b) != (b < a)
    assert sorted([a, b]) == sorted([b, a])
    assert min(a, b) == min(b, a)


def test_file_index_is_numeric_not_lexicographic():
    # mysql-bin.1000000 comes after mysql-bin.999999 although it sorts before it as text.
    assert BinlogPosition("mysql-bin.999999", 10**9) < BinlogPosition("mysql-bin.1000000", 4)


def test_file_names_round_trip_through_their_index():
    assert file_index("mysql-bin.000123") == 123
    assert file_name("mysql-bin.000123", 124) == "mysql-bin.000124"


def test_positions_parse_from_file_colon_pos():
    assert BinlogPosition.parse("mysql-bin.000003:4") == BinlogPosition("mysql-bin.000003", 4)


# --- source epochs: a primary switch or a reset binlog starts a new numbering --------------

epoch_positions = st.builds(
    lambda e, i, p: BinlogPosition(f"mysql-bin.{i:06d}", p, e),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=1, max_value=999_999),
    st.integers(min_value=4, max_value=2**31),
)


@given(epoch_positions, epoch_positions)
def test_a_later_source_epoch_sorts_after_every_position_of_an_earlier_one(a, b):
    assert (a < b) == ((a.epoch, a.file_index, a.pos) < (b.epoch, b.file_index, b.pos))
    # The change sequence's first field carries the epoch, so stored rows sort the same way.
    assert (a.key() < b.key()) == (a < b)


@given(epoch_positions)
def test_positions_of_any_epoch_round_trip_through_text_rows_and_dicts(p):
    assert BinlogPosition.parse(str(p)) == p
    assert BinlogPosition.from_log(p.file, p.log_index, p.pos) == p
    assert BinlogPosition.from_dict(p.to_dict()) == p


def test_epoch_zero_keeps_the_plain_file_number_so_older_lakehouses_need_no_rewrite():
    p = BinlogPosition("mysql-bin.000003", 1234)
    assert (p.log_index, str(p)) == (3, "mysql-bin.000003:1234")
    switched = p.in_epoch(1)
    assert (switched.log_index, str(switched)) == (2**32 + 3, "mysql-bin.000003:1234@1")
    assert BinlogPosition.from_dict({"file": "mysql-bin.000003", "pos": 1234}) == p


def test_a_log_index_that_does_not_name_the_file_is_refused():
    with pytest.raises(ValueError, match="does not name binlog file"):
        BinlogPosition.from_log("mysql-bin.000003", 4, 1234)
    with pytest.raises(ValueError, match=re.escape("mysql-bin.000003:4@1 in source epoch 1")):
        BinlogPosition.parse("mysql-bin.000003:4@x")
