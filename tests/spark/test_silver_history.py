"""SCD type 2 history tables (docs/history.md): one row per version of each key, derived from
the records silver applies, ordered by _cdc_seq, the same whatever the batches' order."""

from __future__ import annotations

import dataclasses

import pytest
from bronze_fixtures import T0, Bronze, col, table  # tests/spark/bronze_fixtures.py

from binlake.config import HistoryConfig, HistoryTable
from binlake.contract.types import Kind
from binlake.silver.history import refs
from binlake.silver.run import run_silver

# Every test runs silver two or three times with history tables (three more Delta tables per
# table, each run deriving versions): left out of `make test-fast`, run by `make test`.
pytestmark = pytest.mark.slow

ORDERS = table("shop.orders", [col("id"), col("status", Kind.STRING), col("note", Kind.STRING)])


def keeping_history(b: Bronze, *rules: HistoryTable) -> Bronze:
    b.config = dataclasses.replace(b.config, history=HistoryConfig(rules or (HistoryTable("shop.orders"),)))
    return b


@pytest.fixture(scope="module")
def shared(spark, tmp_path_factory):
    """Bronze with the orders schema and nothing else, shared by the tests below; see plain."""
    b = Bronze(spark, tmp_path_factory.mktemp("silver_history") / "lh")
    b.schema(ORDERS)
    return b


@pytest.fixture
def plain(shared):
    """The shared bronze, keeping no history; what the test changes (bronze commits, silver and
    history tables, the config) is cut back after it (tests/delta_rollback.py)."""
    checkpoint = shared.checkpoint()
    yield shared
    shared.rollback(checkpoint)


@pytest.fixture
def bronze(plain):
    return keeping_history(plain)


def versions(spark, b, name="shop.orders", cols=("id", "status")):
    """The history as tuples: (*cols, valid_from, valid_to, is_current, ended_by_delete)."""
    db, t = name.split(".")
    rows = b.lh.silver_history(db, t).read(spark).orderBy(*cols[:1], "_cdc_valid_from").collect()
    seq = lambda s: None if s is None else tuple(s)  # noqa: E731
    return [
        (*(r[c] for c in cols), seq(r._cdc_valid_from), seq(r._cdc_valid_to), r._cdc_is_current, r._cdc_ended_by_delete)
        for r in rows
    ]


def test_changes_in_the_same_second_and_the_same_statement_are_versions_in_sequence_order(spark, bronze):
    b = bronze
    # Every fixture record has the same commit time: only _cdc_seq can order them. The
    # multi-row UPDATE at (1, 200) changes key 1 in row 1 and key 2 in row 0.
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="new"),
        b.insert(ORDERS, (1, 100, 1), id=2, status="new"),
        b.update(ORDERS, (1, 200, 0), {"id": 2, "status": "new"}, {"id": 2, "status": "paid"}),
        b.update(ORDERS, (1, 200, 1), {"id": 1, "status": "new"}, {"id": 1, "status": "paid"}),
        b.update(ORDERS, (1, 300, 0), {"id": 1, "status": "paid"}, {"id": 1, "status": "shipped"}),
    )
    run_silver(spark, b.config)
    # Each change of a tracked column opens a version that the next one ends.
    assert versions(spark, b) == [
        (1, "new", (1, 100, 0), (1, 200, 1), False, False),
        (1, "paid", (1, 200, 1), (1, 300, 0), False, False),
        (1, "shipped", (1, 300, 0), None, True, False),
        (2, "new", (1, 100, 1), (1, 200, 0), False, False),
        (2, "paid", (1, 200, 0), None, True, False),
    ]
    history = b.lh.silver_history("shop", "orders").read(spark).schema
    silver = b.lh.silver("shop", "orders").read(spark).schema
    assert history["_cdc_valid_from"].dataType == history["_cdc_valid_to"].dataType == silver["_cdc_seq"].dataType
    assert [f.name for f in history.fields] == [
        "id",
        "status",
        "note",
        "_cdc_valid_from",
        "_cdc_valid_to",
        "_cdc_valid_from_ts",
        "_cdc_valid_to_ts",
        "_cdc_is_current",
        "_cdc_ended_by_delete",
    ]


def test_a_change_only_in_untracked_columns_opens_no_version_and_updates_the_open_one_in_place(spark, bronze):
    b = keeping_history(bronze, HistoryTable("shop.orders", except_columns=("note",)))
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="new", note="x"),
        b.update(ORDERS, (1, 200, 0), {"id": 1, "status": "new", "note": "x"}, {"id": 1, "status": "new", "note": "y"}),
        b.update(
            ORDERS, (1, 300, 0), {"id": 1, "status": "new", "note": "y"}, {"id": 1, "status": "paid", "note": "y"}
        ),
        b.update(
            ORDERS, (1, 400, 0), {"id": 1, "status": "paid", "note": "y"}, {"id": 1, "status": "paid", "note": "y"}
        ),
    )
    run_silver(spark, b.config)
    assert versions(spark, b, cols=("id", "status", "note")) == [
        (1, "new", "y", (1, 100, 0), (1, 300, 0), False, False),
        (1, "paid", "y", (1, 300, 0), None, True, False),
    ]


def test_a_delete_ends_the_version_the_deleted_period_is_a_gap_and_a_reinsert_opens_a_new_version(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="new"),
        b.delete(ORDERS, (1, 200, 0), id=1, status="new"),
        b.insert(ORDERS, (1, 300, 0), id=1, status="new"),
    )
    run_silver(spark, b.config)
    assert versions(spark, b) == [
        (1, "new", (1, 100, 0), (1, 200, 0), False, True),
        (1, "new", (1, 300, 0), None, True, False),
    ]


def test_a_primary_key_update_ends_the_old_key_by_delete_and_opens_the_new_key(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="new"),
        b.update(ORDERS, (1, 200, 0), {"id": 1, "status": "new"}, {"id": 7, "status": "new"}),
    )
    run_silver(spark, b.config)
    assert versions(spark, b) == [
        (1, "new", (1, 100, 0), (1, 200, 0), False, True),
        (7, "new", (1, 200, 0), None, True, False),
    ]


def test_a_truncate_ends_every_version_also_of_a_record_older_than_it_that_arrives_later(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, status="new"), b.insert(ORDERS, (1, 100, 1), id=2, status="new"))
    run_silver(spark, b.config)
    b.commit(b.truncate(ORDERS, (1, 300, 0)), b.insert(ORDERS, (1, 400, 0), id=1, status="again"))
    run_silver(spark, b.config)
    b.commit(b.insert(ORDERS, (1, 150, 0), id=3, status="late"))  # older than the TRUNCATE
    run_silver(spark, b.config)
    t = (1, 300, -2)
    assert versions(spark, b) == [
        (1, "new", (1, 100, 0), t, False, True),
        (1, "again", (1, 400, 0), None, True, False),
        (2, "new", (1, 100, 1), t, False, True),
        (3, "late", (1, 150, 0), t, False, True),
    ]
    # A TRUNCATE comes from the binlog: the versions it ends carry its commit time.
    ends = {
        r._cdc_valid_to_ts
        for r in b.lh.silver_history("shop", "orders").read(spark).where("_cdc_ended_by_delete").collect()
    }
    assert ends == {T0}


def test_a_snapshot_row_opens_a_version_only_where_it_differs_and_takes_its_place_in_sequence_order(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="new"),
        b.insert(ORDERS, (1, 100, 1), id=2, status="new"),
        b.update(ORDERS, (1, 300, 0), {"id": 2, "status": "held"}, {"id": 2, "status": "paid"}),
    )
    run_silver(spark, b.config)
    # Read at (1, 200), applied after the newer change at (1, 300): key 1 is as the change
    # log says (no version), key 2 drifted to 'held' (a version until (1, 300)), key 3 is new.
    b.chunk(ORDERS, [{"id": 1, "status": "new"}, {"id": 2, "status": "held"}, {"id": 3, "status": "new"}], lw=(1, 200))
    run_silver(spark, b.config)
    assert versions(spark, b) == [
        (1, "new", (1, 100, 0), None, True, False),
        (2, "new", (1, 100, 1), (1, 200, -1), False, False),
        (2, "held", (1, 200, -1), (1, 300, 0), False, False),
        (2, "paid", (1, 300, 0), None, True, False),
        (3, "new", (1, 200, -1), None, True, False),
    ]
    times = {
        (r.id, r.status): (r._cdc_valid_from_ts, r._cdc_valid_to_ts)
        for r in b.lh.silver_history("shop", "orders").read(spark).collect()
    }
    assert times[(2, "new")][0] is not None
    assert times[(2, "new")][1] is None  # ended by a snapshot row
    assert times[(3, "new")] == (None, None)


def test_chunk_reconciliation_ends_a_key_the_snapshot_no_longer_returns_at_its_floor(spark, bronze):
    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="kept"),
        b.insert(ORDERS, (1, 100, 1), id=2, status="gone"),
        b.insert(ORDERS, (1, 100, 2), id=50, status="other chunk"),
    )
    run_silver(spark, b.config)
    b.chunk(ORDERS, [{"id": 1, "status": "kept"}], lw=(1, 200), start=[1], end=[10])
    b.commit(b.insert(ORDERS, (1, 300, 0), id=3, status="after the snapshot"))
    run_silver(spark, b.config)
    assert versions(spark, b) == [
        (1, "kept", (1, 100, 0), None, True, False),
        (2, "gone", (1, 100, 1), (1, 200, -2), False, True),
        (3, "after the snapshot", (1, 300, 0), None, True, False),
        (50, "other chunk", (1, 100, 2), None, True, False),
    ]


def test_a_run_killed_before_or_after_the_history_write_converges_when_run_again(spark, bronze, monkeypatch):
    from binlake import faults

    class Killed(BaseException):
        """kill -9 at the fault point: nothing after it runs (an Exception would stop only the table)."""

    b = bronze
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="new"),
        b.update(ORDERS, (1, 200, 0), {"id": 1, "status": "new"}, {"id": 1, "status": "paid"}),
        b.insert(ORDERS, (1, 200, 1), id=2, status="new"),
    )
    for point in ("silver.before_history", "silver.before_progress"):

        def kill(name, point=point):
            if name == point:
                raise Killed(name)

        monkeypatch.setattr(faults, "point", kill)
        with pytest.raises(Killed):
            run_silver(spark, b.config)
    monkeypatch.undo()
    run_silver(spark, b.config)
    assert versions(spark, b) == [
        (1, "new", (1, 100, 0), (1, 200, 0), False, False),
        (1, "paid", (1, 200, 0), None, True, False),
        (2, "new", (1, 200, 1), None, True, False),
    ]


def history_tables(spark, b):
    """Every row of the history, event and fact tables of orders, sorted, as tuples."""
    return [sorted(tuple(r) for r in ref.read(spark).collect()) for ref in refs(b.lh, "shop", "orders")]


def a_first_load(b: Bronze) -> None:
    """A snapshot of three rows in two chunks, and nothing else: silver bulk-loads it."""
    b.chunk(ORDERS, [{"id": 1, "status": "new"}, {"id": 2, "status": "paid"}], lw=(1, 50), end=[3], chunk_id=0)
    b.chunk(ORDERS, [{"id": 3, "status": "new"}], lw=(1, 60), start=[3], chunk_id=1)
    b.commit(heartbeat=(1, 70))


def test_a_first_load_opens_one_version_per_row_in_appends_equal_to_the_merge_paths(spark, bronze, monkeypatch):
    b = bronze
    a_first_load(b)
    before = b.checkpoint()
    with monkeypatch.context() as m:
        m.setattr("binlake.silver.merge.bulk_loadable", lambda batch: False)
        assert not run_silver(spark, b.config).table("shop.orders").bulk_loaded
    merged = history_tables(spark, b)
    b.rollback(before)

    result = run_silver(spark, b.config).table("shop.orders")

    assert result.bulk_loaded
    assert result.history == 3
    assert history_tables(spark, b) == merged
    assert versions(spark, b) == [
        (1, "new", (1, 50, -1), None, True, False),
        (2, "paid", (1, 50, -1), None, True, False),
        (3, "new", (1, 60, -1), None, True, False),
    ]
    for ref in refs(b.lh, "shop", "orders"):
        assert "MERGE" not in {r["operation"] for r in ref.delta(spark).history().collect()}, ref


def test_a_first_load_killed_inside_its_history_appends_converges_when_run_again(spark, bronze, monkeypatch):
    from binlake import faults

    class Killed(BaseException):
        """kill -9 at the fault point: nothing after it runs (an Exception would stop only the table)."""

    def kill(name):
        if name == "silver.before_history":
            raise Killed(name)

    b = bronze
    a_first_load(b)
    with monkeypatch.context() as m:
        m.setattr(faults, "point", kill)
        with pytest.raises(Killed):
            run_silver(spark, b.config)
    history, events, _ = refs(b.lh, "shop", "orders")
    assert (events.read(spark).count(), history.read(spark).count()) == (3, 0), "killed between the appends"

    result = run_silver(spark, b.config).table("shop.orders")

    assert not result.bulk_loaded  # silver holds the rows: the MERGE path completes the rest
    assert versions(spark, b) == [
        (1, "new", (1, 50, -1), None, True, False),
        (2, "paid", (1, 50, -1), None, True, False),
        (3, "new", (1, 60, -1), None, True, False),
    ]
    assert events.read(spark).count() == 3


def test_a_table_no_pattern_names_gets_no_history_tables(spark, plain):
    b = keeping_history(plain, HistoryTable("shop.other"))
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, status="new"))
    run_silver(spark, b.config)
    assert b.lh.silver("shop", "orders").exists(spark)
    assert not any(
        ref.exists(spark)
        for ref in (b.lh.silver_history("shop", "orders"), b.lh.silver_history_events("shop", "orders"))
    )


def test_history_enabled_on_a_table_with_rows_starts_from_silvers_rows(spark, plain):
    b = plain
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="new"),
        b.truncate(ORDERS, (1, 150, 0)),
        b.insert(ORDERS, (1, 200, 0), id=1, status="paid"),
        b.insert(ORDERS, (1, 200, 1), id=2, status="gone"),
        b.delete(ORDERS, (1, 200, 2), id=2, status="gone"),
    )
    run_silver(spark, b.config)
    keeping_history(b)
    b.commit(
        b.update(ORDERS, (1, 300, 0), {"id": 1, "status": "paid"}, {"id": 1, "status": "shipped"}),
        b.insert(ORDERS, (1, 120, 0), id=3, status="late"),
    )  # older than the TRUNCATE before history
    run_silver(spark, b.config)
    assert versions(spark, b) == [
        (1, "paid", (1, 200, 0), (1, 300, 0), False, False),
        (1, "shipped", (1, 300, 0), None, True, False),
        (3, "late", (1, 120, 0), (1, 150, -2), False, True),
    ]


def test_changing_the_tracked_columns_derives_every_key_again(spark, bronze):
    b = keeping_history(bronze, HistoryTable("shop.orders", track_columns=("status",)))
    b.commit(
        b.insert(ORDERS, (1, 100, 0), id=1, status="new", note="x"),
        b.update(ORDERS, (1, 200, 0), {"id": 1, "status": "new", "note": "x"}, {"id": 1, "status": "new", "note": "y"}),
    )
    run_silver(spark, b.config)
    assert len(versions(spark, b)) == 1
    keeping_history(b)  # every column
    b.commit(b.insert(ORDERS, (1, 300, 0), id=2, status="new"))
    run_silver(spark, b.config)
    assert versions(spark, b, cols=("id", "note")) == [
        (1, "x", (1, 100, 0), (1, 200, 0), False, False),
        (1, "y", (1, 200, 0), None, True, False),
        (2, None, (1, 300, 0), None, True, False),
    ]


def test_foreign_key_actions_silver_derives_end_the_childs_versions(spark, tmp_path):
    fk = {
        "name": "fk_cust",
        "columns": ["customer_id"],
        "parent": "shop.customers",
        "parent_columns": ["id"],
        "on_delete": "CASCADE",
        "on_update": "CASCADE",
    }
    customers = table("shop.customers", [col("id"), col("name", Kind.STRING)])
    orders = table("shop.orders", [col("id"), col("customer_id")], fks=[fk])
    b = keeping_history(Bronze(spark, tmp_path / "lh"))
    b.schema(customers)
    b.schema(orders)
    b.commit(b.insert(customers, (1, 10, 0), id=1, name="ann"), b.insert(orders, (1, 20, 0), id=10, customer_id=1))
    run_silver(spark, b.config)
    b.commit(b.delete(customers, (1, 500, 0), id=1, name="ann"))
    run_silver(spark, b.config)
    assert versions(spark, b, cols=("id", "customer_id")) == [(10, 1, (1, 20, 0), (1, 500, 0), False, True)]


def test_an_added_column_is_added_to_the_history_and_its_changes_open_versions(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, status="new"))
    run_silver(spark, b.config)
    v2 = table("shop.orders", [*ORDERS.columns, col("tier", Kind.STRING)])
    b.schema(v2, at=(1, 200), ddl="ALTER TABLE orders ADD COLUMN tier VARCHAR(10)")
    b.commit(
        b.update(v2, (1, 300, 0), {"id": 1, "status": "new", "tier": None}, {"id": 1, "status": "new", "tier": "gold"})
    )
    run_silver(spark, b.config)
    assert versions(spark, b, cols=("id", "tier")) == [
        (1, None, (1, 100, 0), (1, 300, 0), False, False),
        (1, "gold", (1, 300, 0), None, True, False),
    ]


def test_an_incompatible_change_rebuilt_from_a_snapshot_starts_the_history_again_from_the_snapshot(spark, tmp_path):
    wide = table("shop.items", [col("id"), col("qty", bits=64)])
    b = keeping_history(Bronze(spark, tmp_path / "lh"), HistoryTable("shop.items"))
    b.schema(wide)
    b.commit(
        b.insert(wide, (1, 100, 0), id=1, qty=1), b.update(wide, (1, 150, 0), {"id": 1, "qty": 1}, {"id": 1, "qty": 5})
    )
    run_silver(spark, b.config)
    narrow = table("shop.items", [col("id"), col("qty", bits=16)])
    b.schema(narrow, at=(1, 200), ddl="ALTER TABLE items MODIFY qty SMALLINT")
    b.chunk(narrow, [{"id": 1, "qty": 5}, {"id": 2, "qty": 2}], lw=(1, 400), snapshot_id="resnap")
    assert run_silver(spark, b.config).table("shop.items").recreated
    history = b.lh.silver_history("shop", "items").read(spark)
    assert history.schema["qty"].dataType.simpleString() == "smallint"
    assert versions(spark, b, "shop.items", cols=("id", "qty")) == [
        (1, 5, (1, 400, -1), None, True, False),
        (2, 2, (1, 400, -1), None, True, False),
    ]


def test_a_table_that_is_all_key_has_a_version_per_period_of_existence(spark):
    from binlake.silver.history import versions

    links = table("shop.links", [col("a"), col("b")], key=("a", "b"))
    seq = "named_struct('file_index', CAST(1 AS BIGINT), 'pos', CAST({} AS BIGINT), 'row', 0)"
    events = spark.sql(
        " UNION ALL ".join(
            f"SELECT 1 AS a, 2 AS b, {seq.format(pos)} AS _cdc_seq, '{op}' AS _cdc_op, {deleted} AS _cdc_deleted, "
            f"CAST(NULL AS TIMESTAMP) AS _cdc_commit_ts, 2 AS _cdc_prio"
            for pos, op, deleted in ((100, "insert", "false"), (200, "delete", "true"), (300, "insert", "false"))
        )
    )
    rows = versions(events, links, ("a", "b")).orderBy("_cdc_valid_from").collect()
    assert [
        (r.a, r.b, r._cdc_valid_from.pos, r._cdc_valid_to and r._cdc_valid_to.pos, r._cdc_ended_by_delete) for r in rows
    ] == [(1, 2, 100, 200, True), (1, 2, 300, None, False)]
