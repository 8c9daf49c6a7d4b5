"""A lakehouse an earlier binlake laid out (layout 0) is migrated once, by the first command
that writes, and every command works on it after: the publish log's history, the metrics, the
check results and the quarantine are all still there, and gold_as_of finds the publishes of
before the migration.

The layout 0 lakehouse is made the way it came about: the pipeline publishes twice, then its
system tables are put back where earlier binlake versions kept them, with their column sets
and properties of then (tests/spark/test_layout.py builds one table by table)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from source_diff import diff_with_source  # tests/source_diff.py

from binlake import cli, gold_as_of
from binlake.config import load_config
from binlake.contract import layout
from binlake.contract.layout import LAYOUT_VERSION
from binlake.contract.leases import LAYOUT_PROPERTY
from binlake.contract.schemas import SNAPSHOT_ROWS_SCHEMA
from binlake.contract.tables import Lakehouse
from binlake.errors import LayoutOutdatedError

# What layout 0's publish log and progress table lacked.
NEWER_PUBLISH_LOG_COLUMNS = ("silver_rows", "publish_group")
NEWER_PROGRESS_COLUMNS = ("silver_version", "stopped", "history_version")


def _as_layout_0(spark, lh: Lakehouse) -> None:
    """Put the system tables where an earlier binlake kept them, as it kept them."""
    for name in ("silver_progress", "publish_log", "check_results", "metrics"):
        old = Path(lh.layout_0_table(name).path)
        old.parent.mkdir(parents=True, exist_ok=True)
        os.replace(getattr(lh, name).path, old)
    quarantine = Path(lh.root, "system", "quarantine")
    for table in quarantine.glob("*/*"):
        target = Path(lh.root, "gold", "_quarantine", table.parent.name, table.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(table, target)
    shutil.rmtree(quarantine)
    for name, newer in (("publish_log", NEWER_PUBLISH_LOG_COLUMNS), ("silver_progress", NEWER_PROGRESS_COLUMNS)):
        ref = lh.layout_0_table(name)
        keep = ", ".join(f"`{c}`" for c in ref.read(spark).columns if c not in newer)
        spark.sql(f"CREATE OR REPLACE TABLE {ref.sql} USING DELTA AS SELECT {keep} FROM {ref.sql}")
    log = lh.layout_0_table("publish_log")
    spark.sql(f"ALTER TABLE {log.sql} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    # Earlier binlake versions kept snapshot rows as maps in one table, without the properties
    # step 2 gives it (this lakehouse's snapshots wrote typed tables).
    lh.snapshot_rows.create_if_missing(spark, SNAPSHOT_ROWS_SCHEMA)
    spark.sql(
        f"ALTER TABLE {lh.snapshot_rows.sql} UNSET TBLPROPERTIES IF EXISTS "
        "('delta.dataSkippingStatsColumns', 'delta.dataSkippingNumIndexedCols', "
        "'parquet.enable.dictionary#row.key_value.value')"
    )
    shutil.rmtree(lh.leases.path)
    if Path(lh.system_path).exists():
        os.replace(lh.system_path, Path(lh.root, "_system"))
    layout.forget_checked_layouts()


def _mirrors_the_source(spark, mariadb, database, config, lh) -> None:
    """Silver equals the source value for value; gold too, less the row the drop check holds back."""
    diffs = diff_with_source(spark, config, layer="silver")
    assert diffs, [d.describe() for d in diffs if not d.ok]
    assert all(d.ok for d in diffs), [d.describe() for d in diffs if not d.ok]
    with mariadb.root_connection(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM orders")
        source = {row[0] for row in cur.fetchall()}
    assert {r.id for r in lh.gold(database, "orders").read(spark).collect()} == source - {21}


def _publishes(spark, ref) -> list[tuple]:
    cols = ("publish_id", "db", "table", "gold_version", "file_index", "pos", "status", "row_count")
    return sorted(tuple(r[c] for c in cols) for r in ref.read(spark).collect())


@pytest.mark.slow
def test_a_lakehouse_from_an_earlier_binlake_is_migrated_once_and_every_command_works_after(
    spark, mariadb, database, tmp_path, capsys
):
    mariadb.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, qty INT NOT NULL)",
        "INSERT INTO orders SELECT seq, seq FROM seq_1_to_20",
        "INSERT INTO orders VALUES (21, 500)",  # held back by the drop check: a quarantine row
        database=database,
    )
    path = tmp_path / "binlake.yml"
    checks = {f"{database}.orders": [{"column": "qty", "between": [0, 100], "severity": "drop"}]}
    path.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lakehouse"), [f"{database}.orders"], server_id=6500, gold={"checks": checks}
        )
    )
    config = load_config(path)
    lh = Lakehouse(config)
    run = ["--config", str(path)]

    assert cli.main([*run, "run"]) == 0
    (first,) = lh.publish_log.read(spark).collect()
    first_position = f"{first.binlog_file}:{first.pos}"
    mariadb.execute("UPDATE orders SET qty = qty + 1 WHERE id <= 5", database=database)
    assert cli.main([*run, "run"]) == 0
    before = {
        "publishes": _publishes(spark, lh.publish_log),
        "gold_at_first": sorted(
            tuple(r) for r in gold_as_of(spark, config, database, "orders", position=first_position).collect()
        ),
        "quarantine": sorted(tuple(r) for r in lh.quarantine(database, "orders").read(spark).collect()),
        "metrics": lh.metrics.read(spark).count(),
        "check_results": lh.check_results.read(spark).count(),
    }
    assert len(before["publishes"]) == 2
    assert len(before["gold_at_first"]) == 20
    assert before["quarantine"]
    capsys.readouterr()

    _as_layout_0(spark, lh)

    # Commands that only read refuse, with the one command that moves it.
    assert cli.main([*run, "status"]) == 10
    assert "has layout 0, from an earlier binlake" in capsys.readouterr().err
    with pytest.raises(LayoutOutdatedError, match="run `binlake migrate` once"):
        gold_as_of(spark, config, database, "orders")

    # The first command that writes migrates, then does its work.
    mariadb.execute("DELETE FROM orders WHERE id = 20", database=database)
    assert cli.main([*run, "run"]) == 0
    out = capsys.readouterr().out
    assert f"lakehouse layout 0 -> {LAYOUT_VERSION}: moved binlake's own tables" in out
    assert lh.leases.properties(spark)[LAYOUT_PROPERTY] == str(LAYOUT_VERSION)
    assert not Path(lh.root, "gold", "_quarantine").exists()
    assert not Path(lh.root, "_system").exists()
    assert sorted(p.name for p in Path(lh.root, "gold").iterdir()) == [database]
    assert sorted(p.name for p in Path(lh.root, "silver").iterdir()) == [database]

    # Nothing lost: the publish history, gold as of a publish before the move, the rest.
    after = _publishes(spark, lh.publish_log)
    assert set(before["publishes"]) <= set(after)
    assert len(after) == 3
    at_first = gold_as_of(spark, config, database, "orders", position=first_position).collect()
    assert sorted(tuple(r) for r in at_first) == before["gold_at_first"]
    assert set(before["quarantine"]) <= {tuple(r) for r in lh.quarantine(database, "orders").read(spark).collect()}
    assert lh.metrics.read(spark).count() > before["metrics"]
    assert lh.check_results.read(spark).count() > before["check_results"]
    assert lh.publish_log.properties(spark)["delta.enableChangeDataFeed"] == "true"
    _mirrors_the_source(spark, mariadb, database, config, lh)

    # Every command works on the migrated lakehouse, and the migration does not run again.
    mariadb.execute("INSERT INTO orders VALUES (30, 30)", database=database)
    for command in (
        ["status"],
        ["checks"],
        ["capture"],
        ["silver"],
        ["gold"],
        ["verify"],
        ["snapshot", "--table", f"{database}.orders"],
        ["maintain"],
        ["migrate"],
    ):
        assert cli.main([*run, *command]) == 0, command
    out = capsys.readouterr().out
    assert f"lakehouse layout {LAYOUT_VERSION}: up to date, nothing to migrate" in out
    assert "->" not in out.split("lakehouse layout")[-1]
    assert cli.main([*run, "run"]) == 0
    _mirrors_the_source(spark, mariadb, database, config, lh)
