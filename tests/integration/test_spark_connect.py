"""binlake on a Spark Connect session, the kind serverless compute and standard access mode
clusters give: a local Spark Connect server with Delta (binlake.devtools.connect_server), and the
`binlake` commands pointed at it with SPARK_REMOTE. Snapshot, capture, silver and gold run
through it against MariaDB, and gold equals the source value for value.

Every client runs in a process of its own: PySpark switches a whole process to Connect once a
Connect session exists in it (its functions then build Connect columns), which would break
the classic session the other tests of this worker share.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import SMALL_DATA_CONF, TEST_JVM  # tests/conftest.py
from mysql_types import COLUMNS, EDGE_ROW, NULL_ROW, ODD_ROW  # tests/mysql_types.py

ROOT = Path(__file__).resolve().parents[2]
BINLAKE = str(Path(sys.executable).with_name("binlake"))
SERVER_CONF = {
    **SMALL_DATA_CONF,
    "spark.driver.extraJavaOptions": TEST_JVM,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """One Spark Connect server with Delta for the test session."""
    from binlake.devtools.connect_server import start

    began = time.monotonic()
    server = start(workdir=tmp_path_factory.mktemp("connect-server"), extra_conf=SERVER_CONF)
    print(f"Spark Connect server up at {server.url} in {time.monotonic() - began:.1f}s")
    yield server
    server.stop()


def _env(url: str) -> dict[str, str]:
    env = {**os.environ, "SPARK_REMOTE": url, "CI": "1"}
    env.pop("BINLAKE_KILL_AT", None)
    return env


def _binlake(url: str, config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BINLAKE, "--config", str(config), *args], capture_output=True, text=True, env=_env(url), timeout=600
    )


def _python(url: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**_env(url), "PYTHONPATH": str(ROOT / "tests")},
        timeout=600,
    )


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


# The client: the scheduled job's round from the command line (snapshot, capture, silver,
# gold), the source changes, a second round and `status` in the same process (a process
# start and a Connect session cost seconds each), then tests/source_diff.py's check.
CLIENT = """
import contextlib, io, json, sys, time
from pathlib import Path
from binlake.cli import main
from binlake.config import load_config
from binlake.devtools.mariadb import LocalMariaDB
from binlake.spark import get_spark, is_connect
from source_diff import diff_with_source

config, datadir, database, changes = json.loads(sys.argv[1])
seconds, printed = {}, {}
for step, command in (("first run", ["run"]), ("changes", None), ("second run", ["run"]), ("status", ["status"])):
    began, text = time.monotonic(), io.StringIO()
    if command is None:
        LocalMariaDB(Path(datadir)).execute(*changes, database=database)
    else:
        with contextlib.redirect_stdout(text):
            code = main(["--config", config, *command])
        assert code == 0, (command, code, text.getvalue())
    seconds[step], printed[step] = round(time.monotonic() - began, 1), text.getvalue()
spark = get_spark()
assert is_connect(spark), type(spark)
began = time.monotonic()
diffs = diff_with_source(spark, load_config(config))
seconds["diff"] = round(time.monotonic() - began, 1)
print(json.dumps({"seconds": seconds, "status": printed["status"], "diffs": [
    {"ok": d.ok, "text": d.describe(), "rows": d.source_rows} for d in diffs
]}))
"""


@pytest.mark.slow
def test_snapshot_capture_silver_and_gold_run_on_spark_connect(connect_server, mariadb, database, tmp_path):
    mariadb.execute(
        f"CREATE TABLE types ({COLUMNS})",
        "CREATE TABLE items (sku VARCHAR(12) PRIMARY KEY, name VARCHAR(40) NOT NULL, price DECIMAL(8,2), "
        "added DATETIME(3), stock BIGINT UNSIGNED)",
        "INSERT INTO items VALUES "
        + ", ".join(
            f"('sku-{i:03d}', 'item {i}', {i}.25, '2024-01-{1 + i % 28:02d} 10:00:00.{i:03d}', {i * 1000})"
            for i in range(40)
        ),
        "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT)",
        "INSERT INTO notes VALUES (1, 'one'), (2, 'two'), (3, 'three')",
        database=database,
    )
    # Zero dates need a permissive sql_mode; the non-UTC session zone must not shift TIMESTAMPs.
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '+05:30'",
        f"INSERT INTO `{database}`.types VALUES {EDGE_ROW}, {NULL_ROW}, {ODD_ROW}",
    )
    config = tmp_path / "binlake.yml"
    config.write_text(
        mariadb.config_yaml(str(tmp_path / "lakehouse"), [f"{database}.*"], server_id=6100, snapshot={"chunk_size": 16})
    )
    # Changes of every kind between the rounds: the second round's silver MERGE, key-change
    # tombstone and TRUNCATE, and gold's incremental MERGE run as Delta SQL.
    changes = [
        "UPDATE items SET price = price + 1 WHERE sku < 'sku-010'",
        "DELETE FROM items WHERE sku IN ('sku-013', 'sku-027')",
        "UPDATE items SET sku = 'sku-999' WHERE sku = 'sku-030'",
        "INSERT INTO items VALUES ('sku-100', 'new', 0.50, NULL, 18446744073709551615)",
        "DELETE FROM types WHERE id = 2",
        "UPDATE types SET vc = 'changed' WHERE id = 3",
        "TRUNCATE TABLE notes",
        "INSERT INTO notes VALUES (7, 'seven')",
    ]
    args = json.dumps([str(config), str(mariadb.datadir), database, changes])
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, args],
        capture_output=True,
        text=True,
        env={**_env(connect_server.url), "PYTHONPATH": str(ROOT / "tests")},
        timeout=900,
    )
    got = json.loads(_ok(done).strip().splitlines()[-1])
    print(f"seconds: {got['seconds']}")

    assert sorted(d["rows"] for d in got["diffs"]) == [1, 2, 39]
    assert all(d["ok"] for d in got["diffs"]), "\n".join(d["text"] for d in got["diffs"])
    assert f"{database}.items" in got["status"]
    # No secret in what the server logged.
    assert mariadb.cdc_password not in connect_server.log_path.read_text(errors="replace")


def _python_without_binlake(where: Path) -> str:
    """An interpreter that has PySpark (what a Spark worker needs) but no binlake."""
    import py4j
    import pyspark

    libs = where / "libs"
    libs.mkdir()
    for module in (pyspark, py4j):
        (libs / module.__name__).symlink_to(Path(module.__file__).parent)
    launcher = where / "python"
    launcher.write_text(f'#!/bin/sh\nPYTHONPATH={libs} exec {sys.executable} -S "$@"\n')
    launcher.chmod(0o755)
    return str(launcher)


def test_a_connect_server_without_delta_or_binlake_is_refused_in_one_line(tmp_path):
    from binlake.devtools.connect_server import start

    server = start(
        workdir=tmp_path / "server",
        extra_conf={**SERVER_CONF, "spark.python.daemon.module": "pyspark.daemon"},
        delta=False,
        python=_python_without_binlake(tmp_path),
    )
    try:
        config = tmp_path / "binlake.yml"
        config.write_text(
            "source: {host: 127.0.0.1, user: cdc, password: x, server_id: 6200, tables: ['shop.*']}\n"
            f"lakehouse: {{path: {tmp_path / 'lakehouse'}}}\n"
        )
        done = _binlake(server.url, config, "status")
        assert done.returncode == 14
        (line,) = done.stderr.strip().splitlines()
        assert "has no Delta Lake" in line
        assert "python -m binlake.devtools.connect_server" in line
        assert "Databricks serverless compute or a Databricks cluster" in line

        done = _python(
            server.url,
            """
            from pyspark.sql import SparkSession
            from binlake.errors import ConnectWorkersWithoutBinlakeError
            from binlake.spark import require_binlake_on_workers

            try:
                require_binlake_on_workers(SparkSession.builder.getOrCreate())
            except ConnectWorkersWithoutBinlakeError as exc:
                print(exc.exit_code, exc)
            """,
        )
        code, line = _ok(done).strip().splitlines()[-1].split(" ", 1)
        assert code == "14"
        assert "No module named 'binlake'" in line
        assert "install this binlake wheel on that compute" in line
    finally:
        server.stop()


# Gold publishing while another thread commits on the same Connect session, as
# `binlake run --continuous` does where it cannot make gold a session of its own.
TAGS_CLIENT = """
import json, sys, threading
from pathlib import Path
from binlake.config import load_config
from binlake.contract.tables import TableRef
from binlake.devtools.mariadb import LocalMariaDB
from binlake.gold.publish import run_gold
from binlake.ops.pipeline import run_pipeline
from binlake.spark import get_spark, is_connect

config_path, datadir, database, scratch_path = json.loads(sys.argv[1])
spark, config = get_spark(), load_config(config_path)
assert is_connect(spark), type(spark)
assert run_pipeline(spark, config).ok
LocalMariaDB(Path(datadir)).execute("UPDATE t SET v = v + 1", database=database)
from binlake.bronze.capture import run_capture
from binlake.silver.run import run_silver
run_capture(spark, config)
run_silver(spark, config)

scratch = TableRef(path=scratch_path)
scratch.save(spark.range(1).write.format("delta"))
done, errors = threading.Event(), []

def other_layer():
    n = 0
    try:
        while not done.is_set() or n < 3:
            n += 1
            scratch.save(spark.range(n, n + 1).write.format("delta").mode("append"))
            scratch.delta(spark).delete(f"id = {n}")
    except BaseException as exc:
        errors.append(repr(exc))

thread = threading.Thread(target=other_layer)
thread.start()
try:
    for _ in range(3):
        run_gold(spark, config)
        LocalMariaDB(Path(datadir)).execute("UPDATE t SET v = v + 1", database=database)
        run_capture(spark, config)
        run_silver(spark, config)
finally:
    done.set()
    thread.join()
history = spark.sql(f"DESCRIBE HISTORY {scratch.sql}").select("operation", "userMetadata").collect()
print(json.dumps({"errors": errors, "history": [[r[0], r[1]] for r in history]}))
"""


@pytest.mark.slow
def test_gold_tags_only_its_own_commits_on_a_shared_connect_session(connect_server, mariadb, database, tmp_path):
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_50",
        database=database,
    )
    config = tmp_path / "binlake.yml"
    config.write_text(mariadb.config_yaml(str(tmp_path / "lakehouse"), [f"{database}.t"], server_id=6101))
    args = json.dumps([str(config), str(mariadb.datadir), database, str(tmp_path / "scratch")])
    done = subprocess.run(
        [sys.executable, "-c", TAGS_CLIENT, args],
        capture_output=True,
        text=True,
        env={**_env(connect_server.url), "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}"},
        timeout=900,
    )
    got = json.loads(_ok(done).strip().splitlines()[-1])
    assert got["errors"] == []
    assert len(got["history"]) > 3
    # Every commit of the other thread carries its own (no) user metadata, never gold's tag.
    assert [h for h in got["history"] if (h[1] or "").startswith("binlake gold")] == []
