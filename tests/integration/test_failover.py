"""A primary switch: capture follows the promoted replica by GTID, in a new source epoch whose
positions sort after every older one, and the lakehouse ends equal to the new primary, no
change lost or doubled; kill -9 across the switch changes nothing. A source that is not the
binlog capture was reading and has no GTID path stops loudly (exit code 5) with the
recovery, and the re-snapshot policy recovers at a sequence that outranks everything older.

Two servers of their own (not the session server): a primary and a GTID replica with
``log_slave_updates``, as a production pair would be.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from pathlib import Path

import pymysql
import pytest
from source_diff import diff_with_source  # tests/source_diff.py

from binlake import cli
from binlake.bronze.capture import run_capture
from binlake.bronze.capture_state import capture_state
from binlake.config import load_config
from binlake.contract.tables import Lakehouse
from binlake.devtools.mariadb import LocalMariaDB
from binlake.errors import SourceChangedError
from binlake.ops.pipeline import run_pipeline

ROOT = Path(__file__).resolve().parents[2]
BINLAKE = str(ROOT / ".venv" / "bin" / "binlake")
DB = "shop"


@pytest.fixture
def pair(mariadb, tmp_path):
    """(primary, replica): the replica applies the primary's binlog by GTID and logs it."""
    yield from _servers(mariadb, tmp_path, replica=True)


@pytest.fixture
def own_server(mariadb, tmp_path):
    """A server of the test's own (RESET MASTER must not touch the session server)."""
    for primary, _ in _servers(mariadb, tmp_path, replica=False):
        yield primary


def _servers(mariadb, tmp_path, replica: bool):
    servers = []
    for name, sid, extra in (("primary", 11, []), ("replica", 12, ["--log-slave-updates"]))[: 2 if replica else 1]:
        d = tmp_path / name
        d.mkdir()
        # One login for binlake on both, as after a real failover ($MYSQL_PASSWORD).
        (d / "cdc_password").write_text(mariadb.cdc_password)
        servers.append(LocalMariaDB(d, server_id=sid, extra_args=extra).start())
    if replica:
        servers[1].replicate_from(servers[0])
    try:
        yield servers[0], servers[1] if replica else None
    finally:
        for s in servers:
            s.destroy()


def _config(server: LocalMariaDB, tmp_path: Path, name: str, **sections):
    path = tmp_path / f"{name}.yml"
    path.write_text(server.config_yaml(str(tmp_path / "lakehouse"), [f"{DB}.*"], server_id=6100, **sections))
    return path, load_config(path)


def _writes(server: LocalMariaDB, stop: threading.Event, seed: int) -> None:
    rnd = random.Random(seed)
    conn = server.root_connection(DB)
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                k = rnd.randint(1, 400)
                roll = rnd.random()
                if roll < 0.5:
                    cur.execute("UPDATE t SET v = v + 1, note = %s WHERE id = %s", (f"u{rnd.randint(0, 99)}", k))
                elif roll < 0.75:
                    cur.execute("INSERT INTO t VALUES (%s, 0, 'new') ON DUPLICATE KEY UPDATE v = v * 2", (k,))
                else:
                    cur.execute("DELETE FROM t WHERE id = %s", (k,))
    except pymysql.err.MySQLError:
        pass  # the primary went away under the load
    finally:
        conn.close()


def _binlake(config_path: Path, *args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "BINLAKE_SPARK_MASTER": "local[2]"}
    env.pop("BINLAKE_KILL_AT", None)
    if kill_at:
        env["BINLAKE_KILL_AT"] = kill_at
    return subprocess.run(
        [BINLAKE, "--config", str(config_path), *args], env=env, capture_output=True, text=True, timeout=900
    )


def _seed(primary: LocalMariaDB) -> None:
    primary.execute(f"CREATE DATABASE {DB}")
    primary.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(20))",
        "INSERT INTO t SELECT seq, seq, 'seed' FROM seq_1_to_300",
        database=DB,
    )


def _assert_equal(spark, config, layer: str = "gold") -> None:
    diffs = diff_with_source(spark, config, layer=layer)
    assert diffs, "\n".join(d.describe() for d in diffs)
    assert all(d.ok for d in diffs), "\n".join(d.describe() for d in diffs)


def test_capture_follows_a_promoted_replica_by_gtid_and_gold_equals_the_new_primary(spark, pair, tmp_path):
    primary, replica = pair
    _seed(primary)
    _, on_primary = _config(primary, tmp_path, "primary")
    assert run_pipeline(spark, on_primary).ok

    # A write load; capture reads part of it from the primary.
    stop = threading.Event()
    writers = [threading.Thread(target=_writes, args=(primary, stop, i)) for i in range(3)]
    for w in writers:
        w.start()
    try:
        run_capture(spark, on_primary)
        run_capture(spark, on_primary)
    finally:
        stop.set()
        for w in writers:
            w.join()
    before = capture_state(spark, Lakehouse(on_primary))
    assert before.server_id == 11
    assert before.gtid
    assert before.position.epoch == 0

    # The primary stops with the load's tail unread by binlake; the replica is promoted.
    replica.wait_replicated(primary.gtid_binlog_pos())
    primary.stop()
    replica.promote()
    replica.execute(
        f"UPDATE {DB}.t SET note = 'after switch' WHERE id % 7 = 0",
        f"INSERT INTO {DB}.t VALUES (1001, 1, 'on new primary')",
    )

    # Pointed at the new primary, with kill -9 right after the switch's commit.
    replica_path, on_replica = _config(replica, tmp_path, "replica")
    killed = _binlake(replica_path, "capture", "--until-now", kill_at="capture.after_commit")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    after = capture_state(spark, Lakehouse(on_replica))
    assert after.server_id == 12
    assert after.position.epoch == 1

    result = run_pipeline(spark, on_replica)
    assert result.ok, result.summary()
    _assert_equal(spark, on_replica)
    # The change sequence stays ordered across the switch: the new epoch sorts last.
    silver = Lakehouse(on_replica).silver(DB, "t").read(spark)
    top = silver.where("id = 1001").select("_cdc_seq").first()[0]
    assert top["file_index"] >> 32 == 1
    assert silver.where(f"_cdc_seq.file_index >= {1 << 32}").count() >= silver.where("id % 7 = 0").count() // 2


def test_a_reset_binlog_stops_capture_with_exit_code_5_and_the_recovery(spark, own_server, tmp_path, capsys):
    primary = own_server
    _seed(primary)
    path, config = _config(primary, tmp_path, "primary")
    assert run_pipeline(spark, config).ok
    primary.execute(f"UPDATE {DB}.t SET v = -1 WHERE id = 3")
    run_capture(spark, config)
    primary.execute("FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
    primary.execute(f"UPDATE {DB}.t SET v = -2 WHERE id = 4")
    run_capture(spark, config)

    # RESET MASTER: the binlog numbering starts over, and the GTIDs with it.
    primary.execute("RESET MASTER", f"UPDATE {DB}.t SET v = -3 WHERE id = 5")
    with pytest.raises(SourceChangedError) as err:
        run_capture(spark, config)
    assert "the binlog was reset or restored" in str(err.value)
    assert "binlake snapshot --reset-capture" in str(err.value)
    capsys.readouterr()
    assert cli.main(["--config", str(path), "capture", "--until-now"]) == 5
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert len(last) < 600
    assert "reset-capture" in last

    # The recovery re-snapshots at a sequence that outranks everything older.
    _, resnap = _config(primary, tmp_path, "resnapshot", capture={"on_purge": "resnapshot"})
    primary.execute(f"UPDATE {DB}.t SET v = -4 WHERE id = 6")
    assert run_pipeline(spark, resnap).ok
    assert capture_state(spark, Lakehouse(resnap)).position.epoch == 1
    _assert_equal(spark, resnap)
    primary.execute(f"UPDATE {DB}.t SET v = -5 WHERE id = 3")
    assert run_pipeline(spark, resnap).ok
    _assert_equal(spark, resnap)
