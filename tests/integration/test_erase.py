"""``binlake erase``: once the source deleted a key and silver applied it, erase removes every
row of that key from the current version of every layer (bronze change-log images, snapshot
rows, silver tombstone, gold), leaves every other row alone, names the versions that still
hold it until VACUUM, and the key can come back as a new row. Before that it refuses, and
deletes nothing."""

from __future__ import annotations

from source_diff import diff_with_source  # tests/source_diff.py

from binlake import cli
from binlake.config import load_config
from binlake.contract.tables import Lakehouse

CANARY = "ann.canary@example.org"


def _holding(spark, ref, where: str = "true") -> int:
    """Rows of a table (its current version) whose JSON text contains the canary."""
    df = ref.read(spark).where(where)
    return df.selectExpr("to_json(struct(*)) AS j").where(f"j LIKE '%{CANARY}%'").count()


def test_erase_removes_a_deleted_key_from_every_layer_and_nothing_else(spark, mariadb, database, tmp_path, capsys):
    mariadb.execute(
        "CREATE TABLE customers (id INT PRIMARY KEY, email VARCHAR(60), city VARCHAR(20))",
        "CREATE TABLE orders (id INT PRIMARY KEY, customer_id INT, note VARCHAR(60))",
        f"INSERT INTO customers VALUES (1, 'bob@example.org', 'Oslo'), (2, '{CANARY}', 'Rome'), "
        "(3, 'cy@example.org', 'Lima')",
        f"INSERT INTO orders VALUES (10, 2, 'for {CANARY}')",
        database=database,
    )
    path = tmp_path / "binlake.yml"
    # customers keeps SCD type 2 history, published to gold with it, and erased from it too.
    path.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lakehouse"),
            [f"{database}.*"],
            server_id=6321,
            history={"tables": [f"{database}.customers"]},
        )
    )
    config = load_config(path)
    lh = Lakehouse(config)
    assert cli.main(["--config", str(path), "run"]) == 0
    mariadb.execute(
        "UPDATE customers SET city = 'Pisa' WHERE id = 2",
        "UPDATE customers SET city = 'Bari' WHERE id = 2",
        "UPDATE customers SET city = 'Bern' WHERE id = 1",
        database=database,
    )
    assert cli.main(["--config", str(path), "run"]) == 0
    table = f"{database}.customers"
    capsys.readouterr()
    # Gold's history is silver's as of the published position: key 2 went Rome -> Pisa -> Bari.
    gold_history = lh.gold_history(database, "customers").read(spark)
    assert sorted((r["id"], r["city"], r["_cdc_is_current"]) for r in gold_history.collect()) == [
        (1, "Bern", True),
        (1, "Oslo", False),
        (2, "Bari", True),
        (2, "Pisa", False),
        (2, "Rome", False),
        (3, "Lima", True),
    ]
    assert gold_history.exceptAll(lh.silver_history(database, "customers").read(spark)).count() == 0

    # Refused while the source, then silver, still has the key: nothing is deleted.
    assert cli.main(["--config", str(path), "erase", "--table", table, "--key", "id=2"]) == 13
    assert "still has this key on the source: delete it there first" in capsys.readouterr().err
    mariadb.execute("DELETE FROM customers WHERE id = 2", database=database)
    assert cli.main(["--config", str(path), "erase", "--table", table, "--key", "id=2"]) == 13
    assert "silver still has this key" in capsys.readouterr().err
    assert _holding(spark, lh.changelog) == 2  # the two updates of key 2, before and after images
    assert cli.main(["--config", str(path), "erase", "--table", table, "--key", "idx=2"]) == 2

    assert cli.main(["--config", str(path), "run"]) == 0
    silver_before = lh.silver(database, "customers").latest_version(spark)
    capsys.readouterr()
    assert cli.main(["--config", str(path), "erase", "--table", table, "--key", "id=2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("erase: ")
    assert "versions before" in out
    assert "until VACUUM" in out

    on_table = f"db = '{database}' AND `table` = 'customers'"
    assert _holding(spark, lh.changelog, on_table) == 0
    typed = lh.snapshot_tables(spark, database, "customers")
    assert typed
    assert all(_holding(spark, ref) == 0 for ref in typed.values())
    for ref in (
        lh.silver(database, "customers"),
        lh.gold(database, "customers"),
        lh.silver_history(database, "customers"),
        lh.silver_history_events(database, "customers"),
        lh.gold_history(database, "customers"),
    ):
        assert _holding(spark, ref) == 0, ref
        assert ref.read(spark).where("id = 2").count() == 0, ref
    assert lh.gold_history(database, "customers").read(spark).where("id = 1").count() == 2
    # Other keys and other tables keep everything (the order names the canary in its own text).
    assert lh.silver(database, "customers").read(spark).where("id = 1 AND city = 'Bern'").count() == 1
    assert _holding(spark, lh.gold(database, "orders")) == 1
    # Time travel still shows it until VACUUM, as the output says.
    old = spark.read.format("delta").option("versionAsOf", silver_before).load(lh.silver(database, "customers").path)
    assert old.where("id = 2").count() == 1
    assert lh.changelog.properties(spark).get("delta.appendOnly") == "true"
    assert Lakehouse(config).metrics.read(spark).where("command = 'erase' AND status = 'ok'").count() == 1

    # The key may come back as a new row, and gold follows the source as before.
    mariadb.execute("INSERT INTO customers VALUES (2, 'new@example.org', 'Nice')", database=database)
    assert cli.main(["--config", str(path), "run"]) == 0
    diffs = diff_with_source(spark, config)
    assert diffs, [d.describe() for d in diffs if not d.ok]
    assert all(d.ok for d in diffs), [d.describe() for d in diffs if not d.ok]
