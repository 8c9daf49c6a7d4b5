"""``run_pipeline`` against a real MariaDB: snapshot, capture, silver and gold in one call;
gold equals the source, deletes never reach it, and gold as of the first publish still reads
what the source held then."""

from __future__ import annotations

from binlake.gold.publish_log import gold_as_of
from binlake.ops.pipeline import run_pipeline
from binlake.ops.status import collect_status, format_status


def source_rows(mariadb, db):
    with mariadb.root_connection(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, price FROM items ORDER BY id")
        return [(r[0], r[1], float(r[2])) for r in cur.fetchall()]


def gold_rows(df):
    return sorted((r["id"], r["name"], float(r["price"])) for r in df.collect())


def test_the_scheduled_job_publishes_gold_equal_to_the_source(
    spark_with_code_generation, mariadb, database, make_config
):
    spark = spark_with_code_generation  # the compiled paths production runs
    mariadb.execute(
        "CREATE TABLE items (id INT PRIMARY KEY COMMENT 'item number', name VARCHAR(20) NOT NULL, "
        "price DECIMAL(8,2)) COMMENT 'things we sell'",
        "INSERT INTO items VALUES (1, 'pen', 2.50), (2, 'ink', 7.00), (3, 'cap', 1.00), (4, 'bad', 9999.00)",
        database=database,
    )
    config = make_config(
        [f"{database}.*"],
        snapshot={"chunk_size": 2},
        gold={"checks": {f"{database}.items": [{"column": "price", "between": [0, 1000], "severity": "drop"}]}},
    )

    first = run_pipeline(spark, config)

    assert [s.name for s in first.steps] == ["snapshot", "capture", "silver", "gold"]
    assert first.ok
    gold = first.steps[-1].result
    assert gold_rows(gold_as_of(spark, config, database, "items")) == [
        r for r in source_rows(mariadb, database) if r[0] != 4
    ]

    mariadb.execute(
        "UPDATE items SET price = 3.00 WHERE id = 1",
        "DELETE FROM items WHERE id = 2",
        "INSERT INTO items VALUES (5, 'nib', 0.50)",
        database=database,
    )
    second = run_pipeline(spark, config)

    assert second.ok
    now = [r for r in source_rows(mariadb, database) if r[0] != 4]
    assert (
        gold_rows(gold_as_of(spark, config, database, "items"))
        == now
        == [(1, "pen", 3.0), (3, "cap", 1.0), (5, "nib", 0.5)]
    )
    assert gold_rows(gold_as_of(spark, config, database, "items", position=gold.position)) == [
        (1, "pen", 2.5),
        (2, "ink", 7.0),
        (3, "cap", 1.0),
    ]
    text = format_status(collect_status(spark, config))
    assert f"{database}.items" in text
    assert "last publish: " in text
