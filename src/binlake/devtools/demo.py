"""``make demo``: a sample shop database flowing through bronze, silver and gold.

1. creates ``shop`` (customers; orders with a composite key; products with DECIMAL, DATETIME,
   ENUM, JSON and an unsigned BIGINT) in the local MariaDB;
2. runs ``binlake run`` (snapshot, capture, silver, gold);
3. applies inserts, updates and deletes, and runs ``binlake run`` again;
4. prints what an analyst sees: a per-table summary, one SQL query on gold, the order a Great
   Expectations suite quarantined (``gold.expectations``), the masked email column
   (``source.columns``) and a customer's two moves in the history table (``history.tables``);
5. runs ``binlake run --continuous`` for a few seconds: a change made on the source appears
   in gold, and the freshness it measured is printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

SCHEMA = [
    "DROP DATABASE IF EXISTS shop",
    "CREATE DATABASE shop",
    """CREATE TABLE shop.customers (
         id INT PRIMARY KEY COMMENT 'customer number',
         name VARCHAR(100) NOT NULL COMMENT 'full name',
         email VARCHAR(200),
         city VARCHAR(60) COMMENT 'postal address: city',
         country CHAR(2) NOT NULL,
         created_at DATETIME(6) NOT NULL
       ) COMMENT 'people who buy things'""",
    """CREATE TABLE shop.products (
         sku BIGINT UNSIGNED PRIMARY KEY COMMENT 'stock keeping unit',
         title VARCHAR(200) NOT NULL,
         price DECIMAL(10,2) NOT NULL COMMENT 'unit price in EUR',
         status ENUM('active','discontinued') NOT NULL DEFAULT 'active',
         attributes JSON,
         updated_at DATETIME NOT NULL
       ) COMMENT 'the catalogue'""",
    """CREATE TABLE shop.orders (
         customer_id INT NOT NULL,
         order_no INT NOT NULL,
         sku BIGINT UNSIGNED NOT NULL,
         quantity SMALLINT NOT NULL,
         placed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
         PRIMARY KEY (customer_id, order_no)
       ) COMMENT 'one line per order'""",
]

SEED = [
    """INSERT INTO shop.customers VALUES
         (1, 'Ada Lovelace', 'ada@example.com', 'London', 'GB', '2026-01-05 09:00:00.123456'),
         (2, 'Grace Hopper', 'grace@example.com', 'New York', 'US', '2026-02-11 14:30:00'),
         (3, 'Émilie du Châtelet', NULL, 'Paris', 'FR', '2026-03-01 08:15:00'),
         (4, 'Katherine Johnson', 'kj@example.com', 'Hampton', 'US', '2026-03-20 17:45:00')""",
    """INSERT INTO shop.products VALUES
         (18446744073709551000, 'Analytical Engine', 99999.99, 'active', '{"gears": 4000, "steam": true}',
          '2026-01-01 00:00:00'),
         (1001, 'Punch cards (100)', 4.50, 'active', '{"colour": "buff"}', '2026-01-01 00:00:00'),
         (1002, 'Slide rule', 19.90, 'active', NULL, '2026-01-01 00:00:00'),
         (1003, 'Vacuum tube', 7.25, 'discontinued', '{"watts": 5}', '2026-01-01 00:00:00')""",
    """INSERT INTO shop.orders (customer_id, order_no, sku, quantity, placed_at) VALUES
         (1, 1, 18446744073709551000, 1, '2026-04-01 10:00:00.000'),
         (1, 2, 1001, 3, '2026-04-02 10:00:00.000'),
         (2, 1, 1002, 2, '2026-04-03 11:00:00.000'),
         (3, 1, 1001, 10, '2026-04-04 12:00:00.000'),
         (4, 1, 1003, 4, '2026-04-05 13:00:00.000')""",
]

CHANGES = [
    "INSERT INTO shop.customers VALUES (5, 'Alan Turing', 'alan@example.com', 'Manchester', 'GB', "
    "'2026-05-01 09:00:00')",
    "INSERT INTO shop.orders (customer_id, order_no, sku, quantity, placed_at) "
    "VALUES (5, 1, 1002, 1, '2026-05-02 09:00:00'), (2, 2, 1001, 5, '2026-05-02 10:00:00')",
    "UPDATE shop.products SET price = 21.50, updated_at = '2026-05-03 00:00:00' WHERE sku = 1002",
    "UPDATE shop.customers SET email = 'emilie@example.fr' WHERE id = 3",
    # Grace moves twice: two new versions in shop.customers__history.
    "UPDATE shop.customers SET city = 'Arlington' WHERE id = 2",
    "UPDATE shop.customers SET city = 'Washington' WHERE id = 2",
    "UPDATE shop.orders SET quantity = quantity + 1 WHERE customer_id = 1",
    "DELETE FROM shop.orders WHERE customer_id = 4",
    "DELETE FROM shop.customers WHERE id = 4",
    "UPDATE shop.products SET status = 'discontinued' WHERE sku = 1001",
    # A typo on the source: the orders suite's drop expectation keeps it out of gold.
    "INSERT INTO shop.orders (customer_id, order_no, sku, quantity, placed_at) "
    "VALUES (1, 3, 1003, 5000, '2026-05-04 08:00:00')",
]

# The orders' expectation suite, in Great Expectations' own JSON format (gold.expectations).
ORDERS_SUITE = {
    "name": "shop_orders",
    "expectations": [
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "quantity", "min_value": 1, "max_value": 100},
            "meta": {"severity": "drop", "name": "quantity between 1 and 100"},
        },
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "placed_at"}},
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}, "meta": {"severity": "warn"}},
    ],
}

ANALYST_SQL = """
SELECT c.name, c.country, COUNT(*) AS orders, SUM(o.quantity) AS items,
       CAST(SUM(o.quantity * p.price) AS DECIMAL(18,2)) AS revenue_eur
FROM {orders} o
JOIN {customers} c ON c.id = o.customer_id
JOIN {products} p ON p.sku = o.sku
GROUP BY c.name, c.country
ORDER BY revenue_eur DESC
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m binlake.devtools.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--mariadb-dir", default=".local/mariadb")
    ap.add_argument("--workdir", default=".local/demo")
    ns = ap.parse_args(argv)

    import os

    from binlake.devtools.mariadb import LocalMariaDB

    db = LocalMariaDB(Path(ns.mariadb_dir)).start()
    os.environ["MYSQL_PASSWORD"] = db.cdc_password
    work = Path(ns.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config_path = work / "binlake.yml"
    suite = work / "expectations" / "shop_orders.json"
    suite.parent.mkdir()
    suite.write_text(json.dumps(ORDERS_SUITE, indent=2))
    config_path.write_text(
        db.config_yaml(
            str(work / "lakehouse"),
            ["shop.*"],
            snapshot={"chunk_size": 2, "parallelism": 2},
            gold={
                "checks": {"shop.products": [{"column": "price", "between": [0, 100000], "severity": "drop"}]},
                "expectations": {"shop.orders": str(suite)},
            },
            # The customers' email is stored as a salted hash in every layer (a real
            # deployment keeps the salt in a secret: {{secrets/scope/key}}).
            source={"columns": {"shop.customers": {"mask": {"email": "hash"}}}, "mask_salt": "${BINLAKE_DEMO_SALT}"},
            # Every version of a customer's address (SCD type 2); other columns do not open versions.
            history={"tables": [{"table": "shop.customers", "track_columns": ["city", "country"]}]},
        )
    )
    os.environ.setdefault("BINLAKE_DEMO_SALT", "demo-salt-use-a-secret")
    _banner(f"1/5  sample database 'shop' on MariaDB 127.0.0.1:{db.port}; config {config_path}")
    db.execute(*SCHEMA, *SEED)

    from binlake.cli import main as binlake

    _banner("2/5  binlake run  (snapshot -> capture -> silver -> gold)")
    started = time.monotonic()
    rc = binlake(["--config", str(config_path), "run"])
    if rc != 0:
        return rc
    print(f"     first run took {time.monotonic() - started:,.1f}s")

    _banner("3/5  inserts, updates and deletes on the source, then binlake run again")
    db.execute(*CHANGES)
    for sql in CHANGES:
        print("     " + " ".join(sql.split())[:110])
    started = time.monotonic()
    rc = binlake(["--config", str(config_path), "run"])
    if rc != 0:
        return rc
    print(f"     second run took {time.monotonic() - started:,.1f}s")

    _banner("4/5  what an analyst sees")
    rc = _show(config_path, db)
    if rc != 0:
        return rc
    _banner("5/5  binlake run --continuous: a change on the source, watched until it is in gold")
    return _continuous(config_path, db)


def _show(config_path: Path, db) -> int:
    from binlake.config import load_config
    from binlake.contract.sql import qualified, sql
    from binlake.contract.tables import Lakehouse
    from binlake.spark import get_spark

    config = load_config(config_path)
    lh = Lakehouse(config)
    spark = get_spark()
    print(
        f"\n     {'table':16} {'source rows':>11} {'silver live':>11} {'tombstones':>10} {'gold rows':>9} "
        f"{'quarantined':>11}  published at"
    )
    publish = {}
    if lh.publish_log.exists(spark):
        for r in lh.publish_log.read(spark).orderBy("published_at").collect():
            publish[(r["db"], r["table"])] = r
    all_equal = True
    with db.root_connection() as conn, conn.cursor() as cur:
        for table in ("customers", "orders", "products"):
            cur.execute(sql("SELECT COUNT(*) FROM {t}", t=qualified("shop", table)))
            source_rows = cur.fetchone()[0]
            silver = lh.silver("shop", table).read(spark)
            live = silver.where("NOT _cdc_deleted").count()
            tombstones = silver.where("_cdc_deleted").count()
            gold_rows = lh.gold("shop", table).read(spark).count()
            p = publish.get(("shop", table))
            held = (p["silver_rows"] - p["row_count"]) if p else 0
            where = f"{p['binlog_file']}:{p['pos']}" if p else "-"
            all_equal &= source_rows == live == gold_rows + held
            print(f"     {table:16} {source_rows:>11} {live:>11} {tombstones:>10} {gold_rows:>9} {held:>11}  {where}")
    names = {t: lh.gold("shop", t).sql for t in ("customers", "orders", "products")}
    query = ANALYST_SQL.format(**names)
    root = config.lakehouse_root
    assert root is not None, "the demo's lakehouse is a path"
    print(
        "\n     SQL on gold:"
        + "\n       ".join(line for line in query.replace(str(Path(root)), "<lakehouse>").splitlines())
    )
    spark.sql(query).show(truncate=False)
    print(
        "     gold row counts equal the source, less the quarantined rows"
        if all_equal
        else "     MISMATCH between source and gold row counts"
    )
    print("\n     the order the expectation suite's drop expectation held back (system/quarantine), and GE's result:")
    spark.sql(
        sql(
            "SELECT customer_id, order_no, quantity, _quarantine_check, _publish_id "
            "FROM {t} ORDER BY _quarantined_at DESC LIMIT 1",
            t=lh.quarantine("shop", "orders").sql,
        )
    ).show(truncate=False)
    from binlake.ops.check_results import format_results, stored_results

    print("     " + format_results(stored_results(spark, config, ["shop.orders"])).replace("\n", "\n     "))
    print("\n     shop.customers.email is masked (source.columns): gold holds a salted SHA-256, joinable, not readable")
    spark.sql(
        sql("SELECT id, name, left(email, 16) || '...' AS email FROM {t} ORDER BY id", t=names["customers"])
    ).show(truncate=False)
    print("     shop.customers__history (history.tables): every address Grace Hopper had, in binlog order")
    spark.sql(
        sql(
            "SELECT id, name, city, _cdc_valid_from.pos AS from_pos, _cdc_valid_to.pos AS to_pos, _cdc_is_current "
            "FROM {t} WHERE id = 2 ORDER BY _cdc_valid_from",
            t=lh.gold_history("shop", "customers").sql,
        )
    ).show(truncate=False)
    return 0 if all_equal else 1


def _continuous(config_path: Path, db) -> int:
    import threading

    from binlake.config import load_config
    from binlake.contract.tables import Lakehouse
    from binlake.ops.continuous import read_state, run_continuous
    from binlake.spark import get_spark

    config = load_config(config_path)
    lh = Lakehouse(config)
    spark = get_spark()
    stop = threading.Event()
    loop = threading.Thread(target=run_continuous, kwargs={"spark": spark, "config": config, "stop": stop}, daemon=True)
    loop.start()
    try:
        while not (read_state(lh) or {}).get("loops"):
            time.sleep(0.2)  # the first loop: nothing new yet
        db.execute("UPDATE shop.products SET price = 23.90, updated_at = NOW() WHERE sku = 1002")
        changed = time.monotonic()
        print("     UPDATE shop.products SET price = 23.90 WHERE sku = 1002   (committed on the source)")
        gold = lh.gold("shop", "products")
        while time.monotonic() - changed < 120:
            if gold.read(spark).where("sku = 1002 AND price = 23.90").count():
                break
            time.sleep(0.5)
        else:
            print("     the change did not reach gold within 120 s")
            return 1
        print(f"     readable in gold {time.monotonic() - changed:,.1f}s after the commit")
    finally:
        stop.set()
        loop.join(timeout=120)
    state = read_state(lh) or {}
    fresh = state.get("recent_freshness") or []
    if fresh:
        print(
            f"     freshness the loop measured for its last publish: {fresh[-1]:,.1f}s "
            f"(source commit of the newest change -> gold publish; {state.get('loops')} loops)"
        )
    return 0


def _banner(text: str) -> None:
    print(f"\n== {text}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
