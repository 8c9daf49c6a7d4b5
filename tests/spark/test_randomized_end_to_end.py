"""Randomized end to end (issue 4): whatever a seeded random workload does to the source
between ``binlake run`` invocations, gold equals the source afterwards, value for value.

Tables: ``orders`` (composite key BIGINT UNSIGNED + VARCHAR with a case- and
accent-insensitive, PAD SPACE collation), ``types`` (every mapped type, from
tests/mysql_types.py), and ``parent`` with its children ``child`` (``ON DELETE CASCADE ON
UPDATE CASCADE`` on a non-key column), ``link`` (the same on a key column) and the grandchild
``sub`` (``ON UPDATE CASCADE ON DELETE SET NULL`` on link's whole key). InnoDB never logs the
cascaded changes; silver derives them.

Each round runs random transactions (multi-row INSERTs, UPDATEs of non-key columns, range
DELETEs, primary-key UPDATEs including multi-row key shifts and collation-equal key changes
such as ``'ab'`` -> ``'AB'`` or ``'ab '``, TRUNCATE; several statements per transaction, some
rolled back), then ``run_pipeline``. Every snapshot reader is paused once its read has begun
and after its SELECT, where more random transactions run, so changes commit while the chunks
of the first snapshot and of a re-snapshot taken in the middle rounds are being read. The source is
quiet while the pipeline runs, so after each run gold must equal the source.

A failure prints the seed; reproduce with ``BINLAKE_TEST_SEED=<seed>``. The statements run
are written to ``workload.sql`` in the test's tmp_path.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pymysql
import pytest
from mysql_types import COLUMNS, TYPES, row  # tests/mysql_types.py
from source_diff import diff_with_source  # tests/source_diff.py

from binlake.bronze.snapshot import BARRIER_ENV, run_snapshot
from binlake.ops.pipeline import run_pipeline

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("BINLAKE_TEST_SEED") or random.SystemRandom().randrange(1_000_000))
# A new seed every run, so rounds add up across runs; BINLAKE_E2E_ROUNDS=k for a longer one.
ROUNDS = int(os.environ.get("BINLAKE_E2E_ROUNDS", "4"))
RESNAPSHOT_ROUND = 2

DDL = [
    """CREATE TABLE orders (
         tenant BIGINT UNSIGNED NOT NULL, code VARCHAR(12) COLLATE utf8mb4_general_ci NOT NULL,
         qty INT NOT NULL, amount DECIMAL(12,2), note VARCHAR(40),
         PRIMARY KEY (tenant, code))""",
    f"CREATE TABLE types ({COLUMNS})",
    "CREATE TABLE parent (id INT PRIMARY KEY, name VARCHAR(30) NOT NULL, score DOUBLE)",
    """CREATE TABLE child (
         id INT PRIMARY KEY, parent_id INT, qty SMALLINT,
         FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE)""",
    # The parent's key is part of link's key (a cascade moves the row to a new key), and sub
    # references link's whole key (chained: ON UPDATE CASCADE, ON DELETE SET NULL).
    """CREATE TABLE link (
         parent_id INT NOT NULL, n SMALLINT NOT NULL, note VARCHAR(20), PRIMARY KEY (parent_id, n),
         FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE)""",
    """CREATE TABLE sub (
         id INT PRIMARY KEY, parent_id INT, n SMALLINT, qty SMALLINT,
         FOREIGN KEY (parent_id, n) REFERENCES link (parent_id, n) ON DELETE SET NULL ON UPDATE CASCADE)""",
]
TABLES = ["orders", "types", "parent", "child", "link", "sub"]
# InnoDB refuses TRUNCATE of a table another table references.
REFERENCED = ("parent", "link")
# Server errors that refuse one statement and change nothing (1761: a cascade would duplicate a key).
REFUSED = (1761,)


class Workload:
    """Random transactions on one connection; every statement is logged."""

    def __init__(self, conn, rng: random.Random, log: list[str]):
        self.conn, self.rng, self.log = conn, rng, log

    def run(self, sql: str) -> None:
        self.log.append(sql + ";")
        with self.conn.cursor() as cur:
            try:
                cur.execute(sql)
            except pymysql.err.MySQLError as exc:
                # A key shift whose cascade would duplicate a child key: the server refuses the
                # statement (even with IGNORE) and changes nothing, as it would for an application.
                if exc.args[0] not in REFUSED:
                    raise
                self.log.append(f"-- refused: {exc.args[1]}")

    def transaction(self) -> None:
        r = self.rng
        if r.random() < 0.3:  # autocommit: one statement is its own transaction
            self.statement()
            return
        self.run("BEGIN")
        for _ in range(r.randint(2, 5)):
            self.statement()
        self.run("ROLLBACK" if r.random() < 0.15 else "COMMIT")

    def statement(self) -> None:
        r = self.rng
        table = r.choice(TABLES)
        op = r.choices(["insert", "update", "delete", "key", "truncate"], weights=[40, 25, 15, 15, 1])[0]
        if op == "truncate" and table in REFERENCED:
            op = "delete"
        if op == "truncate":
            self.run(f"TRUNCATE {table}")
        else:
            self.run(getattr(self, f"{table}_{op}")())

    # -- orders: composite key, collation-equal keys -----------------------------------------
    def code(self) -> str:
        return "".join(self.rng.choice("abeAB_é") for _ in range(self.rng.randint(1, 4)))

    def orders_insert(self) -> str:
        r = self.rng
        rows = []
        for _ in range(r.randint(1, 8)):
            amount = r.choice(["NULL", "0.00", "-1.25", "99999.99"])
            note = r.choice(["NULL", f"'note {self.code()}'"])
            rows.append(f"({r.randint(1, 8)}, '{self.code()}', {r.randint(-5, 500)}, {amount}, {note})")
        return "INSERT IGNORE INTO orders VALUES " + ", ".join(rows)

    def orders_update(self) -> str:
        t = self.rng.randint(1, 8)
        return f"UPDATE orders SET qty = qty + 1, note = '{self.code()}' WHERE tenant BETWEEN {t} AND {t + 2}"

    def orders_delete(self) -> str:
        return f"DELETE FROM orders WHERE tenant = {self.rng.randint(1, 8)} AND code < '{self.code()}'"

    def orders_key(self) -> str:
        t = self.rng.randint(1, 8)
        change = self.rng.choice(
            [
                "code = UPPER(code)",
                "code = LOWER(code)",
                "code = REPLACE(code, 'e', 'é')",
                "code = CONCAT(code, ' ')",
                "tenant = tenant + 1",
            ]
        )
        return f"UPDATE IGNORE orders SET {change} WHERE tenant = {t} AND CHAR_LENGTH(code) < 10"

    # -- types: every type --------------------------------------------------------------------
    def literal(self, literals: list[str]) -> str:
        return self.rng.choice([*literals, "NULL"])

    def types_insert(self) -> str:
        r = self.rng
        rows = [row(r.randint(1, 120), [self.literal(lits) for _, _, lits in TYPES]) for _ in range(r.randint(1, 6))]
        return "INSERT IGNORE INTO types VALUES " + ", ".join(rows)

    def types_update(self) -> str:
        r = self.rng
        sets = ", ".join(f"{name} = {self.literal(lits)}" for name, _, lits in r.sample(TYPES, r.randint(1, 6)))
        low = r.randint(1, 120)
        return f"UPDATE types SET {sets} WHERE id BETWEEN {low} AND {low + r.randint(0, 10)}"

    def types_delete(self) -> str:
        low = self.rng.randint(1, 120)
        return f"DELETE FROM types WHERE id BETWEEN {low} AND {low + self.rng.randint(0, 5)}"

    def types_key(self) -> str:
        return self.key_shift("types", 120)

    # -- parent / child: foreign-key cascades -------------------------------------------------
    def key_shift(self, table: str, space: int) -> str:
        """Keys move up by 1 (the new key of one row is the old key of the next, in one event) or jump."""
        r = self.rng
        low = r.randint(1, space)
        return (
            f"UPDATE IGNORE {table} SET id = id + {r.choice([1, 1, 7, space])} "
            f"WHERE id BETWEEN {low} AND {low + r.randint(0, 6)} ORDER BY id DESC"
        )

    def parent_insert(self) -> str:
        r = self.rng
        rows = [
            f"({r.randint(1, 60)}, 'p{r.randint(0, 999)}', {r.choice(['NULL', '0.1', '-3.5e100', str(r.random())])})"
            for _ in range(r.randint(1, 6))
        ]
        return "INSERT IGNORE INTO parent VALUES " + ", ".join(rows)

    def parent_update(self) -> str:
        low = self.rng.randint(1, 60)
        return (
            f"UPDATE parent SET score = {self.rng.random()}, name = CONCAT(name, '+') "
            f"WHERE id BETWEEN {low} AND {low + 5}"
        )

    def parent_delete(self) -> str:
        low = self.rng.randint(1, 60)
        return f"DELETE FROM parent WHERE id BETWEEN {low} AND {low + self.rng.randint(0, 3)}"

    def parent_key(self) -> str:
        return self.key_shift("parent", 60)

    def child_insert(self) -> str:
        # A row whose parent does not exist is skipped (IGNORE turns the FK error into a warning).
        r = self.rng
        rows = [
            f"({r.randint(1, 150)}, {r.choice(['NULL', str(r.randint(1, 70))])}, {r.randint(-9, 9)})"
            for _ in range(r.randint(1, 8))
        ]
        return "INSERT IGNORE INTO child VALUES " + ", ".join(rows)

    def child_update(self) -> str:
        low = self.rng.randint(1, 150)
        new = self.rng.choice(["qty = qty + 1", f"parent_id = {self.rng.randint(1, 70)}", "parent_id = NULL"])
        return f"UPDATE IGNORE child SET {new} WHERE id BETWEEN {low} AND {low + 4}"

    def child_delete(self) -> str:
        low = self.rng.randint(1, 150)
        return f"DELETE FROM child WHERE id BETWEEN {low} AND {low + 3}"

    def child_key(self) -> str:
        return self.key_shift("child", 150)

    def link_insert(self) -> str:
        r = self.rng
        low = r.randint(1, 60)
        return (
            f"INSERT IGNORE INTO link SELECT id, {r.randint(1, 4)}, 'l{r.randint(0, 99)}' FROM parent "
            f"WHERE id BETWEEN {low} AND {low + 4}"
        )

    def link_update(self) -> str:
        low = self.rng.randint(1, 70)
        return f"UPDATE link SET note = 'u{self.rng.randint(0, 99)}' WHERE parent_id BETWEEN {low} AND {low + 3}"

    def link_delete(self) -> str:
        return f"DELETE FROM link WHERE parent_id = {self.rng.randint(1, 70)} AND n >= {self.rng.randint(1, 4)}"

    def link_key(self) -> str:
        return f"UPDATE IGNORE link SET n = n + 1 WHERE parent_id = {self.rng.randint(1, 70)} ORDER BY n DESC"

    def sub_insert(self) -> str:
        r = self.rng
        return (
            f"INSERT IGNORE INTO sub SELECT {r.randint(1, 80)}, parent_id, n, {r.randint(-9, 9)} FROM link "
            f"ORDER BY RAND({r.randint(0, 10**6)}) LIMIT {r.randint(1, 4)}"
        )

    def sub_update(self) -> str:
        low = self.rng.randint(1, 80)
        new = self.rng.choice(["qty = qty + 1", "parent_id = NULL, n = NULL"])
        return f"UPDATE sub SET {new} WHERE id BETWEEN {low} AND {low + 4}"

    def sub_delete(self) -> str:
        low = self.rng.randint(1, 80)
        return f"DELETE FROM sub WHERE id BETWEEN {low} AND {low + 3}"

    def sub_key(self) -> str:
        return self.key_shift("sub", 80)


class WindowWriter(threading.Thread):
    """Releases every snapshot reader paused at a barrier (after its low watermark, after its
    SELECT), first running a random transaction half of the time: changes inside the window."""

    def __init__(self, directory: Path, workload: Workload):
        super().__init__(daemon=True)
        self.directory, self.workload = directory, workload
        self.stop_event = threading.Event()
        self.seen: set[str] = set()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                for name in sorted(os.listdir(self.directory)):
                    if name.endswith(".go") or name in self.seen:
                        continue
                    self.seen.add(name)
                    if self.workload.rng.random() < 0.5:
                        self.workload.transaction()
                        self.transactions += 1
                    (self.directory / f"{name}.go").touch()
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self.error = exc
            self.stop_event.set()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)
        if self.error is not None:
            raise self.error


def test_random_changes_between_runs_and_inside_snapshot_windows_end_with_gold_equal_to_the_source(
    spark, mariadb, database, make_config, tmp_path, monkeypatch
):
    print(f"BINLAKE_TEST_SEED={SEED}")
    rng = random.Random(SEED)
    log: list[str] = []
    mariadb.execute(*DDL, database=database)
    conn = mariadb.root_connection(database)
    # Zero dates need a permissive sql_mode; TIMESTAMPs are written from a non-UTC session.
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET SESSION time_zone = '+05:30'")
    workload = Workload(conn, rng, log)
    for table in TABLES:  # a few hundred rows to start with
        for _ in range(12):
            workload.run(getattr(workload, f"{table}_insert")())

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    monkeypatch.setenv(BARRIER_ENV, str(barrier))
    window_writer = WindowWriter(barrier, workload)
    window_writer.start()
    config = make_config([f"{database}.*"], snapshot={"chunk_size": 16, "parallelism": 2, "chunks_per_commit": 4})
    resnapshot: list[str] = []

    def check(when: str) -> None:
        diffs = diff_with_source(spark, config)
        assert {d.name for d in diffs} == {f"{database}.{t}" for t in TABLES}
        if not all(d.ok for d in diffs):
            (tmp_path / "workload.sql").write_text("\n".join(log) + "\n")
            pytest.fail(
                f"gold differs from the source {when} (BINLAKE_TEST_SEED={SEED} reproduces; "
                f"re-snapshot of {resnapshot}; workload in {tmp_path / 'workload.sql'}):\n"
                + "\n".join(d.describe() for d in diffs if not d.ok),
                pytrace=False,
            )

    try:
        for n in range(1, ROUNDS + 1):
            if n > 1:
                for _ in range(rng.randint(4, 10)):
                    workload.transaction()
            if n == RESNAPSHOT_ROUND:
                resnapshot = [f"{database}.{t}" for t in rng.sample(TABLES, rng.randint(1, 2))]
                run_snapshot(spark, config, tables=resnapshot)
            result = run_pipeline(spark, config)
            assert result.ok, f"round {n} (BINLAKE_TEST_SEED={SEED}): {result.summary()}"
            check(f"after round {n}")
    finally:
        window_writer.stop()
        conn.close()
    assert window_writer.transactions > 0, "no change landed inside a snapshot window"
