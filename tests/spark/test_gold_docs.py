"""Every SQL block in docs/gold.md runs against a lakehouse that run_gold published, and
answers what the page says it answers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gold_fixtures import Lake, col, table_schema  # tests/spark/gold_fixtures.py

from binlake.gold.publish import run_gold

DOC = Path(__file__).resolve().parents[2] / "docs" / "gold.md"
ORDERS = table_schema(
    "shop", "orders", [col("id", "int", False), col("item_id", "int"), col("qty", "int", False)], key=["id"]
)


def sql_blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> Lake:
    """Published at mysql-bin.000003:900 (qty 3, source time 08:00) and at mysql-bin.000004:50
    (qty 5 and 1, one order of 500 dropped by a check, source time 09:00)."""
    lake = Lake(
        spark,
        tmp_path_factory.mktemp("gold_docs"),
        checks={"shop.orders": [{"column": "qty", "between": [0, 100], "severity": "drop"}]},
    )
    lake.add_table(ORDERS)
    lake.silver("shop", "orders", [{"id": 10, "item_id": 1, "qty": 3, "seq": (3, 700, 0)}])
    lake.heartbeats([(3, 900, "0-1-41", "2026-11-01 08:00:00"), (4, 50, "0-1-42", "2026-11-01 09:00:00")])
    lake.progress("shop", "orders", 3, 900)
    run_gold(spark, lake.config)
    lake.silver(
        "shop",
        "orders",
        [
            {"id": 10, "item_id": 1, "qty": 5, "seq": (4, 40, 0)},
            {"id": 11, "item_id": 2, "qty": 1, "seq": (4, 45, 0)},
            {"id": 12, "item_id": 2, "qty": 500, "seq": (4, 46, 0)},
        ],
    )
    lake.progress("shop", "orders", 4, 50)
    run_gold(spark, lake.config)
    return lake


def run(spark, lake, sql, **values):
    text = sql.replace("<lakehouse>", lake.config.lakehouse_root)
    for name, value in values.items():
        text = text.replace(f"<{name}>", str(value))
    return spark.sql(text).collect()


def test_the_page_has_the_documented_queries():
    assert len(sql_blocks()) == 5


def test_step_one_by_position_then_step_two_reads_gold_as_published_then(spark, lake):
    by_position, by_time, step_two, _, _ = sql_blocks()

    [found] = run(spark, lake, by_position)
    assert (found["binlog_file"], found["pos"], found["gtid"]) == ("mysql-bin.000003", 900, "0-1-41")
    rows = run(spark, lake, step_two, gold_version=found["gold_version"])
    assert [(r["id"], r["qty"]) for r in rows] == [(10, 3)]

    [at_time] = run(spark, lake, by_time)
    assert at_time["gold_version"] == found["gold_version"]


def test_the_consistent_cut_and_the_quarantine_summary(spark, lake):
    _, _, step_two, cut, quarantine = sql_blocks()

    [latest] = run(spark, lake, cut)
    assert (latest["table"], latest["binlog_file"], latest["pos"], latest["row_count"]) == (
        "orders",
        "mysql-bin.000004",
        50,
        2,
    )
    assert [r["qty"] for r in run(spark, lake, step_two, gold_version=latest["gold_version"])] == [5, 1]
    [dropped] = run(spark, lake, quarantine)
    assert (dropped["_quarantine_check"], dropped["rows_dropped"]) == ("between(qty, 0, 100)", 1)
