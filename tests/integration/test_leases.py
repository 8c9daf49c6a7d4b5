"""One writer per layer, with real processes: while `binlake run --continuous` runs, the
scheduled pipeline's commands refuse at once with one line naming it (exit 15) and write
nothing; once it is killed -9 (so it never gave its leases back), the next command on this host
takes them over without waiting for them to expire."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from source_diff import diff_with_source  # tests/source_diff.py

from binlake import cli
from binlake.config import load_config
from binlake.contract.leases import current_holders
from binlake.contract.tables import Lakehouse

BINLAKE = str(Path(sys.executable).with_name("binlake"))


@pytest.mark.slow
def test_the_pipeline_refuses_beside_run_continuous_and_goes_on_once_it_is_killed(
    spark, mariadb, database, tmp_path, capsys
):
    mariadb.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, qty INT NOT NULL)",
        "INSERT INTO orders SELECT seq, seq FROM seq_1_to_30",
        database=database,
    )
    path = tmp_path / "binlake.yml"
    path.write_text(mariadb.config_yaml(str(tmp_path / "lakehouse"), [f"{database}.orders"], server_id=6600))
    config = load_config(path)
    lh = Lakehouse(config)
    env = {k: v for k, v in os.environ.items() if k != "BINLAKE_KILL_AT"}
    continuous = subprocess.Popen(
        [BINLAKE, "--config", str(path), "run", "--continuous"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    holder = f"`binlake run --continuous` (pid {continuous.pid} on "
    try:
        deadline = time.monotonic() + 300
        while not all(
            holder in current_holders(spark, lh).get(layer, {}).get("holder", "")
            for layer in ("capture", "silver", "gold")
        ):
            assert continuous.poll() is None, continuous.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "run --continuous never held its leases"
            time.sleep(1)
        capsys.readouterr()

        for command in ("capture", "silver", "gold", "run"):
            assert cli.main(["--config", str(path), command]) == 15, command
            err = capsys.readouterr().err
            assert err.count("\n") == 1, err
            assert holder in err, err
            assert err.startswith("error: the ")
            assert "one process writes a layer at a time" in err
        # Each refusal is on the health dashboard (metrics), and none of them did any work.
        refused = lh.metrics.read(spark).where("command IN ('capture', 'silver', 'gold', 'run')").collect()
        assert sorted(r.command for r in refused if r.table is None) == ["capture", "gold", "run", "silver"]
        assert all(r.status == "failed" and r.detail.startswith("LeaseHeldError: ") for r in refused)
        assert cli.main(["--config", str(path), "status"]) == 0
        assert f"writing capture, silver, gold: {holder}" in capsys.readouterr().out
    finally:
        os.killpg(continuous.pid, signal.SIGKILL)
        continuous.wait(timeout=60)

    # Killed -9: it gave nothing back, yet its process is gone on this host, so no waiting.
    assert continuous.returncode == -signal.SIGKILL
    assert holder in current_holders(spark, lh)["capture"]["holder"]
    mariadb.execute("UPDATE orders SET qty = 0 WHERE id = 3", database=database)
    started = time.monotonic()
    assert cli.main(["--config", str(path), "run"]) == 0
    assert time.monotonic() - started < 300
    assert current_holders(spark, lh) == {}, "the run gave its leases back"
    diffs = diff_with_source(spark, config)
    assert diffs, [d.describe() for d in diffs if not d.ok]
    assert all(d.ok for d in diffs), [d.describe() for d in diffs if not d.ok]
