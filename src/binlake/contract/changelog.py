"""bronze/changelog: its schema, the ops a record can have, and the row builders of its records."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import NamedTuple

# The change sequence as SQL users see it: sortable, unique, totally ordered.
CDC_SEQ_TYPE = "STRUCT<file_index: BIGINT, pos: BIGINT, row: INT>"

CHANGELOG_SCHEMA = (
    "db STRING, `table` STRING, op STRING, "
    "file_index BIGINT, pos BIGINT, `row` INT, binlog_file STRING, "
    "before MAP<STRING, STRING>, after MAP<STRING, STRING>, "
    "commit_ts TIMESTAMP, gtid STRING, server_id BIGINT, schema_version STRING, "
    "ddl STRING, captured_at TIMESTAMP"
)
"""bronze/changelog: one row per :class:`ChangeRow`; ``op`` is one of the ops below.
Heartbeats (db and table NULL) mark the end of each capture batch: the transaction
boundary up to which the log is complete, also when no captured table changed.

A row image (``before``, ``after``) maps each column the binlog event carried to its
canonical text (NULL for SQL NULL). Under ``binlog_row_image=FULL`` that is every column;
a writer session with ``MINIMAL`` or ``NOBLOB`` logs fewer, and a column missing from the
map was not logged, which is not the same as NULL."""

# The change log's ops. Row changes:
INSERT, UPDATE, DELETE = "insert", "update", "delete"
DATA_OPS = (INSERT, UPDATE, DELETE)
# What a DDL statement did to a table's rows:
DDL_OP = "ddl"  # the schema (or nothing about the rows) changed
TRUNCATE_OP = "truncate"  # every row is gone, the table stays
DROP_OP = "drop"  # the table is gone under this name (DROP TABLE, or renamed away)
RENAMED_INTO_OP = "renamed_into"  # another table's rows now live under this name
DDL_OPS = (DDL_OP, TRUNCATE_OP, DROP_OP, RENAMED_INTO_OP)
EMPTYING_OPS = (TRUNCATE_OP, DROP_OP, RENAMED_INTO_OP)
"""Ops after which none of the table's older rows exist any more under its name."""
# Row changes the binlog holds as SQL text, not rows (a writer session that set
# binlog_format=STATEMENT or MIXED): ``ddl`` holds the statement. Their effect on the rows is
# unknown, so silver cannot apply them; they are kept so that it can say so and which table.
STATEMENT_OP = "statement"
HEARTBEAT_OP = "heartbeat"  # the end of a capture batch


class ChangeRow(NamedTuple):
    """One row of bronze/changelog, in :data:`CHANGELOG_SCHEMA` order."""

    db: str | None
    table: str | None
    op: str
    file_index: int
    pos: int
    row: int
    binlog_file: str
    before: dict | None
    after: dict | None
    commit_ts: datetime | None
    gtid: str | None
    server_id: int | None
    schema_version: str | None
    ddl: str | None
    captured_at: datetime | None


def heartbeat_row(
    position,
    note: str | None = None,
    captured_at: datetime | None = None,
    server_id: int | None = None,
    gtid: str | None = None,
) -> ChangeRow:
    """The row that ends a capture batch at ``position`` (a BinlogPosition), with the server
    it was read from and, on MariaDB, the GTID state at that position (what capture resumes
    from on another server)."""
    from binlake.contract.position import HEARTBEAT_ROW

    return ChangeRow(
        None,
        None,
        HEARTBEAT_OP,
        position.log_index,
        position.pos,
        HEARTBEAT_ROW,
        position.file,
        None,
        None,
        None,
        gtid,
        server_id,
        None,
        note,
        captured_at or datetime.now(timezone.utc),
    )
