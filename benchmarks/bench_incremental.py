"""What a run costs when little changed, and how fast a change reaches gold.

- ``incremental_run_s``: 16 tables of 5,000 rows; 1,000 row changes (70% updates, 20%
  inserts, 10% deletes) spread over 10 of them; then one ``binlake run`` in a new process,
  as a scheduled job runs it, timed whole (JVM start included). Best of two such rounds.
  The peer figure is the goal (20 s).
- ``idle_run_s``: the same ``binlake run`` with nothing changed (reported, no goal).
- ``table_count_scaling``: the same round on 200 tables (the same 1,000 changes over 10)
  divided by the 16-table time. The goal is 1.5 or less: cost follows the changes.
- ``first_load_many_tables_vs_reload``: the 200 tables' first ``binlake run`` (snapshot,
  capture, silver, gold, in a new process) divided by a plain reload of the same 200 tables:
  Spark's JDBC read of each written to a new Delta table, as many tables at a time as the
  snapshot's ``parallelism`` (2), in the bench's warm Spark session (so the reload pays no
  JVM start: the ratio is, if anything, against binlake). Goal 3.0 or less.
- ``freshness_p50_s`` / ``freshness_p99_s``: ``binlake run --continuous`` on the 16 tables
  under a steady write load of about 100 row changes/s; for every captured insert or update
  in the measured minute, the source commit time (the row's ``updated_at``, set by the
  server) to the commit of the first gold publish at or after its binlog position
  (``published_at`` in the publish log). Goals: 15 s and 30 s.

Tables are sysbench-like OLTP rows (integers, a decimal, strings, two timestamps) in a
MariaDB on this machine; everything runs beside the other benchmarks' server.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from benchmarks.run import ROOT, result

BINLAKE = str(ROOT / ".venv" / "bin" / "binlake")
DDL = """CREATE TABLE {name} (
  id BIGINT NOT NULL PRIMARY KEY, account_id INT NOT NULL, status VARCHAR(16) NOT NULL,
  amount DECIMAL(12,2) NOT NULL, qty INT NOT NULL, note VARCHAR(64),
  created_at DATETIME(6) NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))"""
ROWS = 5_000
CHANGES = 1_000
CHANGED_TABLES = 10
GOAL_RUN_S = 20.0
GOAL_SCALING = 1.5
GOAL_FIRST_LOAD_VS_RELOAD = 3.0
RELOAD_THREADS = 2  # the snapshot's parallelism in config_file
GOAL_P50_S, GOAL_P99_S = 15.0, 30.0
LOAD_SECONDS = 60  # measured part of the continuous write load
WARMUP_SECONDS = 20


def load(mariadb, db: str, tables: int, rows: int) -> list[str]:
    names = [f"t{i:03d}" for i in range(tables)]
    mariadb.execute(f"DROP DATABASE IF EXISTS `{db}`", f"CREATE DATABASE `{db}`")
    statements = []
    for name in names:
        statements += [
            DDL.format(name=name),
            f"INSERT INTO {name} (id, account_id, status, amount, qty, note, created_at) "
            f"SELECT seq, seq % 997, ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'closed'), "
            f"seq * 1.25, seq % 50, CONCAT('note ', seq), '2026-01-01 00:00:00' + INTERVAL seq SECOND "
            f"FROM seq_1_to_{rows}",
        ]
    mariadb.execute(*statements, database=db)
    return names


def change(mariadb, db: str, names: list[str], rng: random.Random, next_id: dict) -> None:
    """CHANGES row changes spread over CHANGED_TABLES tables, in transactions of ten."""
    tables = rng.sample(names, CHANGED_TABLES)
    per = CHANGES // CHANGED_TABLES
    with mariadb.root_connection(db) as conn, conn.cursor() as cur:
        conn.autocommit(False)
        for name in tables:
            for i in range(per):
                kind = i % 10
                if kind < 7:
                    cur.execute(
                        f"UPDATE {name} SET qty = qty + 1, status = 'paid', amount = amount + 0.5 WHERE id = %s",
                        (rng.randint(1, ROWS),),
                    )
                elif kind < 9:
                    next_id[name] = next_id.get(name, ROWS) + 1
                    cur.execute(
                        f"INSERT INTO {name} (id, account_id, status, amount, qty, note, created_at) "
                        "VALUES (%s, 1, 'new', 9.99, 1, 'fresh', NOW(6))",
                        (next_id[name],),
                    )
                else:
                    cur.execute(f"DELETE FROM {name} WHERE id = %s", (rng.randint(1, ROWS),))
                if i % 10 == 9:
                    conn.commit()
        conn.commit()


def config_file(ctx, db: str, tag: str) -> Path:
    path = ctx.workdir / f"incremental_{tag}.yml"
    path.write_text(
        ctx.mariadb.config_yaml(
            str(ctx.workdir / f"incremental_{tag}_lake"),
            [f"{db}.*"],
            server_id=9400 + 40 * len(tag),
            snapshot={"chunk_size": 50000, "parallelism": 2},
        )
    )
    return path


_STEP = re.compile(r"^(snapshot|capture|silver|gold) \((\d+\.\d)s\)", re.M)


def binlake_run(config: Path) -> tuple[float, dict[str, float]]:
    """One ``binlake run`` in a new process: (seconds, seconds per step)."""
    env = {k: v for k, v in os.environ.items() if k != "BINLAKE_SPARK_CONF"}
    started = time.monotonic()
    done = subprocess.run([BINLAKE, "--config", str(config), "run"], capture_output=True, text=True, env=env)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"binlake run failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return seconds, {m.group(1): float(m.group(2)) for m in _STEP.finditer(done.stdout)}


def rounds(ctx, db: str, tables: int, tag: str) -> dict[str, float]:
    names = load(ctx.mariadb, db, tables, ROWS)
    config = config_file(ctx, db, tag)
    first, _ = binlake_run(config)
    idle, idle_steps = binlake_run(config)
    rng, next_id, runs = random.Random(tables), {}, []
    for _ in range(2):
        change(ctx.mariadb, db, names, rng, next_id)
        runs.append(binlake_run(config))
    best, steps = min(runs)
    print(
        f"   {tables} tables x {ROWS:,} rows: first run {first:.1f}s, nothing changed {idle:.1f}s "
        f"({_steps(idle_steps)}), {CHANGES:,} changes over {CHANGED_TABLES} tables: "
        f"{', '.join(f'{s:.1f}s' for s, _ in runs)} (best: {_steps(steps)})",
        flush=True,
    )
    return {"first": first, "idle": idle, "incremental": best}


def reload_tables(ctx, db: str, names: list[str]) -> float:
    """Seconds for Spark's JDBC read of every table written to a new Delta table each,
    RELOAD_THREADS tables at a time (the reload a user without CDC runs)."""
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.bench_snapshot import jdbc_to_delta

    base = ctx.workdir / f"reload_{db}"
    started = time.monotonic()
    with ThreadPoolExecutor(RELOAD_THREADS) as pool:
        counts = list(pool.map(lambda n: jdbc_to_delta(ctx, db, n, "id", 1, str(base / n))[0], names))
    seconds = time.monotonic() - started
    if any(c < ROWS * 0.9 for c in counts):
        raise AssertionError(f"the reload wrote {min(counts)} rows of a table of about {ROWS}")
    return seconds


def _steps(steps: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}s" for k, v in steps.items())


class Writer(threading.Thread):
    """About 100 row changes a second over the tables: ten transactions of ten statements."""

    def __init__(self, mariadb, db: str, names: list[str]):
        super().__init__(daemon=True)
        self.mariadb, self.db, self.names = mariadb, db, names
        self.stop_event = threading.Event()
        self.changes = 0

    def run(self) -> None:
        rng = random.Random(7)
        next_id = {n: 10 * ROWS for n in self.names}
        with self.mariadb.root_connection(self.db) as conn, conn.cursor() as cur:
            conn.autocommit(False)
            while not self.stop_event.is_set():
                began = time.monotonic()
                for _ in range(10):
                    name = rng.choice(self.names)
                    if rng.random() < 0.8:
                        cur.execute(f"UPDATE {name} SET qty = qty + 1 WHERE id = %s", (rng.randint(1, ROWS),))
                    else:
                        next_id[name] += 1
                        cur.execute(
                            f"INSERT INTO {name} (id, account_id, status, amount, qty, note, created_at) "
                            "VALUES (%s, 2, 'new', 1.00, 1, 'live', NOW(6)) "
                            "ON DUPLICATE KEY UPDATE qty = qty + 1",
                            (next_id[name],),
                        )
                conn.commit()
                self.changes += 10
                time.sleep(max(0.0, 0.1 - (time.monotonic() - began)))


_PUBLISHED = re.compile(r"gold published at (\S+:\d+)")


def _published_positions(log_path: Path) -> list[str]:
    """The positions the continuous process's log says gold was published at."""
    return _PUBLISHED.findall(log_path.read_text(errors="replace"))


def freshness(ctx, db: str, config: Path) -> tuple[float, float, int]:
    """(p50, p99 seconds, changes measured) of ``run --continuous`` under the write load."""
    from binlake.config import load_config
    from binlake.contract.position import BinlogPosition
    from binlake.contract.tables import Lakehouse

    lh = Lakehouse(load_config(config))
    names = [f"t{i:03d}" for i in range(16)]
    env = {k: v for k, v in os.environ.items() if k != "BINLAKE_SPARK_CONF"}
    # Its log goes to a file: a pipe nobody reads fills up and stops the process mid-loop.
    log_path = ctx.workdir / "continuous.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [BINLAKE, "--config", str(config), "run", "--continuous"],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
    writer = Writer(ctx.mariadb, db, names)
    try:
        time.sleep(15)  # JVM start and the first loop, with nothing to publish yet
        writer.start()
        time.sleep(WARMUP_SECONDS)
        window_start = time.time()
        time.sleep(LOAD_SECONDS)
        window_end = time.time()
        writer.stop_event.set()
        writer.join(timeout=30)
        with ctx.mariadb.root_connection() as conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
        last_change = BinlogPosition(file, int(pos))
        # Until a publish covers the last change written (however long the loops take).
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and proc.poll() is None:
            # The newest loop may be an idle one (no position): any loop's publish counts.
            published = [BinlogPosition.parse(p) for p in _published_positions(log_path)]
            if published and max(published) >= last_change:
                break
            time.sleep(1)
        else:
            raise RuntimeError(
                f"run --continuous published nothing up to {file}:{pos} (exit {proc.poll()}; see {log_path})"
            )
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    spark = ctx.spark
    lh.changelog.read(spark).createOrReplaceTempView("bench_changelog")
    lh.publish_log.read(spark).where("status = 'published'").createOrReplaceTempView("bench_publishes")
    row = spark.sql(f"""
        WITH changes AS (
          SELECT file_index, pos, CAST(after['updated_at'] AS TIMESTAMP) AS committed
          FROM bench_changelog
          WHERE op IN ('insert', 'update') AND after['updated_at'] IS NOT NULL
            AND CAST(after['updated_at'] AS TIMESTAMP) BETWEEN timestamp_millis({int(window_start * 1000)})
                                                           AND timestamp_millis({int(window_end * 1000)})),
        publishes AS (SELECT DISTINCT file_index, pos, published_at FROM bench_publishes),
        seen AS (
          SELECT c.committed, min(p.published_at) AS published
          FROM changes c JOIN publishes p
            ON p.file_index > c.file_index OR (p.file_index = c.file_index AND p.pos >= c.pos)
          GROUP BY c.file_index, c.pos, c.committed)
        SELECT percentile_approx(CAST(unix_micros(published) - unix_micros(committed) AS DOUBLE) / 1e6, 0.5) AS p50,
               percentile_approx(CAST(unix_micros(published) - unix_micros(committed) AS DOUBLE) / 1e6, 0.99) AS p99,
               count(*) AS n
        FROM seen""").first()
    if not row["n"]:
        raise RuntimeError(f"no change written between the window's bounds reached gold (see {log_path})")
    print(
        f"   continuous, {writer.changes:,} changes written at about 100/s: freshness p50 {row['p50']:.1f}s, "
        f"p99 {row['p99']:.1f}s over {row['n']:,} changes",
        flush=True,
    )
    return float(row["p50"]), float(row["p99"]), int(row["n"])


def run(ctx) -> list[dict]:
    small = rounds(ctx, "bench_inc16", 16, "16")
    out = [
        result(
            "incremental_run_s", small["incremental"], "s (lower is better)", "goal", GOAL_RUN_S, higher_is_better=False
        ),
        result("idle_run_s", small["idle"], "s (lower is better)", "goal", GOAL_RUN_S, higher_is_better=False),
    ]
    if not ctx.quick:
        large = rounds(ctx, "bench_inc200", 200, "200")
        scaling = large["incremental"] / small["incremental"]
        out.append(
            result("table_count_scaling", scaling, "x (lower is better)", "goal", GOAL_SCALING, higher_is_better=False)
        )
        reload_s = reload_tables(ctx, "bench_inc200", [f"t{i:03d}" for i in range(200)])
        print(
            f"   plain Spark JDBC reload of the 200 tables into Delta ({RELOAD_THREADS} at a time): {reload_s:.1f}s "
            f"(first binlake run {large['first'] / reload_s:.1f}x)",
            flush=True,
        )
        out.append(
            result(
                "first_load_many_tables_vs_reload",
                large["first"] / reload_s,
                "x (lower is better)",
                "goal",
                GOAL_FIRST_LOAD_VS_RELOAD,
                higher_is_better=False,
            )
        )
    p50, p99, _ = freshness(ctx, "bench_inc16", config_file(ctx, "bench_inc16", "16"))
    out += [
        result("freshness_p50_s", p50, "s (lower is better)", "goal", GOAL_P50_S, higher_is_better=False),
        result("freshness_p99_s", p99, "s (lower is better)", "goal", GOAL_P99_S, higher_is_better=False),
    ]
    return out
