"""The named row types of the lakehouse's tables list exactly their schema's columns, in order,
so a row built by name lands in the right column."""

from __future__ import annotations

import re

import pytest

from binlake.contract import changelog as cl
from binlake.contract import schemas
from binlake.contract.position import HEARTBEAT_ROW, BinlogPosition


def columns(schema_ddl: str) -> list[str]:
    # Top-level "name TYPE" pairs; types such as MAP<STRING, STRING> hold commas of their own.
    depth, parts, cur = 0, [], ""
    for ch in schema_ddl:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [re.sub(r"`", "", p.split()[0]) for p in parts]


@pytest.mark.parametrize(
    ("row_type", "schema"),
    [
        (cl.ChangeRow, cl.CHANGELOG_SCHEMA),
        (schemas.ManifestRow, schemas.SNAPSHOT_CHUNKS_SCHEMA),
        (schemas.ProgressRow, schemas.PROGRESS_SCHEMA),
    ],
)
def test_a_row_type_names_its_table_columns_in_order(row_type, schema):
    assert list(row_type._fields) == columns(schema)


def test_a_heartbeat_row_ends_a_batch_after_every_change_at_its_position():
    row = cl.heartbeat_row(BinlogPosition("mysql-bin.000007", 1234), note="reset-capture")
    assert (row.op, row.file_index, row.pos, row.row, row.binlog_file, row.ddl) == (
        cl.HEARTBEAT_OP,
        7,
        1234,
        HEARTBEAT_ROW,
        "mysql-bin.000007",
        "reset-capture",
    )
    assert row.db is None
    assert row.table is None
    assert row.captured_at is not None
