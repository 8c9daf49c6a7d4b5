"""Publish groups: each group (``gold.groups``; by default one per source database) is published
at its own binlog position, so one table's trouble (a stopped table, an unfinished snapshot, a
failing check) holds back only its own group; the others go on publishing, and the blocked
group is named in the error and its exit code."""

from __future__ import annotations

import pytest
from gold_fixtures import Lake, col, table_schema  # tests/spark/gold_fixtures.py

from binlake.errors import NotReadyError, QualityCheckFailed
from binlake.gold.publish import run_gold
from binlake.gold.publish_log import gold_as_of, publish_as_of

pytestmark = pytest.mark.slow

ITEMS = table_schema("shop", "items", [col("id", "int", False), col("price", "double")], key=["id"])
ORDERS = table_schema("shop", "orders", [col("id", "int", False), col("qty", "int", False)], key=["id"])
CUSTOMERS = table_schema("crm", "customers", [col("id", "int", False), col("email", "string")], key=["id"])
P, LATER = (3, 900), (4, 50)


def two_databases(spark, tmp_path, crm_snapshot_done=True, **lake_args) -> Lake:
    """shop (items, orders) and crm (customers), silver applied up to P."""
    lake = Lake(spark, tmp_path, tables=("shop.*", "crm.*"), **lake_args)
    for schema in (ITEMS, ORDERS, CUSTOMERS):
        lake.add_table(schema)
    lake.silver("shop", "items", [{"id": 1, "price": 2.5, "seq": (2, 100, -1)}])
    lake.silver("shop", "orders", [{"id": 10, "qty": 3, "seq": (3, 700, 1)}])
    lake.silver("crm", "customers", [{"id": 7, "email": "a@example.com", "seq": (3, 800, 0)}])
    lake.snapshot("shop", "items", chunks=[((2, 100), (2, 150))])
    lake.snapshot("shop", "orders", chunks=[((2, 160), (2, 170))])
    lake.snapshot(
        "crm", "customers", chunks=[((2, 180), (2, 190)), ((2, 200), (2, 210)) if crm_snapshot_done else None]
    )
    lake.heartbeats([(*P, "0-1-41", "2026-11-01 08:00:00"), (*LATER, "0-1-42", "2026-11-01 09:00:00")])
    lake.progress("shop", "items", *P, also=[("shop", "orders"), ("crm", "customers")])
    return lake


def test_a_database_whose_snapshot_is_unfinished_blocks_only_its_own_group(spark, tmp_path):
    lake = two_databases(spark, tmp_path, crm_snapshot_done=False)
    with pytest.raises(NotReadyError) as err:
        run_gold(spark, lake.config)
    message = str(err.value)
    assert message.startswith(
        "1 of 2 publish groups blocked (the others published: shop published at mysql-bin.000003:900)"
    )
    assert "group crm: gold not published at mysql-bin.000003:900" in message
    assert "crm.customers blocks: snapshot snap1 has 1 of 2 chunks complete" in message
    assert err.value.exit_code == 10
    published = err.value.result
    assert [g.group for g in published.groups] == ["shop"]
    assert published.status == "published"
    assert lake.gold("shop", "orders").count() == 1
    assert not lake.lh.gold("crm", "customers").exists(spark)
    log = {(r["db"], r["table"]): r["publish_group"] for r in lake.publish_log().collect()}
    assert log == {("shop", "items"): "shop", ("shop", "orders"): "shop"}

    # Once the snapshot is complete, crm publishes; shop, unchanged, is not written again.
    lake.finish_chunk("crm", "customers", "snap1", 1, (2, 200), (2, 210))
    lake.progress("shop", "items", *P, also=[("shop", "orders"), ("crm", "customers")])
    result = run_gold(spark, lake.config)
    assert {g.group: g.status for g in result.groups} == {"crm": "published", "shop": "unchanged"}
    assert "gold group crm published 1 table at mysql-bin.000003:900" in result.summary()


def test_a_failing_check_in_one_group_lets_the_other_publish_and_fails_the_run(spark, tmp_path):
    lake = two_databases(
        spark, tmp_path, checks={"crm.customers": [{"column": "email", "regex": "^z", "severity": "fail"}]}
    )
    with pytest.raises(QualityCheckFailed) as err:
        run_gold(spark, lake.config)
    assert err.value.exit_code == 7
    assert "group crm: gold not published at mysql-bin.000003:900, the last good gold versions are kept" in str(
        err.value
    )
    assert [g.group for g in err.value.result.groups] == ["shop"]
    attempts = {(r["publish_group"], r["status"]) for r in lake.publish_log().collect()}
    assert attempts == {("shop", "published"), ("crm", "failed")}


def test_a_configured_group_keeps_a_consistent_cut_across_databases(spark, tmp_path):
    lake = two_databases(spark, tmp_path, crm_snapshot_done=False, groups={"all": ["shop.*", "crm.*"]})
    with pytest.raises(NotReadyError) as err:
        run_gold(spark, lake.config)
    # One group: its own error, nothing published.
    assert str(err.value).startswith("gold not published at mysql-bin.000003:900")
    assert not lake.lh.gold("shop", "orders").exists(spark)


def test_each_group_moves_on_alone_and_gold_as_of_reads_each_tables_own_publish(spark, tmp_path):
    lake = two_databases(spark, tmp_path)
    first = run_gold(spark, lake.config)
    assert {g.group for g in first.groups} == {"crm", "shop"}
    # shop moves on to LATER; crm is held at P by a check that fails from now on.
    lake.silver("shop", "orders", [{"id": 10, "qty": 5, "seq": (4, 40, 0)}])
    lake.progress("shop", "items", *LATER, also=[("shop", "orders")])
    checked = lake.with_checks({"crm.customers": [{"column": "email", "regex": "^z", "severity": "fail"}]})
    with pytest.raises(QualityCheckFailed):
        run_gold(spark, checked.config)
    assert lake.gold("shop", "orders").first()["qty"] == 5
    assert publish_as_of(spark, lake.config, "shop", "orders")["file_index"] == LATER[0]
    row = publish_as_of(spark, lake.config, "crm", "customers", position="mysql-bin.000004:50")
    assert (row["file_index"], row["pos"], row["publish_group"]) == (*P, "crm")
    assert gold_as_of(spark, lake.config, "shop", "orders", position="mysql-bin.000003:900").first()["qty"] == 3


def test_a_table_silver_stopped_is_named_with_its_recovery_by_gold_and_status(spark, tmp_path):
    from binlake.ops.status import collect_status, format_status

    lake = two_databases(spark, tmp_path)
    reason = (
        "shop.x: ALTER TABLE customers MODIFY id SMALLINT narrows id: re-snapshot it with "
        "binlake snapshot --table crm.customers"
    )
    lake.progress("crm", "customers", *P, stopped=reason)
    with pytest.raises(NotReadyError) as err:
        run_gold(spark, lake.config)
    assert f"crm.customers blocks: silver stopped it: {reason}" in str(err.value)
    assert [g.group for g in err.value.result.groups] == ["shop"]
    status = collect_status(spark, lake.config)
    row = {t["table"]: t for t in status["tables"]}["crm.customers"]
    assert (row["group"], row["stopped"]) == ("crm", reason)
    assert f"crm.customers: silver stopped it: {reason}" in status["warnings"]
    assert "STOPPED" in format_status(status)
