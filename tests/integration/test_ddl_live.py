"""DDL through the real path (binlog -> bronze -> silver -> gold), not a hand-made history:
a renamed column keeps its values, and a dropped or renamed table leaves gold empty under
its old name while the rows reappear under the new one."""

from __future__ import annotations

from binlake.contract.tables import Lakehouse
from binlake.ops.pipeline import run_pipeline


def _silver(spark, config, db, table):
    return {r["id"]: r for r in Lakehouse(config).silver(db, table).read(spark).where("NOT _cdc_deleted").collect()}


def _gold_rows(spark, config, db, table):
    ref = Lakehouse(config).gold(db, table)
    return sorted(tuple(r) for r in ref.read(spark).select("id").collect()) if ref.exists(spark) else []


def _run(spark, config):
    result = run_pipeline(spark, config)
    assert result.ok, result.summary()
    return result


def test_a_renamed_column_keeps_the_values_of_rows_last_written_before_the_rename(
    spark, mariadb, database, make_config
):
    mariadb.execute(
        f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v INT, w INT)",
        f"INSERT INTO `{database}`.t VALUES (1, 10, 0), (2, 20, 0)",
    )
    config = make_config([f"{database}.*"])
    _run(spark, config)
    # Row 1's last image is written under the old name; row 3 appears under the new one,
    # and its TABLE_MAP is where capture first sees the new schema version.
    mariadb.execute(
        f"UPDATE `{database}`.t SET v = 11 WHERE id = 1",
        f"ALTER TABLE `{database}`.t RENAME COLUMN v TO renamed",
        f"ALTER TABLE `{database}`.t MODIFY renamed BIGINT",
        f"INSERT INTO `{database}`.t VALUES (3, 30, 0)",
    )
    _run(spark, config)

    silver = _silver(spark, config, database, "t")
    assert {i: r["renamed"] for i, r in silver.items()} == {1: 11, 2: 20, 3: 30}
    assert "v" not in Lakehouse(config).silver(database, "t").read(spark).columns


def test_drop_table_and_rename_table_empty_the_old_name_and_the_new_name_is_snapshotted(
    spark, mariadb, database, make_config
):
    mariadb.execute(
        f"CREATE TABLE `{database}`.a (id INT PRIMARY KEY)",
        f"INSERT INTO `{database}`.a VALUES (1), (2)",
        f"CREATE TABLE `{database}`.doomed (id INT PRIMARY KEY)",
        f"INSERT INTO `{database}`.doomed VALUES (7)",
    )
    config = make_config([f"{database}.*"])
    _run(spark, config)
    assert _gold_rows(spark, config, database, "doomed") == [(7,)]

    mariadb.execute(
        f"RENAME TABLE `{database}`.a TO `{database}`.b",
        f"DROP TABLE `{database}`.doomed",
        f"INSERT INTO `{database}`.b VALUES (3)",
    )
    result = _run(spark, config)

    assert _gold_rows(spark, config, database, "a") == []
    assert _gold_rows(spark, config, database, "doomed") == []
    assert _gold_rows(spark, config, database, "b") == [(1,), (2,), (3,)]
    ops = {r["op"] for r in Lakehouse(config).changelog.read(spark).where(f"db = '{database}'").collect()}
    assert {"drop", "renamed_into"} <= ops
    capture = next(s for s in result.steps if s.name == "capture").result
    assert capture.renamed_into == [f"{database}.b"]


def test_a_gh_ost_cut_over_swap_replaces_the_table_with_its_altered_copy(spark, mariadb, database, make_config):
    db = f"`{database}`"
    mariadb.execute(
        f"CREATE TABLE {db}.orders (id INT PRIMARY KEY, qty INT)", f"INSERT INTO {db}.orders VALUES (1, 1), (2, 2)"
    )
    config = make_config([f"{database}.orders"])  # the ghost tables are not captured
    _run(spark, config)

    mariadb.execute(
        f"CREATE TABLE {db}._orders_gho LIKE {db}.orders",
        f"ALTER TABLE {db}._orders_gho ADD COLUMN note VARCHAR(10) NULL",
        f"INSERT INTO {db}._orders_gho (id, qty, note) SELECT id, qty * 10, 'copied' FROM {db}.orders",
        f"RENAME TABLE {db}.orders TO {db}._orders_del, {db}._orders_gho TO {db}.orders",
        f"DROP TABLE {db}._orders_del",
    )
    _run(spark, config)

    gold = Lakehouse(config).gold(database, "orders").read(spark)
    assert sorted((r["id"], r["qty"], r["note"]) for r in gold.collect()) == [(1, 10, "copied"), (2, 20, "copied")]
