"""The change sequence: unique and totally ordered by (file index, position, row)."""

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


def test_file_index_is_numeric_not_lexicographic():
    # mysql-bin.1000000 comes after mysql-bin.999999 although it sorts before it as text.
    assert BinlogPosition("mysql-bin.999999", 10**9) < BinlogPosition("mysql-bin.1000000", 4)


def test_file_names_round_trip_through_their_index():
    assert file_index("mysql-bin.000123") == 123
    assert file_name("mysql-bin.000123", 124) == "mysql-bin.000124"


def test_positions_parse_from_file_colon_pos():
    assert BinlogPosition.parse("mysql-bin.000003:4") == BinlogPosition("mysql-bin.000003", 4)
