"""Foreign-key actions MySQL applies without logging them: silver applies them itself."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from binlake.silver.merge import run_silver
from binlake.source.types import Kind

try:
    from .bronze_fixtures import Bronze, col, table
except ImportError:
    from bronze_fixtures import Bronze, col, table


def fk(name, columns, parent, parent_columns, on_delete="RESTRICT", on_update="RESTRICT"):
    return {"name": name, "columns": list(columns), "parent": parent, "parent_columns": list(parent_columns),
            "on_delete": on_delete, "on_update": on_update}


CUSTOMERS = table("shop.customers", [col("id"), col("name", Kind.STRING)])
ORDERS = table("shop.orders", [col("id"), col("customer_id"), col("note", Kind.STRING)],
               fks=[fk("fk_cust", ["customer_id"], "shop.customers", ["id"], "CASCADE", "CASCADE")])
LINES = table("shop.lines", [col("id"), col("order_id")],
              fks=[fk("fk_order", ["order_id"], "shop.orders", ["id"], "CASCADE")])
NOTES = table("shop.notes", [col("id"), col("customer_id")],
              fks=[fk("fk_note", ["customer_id"], "shop.customers", ["id"], "SET NULL", "SET NULL")])


@pytest.fixture
def b(spark, tmp_path):
    bronze = Bronze(spark, tmp_path / "lh")
    for s in (CUSTOMERS, ORDERS, LINES, NOTES):
        bronze.schema(s)
    bronze.commit(
        bronze.insert(CUSTOMERS, (1, 10, 0), id=1, name="ann"), bronze.insert(CUSTOMERS, (1, 10, 1), id=2, name="bob"),
        bronze.insert(ORDERS, (1, 20, 0), id=10, customer_id=1, note="a"),
        bronze.insert(ORDERS, (1, 20, 1), id=11, customer_id=2, note="b"),
        bronze.insert(LINES, (1, 30, 0), id=100, order_id=10), bronze.insert(LINES, (1, 30, 1), id=101, order_id=11),
        bronze.insert(NOTES, (1, 40, 0), id=7, customer_id=1),
    )
    run_silver(spark, bronze.config)
    return bronze


def live(spark, b, name, cols):
    return b.lh.silver("shop", name).read(spark).where("NOT _cdc_deleted").select(*cols)


def same(actual, spark, rows, schema):
    assert_df_equality(actual, spark.createDataFrame(rows, schema), ignore_row_order=True, ignore_nullable=True,
                       ignore_metadata=True)


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


def test_cascade_ignores_child_rows_newer_than_the_parent_delete_and_replays(spark, b):
    # A child change newer than the parent's delete keeps its own state; a full replay
    # (progress lost) leaves every child row exactly as it was.
    b.commit(b.delete(CUSTOMERS, (1, 500, 0), id=1, name="ann"),
             b.update(ORDERS, (1, 600, 0), {"id": 11, "customer_id": 2, "note": "b"}, {"id": 11, "customer_id": 2, "note": "b2"}))
    run_silver(spark, b.config)
    before = sorted(map(tuple, b.lh.silver("shop", "orders").read(spark).collect()))
    b.lh.silver_progress.delta(spark).delete()  # replay everything
    run_silver(spark, b.config)
    assert sorted(map(tuple, b.lh.silver("shop", "orders").read(spark).collect())) == before


def test_parent_key_update_cascades_to_children(spark, b):
    b.commit(b.update(CUSTOMERS, (1, 500, 0), {"id": 2, "name": "bob"}, {"id": 20, "name": "bob"}),
             b.update(CUSTOMERS, (1, 510, 0), {"id": 20, "name": "bob"}, {"id": 21, "name": "bob"}))
    run_silver(spark, b.config)
    same(live(spark, b, "orders", ["id", "customer_id"]), spark, [(10, 1), (11, 21)], "id INT, customer_id INT")
    same(live(spark, b, "customers", ["id"]), spark, [(1,), (21,)], "id INT")
