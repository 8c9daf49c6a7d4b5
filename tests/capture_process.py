"""``binlake capture --until-now`` in a process of its own, which a fault point may kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def capture_process(config_path: Path, kill_at: str | None = None) -> int:
    """Run capture to the source's end; returns 0, or -SIGKILL when ``kill_at`` fired.

    The process imports binlake from this tree (``PYTHONPATH``), so a worktree tests its own code."""
    env = {**os.environ, "BINLAKE_SPARK_MASTER": "local[2]", "PYTHONPATH": str(ROOT / "src")}
    env.pop("BINLAKE_KILL_AT", None)
    if kill_at:
        env["BINLAKE_KILL_AT"] = kill_at
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "binlake"), "--config", str(config_path), "capture", "--until-now"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=600,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"capture exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.returncode
