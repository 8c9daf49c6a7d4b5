"""The change-log retention condition of ``binlake maintain`` matches each table's own rows
below its own bound, whatever the names hold: a quote, a condition-shaped name, a dot in the
database name (``a.b`` . ``c`` is not ``a`` . ``b.c``), a backslash or a backtick."""

from __future__ import annotations

from binlake.contract.changelog import HEARTBEAT_OP
from binlake.ops.maintain import changelog_retention_condition

OLD, NEW = "2026-01-01 00:00:00", "2026-06-01 00:00:00"
HORIZON = "2026-03-01 00:00:00"

# (db, table, op, file_index, pos, captured_at)
ROWS = [
    ("shop", "it's", "u", 1, 10, OLD),  # below its bound (1, 50): goes
    ("shop", "it's", "u", 1, 60, OLD),  # above it: stays
    ("shop", "it's", "u", 1, 20, NEW),  # below, but too new: stays
    ("shop", "x' OR '1'='1", "u", 1, 5, OLD),  # below its bound (1, 10): goes
    ("shop", "x", "u", 1, 5, OLD),  # not a table of the bounds: stays
    ("shop", "other", "u", 1, 5, OLD),  # nor this one
    ("a.b", "c", "u", 2, 5, OLD),  # below its bound (2, 100): goes
    ("a", "b.c", "u", 2, 5, OLD),  # same dotted name, other table: stays
    ("back`tick", "t\\", "u", 3, 1, OLD),  # below its bound (3, 2): goes
    ("back`tick", "t", "u", 3, 1, OLD),  # stays
    ("", "", HEARTBEAT_OP, 1, 1, OLD),  # below every bound: goes
    ("", "", HEARTBEAT_OP, 1, 30, OLD),  # above the heartbeat bound: stays
]
BOUNDS = {
    ("shop", "it's"): (1, 50),
    ("shop", "x' OR '1'='1"): (1, 10),
    ("a.b", "c"): (2, 100),
    ("back`tick", "t\\"): (3, 2),
}


def _matching(spark, condition: str) -> list[tuple]:
    df = spark.createDataFrame(
        ROWS, "db STRING, `table` STRING, op STRING, file_index BIGINT, pos BIGINT, captured_at STRING"
    ).selectExpr("db", "`table`", "op", "file_index", "pos", "CAST(captured_at AS TIMESTAMP) AS captured_at")
    return sorted((r["db"], r["table"], r["op"], r["file_index"], r["pos"]) for r in df.where(condition).collect())


def test_each_table_loses_only_its_own_old_rows_below_its_own_bound(spark):
    condition = changelog_retention_condition(BOUNDS, HORIZON, heartbeats_below=(1, 10))
    assert _matching(spark, condition) == sorted(
        [
            ("shop", "it's", "u", 1, 10),
            ("shop", "x' OR '1'='1", "u", 1, 5),
            ("a.b", "c", "u", 2, 5),
            ("back`tick", "t\\", "u", 3, 1),
            ("", "", HEARTBEAT_OP, 1, 1),
        ]
    )


def test_without_a_heartbeat_bound_every_heartbeat_stays(spark):
    condition = changelog_retention_condition({("a.b", "c"): (2, 100)}, HORIZON, heartbeats_below=None)
    assert _matching(spark, condition) == [("a.b", "c", "u", 2, 5)]
