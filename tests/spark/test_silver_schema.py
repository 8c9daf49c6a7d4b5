"""Schema changes mid-stream: compatible ones evolve silver in place, incompatible ones stop
only that table with SchemaChangeError naming the DDL and the recovery; any other error of one
table's own stops that table alone too, with SilverTableError naming it and the cause."""

from __future__ import annotations

import pytest
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py
from chispa import assert_df_equality

from binlake.contract.ddl import column_renames
from binlake.contract.types import Kind
from binlake.errors import SchemaChangeError, SilverTableError
from binlake.gold.readiness import silver_progress
from binlake.silver.progress import read_progress
from binlake.silver.run import run_silver
from binlake.silver.schema_evolution import features_needed, widening

V1 = table("shop.items", [col("id"), col("name", Kind.STRING), col("qty")])
OTHER = table("shop.other", [col("id"), col("x", Kind.STRING)])


@pytest.fixture(scope="module")
def b_base(spark, tmp_path_factory):
    """Bronze with the items schema and nothing else, shared by the tests below: each test's
    changes (bronze commits and schemas, the silver tables its runs create and evolve) are
    cut back after it (tests/delta_rollback.py)."""
    bronze = Bronze(spark, tmp_path_factory.mktemp("silver_schema") / "lh")
    bronze.schema(V1)
    return bronze


@pytest.fixture
def b(b_base):
    checkpoint = b_base.checkpoint()
    yield b_base
    b_base.rollback(checkpoint)


def silver_df(spark, b, name="items"):
    return b.lh.silver("shop", name).read(spark)


def live(spark, b, cols, name="items"):
    return silver_df(spark, b, name).where("NOT _cdc_deleted").select(*cols)


def same(actual, spark, rows, schema):
    assert_df_equality(
        actual, spark.createDataFrame(rows, schema), ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )


def data_columns(spark, b, name="items"):
    return [f.name for f in silver_df(spark, b, name).schema.fields if not f.name.startswith("_cdc_")]


@pytest.mark.slow
def test_add_column_after_mid_batch(spark, b):
    b.commit(b.insert(V1, (1, 100, 0), id=1, name="a", qty=1))
    run_silver(spark, b.config)
    v2 = table(
        "shop.items", [col("id"), col("note", Kind.STRING, comment="added"), col("name", Kind.STRING), col("qty")]
    )
    b.commit(b.insert(V1, (1, 150, 0), id=2, name="b", qty=2))
    b.schema(v2, at=(1, 200), ddl="ALTER TABLE items ADD COLUMN note VARCHAR(20) COMMENT 'added' AFTER id")
    b.commit(
        b.insert(v2, (1, 300, 0), id=3, note="n", name="c", qty=3),
        b.update(
            v2,
            (1, 300, 1),
            {"id": 1, "note": None, "name": "a", "qty": "1"},
            {"id": 1, "note": "hello", "name": "a", "qty": "1"},
        ),
    )
    result = run_silver(spark, b.config)
    assert data_columns(spark, b) == ["id", "note", "name", "qty"]
    assert result.table("shop.items").schema_changes
    same(
        live(spark, b, ["id", "note", "name"]),
        spark,
        [(1, "hello", "a"), (2, None, "b"), (3, "n", "c")],
        "id INT, note STRING, name STRING",
    )


@pytest.mark.slow
def test_add_column_first(spark, b):
    v2 = table("shop.items", [col("tenant"), col("id"), col("name", Kind.STRING), col("qty")])
    b.commit(b.insert(V1, (1, 100, 0), id=1, name="a", qty=1))
    run_silver(spark, b.config)
    b.schema(v2, at=(1, 200), ddl="ALTER TABLE items ADD COLUMN tenant INT FIRST")
    b.commit(b.insert(v2, (1, 300, 0), tenant=9, id=2, name="b", qty=2))
    run_silver(spark, b.config)
    assert data_columns(spark, b) == ["tenant", "id", "name", "qty"]
    same(live(spark, b, ["tenant", "id"]), spark, [(None, 1), (9, 2)], "tenant INT, id INT")


def test_drop_column(spark, b):
    v2 = table("shop.items", [col("id"), col("name", Kind.STRING)])
    b.commit(b.insert(V1, (1, 100, 0), id=1, name="a", qty=1))
    run_silver(spark, b.config)
    b.schema(v2, at=(1, 200), ddl="ALTER TABLE items DROP COLUMN qty")
    b.commit(b.insert(v2, (1, 300, 0), id=2, name="b"))
    run_silver(spark, b.config)
    assert data_columns(spark, b) == ["id", "name"]
    same(live(spark, b, ["id", "name"]), spark, [(1, "a"), (2, "b")], "id INT, name STRING")


@pytest.mark.slow
def test_rename_column_with_old_images_in_the_same_batch(spark, b):
    v2 = table("shop.items", [col("id"), col("title", Kind.STRING), col("qty")])
    b.commit(b.insert(V1, (1, 100, 0), id=1, name="a", qty=1))
    run_silver(spark, b.config)
    # Images before the DDL say "name", after it "title"; both land in silver's "title".
    b.commit(b.insert(V1, (1, 150, 0), id=2, name="b", qty=2))
    b.schema(v2, at=(1, 200), ddl="ALTER TABLE items RENAME COLUMN `name` TO `title`")
    b.commit(b.insert(v2, (1, 300, 0), id=3, title="c", qty=3))
    run_silver(spark, b.config)
    assert data_columns(spark, b) == ["id", "title", "qty"]
    same(live(spark, b, ["id", "title"]), spark, [(1, "a"), (2, "b"), (3, "c")], "id INT, title STRING")


@pytest.mark.slow
def test_widening_modify_keeps_values(spark, b):
    v2 = table("shop.items", [col("id"), col("name", Kind.STRING), col("qty", bits=64)])
    b.commit(b.insert(V1, (1, 100, 0), id=1, name="a", qty=7))
    run_silver(spark, b.config)
    b.schema(v2, at=(1, 200), ddl="ALTER TABLE items MODIFY qty BIGINT")
    b.commit(b.insert(v2, (1, 300, 0), id=2, name="b", qty=2**40))
    run_silver(spark, b.config)
    assert silver_df(spark, b).schema["qty"].dataType.simpleString() == "bigint"
    same(live(spark, b, ["id", "qty"]), spark, [(1, 7), (2, 2**40)], "id INT, qty BIGINT")


@pytest.mark.slow
def test_narrowing_stops_only_that_table_with_the_ddl_and_the_recovery(spark, b):
    b.schema(OTHER)
    wide = table("shop.items", [col("id"), col("name", Kind.STRING), col("qty", bits=64)])
    b.schema(wide, at=(1, 50), ddl="ALTER TABLE items MODIFY qty BIGINT")
    b.commit(b.insert(wide, (1, 100, 0), id=1, name="a", qty=1), b.insert(OTHER, (1, 100, 1), id=1, x="x"))
    run_silver(spark, b.config)
    narrow = table("shop.items", [col("id"), col("name", Kind.STRING), col("qty", bits=16)])
    b.schema(narrow, at=(1, 200), ddl="ALTER TABLE items MODIFY qty SMALLINT")
    b.commit(b.insert(narrow, (1, 300, 0), id=2, name="b", qty=2), b.insert(OTHER, (1, 300, 1), id=2, x="y"))
    with pytest.raises(SchemaChangeError) as err:
        run_silver(spark, b.config)
    msg = str(err.value)
    assert "ALTER TABLE items MODIFY qty SMALLINT" in msg
    assert "binlake snapshot --table shop.items" in msg
    assert err.value.result.table("shop.items").error
    # The other table went on.
    same(live(spark, b, ["id", "x"], "other"), spark, [(1, "x"), (2, "y")], "id INT, x STRING")
    # The stop is recorded with its reason and recovery (status and gold's readiness name it).
    stopped = {s.name: s.stopped for s in silver_progress(spark, b.config, b.lh)}
    assert "binlake snapshot --table shop.items" in stopped["shop.items"]
    assert stopped["shop.other"] is None
    # Still stopped on the next run (its progress did not move) ...
    with pytest.raises(SchemaChangeError):
        run_silver(spark, b.config)
    # ... until the table is re-snapshotted with the new schema: silver is rebuilt.
    b.chunk(
        narrow, [{"id": 1, "name": "a", "qty": 1}, {"id": 2, "name": "b", "qty": 2}], lw=(1, 400), snapshot_id="resnap"
    )
    result = run_silver(spark, b.config)
    assert result.table("shop.items").recreated
    assert {s.name: s.stopped for s in silver_progress(spark, b.config, b.lh)}["shop.items"] is None
    assert silver_df(spark, b).schema["qty"].dataType.simpleString() == "smallint"
    same(live(spark, b, ["id", "qty"]), spark, [(1, 1), (2, 2)], "id INT, qty SMALLINT")


def test_key_change_is_incompatible(spark, b):
    b.commit(b.insert(V1, (1, 100, 0), id=1, name="a", qty=1))
    run_silver(spark, b.config)
    v2 = table("shop.items", V1.columns, key=("id", "name"))
    b.schema(v2, at=(1, 200), ddl="ALTER TABLE items DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)")
    b.commit(b.insert(v2, (1, 300, 0), id=2, name="b", qty=2))
    with pytest.raises(SchemaChangeError, match=r"the key changes from \(id\) to \(id, name\)"):
        run_silver(spark, b.config)


def test_ddl_rename_parsing_and_widening_rules():
    assert column_renames("ALTER TABLE t RENAME COLUMN a TO b") == [("a", "b")]
    assert column_renames("alter table t change column `x y` `z` int") == [("x y", "z")]
    assert column_renames("ALTER TABLE t CHANGE a a BIGINT") == []
    assert widening("int", "bigint")
    assert widening("decimal(5,2)", "decimal(10,3)")
    assert widening("float", "double")
    assert widening("bigint", "decimal(20,0)")
    assert not widening("bigint", "int")
    assert not widening("decimal(10,2)", "decimal(10,3)")
    assert not widening("string", "int")
    assert not widening("bigint", "double")


def test_the_table_features_a_column_type_needs():
    assert features_needed(["INT", "TIMESTAMP_NTZ"]) == ["timestampNtz"]
    assert features_needed(["struct<a:timestamp_ntz>"]) == ["timestampNtz"]
    assert features_needed(["TIMESTAMP", "DATE", "STRING", "DECIMAL(20,0)", "BINARY"]) == []


def stop_items_by_a_constraint(spark, b, sql="qty < 100"):
    """A CHECK constraint on silver's items table (Delta's, not the source's): silver's writes
    that break it fail in Delta, an error of that table's own."""
    spark.sql(f"ALTER TABLE {b.lh.silver('shop', 'items').sql} ADD CONSTRAINT small CHECK ({sql})")


def test_an_error_in_one_tables_merge_stops_that_table_alone(spark, b):
    b.schema(OTHER)
    b.commit(b.insert(V1, (1, 100, 0), id=1, name="a", qty=1), b.insert(OTHER, (1, 100, 1), id=1, x="x"))
    run_silver(spark, b.config)
    before = read_progress(spark, b.lh)[("shop", "items")]
    stop_items_by_a_constraint(spark, b)
    b.commit(b.insert(V1, (1, 200, 0), id=2, name="b", qty=500), b.insert(OTHER, (1, 200, 1), id=2, x="y"))

    with pytest.raises(SilverTableError) as err:
        run_silver(spark, b.config)

    msg = str(err.value)
    assert err.value.exit_code == 18
    assert "\n" not in msg
    assert "shop.items" in msg
    assert "DELTA_VIOLATE_CONSTRAINT_WITH_VALUES" in msg
    assert "shop.other" not in msg
    same(live(spark, b, ["id", "x"], "other"), spark, [(1, "x"), (2, "y")], "id INT, x STRING")
    progress = read_progress(spark, b.lh)
    assert progress[("shop", "other")].applied_pos == 201
    assert progress[("shop", "other")].stopped is None
    items = progress[("shop", "items")]
    assert items._replace(stopped=None, updated_at=None) == before._replace(updated_at=None)
    assert "DELTA_VIOLATE_CONSTRAINT_WITH_VALUES" in items.stopped

    # Once the cause is gone the table is applied from where it stopped.
    spark.sql(f"ALTER TABLE {b.lh.silver('shop', 'items').sql} DROP CONSTRAINT small")
    run_silver(spark, b.config)
    same(live(spark, b, ["id", "qty"]), spark, [(1, 1), (2, 500)], "id INT, qty INT")
    assert read_progress(spark, b.lh)[("shop", "items")].stopped is None


def test_an_error_in_one_tables_schema_change_stops_that_table_alone(spark, b):
    b.schema(OTHER)
    b.commit(b.insert(V1, (1, 100, 0), id=1, name="a", qty=1), b.insert(OTHER, (1, 100, 1), id=1, x="x"))
    run_silver(spark, b.config)
    stop_items_by_a_constraint(spark, b)  # Delta refuses to drop a column a constraint names
    v2 = table("shop.items", [col("id"), col("name", Kind.STRING)])
    b.schema(v2, at=(1, 200), ddl="ALTER TABLE items DROP COLUMN qty")
    b.commit(b.insert(v2, (1, 300, 0), id=2, name="b"), b.insert(OTHER, (1, 300, 1), id=2, x="y"))

    with pytest.raises(SilverTableError, match=r"silver stopped shop\.items: AnalysisException: .*qty") as err:
        run_silver(spark, b.config)

    assert err.value.result.table("shop.items").error
    assert not err.value.result.table("shop.other").error
    same(live(spark, b, ["id", "x"], "other"), spark, [(1, "x"), (2, "y")], "id INT, x STRING")
    assert read_progress(spark, b.lh)[("shop", "other")].applied_pos == 301
