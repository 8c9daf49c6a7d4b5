"""``make chaos``: run the real pipeline under faults and prove gold equals the source.

Each scenario gets its own database, lakehouse and config on one throwaway MariaDB. A bounded
writer thread runs random transactions (inserts, multi-row updates, deletes, primary-key
updates, rollbacks) while the scenario injects its faults into real ``binlake`` processes
(kill -9 of the whole process group, server restarts, ``KILL`` of binlake's connections,
binlog rotation bursts, purges, DDL, huge and long-open transactions, an unwritable
lakehouse). Then the writer stops, ``binlake run`` is re-run until it succeeds (what an
operator or a retrying scheduler does), and every gold table is compared with the source,
value for value, at the published position (the source is quiet by then).

    python tests/chaos/driver.py --full          # every scenario but "ci", >= 20 kills
    python tests/chaos/driver.py                 # the short form, "ci" (also run by make test)
    python tests/chaos/driver.py --only purge
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pymysql

ROOT = Path(__file__).resolve().parents[2]
BINLAKE = str(ROOT / ".venv" / "bin" / "binlake")

# Named fault points (binlake.faults.point) in every phase of a run.
KILL_POINTS = [
    "snapshot.after_plan",
    "snapshot.before_manifest",
    "capture.after_commit",
    "silver.after_bulk_load",
    "silver.before_merge",
    "silver.before_progress",
    "gold.after_incremental_merge",
    "gold.before_publish_log",
]

TABLES_DDL = [
    """CREATE TABLE accounts (
         id BIGINT UNSIGNED PRIMARY KEY, owner VARCHAR(64) NOT NULL, balance DECIMAL(18,4) NOT NULL,
         status ENUM('open','frozen','closed') NOT NULL, opened DATETIME(6) NOT NULL, touched TIMESTAMP(6) NULL,
         flags SET('a','b','c'), note TEXT, avatar BLOB, ratio DOUBLE, birthday DATE)""",
    """CREATE TABLE ledger (
         account_id BIGINT UNSIGNED NOT NULL, seq INT NOT NULL, amount DECIMAL(18,4) NOT NULL,
         memo VARCHAR(100), PRIMARY KEY (account_id, seq))""",
    """CREATE TABLE tags (
         tag VARCHAR(40) COLLATE utf8mb4_general_ci PRIMARY KEY, weight FLOAT, payload JSON)""",
    # InnoDB moves and deletes holds with their account without logging it (silver derives it).
    """CREATE TABLE holds (
         account_id BIGINT UNSIGNED NOT NULL, n INT NOT NULL, amount DECIMAL(18,4) NOT NULL,
         PRIMARY KEY (account_id, n),
         FOREIGN KEY (account_id) REFERENCES accounts (id) ON DELETE CASCADE ON UPDATE CASCADE)""",
]


@dataclass
class Outcome:
    scenario: str
    faults: int = 0
    rows_compared: int = 0
    rows_missing: int = 0
    rows_extra: int = 0
    rows_different: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        # A scenario that injected nothing proves nothing, however clean its comparison.
        return (
            self.rows_missing == self.rows_extra == self.rows_different == 0
            and self.rows_compared > 0
            and self.faults > 0
        )


# ---------------------------------------------------------------------------------------
# The write load


class Writer(threading.Thread):
    """Random transactions until stopped; survives server restarts and killed connections."""

    def __init__(self, mariadb, database: str, seed: int, max_txns: int = 100_000, pause: float = 0.01):
        super().__init__(daemon=True)
        self.mariadb, self.database, self.rng = mariadb, database, random.Random(seed)
        self.max_txns, self.pause = max_txns, pause
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.txns = 0
        self.errors = 0

    def run(self) -> None:
        conn = None
        while not self.stop_event.is_set() and self.txns < self.max_txns:
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            try:
                if conn is None:
                    conn = self.mariadb.root_connection(self.database)
                    conn.autocommit(False)
                self._transaction(conn)
                self.txns += 1
            except pymysql.err.Error:
                self.errors += 1
                try:
                    if conn is not None:
                        conn.close()
                except Exception:  # noqa: BLE001 - the connection is gone either way
                    pass
                conn = None
                time.sleep(0.2)
            time.sleep(self.pause)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)

    def _transaction(self, conn) -> None:
        r = self.rng
        with conn.cursor() as cur:
            for _ in range(r.randint(1, 4)):
                op = r.random()
                aid = r.randint(1, 4000)
                if op < 0.30:
                    cur.execute(
                        "INSERT INTO accounts (id, owner, balance, status, opened, touched, flags, note, avatar, "
                        "ratio, birthday) "
                        "VALUES (%s, %s, %s, %s, %s, UTC_TIMESTAMP(6), %s, %s, %s, %s, %s) "
                        "ON DUPLICATE KEY UPDATE balance = balance + 1, touched = UTC_TIMESTAMP(6)",
                        (
                            aid,
                            f"owner-{aid}-é😀",
                            f"{r.randint(-(10**6), 10**6)}.{r.randint(0, 9999):04d}",
                            r.choice(["open", "frozen", "closed"]),
                            f"2026-0{r.randint(1, 9)}-1{r.randint(0, 9)} 12:00:00.{r.randint(0, 999999):06d}",
                            r.choice(["", "a", "b,c", "a,c"]),
                            None if r.random() < 0.3 else "n" * r.randint(0, 50),
                            bytes(r.randrange(256) for _ in range(r.randint(0, 16))),
                            r.random() * 1000,
                            r.choice([None, "1990-05-17", "0000-00-00"]),
                        ),
                    )
                elif op < 0.50:
                    cur.execute(
                        "UPDATE accounts SET balance = balance - 1, status = %s WHERE id BETWEEN %s AND %s",
                        (r.choice(["open", "frozen"]), aid, aid + r.randint(0, 20)),
                    )
                elif op < 0.60:
                    cur.execute("DELETE FROM accounts WHERE id = %s", (aid,))
                    cur.execute("DELETE FROM ledger WHERE account_id = %s", (aid,))
                elif op < 0.65:
                    # Primary-key update: the old key must end deleted, the new one present.
                    cur.execute("UPDATE IGNORE accounts SET id = id + 5000 WHERE id = %s", (aid,))
                elif op < 0.72:
                    # Holds change after their account moved or went, often in the same batch.
                    if r.random() < 0.6:
                        cur.execute(
                            "INSERT INTO holds (account_id, n, amount) SELECT id, %s, %s FROM accounts "
                            "WHERE id IN (%s, %s) ON DUPLICATE KEY UPDATE amount = amount + 1",
                            (r.randint(1, 4), r.randint(0, 999), aid, aid + 5000),
                        )
                    else:
                        cur.execute(
                            "UPDATE holds SET amount = amount - 1 WHERE account_id IN (%s, %s)", (aid, aid + 5000)
                        )
                elif op < 0.85:
                    cur.execute(
                        "INSERT INTO ledger (account_id, seq, amount, memo) VALUES (%s, %s, %s, %s) "
                        "ON DUPLICATE KEY UPDATE amount = amount + 1",
                        (aid, r.randint(1, 20), f"{r.randint(-999, 999)}.50", r.choice([None, "rent", "coffee ☕"])),
                    )
                elif op < 0.95:
                    tag = r.choice(["alpha", "Beta", "gamma", "DELTA", "epsilon", "zeta", "ÉTÉ", "été2"]) + str(
                        r.randint(0, 30)
                    )
                    cur.execute(
                        "INSERT INTO tags (tag, weight, payload) VALUES (%s, %s, %s) "
                        "ON DUPLICATE KEY UPDATE weight = VALUES(weight), payload = VALUES(payload)",
                        (
                            tag if r.random() < 0.5 else tag.upper(),
                            r.random(),
                            json.dumps({"n": r.randint(0, 9), "s": "x"}),
                        ),
                    )
                else:
                    cur.execute("DELETE FROM tags WHERE tag LIKE %s", (r.choice("abcdeglz") + "%",))
        if r.random() < 0.05:
            conn.rollback()
        else:
            conn.commit()


# ---------------------------------------------------------------------------------------
# The harness


class Harness:
    def __init__(self, workdir: Path, full: bool, seed: int = 7):
        from binlake.devtools.mariadb import LocalMariaDB

        self.workdir = workdir
        self.full = full
        self.rng = random.Random(seed)
        self.failures = 0
        self.mariadb = LocalMariaDB(workdir / "mariadb").start()
        os.environ["MYSQL_PASSWORD"] = self.mariadb.cdc_password
        self._spark = None

    @property
    def spark(self):
        if self._spark is None:
            from binlake.spark import get_spark

            self._spark = get_spark("binlake-chaos-compare")
        return self._spark

    def close(self) -> None:
        self.mariadb.destroy()

    # -- setup -------------------------------------------------------------------------
    def new_scenario(self, name: str, seed_rows: int = 1500, server=None, **sections) -> tuple[str, Path]:
        server = server or self.mariadb
        db = f"chaos_{name}"
        server.execute(f"DROP DATABASE IF EXISTS `{db}`", f"CREATE DATABASE `{db}`")
        server.execute(*TABLES_DDL, database=db)
        server.execute(
            "INSERT INTO accounts (id, owner, balance, status, opened, flags, ratio) "
            "SELECT seq, CONCAT('seed-', seq), seq * 1.5, 'open', '2026-01-01 00:00:00', 'a', seq / 7 FROM "
            f"seq_1_to_{seed_rows}",
            f"INSERT INTO ledger (account_id, seq, amount) SELECT seq, 1, seq FROM seq_1_to_{seed_rows}",
            f"INSERT INTO holds (account_id, n, amount) SELECT seq, 1, seq FROM seq_1_to_{seed_rows // 2}",
            "INSERT INTO tags (tag, weight) VALUES ('alpha0', 1), ('Beta1', 2)",
            database=db,
        )
        base = self.workdir / name
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        sections.setdefault("snapshot", {"chunk_size": 400, "parallelism": 2})
        config = base / "binlake.yml"
        config.write_text(server.config_yaml(str(base / "lakehouse"), [f"{db}.*"], server_id=6100, **sections))
        return db, config

    # -- running binlake -----------------------------------------------------------------
    def binlake(
        self,
        config: Path,
        *args: str,
        kill_at: str | None = None,
        kill_after: float | None = None,
        timeout: float = 900,
        debug: bool = False,
    ) -> tuple[int, str]:
        """Run one binlake command; returns (exit code, stderr). -9 means it was killed.
        ``debug``: an unexpected error prints its traceback (in the failure's log file)."""
        env = dict(os.environ)
        env.pop("BINLAKE_KILL_AT", None)
        if kill_at:
            env["BINLAKE_KILL_AT"] = kill_at
        env["CI"] = "1"  # plain progress lines
        proc = subprocess.Popen(
            [BINLAKE, *(["--debug"] if debug else []), "--config", str(config), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        err = ""
        try:
            if kill_after is not None:
                try:
                    _, err = proc.communicate(timeout=kill_after)
                    return proc.returncode, err
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    _, err = proc.communicate()
                    return -9, err
            _, err = proc.communicate(timeout=timeout)
            return proc.returncode, err
        finally:
            if proc.returncode not in (0, -9):
                self._keep_failure(config, args[0], err)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            _reap_group(proc.pid)

    def run_here(self, config: Path) -> tuple[int, str]:
        """``binlake run`` in this process, as the CLI runs it (layout check, leases, exit code),
        on the harness's warm session: for runs nothing kills, a JVM start less than
        :meth:`binlake`. Returns (exit code, stderr)."""
        import contextlib
        import io

        from binlake import cli

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = cli.main(["--debug", "--config", str(config), "run"])
        if rc != 0:
            self._keep_failure(config, "run", err.getvalue())
        return rc, err.getvalue()

    def _keep_failure(self, config: Path, command: str, err: str) -> None:
        """A failed command's whole stderr (with --debug's traceback) beside the config, for the post-mortem."""
        self.failures += 1
        (config.parent / f"failed-{self.failures:02d}-{command}.log").write_text(err or "")

    def start_background(self, config: Path, *args: str) -> subprocess.Popen:
        env = {**os.environ, "CI": "1"}
        env.pop("BINLAKE_KILL_AT", None)
        return subprocess.Popen(
            [BINLAKE, "--config", str(config), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )

    def kill(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _reap_group(proc.pid)

    def converge(self, config: Path, outcome: Outcome, attempts: int = 4, here: bool = False) -> None:
        """``binlake run`` until it succeeds; ``here``: in this process (:meth:`run_here`)."""
        for i in range(attempts):
            rc, err = self.run_here(config) if here else self.binlake(config, "run")
            if rc == 0:
                return
            outcome.notes.append(f"converge attempt {i + 1}: exit {rc}: {_last_line(err)}")
        raise RuntimeError(f"{outcome.scenario}: binlake run did not converge: {outcome.notes[-1]}")

    # -- comparing -------------------------------------------------------------------------
    def compare(self, config_path: Path, db: str, outcome: Outcome) -> None:
        """Every source table against its gold table, value for value (tests/source_diff.py)."""
        from source_diff import diff_with_source

        from binlake.config import load_config

        for d in diff_with_source(self.spark, load_config(config_path)):
            outcome.rows_compared += d.source_rows
            outcome.rows_missing += d.missing
            outcome.rows_extra += d.extra
            outcome.rows_different += d.different
            if not d.ok:
                outcome.notes.append(d.describe())


def _reap_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# ---------------------------------------------------------------------------------------
# Scenarios: each injects faults, then the harness converges and compares.


def scenario_kill9(h: Harness, out: Outcome) -> None:
    """kill -9 at named points in every phase and at random instants, under a write load."""
    db, config = h.new_scenario("kill9")
    writer = Writer(h.mariadb, db, seed=1)
    writer.start()
    kills = 24 if h.full else 4
    try:
        for i in range(kills):
            if i < len(KILL_POINTS) or (not h.full and i < kills - 1):
                point = KILL_POINTS[i % len(KILL_POINTS)]
                rc, err = h.binlake(config, "run", kill_at=point)
                label = point
            else:
                delay = h.rng.uniform(2, 45)
                rc, err = h.binlake(config, "run", kill_after=delay)
                label = f"random after {delay:.1f}s"
            if rc == -9:
                out.faults += 1
            else:
                out.notes.append(f"kill at {label} did not trigger (exit {rc}{': ' + _last_line(err) if rc else ''})")
    finally:
        writer.stop()
    h.converge(config, out)
    h.compare(config, db, out)


def scenario_restart(h: Harness, out: Outcome) -> None:
    """MariaDB restarted during the snapshot and during capture."""
    db, config = h.new_scenario("restart", seed_rows=3000)
    writer = Writer(h.mariadb, db, seed=2)
    writer.start()
    try:
        proc = h.start_background(config, "run")
        time.sleep(h.rng.uniform(8, 20))
        h.mariadb.restart()
        out.faults += 1
        proc.wait(timeout=900)
        h.converge(config, out)
        proc = h.start_background(config, "capture", "--continuous")
        time.sleep(25)
        h.mariadb.restart()
        out.faults += 1
        time.sleep(10)
        h.kill(proc)
    finally:
        writer.stop()
    h.converge(config, out)
    h.compare(config, db, out)


def scenario_continuous(h: Harness, out: Outcome) -> None:
    """kill -9 of ``binlake run --continuous`` at random instants of its loops (capture, silver
    or gold of whichever loop is running) under a write load."""
    from binlake.config import load_config
    from binlake.contract.tables import Lakehouse
    from binlake.ops.continuous import read_state

    db, config = h.new_scenario("continuous", seed_rows=2000)
    lh = Lakehouse(load_config(config))
    writer = Writer(h.mariadb, db, seed=9)
    writer.start()
    try:
        for _ in range(3 if h.full else 1):
            proc = h.start_background(config, "run", "--continuous")
            deadline = time.monotonic() + 600
            # Two loops of this process first, so the kill lands inside a working loop.
            while time.monotonic() < deadline and proc.poll() is None:
                state = read_state(lh) or {}
                if state.get("pid") == proc.pid and state.get("loops", 0) >= 2:
                    break
                time.sleep(0.5)
            time.sleep(h.rng.uniform(0.5, 6))
            if proc.poll() is None:
                out.faults += 1
            else:
                out.notes.append(f"run --continuous ended by itself (exit {proc.returncode})")
            h.kill(proc)
    finally:
        writer.stop()
    h.converge(config, out)
    h.compare(config, db, out)


def scenario_kill_connection(h: Harness, out: Outcome) -> None:
    """binlake's connections killed server-side (KILL <id>) during snapshot and capture."""
    db, config = h.new_scenario("killconn", seed_rows=3000)
    writer = Writer(h.mariadb, db, seed=3)
    writer.start()
    try:
        for args, wait in ((("run",), 12), (("capture", "--continuous"), 25)):
            proc = h.start_background(config, *args)
            # From `wait` seconds on, kill binlake's connections as soon as the phase's own are
            # open: the binlog stream for capture; for run, the snapshot readers (a query in
            # flight, or the parallel readers' connections). A fixed time window missed them
            # on a loaded box, where a JVM can take a minute to connect.
            time.sleep(wait)
            deadline = time.monotonic() + 600
            killed = False
            with h.mariadb.root_connection() as conn, conn.cursor() as cur:
                while time.monotonic() < deadline and proc.poll() is None and not killed:
                    cur.execute(
                        "SELECT ID, COMMAND, LEFT(COALESCE(INFO, ''), 60) FROM information_schema.PROCESSLIST "
                        "WHERE USER = 'cdc'"
                    )
                    rows = cur.fetchall()
                    if args[0] == "capture":
                        in_phase = any(command.startswith("Binlog Dump") for _, command, _ in rows)
                    else:
                        in_phase = any(command == "Query" for _, command, _ in rows) or len(rows) >= 2
                    for pid, command, info in rows if in_phase else ():
                        try:
                            cur.execute(f"KILL {int(pid)}")
                            killed = True
                            out.notes.append(f"{args[0]}: killed {command} {info}".strip())
                        except pymysql.err.Error:
                            pass
                    if not killed:
                        time.sleep(0.2)
            out.faults += int(killed)
            if args[0] == "capture":
                time.sleep(5)
                h.kill(proc)
            else:
                proc.wait(timeout=900)
    finally:
        writer.stop()
    h.converge(config, out)
    h.compare(config, db, out)


def scenario_rotation(h: Harness, out: Outcome) -> None:
    """Bursts of FLUSH BINARY LOGS while capture runs."""
    db, config = h.new_scenario("rotation")
    h.converge(config, out)
    writer = Writer(h.mariadb, db, seed=4)
    writer.start()
    proc = h.start_background(config, "capture", "--continuous")
    try:
        for _ in range(3 if h.full else 1):
            time.sleep(8)
            for _ in range(15):
                h.mariadb.execute("FLUSH BINARY LOGS")
                out.faults += 1
                time.sleep(0.1)
        time.sleep(10)
    finally:
        writer.stop()
        h.kill(proc)
    h.converge(config, out)
    h.compare(config, db, out)


def scenario_purge(h: Harness, out: Outcome) -> None:
    """The binlog is purged while binlake is stopped: a loud error, then the documented recovery."""
    db, config = h.new_scenario("purge")
    h.converge(config, out)
    h.mariadb.execute(
        f"UPDATE `{db}`.accounts SET balance = balance + 7 WHERE id < 50",
        f"DELETE FROM `{db}`.ledger WHERE account_id < 20",
        "FLUSH BINARY LOGS",
    )
    h.mariadb.purge_binlogs()
    out.faults += 1
    rc, err = h.binlake(config, "run")
    line = _last_line(err)
    if rc != 5 or "purged" not in line:
        out.notes.append(f"expected exit 5 naming the purged file, got exit {rc}: {line}")
        out.rows_different += 1  # a silent success here would be a lie: count it as a failure
    recovery = re.search(r"recover with: (binlake [^(]+?)\s*(\(|$)", line)
    if recovery:
        args = recovery.group(1).split()[1:]
        rc, err = h.binlake(config, *args)
        out.notes.append(f"recovery `{recovery.group(1).strip()}` exit {rc}")
    h.converge(config, out)
    h.compare(config, db, out)

    # The opt-in policy recovers by itself.
    auto_db, auto_config = h.new_scenario("purge_auto", capture={"on_purge": "resnapshot"})
    h.converge(auto_config, out)
    h.mariadb.execute(f"UPDATE `{auto_db}`.accounts SET balance = balance + 7 WHERE id < 50", "FLUSH BINARY LOGS")
    h.mariadb.purge_binlogs()
    out.faults += 1
    h.converge(auto_config, out, attempts=1)
    h.compare(auto_config, auto_db, out)


def scenario_ddl(h: Harness, out: Outcome) -> None:
    """DDL during capture and during snapshot; a new table matching the pattern is picked up."""
    db, config = h.new_scenario("ddl", seed_rows=2500)
    proc = h.start_background(config, "run")
    time.sleep(10)
    h.mariadb.execute("ALTER TABLE accounts ADD COLUMN extra INT NULL AFTER owner", database=db)
    out.faults += 1
    proc.wait(timeout=900)
    h.converge(config, out)
    writer = Writer(h.mariadb, db, seed=6)
    writer.start()
    try:
        for ddl in (
            "UPDATE accounts SET extra = id % 7 WHERE id < 100",
            "ALTER TABLE accounts RENAME COLUMN extra TO extra2",
            "ALTER TABLE accounts MODIFY extra2 BIGINT NULL",
            "ALTER TABLE accounts ADD COLUMN first_col VARCHAR(10) NULL FIRST",
            "ALTER TABLE ledger DROP COLUMN memo",
            "TRUNCATE TABLE tags",
            "CREATE TABLE late_arrival (id INT PRIMARY KEY, v VARCHAR(10))",
            "INSERT INTO late_arrival VALUES (1, 'a'), (2, 'b')",
            "RENAME TABLE tags TO tags_renamed",
            "CREATE TABLE doomed (id INT PRIMARY KEY)",
            "INSERT INTO doomed VALUES (1), (2)",
            "DROP TABLE doomed",
            # A gh-ost / pt-online-schema-change cut-over: copy, alter the copy, swap, drop.
            "CREATE TABLE _ledger_gho LIKE ledger",
            "INSERT INTO _ledger_gho SELECT * FROM ledger",
            "ALTER TABLE _ledger_gho ADD COLUMN note2 VARCHAR(5) NULL",
            "RENAME TABLE ledger TO _ledger_del, _ledger_gho TO ledger",
            "DROP TABLE _ledger_del",
        ):
            if "ledger" in ddl:
                writer.paused.set()  # the writer's INSERT names memo
                time.sleep(0.5)
            h.mariadb.execute(ddl, database=db)
            if ddl.startswith(("ALTER", "TRUNCATE", "CREATE", "RENAME", "DROP")):
                out.faults += 1
            if ddl.startswith(("CREATE TABLE _ledger_gho", "INSERT INTO _ledger_gho")):
                continue  # the cut-over's steps land in one run, as they would in production
            rc, err = h.binlake(config, "run")
            if rc != 0:
                out.notes.append(f"after `{ddl}`: exit {rc}: {_last_line(err)}")
    finally:
        writer.stop()
    h.converge(config, out)
    h.compare(config, db, out)
    # Names that are gone from the source must be gone from gold too (published empty).
    from binlake.config import load_config
    from binlake.contract.tables import Lakehouse

    lh = Lakehouse(load_config(config))
    for gone in ("tags", "doomed", "_ledger_gho", "_ledger_del"):
        ref = lh.gold(db, gone)
        rows = ref.read(h.spark).count() if ref.exists(h.spark) else 0
        out.rows_compared += 1
        if rows:
            out.rows_extra += rows
            out.notes.append(f"gold {db}.{gone} still has {rows} rows after the table was dropped or renamed away")


def scenario_big_transactions(h: Harness, out: Outcome) -> None:
    """One huge transaction, and a transaction left open across several capture runs."""
    db, config = h.new_scenario("bigtxn")
    h.converge(config, out)
    n = 1_000_000 if h.full else 50_000
    h.mariadb.execute(
        f"INSERT INTO ledger (account_id, seq, amount, memo) SELECT 100000 + seq, 1, seq, 'bulk' FROM seq_1_to_{n}",
        database=db,
    )
    out.faults += 1
    h.converge(config, out)
    open_conn = h.mariadb.root_connection(db)
    open_conn.autocommit(False)
    with open_conn.cursor() as cur:
        cur.execute("INSERT INTO tags (tag, weight) VALUES ('long-open', 1)")
        cur.execute("UPDATE accounts SET balance = 0 WHERE id < 10")
    for _ in range(2):
        h.mariadb.execute("INSERT INTO tags (tag, weight) VALUES (UUID(), 2)", database=db)
        rc, err = h.binlake(config, "run")
        if rc != 0:
            out.notes.append(f"run with an open transaction: exit {rc}: {_last_line(err)}")
    open_conn.commit()
    open_conn.close()
    out.faults += 1
    h.converge(config, out)
    h.compare(config, db, out)


def scenario_unwritable(h: Harness, out: Outcome) -> None:
    """The lakehouse refuses writes (EPERM from the kernel: ``chattr +i``, which binds root
    too): each run fails with one clear line, gold is never half published, and the first
    run after the fix catches up."""
    db, config = h.new_scenario("unwritable")
    h.converge(config, out)
    lakehouse = config.parent / "lakehouse"
    from binlake.config import load_config
    from binlake.contract.tables import Lakehouse

    lh = Lakehouse(load_config(config))
    published = _published_versions(h, lh)
    # 1. bronze's change log: capture cannot commit.  2. the last gold table of the group:
    # the tables before it are written, then the publish must be undone.
    for label, locked in (
        ("bronze change log", lakehouse / "bronze" / "changelog"),
        ("gold tags", lakehouse / "gold" / db / "tags"),
    ):
        h.mariadb.execute(
            f"UPDATE `{db}`.accounts SET balance = balance + 3 WHERE id < 30",
            f"INSERT INTO `{db}`.tags (tag, weight) VALUES (UUID(), 1)",
        )
        if subprocess.run(["chattr", "-R", "+i", str(locked)], capture_output=True).returncode != 0:
            out.notes.append(f"{label}: chattr +i not permitted here: fault not injected")
            out.rows_different += 1  # an uninjected fault proves nothing: count it as a failure
            continue
        try:
            rc, err = h.binlake(config, "run")
            out.faults += 1
            line = _last_line(err)
            out.notes.append(f"{label} read-only: exit {rc}: {line}")
            if rc == 0 or "Traceback" in err or "cannot write" not in line:
                out.notes.append(f"{label}: expected a one-line 'cannot write' error")
                out.rows_different += 1
            if _published_versions(h, lh) != published:
                out.notes.append(f"{label}: the publish log moved although the run failed")
                out.rows_different += 1
            for name, version in published.items():
                if not _same_as_version(h, lh, db, name, version):
                    out.notes.append(f"{label}: gold {name} latest differs from its published version {version}")
                    out.rows_different += 1
        finally:
            subprocess.run(["chattr", "-R", "-i", str(locked)], capture_output=True)
    h.converge(config, out)
    h.compare(config, db, out)


def _published_versions(h: Harness, lh) -> dict[str, int]:
    """The gold version of each table named by the latest published entry of the publish log."""
    from pyspark.sql import functions as F

    log = lh.publish_log.read(h.spark).where(F.col("status") == "published")
    last = log.agg(F.max("published_at")).first()[0]
    return {
        r["table"]: int(r["gold_version"])
        for r in log.where(F.col("published_at") == last).select("table", "gold_version").collect()
    }


def _same_as_version(h: Harness, lh, db: str, table: str, version: int) -> bool:
    ref = lh.gold(db, table)
    latest = h.spark.read.format("delta").load(ref.path)
    then = h.spark.read.format("delta").option("versionAsOf", version).load(ref.path)
    return latest.exceptAll(then).isEmpty() and then.exceptAll(latest).isEmpty()


def scenario_ci(h: Harness, out: Outcome) -> None:
    """The short form for every `make test`: under a write load, kill -9 of ``binlake
    maintain`` beside a complete ``binlake run``, an online schema change of ``ledger``
    (pt-osc's statements, replayed at its cut-over), a rotation burst, then kill -9 of ``binlake
    run --continuous`` in each of its three stages; a few minutes instead
    of the full matrix's hour. The first load is killed inside a typed snapshot wave and inside
    silver's bulk load first (the snapshot's other kills are the full run's and
    tests/integration/test_snapshot.py's), then finished in this process. What is killed runs
    as ``binlake`` commands; the runs nothing kills (the one beside maintain, the convergence)
    run in this process, a JVM start less each."""
    # Maintenance with no retention: every tombstone and change-log row below the safe bound
    # is fair game, and two files make a table worth compacting.
    db, config = h.new_scenario(
        "ci",
        seed_rows=800,
        maintenance={"tombstone_retention_hours": 0, "changelog_retention_days": 0, "optimize_min_files": 2},
    )

    def beside_maintain(run, maintain_kill_at: str | None) -> None:
        """``run()`` while ``binlake maintain`` runs beside it (killed at ``maintain_kill_at``)."""
        done: list = []
        thread = threading.Thread(
            target=lambda: done.append(h.binlake(config, "maintain", kill_at=maintain_kill_at, debug=True)), daemon=True
        )
        thread.start()
        try:
            run()
        finally:
            thread.join(timeout=900)
        rc, err = done[0] if done else (None, "maintain did not finish")
        if maintain_kill_at and rc == -9:
            out.faults += 1
        elif rc != 0 or maintain_kill_at:
            out.notes.append(
                f"maintain beside the pipeline (kill at {maintain_kill_at}) failed: exit {rc}: {_last_line(err)}"
            )

    # The first load, before the writer starts (silver's bulk path needs snapshot windows no
    # change lands in): killed inside a typed snapshot wave (its rows written, no manifest
    # row), then inside silver's bulk load (rows appended, no progress), then finished in this
    # process.
    from binlake.config import load_config
    from binlake.ops.pipeline import run_pipeline

    for point in ("snapshot.before_manifest", "silver.after_bulk_load"):
        rc, err = h.binlake(config, "run", kill_at=point, debug=True)
        if rc == -9:
            out.faults += 1
        else:
            out.notes.append(f"the first load: the kill at {point} did not trigger (exit {rc}: {_last_line(err)})")
    first = run_pipeline(h.spark, load_config(config))
    if not first.ok:
        out.notes.append(f"the first load failed: {first.summary()}")
    # A steady load that each run's capture meets, light enough that a run's work (and so
    # the next run's) does not grow with how long the last one took.
    writer = Writer(h.mariadb, db, seed=8, pause=0.05)
    writer.start()
    try:
        # Capture's kills (and silver.before_merge) are the full run's and test_capture_kill's.

        def complete_run() -> None:  # a complete publish, so the next ones are incremental
            rc, err = h.run_here(config)
            if rc != 0:
                out.notes.append(f"the run beside maintain failed (exit {rc}: {_last_line(err)})")

        beside_maintain(complete_run, "maintain.after_tombstones")
        _online_schema_change(h, db)  # its cut-over is captured by the killed runs below
        out.faults += 1
        # Gold's kills (gold.before_publish_log, gold.after_incremental_merge) are the full
        # run's; tests/spark/test_incremental_cost.py kills a publish after its gold MERGE.
        for _ in range(10):
            h.mariadb.execute("FLUSH BINARY LOGS")
            out.faults += 1
            time.sleep(0.2)
        # run --continuous runs capture, silver and gold as three overlapping stages: a kill
        # in each stage lands while the other two are at work.
        for point in ("capture.before_commit@2", "silver.before_progress", "gold.before_publish_log"):
            rc, err = h.binlake(config, "run", "--continuous", kill_at=point, timeout=420, debug=True)
            if rc == -9:
                out.faults += 1
            else:
                out.notes.append(
                    f"run --continuous: the kill at {point} did not trigger (exit {rc}: {_last_line(err)})"
                )
    finally:
        writer.stop()
    h.converge(config, out, here=True)
    h.compare(config, db, out)
    _check_replayed(h, config, db, "ledger", out)


# pt-online-schema-change's statements for --alter on ``ledger`` (its triggers keep the new
# table in step with the write load, its copy is INSERT ... SELECT in key ranges).
_LEDGER_COLS = "account_id, seq, amount, memo"
_PT_OSC = [
    "CREATE TABLE _ledger_new LIKE ledger",
    "ALTER TABLE _ledger_new ADD COLUMN fee DECIMAL(9,2) NOT NULL DEFAULT 0.25",
    "CREATE TRIGGER pt_osc_ledger_del AFTER DELETE ON ledger FOR EACH ROW DELETE IGNORE FROM _ledger_new "
    "WHERE _ledger_new.account_id <=> OLD.account_id AND _ledger_new.seq <=> OLD.seq",
    "CREATE TRIGGER pt_osc_ledger_upd AFTER UPDATE ON ledger FOR EACH ROW BEGIN DELETE IGNORE FROM _ledger_new "
    "WHERE !(OLD.account_id <=> NEW.account_id AND OLD.seq <=> NEW.seq) AND _ledger_new.account_id <=> OLD.account_id "
    f"AND _ledger_new.seq <=> OLD.seq; REPLACE INTO _ledger_new ({_LEDGER_COLS}) "
    "VALUES (NEW.account_id, NEW.seq, NEW.amount, NEW.memo); END",
    f"CREATE TRIGGER pt_osc_ledger_ins AFTER INSERT ON ledger FOR EACH ROW REPLACE INTO _ledger_new ({_LEDGER_COLS}) "
    "VALUES (NEW.account_id, NEW.seq, NEW.amount, NEW.memo)",
    *[
        f"INSERT LOW_PRIORITY IGNORE INTO _ledger_new ({_LEDGER_COLS}) SELECT {_LEDGER_COLS} FROM ledger "
        f"FORCE INDEX(`PRIMARY`) WHERE account_id >= {lo} AND account_id < {lo + 1500} LOCK IN SHARE MODE"
        for lo in range(0, 6000, 1500)
    ],
    "RENAME TABLE ledger TO _ledger_old, _ledger_new TO ledger",
    "DROP TABLE IF EXISTS _ledger_old",
]


def _online_schema_change(h: Harness, db: str) -> None:
    """An online schema change of ``ledger`` under the write load (pt-osc's statement sequence)."""
    for statement in _PT_OSC:
        h.mariadb.execute(statement, database=db)
        time.sleep(0.2)  # the writer's changes land between the copy's ranges


def _check_replayed(h: Harness, config: Path, db: str, table: str, out: Outcome) -> None:
    """The cut-over replayed the shadow: one ``-replay`` chunk of ``table``, not a re-read."""
    from binlake.bronze.osc_replay import REPLAY_SUFFIX
    from binlake.config import load_config
    from binlake.contract.tables import Lakehouse

    chunks = Lakehouse(load_config(config)).snapshot_chunks.read(h.spark).where(f"db = '{db}' AND `table` = '{table}'")
    replays = chunks.where(chunks.snapshot_id.endswith(REPLAY_SUFFIX)).select("snapshot_id").distinct().count()
    if replays != 1:
        out.notes.append(f"the online schema change of {table} failed to replay: {replays} replay(s) in the manifest")


def scenario_failover(h: Harness, out: Outcome) -> None:
    """The primary stops under a write load, its GTID replica is promoted and binlake is
    pointed at it; kill -9 of binlake before, at and after the switch."""
    from binlake.devtools.mariadb import LocalMariaDB

    servers = []
    for name, sid, extra in (("primary", 21, []), ("replica", 22, ["--log-slave-updates"])):
        d = h.workdir / "failover-servers" / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        (d / "cdc_password").write_text(h.mariadb.cdc_password)  # one login on both, $MYSQL_PASSWORD
        servers.append(LocalMariaDB(d, server_id=sid, extra_args=extra).start())
    primary, replica = servers
    try:
        replica.replicate_from(primary)
        db, config = h.new_scenario("failover", server=primary)
        h.converge(config, out)
        writer = Writer(primary, db, seed=5)
        writer.start()
        try:
            for point in ("capture.after_commit", None, "silver.before_merge"):
                rc, _ = (
                    h.binlake(config, "run", kill_at=point)
                    if point
                    else h.binlake(config, "run", kill_after=h.rng.uniform(3, 20))
                )
                out.faults += rc == -9
            rc, err = h.binlake(config, "run")
            if rc != 0:
                out.notes.append(f"run on the primary exit {rc}: {_last_line(err)}")
            time.sleep(2)  # the load goes on past binlake's last read
            # The switch: the primary stops under the load once the replica has all it wrote.
            writer.paused.set()
            time.sleep(0.3)
            replica.wait_replicated(primary.gtid_binlog_pos())
            primary.stop()
            replica.promote()
            out.faults += 1
            writer.mariadb = replica
            writer.paused.clear()
            text = config.read_text().replace(f"port: {primary.port}", f"port: {replica.port}")
            assert f"port: {replica.port}" in text, "the config names the primary's port"
            config.write_text(text)
            for point in ("capture.after_commit", "gold.before_publish_log", None):
                rc, _ = (
                    h.binlake(config, "run", kill_at=point)
                    if point
                    else h.binlake(config, "run", kill_after=h.rng.uniform(3, 20))
                )
                out.faults += rc == -9
            time.sleep(2)
        finally:
            writer.stop()
        h.converge(config, out)
        h.compare(config, db, out)
        if not _switched(h, config):
            out.notes.append("capture never recorded the switch (no position in source epoch 1)")
            out.rows_different += 1
    finally:
        for s in servers:
            s.destroy()


def _switched(h: Harness, config: Path) -> bool:
    from binlake.bronze.capture_state import capture_state
    from binlake.config import load_config
    from binlake.contract.tables import Lakehouse

    state = capture_state(h.spark, Lakehouse(load_config(config)))
    return state is not None and state.position.epoch >= 1


SCENARIOS = {
    "ci": scenario_ci,
    "kill9": scenario_kill9,
    "restart": scenario_restart,
    "continuous": scenario_continuous,
    "killconn": scenario_kill_connection,
    "rotation": scenario_rotation,
    "purge": scenario_purge,
    "ddl": scenario_ddl,
    "bigtxn": scenario_big_transactions,
    "unwritable": scenario_unwritable,
    "failover": scenario_failover,
}
SHORT = ("ci",)


def run(names: list[str], full: bool, workdir: Path) -> list[Outcome]:
    # Absolute: binlake resolves a relative lakehouse path against the config's directory,
    # while the unwritable scenario locks the path as given.
    workdir = Path(workdir).resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    h = Harness(workdir, full=full)
    outcomes = []
    try:
        for name in names:
            out = Outcome(name)
            started = time.monotonic()
            try:
                SCENARIOS[name](h, out)
            except Exception as exc:  # noqa: BLE001 - a scenario that cannot finish is a failed scenario
                out.notes.append(f"scenario failed: {type(exc).__name__}: {exc}")
                out.rows_compared = 0
            out.seconds = round(time.monotonic() - started, 1)
            outcomes.append(out)
            print(_row(out), flush=True)
    finally:
        h.close()
    return outcomes


def _row(o: Outcome) -> str:
    return (
        f"| {o.scenario} | {o.faults} | {o.rows_compared} | {o.rows_missing} | {o.rows_extra} | "
        f"{o.rows_different} | {o.seconds:.0f}s | {'ok' if o.ok else 'FAIL'} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make chaos", description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="every scenario, >= 20 kills (default: the short form)")
    ap.add_argument("--only", action="append", default=[], choices=sorted(SCENARIOS))
    ap.add_argument("--workdir", default=str(ROOT / ".local" / "chaos"))
    ns = ap.parse_args(argv)
    from binlake.console import setup_logging

    setup_logging()
    names = ns.only or ([n for n in SCENARIOS if n not in SHORT] if ns.full else list(SHORT))
    print("| scenario | faults | rows compared | missing | extra | different | time | result |")
    print("|---|---|---|---|---|---|---|---|")
    outcomes = run(names, ns.full, Path(ns.workdir))
    Path(ns.workdir).mkdir(parents=True, exist_ok=True)
    (Path(ns.workdir) / "results.json").write_text(json.dumps([asdict(o) | {"ok": o.ok} for o in outcomes], indent=2))
    for o in outcomes:
        for note in o.notes:
            print(f"  {o.scenario}: {note}")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "tests"))  # source_diff
    sys.exit(main())
