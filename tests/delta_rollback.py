"""Sharing one local lakehouse between tests: every Delta table's version before a test, and
the cut back to it after.

Cutting the log of a local table back to a version is that version, to every reader (files
added since stay, unreferenced); RESTORE would cost a Spark job per table and a new commit.
Delta's cached snapshots are dropped after a cut, so no reader keeps a newer one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def delta_versions(root: Path) -> dict[Path, int]:
    """Every Delta table under ``root`` and its newest version (no Spark job)."""
    return {log.parent: _newest(log) for log in sorted(Path(root).rglob("_delta_log"))}


def roll_back(spark, root: Path, versions: dict[Path, int]) -> None:
    """Put every Delta table under ``root`` back at its version in ``versions``, removing the
    tables created since."""
    cut = False
    for table, newest in delta_versions(root).items():
        if table not in versions:
            shutil.rmtree(table)
            cut = True
        elif newest != versions[table]:
            _truncate(table / "_delta_log", versions[table])
            cut = True
    if cut:
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def _newest(log: Path) -> int:
    return max((int(f.name.split(".")[0]) for f in log.glob("*.json")), default=-1)


def _truncate(log: Path, version: int) -> None:
    """Remove the log entries after ``version``: commits, their checksums and checkpoints, and a
    ``_last_checkpoint`` that names one of them."""
    for f in log.iterdir():
        head = f.name.split(".")[0]
        if head.isdigit() and int(head) > version:
            f.unlink()
    last = log / "_last_checkpoint"
    if last.exists() and json.loads(last.read_text())["version"] > version:
        last.unlink()
