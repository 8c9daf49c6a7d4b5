"""Column rules (``source.columns``): an excluded column never reaches the lakehouse, a masked
one is stored masked in every layer (history tables included), whether its row came from the
snapshot or the binlog,
and the same value gets the same hash in every table (so masked columns still join). A rule
that changes while the table has data stops that table, naming the re-snapshot that
recovers it; the other tables go on."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from binlake import cli
from binlake.config import load_config
from binlake.contract.columns import masked_text
from binlake.contract.tables import Lakehouse

SALT = "salt-4b1d"
# One canary per place a value must never be stored: the excluded column, in rows read by
# the snapshot and by capture, and the masked columns' clear values.
SSN = ("SSN-Canary-0417", "SSN-Canary-0533", "SSN-Canary-0871")
EMAIL = "email.canary@example.org"
NOTE = ("Note-Canary-snap", "Note-Canary-binlog")
CANARIES = (*SSN, EMAIL, *NOTE)


def _files_holding(root: Path, needle: str) -> list[str]:
    """Files under ``root`` holding ``needle``: raw bytes (Delta logs, their column statistics,
    checkpoints), and every Parquet file's values decoded (compression can hide raw bytes)."""
    hits = []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        if needle.encode() in p.read_bytes():
            hits.append(str(p))
        elif p.suffix == ".parquet" and needle in str(pq.read_table(p).to_pylist()):
            hits.append(f"{p} (decoded)")
    return hits


def _config(mariadb, tmp_path, database: str, rule: dict, name: str = "binlake.yml") -> Path:
    path = tmp_path / name
    path.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lakehouse"),
            [f"{database}.*"],
            server_id=6441,
            source={
                "columns": {f"{database}.customers": rule, f"{database}.orders": {"mask": {"email": "hash"}}},
                "mask_salt": "${MASK_SALT}",
            },
            # The history tables (silver's versions and events, gold's copy) hold images too.
            history={"tables": [f"{database}.customers"]},
        )
    )
    return path


def test_excluded_and_masked_values_reach_no_file_and_no_output_and_hashes_join(
    spark, mariadb, database, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MASK_SALT", SALT)
    mariadb.execute(
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40), email VARCHAR(60), ssn CHAR(15), note TEXT)",
        "CREATE TABLE orders (id INT PRIMARY KEY, email VARCHAR(60), total DECIMAL(8,2))",
        f"INSERT INTO customers VALUES (1, 'Ann', '{EMAIL}', '{SSN[0]}', '{NOTE[0]}'), "
        "(2, 'Bob', 'bob@example.org', NULL, NULL)",
        database=database,
    )
    rule = {"exclude": ["ssn"], "mask": {"email": "hash", "note": "null"}}
    path = _config(mariadb, tmp_path, database, rule)
    config = load_config(path)
    lh = Lakehouse(config)
    assert cli.main(["--config", str(path), "run"]) == 0  # the snapshot reads customers 1 and 2

    # Through the binlog: a new customer with the same email, an update, an order.
    mariadb.execute(
        f"INSERT INTO customers VALUES (3, 'Cy', '{EMAIL}', '{SSN[1]}', '{NOTE[1]}')",
        f"UPDATE customers SET name = 'Ann B', ssn = '{SSN[2]}' WHERE id = 1",
        f"INSERT INTO orders VALUES (10, '{EMAIL}', 12.50), (11, 'bob@example.org', 3.00)",
        database=database,
    )
    assert cli.main(["--config", str(path), "run"]) == 0
    out = capsys.readouterr()

    hashed = masked_text("hash", SALT, EMAIL)
    for ref in (lh.silver(database, "customers"), lh.gold(database, "customers")):
        df = ref.read(spark)
        assert "ssn" not in df.columns
        rows = {r["id"]: r for r in df.where("NOT _cdc_deleted" if "_cdc_deleted" in df.columns else "true").collect()}
        assert sorted(rows) == [1, 2, 3]
        assert rows[1]["name"] == "Ann B"
        # Snapshot (1) and binlog (3) hash the same value to the same text; note is stored as NULL.
        assert rows[1]["email"] == rows[3]["email"] == hashed
        assert len(hashed) == 64
        assert rows[2]["email"] == masked_text("hash", SALT, "bob@example.org")
        assert all(r["note"] is None for r in rows.values())
    customers, orders = lh.gold(database, "customers").read(spark), lh.gold(database, "orders").read(spark)
    assert customers.join(orders, "email").count() == 3  # both of Ann's address twins, and Bob
    history = lh.gold_history(database, "customers").read(spark)
    assert "ssn" not in history.columns
    assert history.where("id = 1").count() == 2  # Ann, then Ann B
    assert {r["email"] for r in history.where("id = 1").collect()} == {hashed}

    for canary in CANARIES:
        assert _files_holding(tmp_path / "lakehouse", canary) == [], f"{canary} was stored"
        assert canary not in out.out + out.err, f"{canary} was printed"
    assert SALT not in out.out + out.err
    assert _files_holding(tmp_path / "lakehouse", SALT) == []

    # A new rule for a table with data: that table stops with the fix, the other goes on.
    changed = _config(mariadb, tmp_path, database, {**rule, "mask": {**rule["mask"], "name": "null"}}, "changed.yml")
    mariadb.execute(
        "UPDATE customers SET name = 'Bob C' WHERE id = 2",
        "INSERT INTO orders VALUES (12, NULL, 1.00)",
        database=database,
    )
    assert cli.main(["--config", str(changed), "run"]) == 6
    err = capsys.readouterr().err.strip().splitlines()
    table = f"{database}.customers"
    assert any(
        f"silver stopped {table}: its column rules" in line
        and f"recover with: binlake snapshot --table {table}" in line
        for line in err
    ), err
    assert lh.silver(database, "orders").read(spark).where("id = 12").count() == 1
    assert lh.silver(database, "customers").read(spark).where("name = 'Bob C'").count() == 0  # not mixed in

    assert cli.main(["--config", str(changed), "snapshot", "--table", table]) == 0
    assert cli.main(["--config", str(changed), "run"]) == 0
    for ref in (lh.silver(database, "customers"), lh.gold(database, "customers")):
        df = ref.read(spark)
        live = df.where("NOT _cdc_deleted") if "_cdc_deleted" in df.columns else df
        assert sorted(r["id"] for r in live.collect()) == [1, 2, 3]
        assert live.where("name IS NOT NULL OR note IS NOT NULL").count() == 0
        assert "ssn" not in df.columns
        assert live.where(f"email = '{hashed}'").count() == 2
