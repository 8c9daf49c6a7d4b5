"""``make bench``: run every ``benchmarks/bench_*.py``, write ``.local/bench/results.json`` and
append the figures to ``benchmarks/history.csv`` (one row per figure: date, commit, name,
value, unit, peer_value, ratio, note; ``python -m benchmarks.plot NAME`` draws one over time).

Each module exposes ``run(ctx) -> list[dict]`` returning objects
``{"name", "value", "unit", "peer", "peer_value", "ratio"}`` (ratio = value / peer_value for
throughputs, higher is better; a metric where lower is better says so in its unit).
``ctx`` gives a running local MariaDB (``ctx.mariadb``), a Spark session (``ctx.spark``) and a
scratch directory (``ctx.workdir``). Peers are run side by side, in the same process and on the
same table, so the ratio is fair on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import pkgutil
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "benchmarks" / "history.csv"
HISTORY_FIELDS = ["date", "commit", "name", "value", "unit", "peer_value", "ratio", "note"]
# The snapshot benchmark's peer, Spark's JDBC reader, needs MariaDB Connector/J: resolved from
# Maven Central into the Ivy cache when the bench session starts (downloaded on the first run).
JDBC_PACKAGES = ["org.mariadb.jdbc:mariadb-java-client:3.5.6"]


@dataclass
class BenchContext:
    mariadb: object
    spark: object
    workdir: Path
    quick: bool
    large: bool = False  # `make bench-large`: the benchmarks' large sizes too (full_sync_scaling)


def result(name: str, value: float, unit: str, peer: str, peer_value: float, higher_is_better: bool = True) -> dict:
    ratio = (value / peer_value if higher_is_better else peer_value / value) if value and peer_value else None
    return {
        "name": name,
        "value": round(value, 3),
        "unit": unit,
        "peer": peer,
        "peer_value": round(peer_value, 3),
        "ratio": round(ratio, 3) if ratio is not None else None,
    }


def commit_measured() -> str:
    """The commit the figures are of: short hash, ``+dirty`` when the tree has changes."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def append_history(results: list[dict], note: str = "", path: Path = HISTORY) -> None:
    """Append one row per figure to the history a reader can plot (benchmarks/history.csv)."""
    date, commit = datetime.now(timezone.utc).strftime("%Y-%m-%d"), commit_measured()
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HISTORY_FIELDS, lineterminator="\n")
        if new:
            w.writeheader()
        for r in results:
            w.writerow(
                {
                    "date": date,
                    "commit": commit,
                    "name": r["name"],
                    "value": r["value"],
                    "unit": r["unit"],
                    "peer_value": r.get("peer_value", ""),
                    "ratio": "" if r.get("ratio") is None else r["ratio"],
                    "note": note,
                }
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make bench")
    ap.add_argument("--only", action="append", default=[], help="run only bench modules whose name contains this")
    ap.add_argument("--quick", action="store_true", help="small data sizes (for a smoke run; kept out of the history)")
    ap.add_argument("--no-history", action="store_true", help="do not append the figures to benchmarks/history.csv")
    ap.add_argument("--large", action="store_true", help="also the large sizes (make bench-large)")
    ns = ap.parse_args(argv)

    from binlake.console import setup_logging
    from binlake.devtools.mariadb import LocalMariaDB
    from binlake.spark import get_spark

    setup_logging()
    out_dir = ROOT / ".local" / "bench"
    workdir = out_dir / "work"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    db = LocalMariaDB(workdir / "mariadb").start()
    import os

    os.environ["MYSQL_PASSWORD"] = db.cdc_password
    spark = get_spark("binlake-bench", extra_packages=JDBC_PACKAGES)
    ctx = BenchContext(mariadb=db, spark=spark, workdir=workdir, quick=ns.quick, large=ns.large)
    results: list[dict] = []
    try:
        for mod in sorted(
            m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_")
        ):
            if ns.only and not any(o in mod for o in ns.only):
                continue
            started = time.monotonic()
            print(f"== {mod}", flush=True)
            results.extend(importlib.import_module(f"benchmarks.{mod}").run(ctx))
            print(f"   ({time.monotonic() - started:,.0f}s)", flush=True)
    finally:
        db.destroy()
    fresh = list(results)  # this run's figures, before a partial run merges the earlier ones
    path = out_dir / "results.json"
    if ns.only and path.exists():
        # A partial run (--only) updates its own figures and keeps the others'.
        ran = {r["name"] for r in results}
        results = [r for r in json.loads(path.read_text()) if r["name"] not in ran] + results
    path.write_text(json.dumps(results, indent=2))
    if not (ns.quick or ns.no_history):
        append_history(fresh)
    print(f"\n{'name':34} {'value':>14} {'unit':22} {'peer':28} {'peer_value':>14} {'ratio':>7}")
    for r in results:
        print(
            f"{r['name']:34} {r['value']:>14,.2f} {r['unit']:22} {r['peer']:28} {r['peer_value']:>14,.2f} "
            f"{r['ratio'] or 0:>7.2f}"
        )
    print(f"\nwritten to {path}" + ("" if ns.quick or ns.no_history else f", appended to {HISTORY}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
