"""Gold's SCD type 2 history tables (docs/history.md): each publish makes gold's history equal to
silver's history as of the published position, and writes only the keys whose versions changed
since the version gold holds, not a copy of the whole history."""

from __future__ import annotations

import dataclasses

import pytest
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py

from binlake.config import HistoryConfig, HistoryTable
from binlake.contract.types import Kind
from binlake.gold.publish import HISTORY_SOURCE_PROPERTY, run_gold
from binlake.silver.run import run_silver

pytestmark = pytest.mark.slow  # history tables: three more Delta tables, versions derived per run

ORDERS = table("shop.orders", [col("id"), col("status", Kind.STRING)])


def published(spark, b: Bronze) -> tuple[list, list]:
    """(gold's history rows, silver's history rows at the version gold says it holds)."""
    gold, silver = b.lh.gold_history("shop", "orders"), b.lh.silver_history("shop", "orders")
    held = int(gold.properties(spark)[HISTORY_SOURCE_PROPERTY])
    order = ["id", "_cdc_valid_from"]
    return (
        [r.asDict() for r in gold.read(spark).orderBy(*order).collect()],
        [r.asDict() for r in silver.read_version(spark, held).orderBy(*order).collect()],
    )


def operations_since(spark, ref, version: int) -> list[str]:
    return [c["operation"] for c in ref.commits(spark, version + 1)]


@pytest.fixture(scope="module")
def first_published(spark, tmp_path_factory):
    """20 keys in silver with history, published once; shared by the tests below."""
    b = Bronze(spark, tmp_path_factory.mktemp("gold_history") / "lh")
    b.config = dataclasses.replace(b.config, history=HistoryConfig((HistoryTable("shop.orders"),)))
    b.schema(ORDERS)
    b.commit(*[b.insert(ORDERS, (1, 100, r), id=r, status="new") for r in range(20)])
    run_silver(spark, b.config)
    run_gold(spark, b.config)
    return b


@pytest.fixture
def lake(first_published):
    """The shared lakehouse; what a test commits is cut back after it (tests/delta_rollback.py)."""
    checkpoint = first_published.checkpoint()
    yield first_published
    first_published.rollback(checkpoint)


def test_the_first_publish_copies_silvers_history(spark, lake):
    gold_rows, silver_rows = published(spark, lake)
    assert len(gold_rows) == 20
    assert gold_rows == silver_rows


def test_a_later_publish_merges_only_the_keys_whose_versions_changed(spark, lake):
    gold = lake.lh.gold_history("shop", "orders")
    before = gold.latest_version(spark)
    lake.commit(
        lake.update(ORDERS, (2, 10, 0), {"id": 3, "status": "new"}, {"id": 3, "status": "paid"}),
        lake.delete(ORDERS, (2, 20, 0), id=7, status="new"),
        lake.insert(ORDERS, (2, 30, 0), id=99, status="new"),
    )
    run_silver(spark, lake.config)
    run_gold(spark, lake.config)

    gold_rows, silver_rows = published(spark, lake)
    assert gold_rows == silver_rows
    assert len(gold_rows) == 22  # key 3 has two versions now, key 99 one, key 7 its ended one
    assert operations_since(spark, gold, before) == ["MERGE", "SET TBLPROPERTIES"]
    merge = gold.commits(spark, before + 1, before + 1)[0]
    assert merge["operation"] == "MERGE"
    metrics = lake.lh.gold_history("shop", "orders").delta(spark).history(2).collect()[-1]["operationMetrics"]
    # Key 3: its old version ended and a new one; key 7: ended; key 99: new. Not 20 rows again.
    assert int(metrics["numTargetRowsInserted"]) == 2
    assert int(metrics["numTargetRowsUpdated"]) == 2


def test_a_publish_with_nothing_new_in_the_history_writes_nothing(spark, lake):
    gold = lake.lh.gold_history("shop", "orders")
    before = gold.latest_version(spark)
    lake.commit()  # a heartbeat: the position moves, no row changes
    run_silver(spark, lake.config)
    run_gold(spark, lake.config)
    assert gold.latest_version(spark) == before


def test_a_publish_killed_before_recording_the_version_converges_when_run_again(spark, lake):
    """The MERGE committed, the property did not: the next publish starts from the older
    version, replaces those keys' versions with silver's again and ends equal."""
    gold = lake.lh.gold_history("shop", "orders")
    held = gold.properties(spark)[HISTORY_SOURCE_PROPERTY]
    lake.commit(lake.update(ORDERS, (2, 10, 0), {"id": 5, "status": "new"}, {"id": 5, "status": "paid"}))
    run_silver(spark, lake.config)
    run_gold(spark, lake.config)
    spark.sql(f"ALTER TABLE {gold.sql} SET TBLPROPERTIES ('{HISTORY_SOURCE_PROPERTY}' = '{held}')")
    lake.commit(lake.update(ORDERS, (2, 20, 0), {"id": 6, "status": "new"}, {"id": 6, "status": "paid"}))
    run_silver(spark, lake.config)
    run_gold(spark, lake.config)

    gold_rows, silver_rows = published(spark, lake)
    assert gold_rows == silver_rows
    assert [r["status"] for r in gold_rows if r["id"] in (5, 6)] == ["new", "paid", "new", "paid"]


def test_a_history_rewritten_in_silver_is_copied_whole(spark, lake):
    """A commit other than a MERGE in silver's history (here: a tracked-columns change derives
    every key again and records it in a property) may have changed any key: gold copies it."""
    lake.config = dataclasses.replace(
        lake.config, history=HistoryConfig((HistoryTable("shop.orders", except_columns=("status",)),))
    )
    lake.commit(lake.update(ORDERS, (2, 10, 0), {"id": 1, "status": "new"}, {"id": 1, "status": "paid"}))
    run_silver(spark, lake.config)
    gold = lake.lh.gold_history("shop", "orders")
    before = gold.latest_version(spark)
    run_gold(spark, lake.config)

    gold_rows, silver_rows = published(spark, lake)
    assert gold_rows == silver_rows
    assert operations_since(spark, gold, before)[0] in ("WRITE", "CREATE OR REPLACE TABLE AS SELECT")
