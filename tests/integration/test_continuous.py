"""``binlake run --continuous``: one long-lived process loops capture -> silver -> gold, so a
change committed on the source becomes readable in gold without a scheduled run; its state
(loops, freshness) is in ``binlake status`` and its loops in the metrics table; SIGTERM lets the
loop in progress finish and be recorded, then ends it with exit code 0. (kill -9 of the loop
under a write load is the fault matrix's ``continuous`` scenario, tests/chaos/driver.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from source_diff import diff_with_source  # tests/source_diff.py

from binlake.config import load_config
from binlake.contract.tables import Lakehouse
from binlake.ops.continuous import read_state
from binlake.ops.status import collect_status

BINLAKE = str(Path(sys.executable).with_name("binlake"))


def _wait(what: str, condition, timeout: float = 180) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():
            return time.monotonic() - began
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def _orders(mariadb, database):
    mariadb.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, qty INT NOT NULL, note VARCHAR(20))",
        "INSERT INTO orders SELECT seq, seq, 'seed' FROM seq_1_to_50",
        database=database,
    )


def _start(config_path: Path) -> subprocess.Popen:
    env = {**os.environ, "CI": "1"}
    env.pop("BINLAKE_KILL_AT", None)
    return subprocess.Popen(
        [BINLAKE, "--config", str(config_path), "run", "--continuous"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


@pytest.mark.slow
def test_a_change_reaches_gold_while_the_loop_runs_and_sigterm_stops_it_between_commits(
    spark, mariadb, database, tmp_path
):
    _orders(mariadb, database)
    config_path = tmp_path / "binlake.yml"
    config_path.write_text(mariadb.config_yaml(str(tmp_path / "lakehouse"), [f"{database}.orders"], server_id=6300))
    config = load_config(config_path)
    lh = Lakehouse(config)

    proc = _start(config_path)
    try:
        _wait("the first loop", lambda: (read_state(lh) or {}).get("loops"), timeout=300)
        mariadb.execute(
            f"UPDATE `{database}`.orders SET qty = 500 WHERE id = 5",
            f"INSERT INTO `{database}`.orders VALUES (51, 51, 'new')",
            f"DELETE FROM `{database}`.orders WHERE id = 7",
        )
        gold = lh.gold(database, "orders")
        _wait(
            "the change in gold",
            lambda: gold.exists(spark) and gold.read(spark).where("id = 5 AND qty = 500").count() == 1,
        )
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    assert "SIGTERM: stopping after the loop in progress" in err
    assert "stopped after loop" in err
    diffs = diff_with_source(spark, config)
    assert diffs, [d.describe() for d in diffs if not d.ok]
    assert all(d.ok for d in diffs), [d.describe() for d in diffs if not d.ok]
    state = read_state(lh)
    assert state["loops"] >= 2, "the loop that published the change measured no freshness"
    assert state["recent_freshness"], "the loop that published the change measured no freshness"
    assert 0 <= state["recent_freshness"][-1] < 180
    assert collect_status(spark, config)["continuous"]["loops"] == state["loops"]
    # The loops that moved something are in the metrics table, appended when SIGTERM stopped it.
    metrics = lh.metrics.read(spark).where("command = 'run --continuous'")
    assert metrics.where(f"step = 'gold' AND `table` = '{database}.orders' AND rows_out = 50").count() >= 1, (
        "no loop recorded the publish of the change"
    )
    assert metrics.where("step = 'capture' AND `table` IS NULL AND rows_in >= 3").count() >= 1
