"""A table that existed before and is newly matched by ``source.tables`` is snapshotted by
every path that captures it: here the bundle's scheduled pipeline, whose tasks run
``binlake-job capture --until-now``, then ``silver``, then ``gold``; ``binlake run`` does it
in its snapshot step. Gold never publishes the table from a partial snapshot."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from source_diff import diff_with_source  # tests/source_diff.py

from binlake.config import load_config_text
from binlake.contract.tables import Lakehouse
from binlake.deploy.entrypoints import parse_job_args, run_job

ROOT = Path(__file__).resolve().parents[2]
BINLAKE_JOB = str(ROOT / ".venv" / "bin" / "binlake-job")


def _job_args(mariadb, lakehouse: Path, tables: str) -> list[str]:
    return [
        f"--lakehouse-path={lakehouse}",
        "--mysql-host=127.0.0.1",
        f"--mysql-port={mariadb.port}",
        "--mysql-user=cdc",
        "--mysql-server-id=6300",
        "--mysql-password-env=MYSQL_PASSWORD",
        f"--tables={tables}",
    ]


def _pipeline_job(args: list[str]) -> list[int]:
    """The bundle's binlake_pipeline tasks, in order, stopping at the first failure."""
    codes = []
    for task in (["capture", "--until-now"], ["silver"], ["gold"]):
        codes.append(run_job(parse_job_args([*args, *task])))
        if codes[-1]:
            break
    return codes


def test_the_scheduled_pipeline_snapshots_a_newly_included_table_before_capturing_it(
    spark, mariadb, database, tmp_path
):
    db = database
    mariadb.execute(
        "CREATE TABLE a (id INT PRIMARY KEY, v INT)",
        "INSERT INTO a VALUES (1, 1), (2, 2)",
        "CREATE TABLE b (id INT PRIMARY KEY, v INT)",
        "INSERT INTO b SELECT seq, seq FROM seq_1_to_40",
        database=db,
    )
    lakehouse = tmp_path / "lakehouse"
    only_a = _job_args(mariadb, lakehouse, f"{db}.a")
    assert run_job(parse_job_args([*only_a, "snapshot"])) == 0
    assert _pipeline_job(only_a) == [0, 0, 0]

    # b's older rows are in no change record binlake kept; then it is included.
    mariadb.execute("UPDATE b SET v = -v WHERE id <= 5", "INSERT INTO a VALUES (3, 3)", database=db)
    both = _job_args(mariadb, lakehouse, f"{db}.a,{db}.b")
    config = load_config_text(parse_job_args([*both, "gold"]).config_yaml)

    # kill -9 inside the snapshot capture takes first: gold must not publish b partially.
    env = {**os.environ, "BINLAKE_KILL_AT": "snapshot.before_manifest", "BINLAKE_SPARK_MASTER": "local[2]"}
    killed = subprocess.run(
        [BINLAKE_JOB, *both, "capture", "--until-now"], env=env, capture_output=True, text=True, timeout=600
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert run_job(parse_job_args([*both, "silver"])) == 0
    assert run_job(parse_job_args([*both, "gold"])) != 0  # not ready: b's snapshot is not complete
    assert not Lakehouse(config).gold(db, "b").exists(spark)

    mariadb.execute("UPDATE b SET v = 1000 WHERE id = 40", database=db)
    assert _pipeline_job(both) == [0, 0, 0]
    diffs = diff_with_source(spark, config)
    assert [d.name for d in diffs] == [f"{db}.a", f"{db}.b"]
    assert all(d.ok for d in diffs), "\n".join(d.describe() for d in diffs)
