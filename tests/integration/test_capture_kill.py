"""kill -9 of `binlake capture --until-now` at any point, then a re-run: every change exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from binlake.bronze.capture import run_capture
from binlake.config import load_config
from binlake.contract.tables import Lakehouse

ROOT = Path(__file__).resolve().parents[2]
BINLAKE = str(ROOT / ".venv" / "bin" / "binlake")


def _capture(
    config_path: Path, kill_at: str | None = None, kill_after_commits: int | None = None, log_dir: Path | None = None
) -> int:
    env = {**os.environ, "BINLAKE_SPARK_MASTER": "local[2]"}
    env.pop("BINLAKE_KILL_AT", None)
    if kill_at:
        env["BINLAKE_KILL_AT"] = kill_at
    proc = subprocess.Popen(
        [BINLAKE, "--config", str(config_path), "capture", "--until-now"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if kill_after_commits is not None:
        # Kill at an arbitrary instant: as soon as the run has committed this many batches.
        assert log_dir is not None
        seen = len(list(log_dir.glob("*.json")))
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if len(list(log_dir.glob("*.json"))) >= seen + kill_after_commits:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
    _, err = proc.communicate(timeout=600)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"capture exited {proc.returncode}: {err[-2000:]}")
    return proc.returncode


def test_kill_9_at_any_point_then_rerun_writes_every_change_exactly_once(spark, mariadb, database, tmp_path):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v INT)")
    config_path = tmp_path / "binlake.yml"
    config_path.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lake"),
            [f"{database}.*"],
            server_id=7100,
            capture={"startup": "latest", "max_batch_rows": 25},
        )
    )
    config = load_config(config_path)
    run_capture(spark, config)  # establishes the resume position before the changes

    expected = 0
    for wave in range(4):
        base = wave * 100
        mariadb.execute(
            f"INSERT INTO `{database}`.t VALUES " + ",".join(f"({base + i}, {i})" for i in range(30)),
            f"UPDATE `{database}`.t SET v = v + 1 WHERE id >= {base} AND id < {base + 10}",
            f"DELETE FROM `{database}`.t WHERE id >= {base + 20} AND id < {base + 25}",
            *[f"INSERT INTO `{database}`.t VALUES ({base + 50 + i}, {i})" for i in range(5)],
            "FLUSH BINARY LOGS",
        )
        expected += 30 + 10 + 5 + 5
    # Small transactions in the current file: the last partition of a batch stops at the
    # first transaction boundary after max_batch_rows, so these make several batches.
    mariadb.execute(
        *[
            f"INSERT INTO `{database}`.t VALUES " + ",".join(f"({1000 + 10 * k + i}, 0)" for i in range(5))
            for k in range(12)
        ]
    )
    expected += 60

    log_dir = tmp_path / "lake" / "bronze" / "changelog" / "_delta_log"
    outcomes = [
        _capture(config_path, kill_at="capture.before_commit@2"),  # mid-batch: read, not committed
        _capture(config_path, kill_at="capture.after_commit@1"),  # right after a Delta commit
        _capture(config_path, kill_after_commits=1, log_dir=log_dir),  # whenever a commit lands
        _capture(config_path, kill_at="capture.after_commit@2"),
    ]
    assert outcomes[:2] == [-signal.SIGKILL] * 2, f"mid-batch and after-commit kills must have happened: {outcomes}"
    run_capture(spark, config)  # the re-run that finishes: in this process, a JVM start less

    log = Lakehouse(config).changelog.read(spark).where(f"db = '{database}' AND op IN ('insert','update','delete')")
    per_seq = log.groupBy("file_index", "pos", "row").count()
    assert per_seq.where("count > 1").count() == 0, "no change may be written twice"
    assert log.count() == expected, "no change may be lost"
    assert log.select("file_index").distinct().count() >= 4, "the changes span several binlog files"
