"""Foreign-key actions MySQL applies without logging them: silver applies them itself."""

from __future__ import annotations

import pytest
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py
from chispa import assert_df_equality

from binlake.contract.types import Kind
from binlake.errors import SilverTableError
from binlake.silver import cascade
from binlake.silver.progress import read_progress
from binlake.silver.run import run_silver


def fk(name, columns, parent, parent_columns, on_delete="RESTRICT", on_update="RESTRICT"):
    return {
        "name": name,
        "columns": list(columns),
        "parent": parent,
        "parent_columns": list(parent_columns),
        "on_delete": on_delete,
        "on_update": on_update,
    }


CUSTOMERS = table("shop.customers", [col("id"), col("name", Kind.STRING)])
ORDERS = table(
    "shop.orders",
    [col("id"), col("customer_id"), col("note", Kind.STRING)],
    fks=[fk("fk_cust", ["customer_id"], "shop.customers", ["id"], "CASCADE", "CASCADE")],
)
LINES = table(
    "shop.lines", [col("id"), col("order_id")], fks=[fk("fk_order", ["order_id"], "shop.orders", ["id"], "CASCADE")]
)
NOTES = table(
    "shop.notes",
    [col("id"), col("customer_id")],
    fks=[fk("fk_note", ["customer_id"], "shop.customers", ["id"], "SET NULL", "SET NULL")],
)


@pytest.fixture(scope="module")
def b_base(spark, tmp_path_factory):
    """Four tables in silver; shared by the tests, each test's changes rolled back."""
    bronze = Bronze(spark, tmp_path_factory.mktemp("cascade") / "lh")
    for s in (CUSTOMERS, ORDERS, LINES, NOTES):
        bronze.schema(s)
    bronze.commit(
        bronze.insert(CUSTOMERS, (1, 10, 0), id=1, name="ann"),
        bronze.insert(CUSTOMERS, (1, 10, 1), id=2, name="bob"),
        bronze.insert(ORDERS, (1, 20, 0), id=10, customer_id=1, note="a"),
        bronze.insert(ORDERS, (1, 20, 1), id=11, customer_id=2, note="b"),
        bronze.insert(LINES, (1, 30, 0), id=100, order_id=10),
        bronze.insert(LINES, (1, 30, 1), id=101, order_id=11),
        bronze.insert(NOTES, (1, 40, 0), id=7, customer_id=1),
    )
    run_silver(spark, bronze.config)
    return bronze


@pytest.fixture
def b(b_base):
    checkpoint = b_base.checkpoint()
    yield b_base
    b_base.rollback(checkpoint)


def live(spark, b, name, cols):
    return b.lh.silver("shop", name).read(spark).where("NOT _cdc_deleted").select(*cols)


def same(actual, spark, rows, schema):
    assert_df_equality(
        actual, spark.createDataFrame(rows, schema), ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )


@pytest.mark.slow
def test_delete_cascades_to_children_and_grandchildren_and_sets_null(spark, b):
    b.commit(b.delete(CUSTOMERS, (1, 500, 0), id=1, name="ann"))
    result = run_silver(spark, b.config)
    same(live(spark, b, "orders", ["id"]), spark, [(11,)], "id INT")
    same(live(spark, b, "lines", ["id"]), spark, [(101,)], "id INT")
    same(live(spark, b, "notes", ["id", "customer_id"]), spark, [(7, None)], "id INT, customer_id INT")
    tomb = b.lh.silver("shop", "orders").read(spark).where("id = 10").select("_cdc_deleted", "_cdc_seq.pos").first()
    assert tuple(tomb) == (True, 500)  # the parent's sequence
    assert result.table("shop.orders").cascaded == 1
    assert result.table("shop.lines").cascaded == 1


@pytest.mark.slow
def test_cascade_ignores_child_rows_newer_than_the_parent_delete_and_replays(spark, b):
    # A child change newer than the parent's delete keeps its own state; a full replay
    # (progress lost) leaves every child row exactly as it was.
    b.commit(
        b.delete(CUSTOMERS, (1, 500, 0), id=1, name="ann"),
        b.update(
            ORDERS, (1, 600, 0), {"id": 11, "customer_id": 2, "note": "b"}, {"id": 11, "customer_id": 2, "note": "b2"}
        ),
    )
    run_silver(spark, b.config)
    before = sorted(map(tuple, b.lh.silver("shop", "orders").read(spark).collect()))
    b.lh.silver_progress.delta(spark).delete()  # replay everything
    run_silver(spark, b.config)
    assert sorted(map(tuple, b.lh.silver("shop", "orders").read(spark).collect())) == before


@pytest.mark.parametrize("few_rows", [cascade.FEW_ROWS, 1], ids=["rounds compared on the driver", "in Spark"])
def test_a_parent_key_updated_three_times_in_a_batch_moves_its_children_three_times(spark, b, monkeypatch, few_rows):
    # Each round settles one more move (2 -> 20, then 20 -> 21, then 21 -> 22): a round
    # compared as equal to the one before it too early leaves the children behind.
    monkeypatch.setattr(cascade, "FEW_ROWS", few_rows)
    b.commit(
        b.update(CUSTOMERS, (1, 500, 0), {"id": 2, "name": "bob"}, {"id": 20, "name": "bob"}),
        b.update(CUSTOMERS, (1, 510, 0), {"id": 20, "name": "bob"}, {"id": 21, "name": "bob"}),
        b.update(CUSTOMERS, (1, 520, 0), {"id": 21, "name": "bob"}, {"id": 22, "name": "bob"}),
    )
    run_silver(spark, b.config)
    same(live(spark, b, "orders", ["id", "customer_id"]), spark, [(10, 1), (11, 22)], "id INT, customer_id INT")
    same(live(spark, b, "customers", ["id"]), spark, [(1,), (22,)], "id INT")


def test_children_wait_for_a_parent_stopped_by_an_error_of_its_own_and_get_its_actions_after(spark, b):
    # Delta refuses to drop a column a constraint names: the parent's schema change fails.
    spark.sql(f"ALTER TABLE {b.lh.silver('shop', 'customers').sql} ADD CONSTRAINT named CHECK (name <> '')")
    b.commit(b.delete(CUSTOMERS, (1, 500, 0), id=1, name="ann"))
    nameless = b.schema(table("shop.customers", [col("id")]), at=(1, 600), ddl="ALTER TABLE customers DROP COLUMN name")
    b.commit(b.insert(nameless, (1, 700, 0), id=3))
    held = {name: read_progress(spark, b.lh)[("shop", name)] for name in ("orders", "lines", "notes")}

    with pytest.raises(SilverTableError) as err:
        run_silver(spark, b.config)

    assert "silver stopped shop.customers" in str(err.value)
    assert "silver held shop.orders back: its foreign-key parent shop.customers is stopped" in str(err.value)
    progress = read_progress(spark, b.lh)
    for name, row in held.items():  # the children did not move past the parent's delete
        assert progress[("shop", name)].changelog_version == row.changelog_version
        assert "shop.customers" in progress[("shop", name)].stopped
    same(live(spark, b, "orders", ["id"]), spark, [(10,), (11,)], "id INT")

    spark.sql(f"ALTER TABLE {b.lh.silver('shop', 'customers').sql} DROP CONSTRAINT named")
    run_silver(spark, b.config)
    same(live(spark, b, "orders", ["id"]), spark, [(11,)], "id INT")
    same(live(spark, b, "lines", ["id"]), spark, [(101,)], "id INT")
    same(live(spark, b, "notes", ["id", "customer_id"]), spark, [(7, None)], "id INT, customer_id INT")
    assert all(r.stopped is None for r in read_progress(spark, b.lh).values())


# ---------------------------------------------------------------------------------------
# Cascades in sequence order with the child's own changes (issue 29)

A = table("shop.a", [col("id")])
FA = table(
    "shop.fa",
    [col("a_id"), col("f_id"), col("note", Kind.STRING)],
    key=("a_id", "f_id"),
    fks=[fk("fk_a", ["a_id"], "shop.a", ["id"], on_delete="CASCADE", on_update="CASCADE")],
)
# A grandchild that references the child's whole key, and a SET NULL child beside it.
FB = table(
    "shop.fb",
    [col("id"), col("a_id"), col("f_id")],
    fks=[fk("fk_fa", ["a_id", "f_id"], "shop.fa", ["a_id", "f_id"], on_delete="CASCADE", on_update="CASCADE")],
)
FN = table(
    "shop.fn",
    [col("id"), col("a_id"), col("v", Kind.STRING)],
    fks=[fk("fk_n", ["a_id"], "shop.a", ["id"], on_delete="SET NULL", on_update="SET NULL")],
)


@pytest.fixture(scope="module")
def fa_base(spark, tmp_path_factory):
    bronze = Bronze(spark, tmp_path_factory.mktemp("cascade_fa") / "lh")
    for s in (A, FA, FB, FN):
        bronze.schema(s)
    bronze.commit(
        bronze.insert(A, (1, 10, 0), id=68),
        bronze.insert(A, (1, 10, 1), id=69),
        bronze.insert(FA, (1, 20, 0), a_id=68, f_id=671, note="x"),
        bronze.insert(FA, (1, 20, 1), a_id=68, f_id=497, note="y"),
        bronze.insert(FA, (1, 20, 2), a_id=69, f_id=1, note="z"),
        bronze.insert(FB, (1, 30, 0), id=1, a_id=68, f_id=497),
        bronze.insert(FB, (1, 30, 1), id=2, a_id=69, f_id=1),
        bronze.insert(FN, (1, 40, 0), id=5, a_id=68, v="n"),
    )
    run_silver(spark, bronze.config)
    return bronze


@pytest.fixture
def fa(fa_base):
    checkpoint = fa_base.checkpoint()
    yield fa_base
    fa_base.rollback(checkpoint)


def rows(spark, b, name, cols):
    return sorted(tuple(r) for r in live(spark, b, name, cols).collect())


@pytest.mark.slow
def test_a_child_row_deleted_after_the_parent_key_update_in_the_same_batch_stays_deleted(spark, fa):
    fa.commit(
        fa.update(A, (1, 500, 0), {"id": 68}, {"id": 220}), fa.delete(FA, (1, 510, 0), a_id=220, f_id=671, note="x")
    )
    run_silver(spark, fa.config)
    assert rows(spark, fa, "fa", ["a_id", "f_id"]) == [(69, 1), (220, 497)]


@pytest.mark.slow
def test_a_child_row_updated_after_the_parent_key_update_in_the_same_batch_is_one_row_with_the_new_value(spark, fa):
    fa.commit(
        fa.update(A, (1, 500, 0), {"id": 68}, {"id": 220}),
        fa.update(FA, (1, 510, 0), {"a_id": 220, "f_id": 671, "note": "x"}, {"a_id": 220, "f_id": 671, "note": "new"}),
    )
    run_silver(spark, fa.config)
    assert rows(spark, fa, "fa", ["a_id", "f_id", "note"]) == [(69, 1, "z"), (220, 497, "y"), (220, 671, "new")]
    # The old keys are tombstones at the parent's change.
    old = fa.lh.silver("shop", "fa").read(spark).where("a_id = 68").select("_cdc_deleted", "_cdc_seq.pos").collect()
    assert sorted(tuple(r) for r in old) == [(True, 500), (True, 500)]


@pytest.mark.slow
def test_the_moved_row_carries_what_the_child_changed_before_the_parent_change(spark, fa):
    fa.commit(
        fa.update(FA, (1, 490, 0), {"a_id": 68, "f_id": 671, "note": "x"}, {"a_id": 68, "f_id": 671, "note": "mid"}),
        fa.update(A, (1, 500, 0), {"id": 68}, {"id": 220}),
        fa.update(FN, (1, 505, 0), {"id": 5, "a_id": None, "v": "n"}, {"id": 5, "a_id": None, "v": "later"}),
    )
    run_silver(spark, fa.config)
    assert rows(spark, fa, "fa", ["a_id", "f_id", "note"]) == [(69, 1, "z"), (220, 497, "y"), (220, 671, "mid")]
    assert rows(spark, fa, "fn", ["id", "a_id", "v"]) == [(5, None, "later")]


@pytest.mark.slow
def test_chained_cascades_follow_the_same_order(spark, fa):
    # a 68 -> 220 moves fa (68, 497) to (220, 497), which moves fb 1 along; fb 1 then points
    # at a new fa row, and a 220 -> 300 in the same batch moves all of them once more.
    fa.commit(
        fa.update(A, (1, 500, 0), {"id": 68}, {"id": 220}),
        fa.insert(FA, (1, 505, 0), a_id=220, f_id=9, note="w"),
        fa.update(FB, (1, 510, 0), {"id": 1, "a_id": 220, "f_id": 497}, {"id": 1, "a_id": 220, "f_id": 9}),
        fa.update(A, (1, 530, 0), {"id": 220}, {"id": 300}),
    )
    result = run_silver(spark, fa.config)
    assert rows(spark, fa, "fa", ["a_id", "f_id", "note"]) == [
        (69, 1, "z"),
        (300, 9, "w"),
        (300, 497, "y"),
        (300, 671, "x"),
    ]
    assert rows(spark, fa, "fb", ["id", "a_id", "f_id"]) == [(1, 300, 9), (2, 69, 1)]
    assert rows(spark, fa, "fn", ["id", "a_id"]) == [(5, None)]
    fb1 = fa.lh.silver("shop", "fb").read(spark).where("id = 1").select("_cdc_seq.pos").first()[0]
    assert fb1 == 530
    assert result.table("shop.fa").cascaded > 0
    assert result.table("shop.fb").cascaded > 0


@pytest.mark.slow
def test_a_child_inserted_again_after_a_cascaded_delete_is_live(spark, fa):
    fa.commit(
        fa.delete(A, (1, 500, 0), id=69),
        fa.insert(A, (1, 510, 0), id=69),
        fa.insert(FA, (1, 520, 0), a_id=69, f_id=1, note="again"),
    )
    run_silver(spark, fa.config)
    assert rows(spark, fa, "fa", ["a_id", "f_id", "note"]) == [(68, 497, "y"), (68, 671, "x"), (69, 1, "again")]
    assert rows(spark, fa, "fb", ["id"]) == [(1,)]  # fb 2 went with fa (69, 1)


@pytest.mark.slow
def test_a_run_killed_between_table_merges_converges(spark, fa, monkeypatch):
    from binlake.silver import merge, run

    fa.commit(
        fa.update(A, (1, 500, 0), {"id": 68}, {"id": 220}),
        fa.update(FA, (1, 510, 0), {"a_id": 220, "f_id": 497, "note": "y"}, {"a_id": 220, "f_id": 497, "note": "y2"}),
    )
    real = merge.merge_into_silver
    merged = []

    class Killed(BaseException):
        """kill -9: nothing after it runs (an Exception would only stop that table)."""

    def dies_after_two(spark_, ref, schema, source, **options):
        if len(merged) == 2:
            raise Killed()
        merged.append(schema.name)
        return real(spark_, ref, schema, source, **options)

    monkeypatch.setattr(run, "TABLE_THREADS", 1)
    monkeypatch.setattr(merge, "merge_into_silver", dies_after_two)
    with pytest.raises(Killed):
        run_silver(spark, fa.config)
    assert merged  # some tables took their batch, the progress did not
    monkeypatch.setattr(merge, "merge_into_silver", real)
    run_silver(spark, fa.config)
    assert rows(spark, fa, "fa", ["a_id", "f_id", "note"]) == [(69, 1, "z"), (220, 497, "y2"), (220, 671, "x")]
    assert rows(spark, fa, "fb", ["id", "a_id", "f_id"]) == [(1, 220, 497), (2, 69, 1)]
    assert rows(spark, fa, "fn", ["id", "a_id"]) == [(5, None)]
