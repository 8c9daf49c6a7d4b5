"""The snapshot chunk reader's decisions, without a server: the statements that read a chunk,
the check that the table still has its planned columns, how each result column becomes its
canonical text, and the batches a chunk yields."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pymysql.constants import FIELD_TYPE

from binlake.bronze.chunking import key_to_json, range_condition
from binlake.bronze.snapshot_source import (
    ChunkBatches,
    ChunkPartition,
    arrow_schema,
    plan_chunk_read,
    row_hashes,
)
from binlake.config import ColumnRule
from binlake.contract.columns import masked_text
from binlake.contract.position import BinlogPosition
from binlake.contract.types import Column, Kind, TableSchema
from binlake.errors import SchemaChangeError
from binlake.source.textrows import RowBlock

SCHEMA = TableSchema(
    "shop",
    "orders",
    (
        Column("id", Kind.INT, bits=32, nullable=False, mysql_type="int"),
        Column("price", Kind.FLOAT, mysql_type="float"),
        Column("shipped", Kind.DATE, mysql_type="date"),
        Column("email", Kind.STRING, mysql_type="varchar(80)"),
    ),
    key=("id",),
)
COLUMNS = ["id", "price", "shipped", "email"]


def chunk(start=("10",), end=("20",)) -> ChunkPartition:
    return ChunkPartition("snap-1", "shop", "orders", 3, key_to_json(start), key_to_json(end), "v1")


# ---------------------------------------------------------------------------------------
# The statements


def test_a_chunk_selects_every_column_with_lossy_ones_again_exactly_ahead():
    plan = plan_chunk_read(chunk(), SCHEMA, None, "")
    where, params = range_condition(SCHEMA.key_columns, ("10",), ("20",))
    assert plan.select == f"SELECT CAST(`price` AS DOUBLE), `shop`.`orders`.* FROM `shop`.`orders` WHERE {where}"
    assert plan.params == params
    assert params
    assert [c.name for c in plan.exact] == ["price"]
    assert plan.probe is None, "``*`` itself shows a column added or dropped since planning"


def test_an_unbounded_chunk_selects_the_whole_table():
    plan = plan_chunk_read(chunk(start=None, end=None), SCHEMA, None, "")
    assert plan.select.endswith("FROM `shop`.`orders` WHERE 1=1")
    assert plan.params == []


def test_a_dropped_column_is_never_selected_and_a_probe_reads_the_column_names():
    rule = ColumnRule("shop.orders", exclude=("email",))
    plan = plan_chunk_read(chunk(), SCHEMA, rule, "")
    assert plan.select.startswith("SELECT CAST(`price` AS DOUBLE), `id`, `price`, `shipped` FROM `shop`.`orders`")
    assert "email" not in plan.select
    assert "*" not in plan.select
    assert plan.probe == "SELECT * FROM `shop`.`orders` LIMIT 0"


def test_invisible_columns_are_named_because_star_leaves_them_out():
    from dataclasses import replace

    hidden = replace(SCHEMA, columns=(*SCHEMA.columns, Column("my_row_id", Kind.UINT, bits=64, visible=False)))
    plan = plan_chunk_read(chunk(), hidden, None, "")
    assert "`shop`.`orders`.*, `shop`.`orders`.`my_row_id` FROM" in plan.select
    plan.check_columns([*COLUMNS, "my_row_id"])  # what the SELECT returns: *, then the named ones
    rule = ColumnRule("shop.orders", exclude=("email",))
    probed = plan_chunk_read(chunk(), hidden, rule, "")
    assert "`my_row_id` FROM" in probed.select
    probed.check_columns(COLUMNS), "the probe's * shows the visible columns only"


# ---------------------------------------------------------------------------------------
# Drift


def test_the_planned_columns_in_any_order_pass_the_drift_check():
    plan_chunk_read(chunk(), SCHEMA, None, "").check_columns(["email", "id", "shipped", "price"])


@pytest.mark.parametrize("present", [[*COLUMNS, "added"], COLUMNS[:-1], ["id", "price", "shipped", "mail"]])
def test_a_column_added_dropped_or_renamed_since_planning_stops_the_read(present):
    plan = plan_chunk_read(chunk(), SCHEMA, None, "")
    with pytest.raises(SchemaChangeError, match=r"shop\.orders changed during the snapshot \(columns now .*re-run"):
        plan.check_columns(present)


# ---------------------------------------------------------------------------------------
# Encoding the result


def text_row(*values: bytes | None) -> bytes:
    """One text-protocol row packet's payload: each value length-prefixed, 0xFB for NULL."""
    return b"".join(b"\xfb" if v is None else bytes([len(v)]) + v for v in values)


def block_of(rows: list[bytes], binary: list[bool]) -> RowBlock:
    """The rows as the socket reader hands them over: packets back to back."""
    buf, starts = b"", []
    for seq, payload in enumerate(rows):
        buf += len(payload).to_bytes(3, "little") + bytes([seq % 256])
        starts.append(len(buf))
        buf += payload
    return RowBlock(np.frombuffer(buf, dtype=np.uint8), np.array(starts, dtype=np.int64), binary)


# The result of the chunk's SELECT: CAST(price AS DOUBLE), then id, price, shipped, email.
RESULT = ["CAST(`price` AS DOUBLE)", *COLUMNS]
TYPES = [FIELD_TYPE.DOUBLE, FIELD_TYPE.LONG, FIELD_TYPE.FLOAT, FIELD_TYPE.DATE, FIELD_TYPE.VAR_STRING]
TEXT = [False] * 5
ROWS = [
    text_row(b"0.48237513906955093", b"11", b"0.482375", b"2024-02-29", b"a@example.org"),
    text_row(b"1.5", b"12", b"1.5", None, None),
    text_row(b"1.5", b"13", b"1.5", b"2024-02-29", "\u00e9@example.org".encode()),
]


def test_canonical_protocol_texts_pass_as_they_are_and_the_others_are_encoded():
    encoding = plan_chunk_read(chunk(), SCHEMA, None, "").row_encoding(RESULT, TEXT, TYPES)
    assert encoding.names == COLUMNS
    assert encoding.as_is == [0, 3], "INT and VARCHAR texts are canonical already"
    assert [(i, src) for i, src, _ in encoding.encoded] == [(1, 0), (2, 3)], "FLOAT from its exact re-select"
    texts = encoding.texts(block_of(ROWS, TEXT))
    assert texts.to_pylist() == [
        *["11", "0.4823751449584961", "2024-02-29", "a@example.org"],  # the exact value, not the 0.482375 printed
        *["12", "1.5", None, None],
        *["13", "1.5", "2024-02-29", "\u00e9@example.org"],
    ]


def test_the_rows_are_one_text_column_per_stored_column_in_the_order_asked():
    encoding = plan_chunk_read(chunk(), SCHEMA, None, "").row_encoding(RESULT, TEXT, TYPES)
    texts = encoding.texts(block_of(ROWS, TEXT))
    columns = encoding.columns(texts, 3, ["email", "id", "price", "shipped"])
    assert [c.to_pylist() for c in columns] == [
        ["a@example.org", None, "\u00e9@example.org"],
        ["11", "12", "13"],
        ["0.4823751449584961", "1.5", "1.5"],
        ["2024-02-29", None, "2024-02-29"],
    ]
    assert row_hashes(COLUMNS, texts).tolist() == row_hashes(COLUMNS, pa.array(texts.to_pylist())).tolist()


def test_a_masked_column_is_masked_after_its_canonical_text_as_capture_does():
    rule = ColumnRule("shop.orders", mask={"email": "hash", "shipped": "null"})
    encoding = plan_chunk_read(chunk(), SCHEMA, rule, "pepper").row_encoding(RESULT, TEXT, TYPES)
    assert encoding.as_is == [0]
    texts = encoding.texts(block_of(ROWS, TEXT)).to_pylist()
    assert texts[3] == masked_text("hash", "pepper", "a@example.org")
    assert texts[7] is None, "hash keeps NULL as NULL"
    assert texts[2] is None, "a null mask stores NULL"
    assert texts[10] is None, "a null mask stores NULL"


def test_a_column_the_protocol_sends_as_bytes_is_encoded():
    binary = [False, False, False, False, True]  # email's collation is binary
    encoding = plan_chunk_read(chunk(), SCHEMA, None, "").row_encoding(RESULT, binary, TYPES)
    assert encoding.as_is == [0]
    assert [i for i, _, _ in encoding.encoded] == [1, 2, 3]


# ---------------------------------------------------------------------------------------
# The batches


LW = BinlogPosition("mysql-bin.000004", 1234, epoch=1)


def test_row_batches_carry_only_the_texts_and_the_chunk_identity():
    encoding = plan_chunk_read(chunk(), SCHEMA, None, "").row_encoding(RESULT, TEXT, TYPES)
    batches = ChunkBatches(chunk(), "attempt-9", COLUMNS)
    batch = batches.rows(encoding.columns(encoding.texts(block_of(ROWS, TEXT)), 3, COLUMNS))
    assert batch.schema == arrow_schema(4)
    assert batch.num_rows == 3
    assert batch.to_pylist()[0] == {
        "_t0": "11",
        "_t1": "0.4823751449584961",
        "_t2": "2024-02-29",
        "_t3": "a@example.org",
        "_cdc_chunk_id": 3,
        "_cdc_attempt_id": "attempt-9",
        "_cdc_chunk_stats": None,
    }


def test_the_marker_row_has_no_values_and_holds_the_watermarks_count_checksum_and_zero_dates():
    hw = BinlogPosition("mysql-bin.000005", 99, epoch=1)
    batches = ChunkBatches(chunk(), "attempt-9", COLUMNS)
    marker = batches.marker(LW, hw, count=3, checksum=2**64 - 1, zero_dates=2).to_pylist()
    assert len(marker) == 1
    assert all(marker[0][f"_t{i}"] is None for i in range(4))
    assert (marker[0]["_cdc_chunk_id"], marker[0]["_cdc_attempt_id"]) == (3, "attempt-9")
    assert dict(marker[0]["_cdc_chunk_stats"]) == {
        "snapshot_id": "snap-1",
        "lw_file": "mysql-bin.000004",
        "lw_file_index": str(LW.log_index),
        "lw_pos": "1234",
        "hw_file": "mysql-bin.000005",
        "hw_pos": "99",
        "row_count": "3",
        "checksum": str(2**64 - 1),
        "zero_dates": "2",
    }
