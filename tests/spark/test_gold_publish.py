"""Gold publishes a whole group of tables at one binlog position P, only when Invariant S
holds for every table, and records each publish in the publish log (docs/architecture.md, "Gold")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from chispa import assert_df_equality
from gold_fixtures import Lake, col, table_schema  # tests/spark/gold_fixtures.py

from binlake.errors import LakehouseError, NotReadyError
from binlake.gold.publish import run_gold
from binlake.gold.publish_log import gold_as_of, publish_as_of

pytestmark = pytest.mark.slow

ITEMS = table_schema(
    "shop",
    "items",
    [
        col("id", "int", False, "item number"),
        col("name", "string", False, "what the customer sees"),
        col("price", "double", True, "unit price in EUR"),
        col("added", "date"),
    ],
    key=["id"],
    comment="things we sell",
)
ORDERS = table_schema(
    "shop", "orders", [col("id", "int", False), col("item_id", "int"), col("qty", "int", False)], key=["id"]
)

P = (3, 900)


def item(i, name, price, seq, deleted=False, commit_ts="2026-11-01 08:00:00"):
    return {"id": i, "name": name, "price": price, "seq": seq, "deleted": deleted, "commit_ts": commit_ts}


def ready_lake(spark, tmp_path, checks=None, at=P) -> Lake:
    """Both tables snapshotted (hw before P), silver applied up to P, one tombstone in items."""
    lake = Lake(spark, tmp_path, checks=checks)
    lake.add_table(ITEMS)
    lake.add_table(ORDERS)
    lake.silver(
        "shop",
        "items",
        [
            item(1, "pen", 2.5, (2, 100, -1)),
            item(2, "ink", 7.0, (3, 500, 0)),
            item(3, "gone", 1.0, (3, 600, 0), deleted=True),
        ],
    )
    lake.silver("shop", "orders", [{"id": 10, "item_id": 1, "qty": 3, "seq": (3, 700, 1)}])
    lake.snapshot("shop", "items", "snap1", chunks=[((2, 100), (2, 150)), ((2, 160), (2, 170))])
    lake.snapshot("shop", "orders", "snap1", chunks=[((2, 180), (2, 190))])
    lake.heartbeats(
        [
            (3, 400, "0-1-40", "2026-11-01 07:59:00"),
            (*at, "0-1-41", "2026-11-01 08:00:00"),
            (4, 50, "0-1-42", "2026-11-01 09:00:00"),
        ]
    )  # the last one is captured, not yet in silver
    lake.progress("shop", "items", *at, also=[("shop", "orders")])
    return lake


@pytest.fixture(scope="module")
def base(spark, tmp_path_factory):
    """A ready, never-published lake shared by the tests below; each test's changes are rolled back."""
    return ready_lake(spark, tmp_path_factory.mktemp("gold_base"))


@pytest.fixture
def lake(base):
    checkpoint = base.checkpoint()
    yield base
    base.rollback(checkpoint)


@pytest.fixture(scope="module")
def published(spark, tmp_path_factory):
    """A lake published once; tests only read it."""
    lake = ready_lake(spark, tmp_path_factory.mktemp("gold_published"))
    return lake, run_gold(spark, lake.config)


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory):
    """Published at mysql-bin.000003:900 (orders qty 3), re-run unchanged, then orders changed
    and both tables published again at mysql-bin.000004:50."""
    lake = ready_lake(spark, tmp_path_factory.mktemp("gold_history"))
    first = run_gold(spark, lake.config)
    versions = {t: lake.gold_version("shop", t) for t in ("items", "orders")}
    again = run_gold(spark, lake.config)
    lake.silver(
        "shop",
        "orders",
        [{"id": 10, "item_id": 1, "qty": 5, "seq": (4, 40, 0)}, {"id": 11, "item_id": 2, "qty": 1, "seq": (4, 45, 0)}],
    )
    lake.progress("shop", "items", 4, 50, also=[("shop", "orders")])
    third = run_gold(spark, lake.config)
    return lake, first, again, third, versions


def test_gold_holds_the_live_silver_rows_with_documented_metadata_and_comments(spark, published):
    lake, result = published

    assert result.status == "published"
    assert (result.position.file_index, result.position.pos, str(result.position)) == (3, 900, "mysql-bin.000003:900")
    expected = spark.createDataFrame(
        [(1, "pen", 2.5, None, (2, 100, -1)), (2, "ink", 7.0, None, (3, 500, 0))],
        "id INT, name STRING, price DOUBLE, added DATE, _cdc_seq STRUCT<file_index: BIGINT, pos: BIGINT, row: INT>",
    )
    gold = lake.gold("shop", "items")
    assert gold.columns == ["id", "name", "price", "added", "_cdc_seq", "_cdc_commit_ts"]
    assert_df_equality(
        gold.drop("_cdc_commit_ts"), expected, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )
    fields = {f.name: f.metadata.get("comment") for f in gold.schema.fields}
    assert fields["name"] == "what the customer sees"
    assert fields["price"] == "unit price in EUR"
    assert fields["_cdc_seq"].startswith("Binlog change sequence")
    detail = spark.sql(f"DESCRIBE DETAIL {lake.lh.gold('shop', 'items').sql}").first()
    assert detail["description"] == "things we sell"
    assert lake.gold("shop", "orders").count() == 1


def test_tombstones_never_reach_gold(published):
    lake, _ = published

    assert lake.gold("shop", "items").where("id = 3").count() == 0
    assert "_cdc_deleted" not in lake.gold("shop", "items").columns


def test_the_publish_log_records_position_gtid_time_versions_counts_and_checks(spark, published):
    lake, result = published

    rows = {r["table"]: r for r in lake.publish_log().collect()}
    assert set(rows) == {"items", "orders"}
    items = rows["items"]
    assert items["publish_id"] == rows["orders"]["publish_id"] == result.publish_id
    assert (items["binlog_file"], items["file_index"], items["pos"]) == ("mysql-bin.000003", 3, 900)
    assert items["gtid"] == "0-1-41"  # the latest at or before P, not the one captured after it
    assert str(items["source_time"]) == "2026-11-01 08:00:00"
    assert items["gold_version"] == lake.gold_version("shop", "items")
    assert items["silver_version"] == int(lake.lh.silver("shop", "items").delta(spark).history(1).first()["version"])
    assert (items["row_count"], rows["orders"]["row_count"]) == (2, 1)
    assert items["status"] == "published"
    assert items["published_at"] is not None
    checks = json.loads(items["checks"])
    by_name = {c["name"]: c for c in checks["results"]}
    assert by_name["primary_key_unique(id)"]["success"] is True
    assert by_name["primary_key_not_null(id)"]["success"] is True
    assert by_name["not_null(name)"]["severity"] == "fail"
    assert by_name["row_count_equals_silver(2)"]["observed_value"] == 2
    assert {c["engine"] for c in checks["results"]} == {"spark"}  # one Spark job per table, no per-check scans


def test_a_table_with_an_unfinished_snapshot_blocks_the_whole_group(spark, lake):
    lake.snapshot("shop", "orders", "snap2", chunks=[((3, 200), (3, 300)), None], planned_at="2026-11-01 07:50:00")
    lake.progress("shop", "orders", *P)

    with pytest.raises(
        NotReadyError,
        match=r"shop\.orders blocks: snapshot snap2 has 1 of 2 chunks complete "
        r"\(first missing chunk 1\): run binlake snapshot to finish it",
    ) as err:
        run_gold(spark, lake.config)

    assert set(err.value.blockers) == {"shop.orders"}
    assert not lake.lh.gold("shop", "items").exists(spark)
    assert not lake.lh.gold("shop", "orders").exists(spark)


def test_tables_at_different_positions_block_the_group(spark, lake):
    lake.progress("shop", "items", 4, 50)

    with pytest.raises(
        NotReadyError,
        match=r"shop\.orders blocks: silver applied the change log up to "
        r"mysql-bin\.000003:900, the rest of the group is at mysql-bin\.000004:50: "
        r"run binlake silver",
    ):
        run_gold(spark, lake.config)

    assert not lake.lh.publish_log.exists(spark) or lake.publish_log().count() == 0


def test_a_chunk_whose_high_watermark_is_beyond_P_blocks(spark, lake):
    lake.snapshot("shop", "orders", "snap2", chunks=[((3, 850), (3, 950))], planned_at="2026-11-01 07:50:00")
    lake.progress("shop", "orders", *P)

    with pytest.raises(
        NotReadyError,
        match=r"shop\.orders blocks: snapshot snap2 chunk 0 has high watermark "
        r"mysql-bin\.000003:950 beyond silver's position mysql-bin\.000003:900",
    ):
        run_gold(spark, lake.config)


def test_a_completed_chunk_silver_has_not_applied_yet_blocks(spark, lake):
    applied = lake.chunks_version()
    lake.snapshot("shop", "orders", "snap2", chunks=[((3, 800), (3, 850))], planned_at="2026-11-01 07:50:00")
    lake.progress("shop", "orders", *P, chunks_version=applied)

    with pytest.raises(
        NotReadyError,
        match=r"shop\.orders blocks: snapshot snap2: 1 completed chunk is not yet "
        r"applied to silver: run binlake silver",
    ):
        run_gold(spark, lake.config)


def test_silver_rows_beyond_its_recorded_progress_block(spark, lake):
    lake.silver("shop", "orders", [{"id": 10, "item_id": 1, "qty": 4, "seq": (4, 20, 0)}])

    with pytest.raises(
        NotReadyError,
        match=r"shop\.orders blocks: silver holds changes up to #4:20 beyond its "
        r"recorded progress mysql-bin\.000003:900",
    ):
        run_gold(spark, lake.config)


def test_publishing_the_same_silver_state_again_changes_nothing(history):
    lake, first, again, _, _versions = history

    assert again.status == "unchanged"
    assert again.publish_id == first.publish_id
    assert "gold unchanged: already published at mysql-bin.000003:900" in again.summary()
    assert lake.publish_log().where(f"publish_id = '{first.publish_id}'").count() == 2


def test_a_new_position_with_unchanged_silver_moves_P_but_keeps_that_tables_gold_version(history):
    lake, _, _, third, versions = history

    assert str(third.position) == "mysql-bin.000004:50"
    assert lake.gold_version("shop", "items") == versions["items"]
    assert lake.gold_version("shop", "orders") > versions["orders"]
    latest = {r["table"]: r for r in lake.publish_log().where(f"publish_id = '{third.publish_id}'").collect()}
    assert latest["items"]["gold_version"] == versions["items"]
    assert latest["items"]["pos"] == 50
    assert latest["items"]["gtid"] == "0-1-42"


def test_gold_as_of_a_position_or_a_time_reads_the_version_published_then(spark, history):
    lake = history[0]

    def qtys(**when):
        return sorted(r["qty"] for r in gold_as_of(spark, lake.config, "shop", "orders", **when).collect())

    assert qtys(position="mysql-bin.000003:950") == [3]
    assert qtys(position=(4, 50)) == [1, 5]
    assert qtys(time="2026-11-01T08:30:00Z") == [3]
    assert qtys(time="2026-11-01T10:30:00+01:00") == [1, 5]
    assert qtys() == [1, 5]
    assert publish_as_of(spark, lake.config, "shop", "orders", position=(3, 900))["gtid"] == "0-1-41"


def test_gold_as_of_explains_bad_arguments_and_missing_publishes(spark, history):
    lake = history[0]

    with pytest.raises(ValueError, match=r"^give position or time, not both$"):
        gold_as_of(spark, lake.config, "shop", "orders", position=(3, 900), time="2026-11-01T08:00:00Z")
    with pytest.raises(
        ValueError,
        match=r'^position must be "FILE:POS" such as "mysql-bin.000003:1234" or a '
        r"\(file_index, pos\) tuple, got 'yesterday'$",
    ):
        gold_as_of(spark, lake.config, "shop", "orders", position="yesterday")
    with pytest.raises(ValueError, match=r"^time must be a datetime or an ISO-8601 string"):
        gold_as_of(spark, lake.config, "shop", "orders", time="noon")
    with pytest.raises(NotReadyError, match=r"no gold publish of shop\.orders at or before mysql-bin\.000002:5"):
        gold_as_of(spark, lake.config, "shop", "orders", position="mysql-bin.000002:5")
    with pytest.raises(
        NotReadyError,
        match=r"no gold publish of shop\.orders with source time at or before "
        r"2026-10-01 00:00:00\.000000 UTC",
    ):
        gold_as_of(spark, lake.config, "shop", "orders", time="2026-10-01T00:00:00Z")


def test_nothing_to_publish_or_read_before_silver_has_run(spark, tmp_path):
    lake = Lake(spark, tmp_path)

    with pytest.raises(NotReadyError, match="no captured table has silver progress yet; run binlake silver first"):
        run_gold(spark, lake.config)
    with pytest.raises(NotReadyError, match="gold has never been published: run binlake gold first"):
        gold_as_of(spark, lake.config, "shop", "orders")


def test_an_unwritable_gold_location_is_one_clear_error_and_publishes_nothing(spark, lake):
    blocked = Path(lake.lh.gold("shop", "orders").path)
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("not a directory")  # as good as a read-only mount, also for root
    try:
        with pytest.raises(
            LakehouseError,
            match=r"^cannot write .*/gold/shop/orders: .*; nothing was published \(the last "
            r"publish stays current\): fix the location's permissions or space",
        ):
            run_gold(spark, lake.config)
    finally:
        blocked.unlink()

    assert not lake.lh.publish_log.exists(spark) or lake.publish_log().count() == 0


def test_a_refused_write_mid_group_puts_the_tables_already_written_back(spark, tmp_path):
    """items is written before orders; when orders' location refuses the write (EPERM from
    ``chattr +i``, which binds root too), items goes back to the version the last publish
    names, so even readers of the latest versions never see half a publish."""
    lake = ready_lake(spark, tmp_path)
    first = run_gold(spark, lake.config)
    published_items = lake.gold_version("shop", "items")
    lake.silver("shop", "items", [item(1, "pen", 3.0, (4, 10, 0))])
    lake.silver("shop", "orders", [{"id": 10, "item_id": 1, "qty": 9, "seq": (4, 20, 0)}])
    lake.progress("shop", "items", 4, 50, also=[("shop", "orders")])
    orders_dir = lake.lh.gold("shop", "orders").path
    if subprocess.run(["chattr", "-R", "+i", orders_dir], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted on this file system")
    try:
        with pytest.raises(
            LakehouseError,
            match=r"^cannot write .*/gold/shop/orders: .*Operation not permitted; "
            r"nothing was published",
        ):
            run_gold(spark, lake.config)
    finally:
        subprocess.run(["chattr", "-R", "-i", orders_dir], capture_output=True)

    latest = lake.gold("shop", "items")
    at_publish = (
        spark.read.format("delta").option("versionAsOf", published_items).load(lake.lh.gold("shop", "items").path)
    )
    assert_df_equality(latest, at_publish, ignore_row_order=True)
    assert {r["publish_id"] for r in lake.publish_log().collect()} == {first.publish_id}

    again = run_gold(spark, lake.config)  # fixed: the next run publishes
    assert again.status == "published"
    assert lake.gold("shop", "orders").first()["qty"] == 9
