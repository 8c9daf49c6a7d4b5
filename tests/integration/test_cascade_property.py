"""Foreign-key actions end to end (issue 29): InnoDB applies ON UPDATE / ON DELETE actions
without logging them, and gold must still equal the source after every ``binlake run``.

Shapes covered, each in one schema:

- ``c``: ON UPDATE CASCADE / ON DELETE CASCADE on a column of the child's primary key
  (a parent key update moves the child row to a new key);
- ``s``: ON UPDATE CASCADE / ON DELETE SET NULL on a non-key column;
- ``g``: a grandchild referencing the whole key of ``c`` (ON UPDATE CASCADE / ON DELETE
  SET NULL), so a parent key update reaches it through ``c`` (chained).

The property test runs seeded random interleavings of parent key updates, parent deletes
and inserts, and child inserts, updates (key and non-key columns) and deletes, cut into
batches at random points; after each cut it runs the pipeline and compares gold with the
source value for value. ``BINLAKE_TEST_SEED=<n>`` reproduces one seed;
``BINLAKE_CASCADE_SEEDS=<k>`` runs k seeds (one in `make test`, which a fresh random
base seed makes a different one on every run).
"""

from __future__ import annotations

import os
import random

import pymysql
import pytest
from source_diff import diff_with_source  # tests/source_diff.py

from binlake.ops.pipeline import run_pipeline

DDL = [
    "CREATE TABLE p (id INT PRIMARY KEY, v INT)",
    """CREATE TABLE c (p_id INT NOT NULL, k INT NOT NULL, v INT, PRIMARY KEY (p_id, k),
         FOREIGN KEY (p_id) REFERENCES p (id) ON UPDATE CASCADE ON DELETE CASCADE)""",
    """CREATE TABLE s (id INT PRIMARY KEY, p_id INT, v INT,
         FOREIGN KEY (p_id) REFERENCES p (id) ON UPDATE CASCADE ON DELETE SET NULL)""",
    """CREATE TABLE g (id INT PRIMARY KEY, p_id INT, k INT, v INT,
         FOREIGN KEY (p_id, k) REFERENCES c (p_id, k) ON UPDATE CASCADE ON DELETE SET NULL)""",
]
TABLES = ("p", "c", "s", "g")
# Refusals that change nothing: duplicate key, a parent row still referenced, a missing
# parent, a NULL into NOT NULL, a cascade that would duplicate a child key.
REFUSED = (1062, 1451, 1452, 1048, 1761)
# Small key spaces, so parent changes hit children that changed in the same batch.
P_IDS, C_KS, S_IDS, G_IDS = 12, 4, 10, 10


def check_gold(spark, config, what: str, log: list[str], tables=TABLES) -> None:
    diffs = diff_with_source(spark, config)
    assert {d.name.split(".")[1] for d in diffs} == set(tables)
    bad = [d for d in diffs if not d.ok]
    if bad:
        pytest.fail(
            f"gold differs from the source {what}:\n"
            + "\n".join(d.describe() for d in bad)
            + "\nstatements:\n"
            + "\n".join(log[-60:]),
            pytrace=False,
        )


def run_ok(spark, config) -> None:
    result = run_pipeline(spark, config)
    assert result.ok, result.summary()


def test_child_rows_deleted_or_updated_after_the_parent_key_update_are_published_as_the_source_has_them(
    spark, mariadb, database, make_config
):
    # In one batch, after a parent key update InnoDB cascades without logging it: a child row
    # deleted stays deleted (fa), a child row updated is one row with its new value (fa3).
    mariadb.execute(
        "CREATE TABLE a (id INT PRIMARY KEY) ENGINE=InnoDB",
        """CREATE TABLE fa (a_id INT NOT NULL, f_id INT NOT NULL, PRIMARY KEY (a_id, f_id),
             FOREIGN KEY (a_id) REFERENCES a (id) ON UPDATE CASCADE) ENGINE=InnoDB""",
        "INSERT INTO a VALUES (68), (69)",
        "INSERT INTO fa VALUES (68, 671), (68, 497), (69, 1)",
        "CREATE TABLE a3 (id INT PRIMARY KEY) ENGINE=InnoDB",
        """CREATE TABLE fa3 (a_id INT NOT NULL, f_id INT NOT NULL, note VARCHAR(10), PRIMARY KEY (a_id, f_id),
             FOREIGN KEY (a_id) REFERENCES a3 (id) ON UPDATE CASCADE) ENGINE=InnoDB""",
        "INSERT INTO a3 VALUES (1)",
        "INSERT INTO fa3 VALUES (1, 7, 'old'), (1, 8, 'old')",
        database=database,
    )
    config = make_config([f"{database}.*"])
    run_ok(spark, config)
    mariadb.execute(
        "UPDATE a SET id = 220 WHERE id = 68",
        "DELETE FROM fa WHERE a_id = 220 AND f_id = 671",
        "UPDATE a3 SET id = 300 WHERE id = 1",
        "UPDATE fa3 SET note = 'new' WHERE a_id = 300 AND f_id = 7",
        database=database,
    )
    run_ok(spark, config)  # gold's key check used to fail here on fa3 (two live rows for one key)

    def gold(table, *cols):
        return sorted(
            tuple(r)
            for r in spark.read.format("delta")
            .load(f"{config.lakehouse_root}/gold/{database}/{table}")
            .select(*cols)
            .collect()
        )

    assert gold("fa", "a_id", "f_id") == [(69, 1), (220, 497)]
    assert gold("fa3", "a_id", "f_id", "note") == [(300, 7, "new"), (300, 8, "old")]
    check_gold(spark, config, "after the changes", [], tables=("a", "fa", "a3", "fa3"))


class Workload:
    """Random statements over p, c, s, g; those the server refuses (a missing parent, a
    duplicate key) simply change nothing, as they would for an application."""

    def __init__(self, conn, rng: random.Random, log: list[str]):
        self.conn, self.rng, self.log = conn, rng, log

    def run(self, sql: str) -> None:
        self.log.append(sql + ";")
        with self.conn.cursor() as cur:
            try:
                cur.execute(sql)
            except pymysql.err.MySQLError as exc:
                if exc.args[0] not in REFUSED:
                    raise
                self.log.append(f"-- refused: {exc.args[1]}")

    def statement(self) -> None:
        r = self.rng
        pick = r.choices(
            [
                "p_key",
                "p_delete",
                "p_insert",
                "p_value",
                "c_insert",
                "c_update",
                "c_key",
                "c_delete",
                "s_insert",
                "s_update",
                "s_delete",
                "g_insert",
                "g_update",
                "g_delete",
            ],
            weights=[14, 6, 8, 3, 10, 5, 4, 4, 6, 4, 2, 6, 4, 2],
        )[0]
        self.run(getattr(self, pick)())

    def transaction(self) -> None:
        if self.rng.random() < 0.5:
            self.statement()
            return
        self.run("BEGIN")
        for _ in range(self.rng.randint(2, 4)):
            self.statement()
        self.run("ROLLBACK" if self.rng.random() < 0.1 else "COMMIT")

    def p(self) -> int:
        return self.rng.randint(1, P_IDS)

    def p_key(self) -> str:
        r = self.rng
        if r.random() < 0.3:  # several parents in one statement: one event, many rows
            low = self.p()
            return f"UPDATE IGNORE p SET id = id + {P_IDS} WHERE id BETWEEN {low} AND {low + 2} ORDER BY id DESC"
        return f"UPDATE IGNORE p SET id = {r.randint(1, 2 * P_IDS)} WHERE id = {self.p()}"

    def p_delete(self) -> str:
        return f"DELETE FROM p WHERE id = {self.rng.randint(1, 2 * P_IDS)}"

    def p_insert(self) -> str:
        return f"INSERT IGNORE INTO p VALUES ({self.rng.randint(1, 2 * P_IDS)}, {self.rng.randint(0, 99)})"

    def p_value(self) -> str:
        return f"UPDATE p SET v = v + 1 WHERE id = {self.rng.randint(1, 2 * P_IDS)}"

    def c_insert(self) -> str:
        r = self.rng
        return (
            f"INSERT IGNORE INTO c SELECT id, {r.randint(1, C_KS)}, {r.randint(0, 99)} FROM p "
            f"ORDER BY RAND({r.randint(0, 10**6)}) LIMIT 1"
        )

    def c_update(self) -> str:
        return f"UPDATE c SET v = {self.rng.randint(0, 99)} WHERE p_id = {self.rng.randint(1, 2 * P_IDS)}"

    def c_key(self) -> str:
        r = self.rng
        return (
            f"UPDATE IGNORE c SET k = {r.randint(1, C_KS)} "
            f"WHERE p_id = {r.randint(1, 2 * P_IDS)} AND k = {r.randint(1, C_KS)}"
        )

    def c_delete(self) -> str:
        r = self.rng
        return f"DELETE FROM c WHERE p_id = {r.randint(1, 2 * P_IDS)} AND k >= {r.randint(1, C_KS)}"

    def s_insert(self) -> str:
        r = self.rng
        return (
            f"INSERT IGNORE INTO s SELECT {r.randint(1, S_IDS)}, id, {r.randint(0, 99)} FROM p "
            f"ORDER BY RAND({r.randint(0, 10**6)}) LIMIT 1"
        )

    def s_update(self) -> str:
        r = self.rng
        change = r.choice([f"v = {r.randint(0, 99)}", "p_id = NULL", f"p_id = {r.randint(1, 2 * P_IDS)}"])
        return f"UPDATE IGNORE s SET {change} WHERE id = {r.randint(1, S_IDS)}"

    def s_delete(self) -> str:
        return f"DELETE FROM s WHERE id = {self.rng.randint(1, S_IDS)}"

    def g_insert(self) -> str:
        r = self.rng
        return (
            f"INSERT IGNORE INTO g SELECT {r.randint(1, G_IDS)}, p_id, k, {r.randint(0, 99)} FROM c "
            f"ORDER BY RAND({r.randint(0, 10**6)}) LIMIT 1"
        )

    def g_update(self) -> str:
        r = self.rng
        change = r.choice([f"v = {r.randint(0, 99)}", "p_id = NULL, k = NULL"])
        return f"UPDATE g SET {change} WHERE id = {r.randint(1, G_IDS)}"

    def g_delete(self) -> str:
        return f"DELETE FROM g WHERE id = {self.rng.randint(1, G_IDS)}"


# One random base per worker process; the test ids are indices, the same on every worker.
BASE_SEED = int(os.environ.get("BINLAKE_TEST_SEED") or random.SystemRandom().randrange(1_000_000))
SEEDS = 1 if os.environ.get("BINLAKE_TEST_SEED") else int(os.environ.get("BINLAKE_CASCADE_SEEDS", "1"))
CUTS = 1  # more cuts per seed: BINLAKE_CASCADE_SEEDS adds seeds, each with its own interleaving


@pytest.mark.slow
@pytest.mark.parametrize("index", range(SEEDS))
def test_random_interleavings_of_parent_and_child_changes_end_with_gold_equal_to_the_source(
    spark, mariadb, database, make_config, index
):
    seed = BASE_SEED + index
    print(f"BINLAKE_TEST_SEED={seed}")
    rng = random.Random(seed)
    log: list[str] = [f"-- BINLAKE_TEST_SEED={seed}"]
    mariadb.execute(*DDL, database=database)
    conn = mariadb.root_connection(database)
    workload = Workload(conn, rng, log)
    try:
        for i in range(1, P_IDS + 1):
            workload.run(f"INSERT INTO p VALUES ({i}, {i})")
        for _ in range(20):
            workload.run(rng.choice([workload.c_insert, workload.s_insert])())
        for _ in range(8):
            workload.run(workload.g_insert())
        config = make_config([f"{database}.*"])
        run_ok(spark, config)
        check_gold(spark, config, f"after the snapshot (BINLAKE_TEST_SEED={seed})", log)
        for cut in range(1, CUTS + 1):
            for _ in range(rng.randint(1, 12)):
                workload.transaction()
            log.append(f"-- cut {cut}: binlake run")
            run_ok(spark, config)
            check_gold(spark, config, f"after cut {cut} (BINLAKE_TEST_SEED={seed})", log)
    finally:
        conn.close()
