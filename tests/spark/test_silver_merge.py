"""Silver MERGE semantics: latest change per key wins by _cdc_seq, whatever the batching."""

from __future__ import annotations

import re

import pytest
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py
from chispa import assert_df_equality

from binlake.contract.types import Kind
from binlake.silver.run import run_silver

ORDERS = table(
    "shop.orders", [col("id", comment="order id"), col("v", Kind.STRING), col("d", Kind.DATE)], comment="all orders"
)
CODES = table("shop.codes", [col("code", Kind.STRING), col("v", Kind.STRING)], key=("code",))


@pytest.fixture(scope="module")
def bronze_base(spark, tmp_path_factory):
    """Bronze with the orders schema and nothing else, shared by the tests below: each
    test's changes (its bronze commits, the silver tables and progress its runs create) are
    cut back after it (tests/delta_rollback.py), so every test starts from this state."""
    b = Bronze(spark, tmp_path_factory.mktemp("silver_merge") / "lh")
    b.schema(ORDERS)
    return b


@pytest.fixture
def bronze(bronze_base):
    checkpoint = bronze_base.checkpoint()
    yield bronze_base
    bronze_base.rollback(checkpoint)


def silver(spark, b, name="shop.orders"):
    db, t = name.split(".")
    return b.lh.silver(db, t).read(spark)


def current(spark, b, name="shop.orders", cols=("id", "v")):
    """Live rows as (cols...) — what gold would publish."""
    return silver(spark, b, name).where("NOT _cdc_deleted").select(*cols)


def expect(spark, rows, schema="id INT, v STRING"):
    return spark.createDataFrame(rows, schema)


def test_several_changes_for_one_key_in_one_batch_keep_the_latest(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, v="a"),
        b.update(ORDERS, (1, 200, 0), {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
        b.update(ORDERS, (1, 200, 1), {"id": 1, "v": "b"}, {"id": 1, "v": "c"}),
        b.insert(ORDERS, (1, 300, 0), id=2, v="x"),
    )
    result = run_silver(spark, b.config)
    assert_df_equality(
        current(spark, b),
        expect(spark, [(1, "c"), (2, "x")]),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
    assert result.table("shop.orders").changes == 4
    assert "shop.orders" in result.summary()


def test_sequence_is_exposed_and_the_op_recorded(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (3, 100, 0), id=1, v="a"),
        b.update(ORDERS, (3, 150, 2), {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
    )
    run_silver(spark, b.config)
    row = (
        silver(spark, b)
        .select("_cdc_seq.file_index", "_cdc_seq.pos", "_cdc_seq.row", "_cdc_op", "_cdc_deleted")
        .first()
    )
    assert tuple(row) == (3, 150, 2, "update", False)


def test_delete_becomes_a_tombstone_that_keeps_its_sequence(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, v="a"), b.insert(ORDERS, (1, 100, 1), id=2, v="b"))
    run_silver(spark, b.config)
    b.commit(b.delete(ORDERS, (1, 200, 0), id=1, v="a"))
    run_silver(spark, b.config)
    tomb = silver(spark, b).where("id = 1").select("v", "_cdc_deleted", "_cdc_seq.pos", "_cdc_op").first()
    assert tuple(tomb) == ("a", True, 200, "delete")
    assert_df_equality(current(spark, b), expect(spark, [(2, "b")]), ignore_nullable=True, ignore_metadata=True)


def test_a_late_older_record_never_resurrects_a_delete(spark, bronze):
    b = bronze
    b.commit(b.delete(ORDERS, (1, 200, 0), id=1, v="a"))
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, v="a"))  # older, arrives later
    run_silver(spark, b.config)
    assert current(spark, b).count() == 0


def test_silver_reads_only_what_is_new_since_its_progress(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, v="a"))
    first = run_silver(spark, b.config)
    second = run_silver(spark, b.config)
    assert first.table("shop.orders").changes == 1
    assert second.table("shop.orders").changes == 0
    prog = b.lh.silver_progress.read(spark).where("`table` = 'orders'").first()
    assert prog["changelog_version"] == b.lh.changelog.delta(spark).history(1).first()["version"]
    assert (prog["applied_file"], prog["applied_file_index"], prog["applied_pos"]) == ("mysql-bin.000001", 1, 101)


def test_a_batch_replayed_after_a_crash_before_progress_changes_nothing(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, v="a"),
        b.delete(ORDERS, (1, 110, 0), id=1, v="a"),
        b.insert(ORDERS, (1, 120, 0), id=2, v="b"),
    )
    run_silver(spark, b.config)
    before = silver(spark, b).collect()
    # Simulate kill -9 after the MERGE, before the progress write: forget progress.
    b.lh.silver_progress.delta(spark).delete()
    run_silver(spark, b.config)
    assert sorted(map(tuple, silver(spark, b).collect())) == sorted(map(tuple, before))


@pytest.mark.slow
def test_snapshot_applied_after_newer_events_changes_nothing(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (2, 500, 0), id=1, v="new"))
    run_silver(spark, b.config)
    b.chunk(ORDERS, [{"id": 1, "v": "old"}, {"id": 2, "v": "snap"}], lw=(2, 100))
    result = run_silver(spark, b.config)
    assert_df_equality(
        current(spark, b),
        expect(spark, [(1, "new"), (2, "snap")]),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
    assert result.table("shop.orders").snapshot_rows == 2
    snap = (
        silver(spark, b)
        .where("id = 2")
        .select("_cdc_seq.file_index", "_cdc_seq.pos", "_cdc_seq.row", "_cdc_op")
        .first()
    )
    assert tuple(snap) == (2, 100, -1, "snapshot")


def test_a_chunk_without_manifest_is_invisible(spark, bronze):
    b = bronze
    b.chunk(ORDERS, [{"id": 1, "v": "half"}], lw=(2, 100), manifest=False)
    run_silver(spark, b.config)
    assert silver(spark, b).count() == 0


@pytest.mark.slow
def test_chunk_reconciliation_tombstones_a_missed_delete_but_not_a_key_changed_after_lw(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, v="kept"),
        b.insert(ORDERS, (1, 100, 1), id=2, v="missed-delete"),
        b.insert(ORDERS, (1, 100, 2), id=3, v="after-lw"),
        b.insert(ORDERS, (1, 100, 3), id=50, v="other chunk"),
    )
    b.commit(b.update(ORDERS, (2, 300, 0), {"id": 3, "v": "after-lw"}, {"id": 3, "v": "changed"}))
    run_silver(spark, b.config)
    # Chunk [1, 10) at lw (2, 200) returned only id 1: id 2 was deleted without a binlog
    # event (drift); id 3 changed after lw so its absence proves nothing; id 50 is outside.
    b.chunk(ORDERS, [{"id": 1, "v": "kept"}], lw=(2, 200), start=[1], end=[10])
    result = run_silver(spark, b.config)
    assert_df_equality(
        current(spark, b),
        expect(spark, [(1, "kept"), (3, "changed"), (50, "other chunk")]),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
    assert result.table("shop.orders").reconciled == 1
    tomb = silver(spark, b).where("id = 2").select("_cdc_seq.file_index", "_cdc_seq.pos", "_cdc_seq.row").first()
    assert tuple(tomb) == (2, 200, -2)  # just below the snapshot's own rows


def test_primary_key_update_tombstones_the_old_key(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, v="a"))
    run_silver(spark, b.config)
    b.commit(b.update(ORDERS, (1, 200, 0), {"id": 1, "v": "a"}, {"id": 7, "v": "a"}))
    run_silver(spark, b.config)
    assert_df_equality(current(spark, b), expect(spark, [(7, "a")]), ignore_nullable=True, ignore_metadata=True)
    assert silver(spark, b).where("id = 1 AND _cdc_deleted").count() == 1


def test_primary_key_swap_back_in_one_batch(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, v="a"),
        b.update(ORDERS, (1, 200, 0), {"id": 1, "v": "a"}, {"id": 7, "v": "a"}),
        b.update(ORDERS, (1, 300, 0), {"id": 7, "v": "a"}, {"id": 1, "v": "z"}),
    )
    run_silver(spark, b.config)
    assert_df_equality(current(spark, b), expect(spark, [(1, "z")]), ignore_nullable=True, ignore_metadata=True)


@pytest.mark.slow
def test_truncate_tombstones_every_older_row_even_from_a_late_snapshot(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, v="a"), b.insert(ORDERS, (1, 100, 1), id=2, v="b"))
    run_silver(spark, b.config)
    b.commit(b.truncate(ORDERS, (1, 200, 0)), b.insert(ORDERS, (1, 300, 0), id=3, v="after"))
    result = run_silver(spark, b.config)
    assert result.table("shop.orders").truncated == 2
    assert_df_equality(current(spark, b), expect(spark, [(3, "after")]), ignore_nullable=True, ignore_metadata=True)
    # A chunk read before the TRUNCATE but committed after it must not bring rows back.
    b.chunk(ORDERS, [{"id": 1, "v": "a"}, {"id": 9, "v": "pre-truncate"}], lw=(1, 150), start=[1], end=[3])
    run_silver(spark, b.config)
    assert_df_equality(current(spark, b), expect(spark, [(3, "after")]), ignore_nullable=True, ignore_metadata=True)


def test_zero_dates_become_null_and_are_counted(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, v="a", d="0000-00-00"),
        b.insert(ORDERS, (1, 100, 1), id=2, v="b", d="2026-01-31"),
    )
    b.chunk(ORDERS, [{"id": 3, "v": "c", "d": "0000-00-00"}], lw=(1, 50))
    result = run_silver(spark, b.config)
    assert result.table("shop.orders").zero_dates == 2
    rows = {r["id"]: r["d"] for r in silver(spark, b).collect()}
    assert rows[1] is None
    assert rows[3] is None
    assert str(rows[2]) == "2026-01-31"
    run_silver(spark, b.config)
    assert b.lh.silver_progress.read(spark).where("`table` = 'orders'").first()["zero_dates"] == 2


def test_silver_table_is_typed_clustered_commented_with_cdf_and_deletion_vectors(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, v="a"))
    run_silver(spark, b.config)
    ref = b.lh.silver("shop", "orders")
    detail = spark.sql(f"DESCRIBE DETAIL {ref.sql}").first()
    assert detail["clusteringColumns"] == ["id"]
    assert detail["description"] == "all orders"
    props = detail["properties"]
    assert props["delta.enableChangeDataFeed"] == "true"
    assert props["delta.enableDeletionVectors"] == "true"
    fields = {f.name: f for f in ref.read(spark).schema.fields}
    assert fields["id"].dataType.simpleString() == "int"
    assert fields["d"].dataType.simpleString() == "date"
    assert fields["id"].metadata.get("comment") == "order id"
    assert fields["_cdc_seq"].dataType.simpleString() == "struct<file_index:bigint,pos:bigint,row:int>"


def test_run_silver_checks_its_arguments(spark):
    with pytest.raises(TypeError, match=re.escape("config must be a binlake.config.Config, got dict")):
        run_silver(spark, {})


@pytest.mark.slow
def test_a_snapshot_read_right_after_a_truncate_keeps_its_rows(spark, bronze):
    # gh-ost's cut-over on a quiet source: the RENAME (like a TRUNCATE) empties the name and
    # the snapshot taken next has the statement's own end position as its low watermark.
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, v="old"), b.insert(ORDERS, (1, 100, 1), id=2, v="old"))
    run_silver(spark, b.config)
    b.commit(b.truncate(ORDERS, (1, 200, 0)))
    b.chunk(ORDERS, [{"id": 1, "v": "new"}, {"id": 5, "v": "new"}], lw=(1, 200), start=[1], end=[9])
    run_silver(spark, b.config)
    assert_df_equality(
        current(spark, b),
        expect(spark, [(1, "new"), (5, "new")]),
        ignore_nullable=True,
        ignore_metadata=True,
        ignore_row_order=True,
    )
    # and a later chunk read before the TRUNCATE still brings nothing back
    b.chunk(ORDERS, [{"id": 2, "v": "old"}], lw=(1, 150), start=[2], end=[3])
    run_silver(spark, b.config)
    assert_df_equality(
        current(spark, b),
        expect(spark, [(1, "new"), (5, "new")]),
        ignore_nullable=True,
        ignore_metadata=True,
        ignore_row_order=True,
    )


def test_a_key_returned_by_its_own_chunk_survives_a_neighbour_it_only_sorts_into_in_spark(spark, bronze):
    # utf8mb4_general_ci: 'é' = 'E' < 'f', so MySQL's chunk [-inf, 'f') returned it; by code
    # point (binary, lower or upper case) 'é' sorts after 'f', into the chunk ['f', +inf).
    b = bronze
    b.schema(CODES)
    b.chunk(CODES, [{"code": "a", "v": "s"}, {"code": "é", "v": "s"}], lw=(1, 100), end=["f"])
    b.chunk(CODES, [{"code": "g", "v": "s"}], lw=(1, 200), start=["f"])
    result = run_silver(spark, b.config)
    assert_df_equality(
        current(spark, b, "shop.codes", ("code", "v")),
        expect(spark, [("a", "s"), ("g", "s"), ("é", "s")], "code STRING, v STRING"),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
    assert result.table("shop.codes").reconciled == 0


@pytest.mark.slow
def test_a_neighbour_committed_first_tombstones_only_until_the_key_s_own_chunk_arrives(spark, bronze):
    b = bronze
    b.schema(CODES)
    b.commit(b.insert(CODES, (1, 50, 0), code="é", v="old"), b.insert(CODES, (1, 50, 1), code="h", v="gone"))
    run_silver(spark, b.config)
    # Chunk ['f', +inf) commits first; 'h' was deleted without a binlog event (drift).
    b.chunk(CODES, [{"code": "g", "v": "s"}], lw=(1, 200), start=["f"])
    run_silver(spark, b.config)
    assert current(spark, b, "shop.codes", ("code",)).where("code = 'h'").count() == 0
    tomb = (
        silver(spark, b, "shop.codes")
        .where("code = 'h'")
        .select("_cdc_seq.file_index", "_cdc_seq.pos", "_cdc_seq.row")
        .first()
    )
    assert tuple(tomb) == (1, 200, -2)
    # The next wave's chunk [-inf, 'f') returns 'é': its row outranks the provisional tombstone.
    b.chunk(CODES, [{"code": "é", "v": "s"}], lw=(1, 300), end=["f"])
    run_silver(spark, b.config)
    assert_df_equality(
        current(spark, b, "shop.codes", ("code", "v")),
        expect(spark, [("g", "s"), ("é", "s")], "code STRING, v STRING"),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
