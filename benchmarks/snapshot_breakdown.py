"""Where a snapshot's time and CPU go, beside the JDBC peer: ``python -m benchmarks.snapshot_breakdown``.

A diagnostic, not a benchmark (nothing goes to the history): on the snapshot benchmark's two
tables (sbtest 1M rows, TPC-H lineitem SF0.1) it runs four variants in one process,
alternating, and prints each one's best wall time with the CPU seconds of the Spark JVM, the
Python workers, MariaDB and the driver's Python:

- ``jdbc->delta``: the peer, Spark's partitioned JDBC read into a new Delta table;
- ``jdbc->noop``: the same read into Spark's no-op sink (the read alone);
- ``run_snapshot rows->noop``: binlake's whole snapshot with the typed rows' write sent to the
  no-op sink (the reader and the protocol around it: plan, markers, manifest);
- ``run_snapshot``: binlake's whole snapshot.

"rows phase" is the time inside the rows' reads and writes; the rest of ``run_snapshot`` is the
protocol around them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

from benchmarks import bench_snapshot as bench
from benchmarks.run import JDBC_PACKAGES, ROOT
from benchmarks.tpch import load_lineitem

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_and_parent(pid: int) -> tuple[float, int]:
    """CPU seconds of ``pid`` with its reaped children, and its parent's pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0, -1
    return sum(int(f) for f in fields[11:15]) / TICK, int(fields[1])


def _cpu(jvm: int, mariadb: int) -> dict[str, float]:
    procs = {int(p): _cpu_and_parent(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    below, todo = set(), [jvm]
    while todo:  # the JVM's Python workers and their daemon
        parent = todo.pop()
        for pid, (_, ppid) in procs.items():
            if ppid == parent and pid not in below:
                below.add(pid)
                todo.append(pid)
    own = os.times()
    return {
        "jvm": procs.get(jvm, (0.0, 0))[0],
        "workers": sum(procs[p][0] for p in below),
        "mariadb": procs.get(mariadb, (0.0, 0))[0],
        "driver": own.user + own.system,
    }


class _Probe:
    """Times the rows' phase of ``run_snapshot`` and can send the rows' write to the no-op sink."""

    def __init__(self):
        from binlake.bronze import snapshot
        from binlake.contract.tables import TableRef

        self.noop, self.rows_seconds = False, 0.0
        real_write, real_save = snapshot._write_snapshot_rows, TableRef.save

        def write_rows(*args, **kwargs):
            began = time.monotonic()
            try:
                return real_write(*args, **kwargs)
            finally:
                self.rows_seconds += time.monotonic() - began

        def save(ref, writer):
            if self.noop and "/bronze/snapshots/" in str(ref.path or ""):
                writer.format("noop").mode("overwrite").save()
            else:
                real_save(ref, writer)

        snapshot._write_snapshot_rows = write_rows
        TableRef.save = save

    def snapshot(self, ctx, config, name: str, noop: bool) -> None:
        """A whole ``run_snapshot`` of ``name``, its rows' write to the no-op sink if ``noop``."""
        self.noop = noop
        try:
            bench.binlake_snapshot(ctx, config, name)
        finally:
            self.noop = False


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.snapshot_breakdown")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="100k sbtest rows and lineitem SF0.01")
    ns = ap.parse_args()

    from binlake.devtools.mariadb import LocalMariaDB
    from binlake.spark import get_spark

    work = ROOT / ".local" / "snapshot_breakdown"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    db = LocalMariaDB(work / "mariadb").start()
    os.environ["MYSQL_PASSWORD"] = db.cdc_password
    try:
        spark = get_spark("binlake-snapshot-breakdown", extra_packages=JDBC_PACKAGES)
        ctx = SimpleNamespace(mariadb=db, spark=spark, workdir=work, quick=ns.quick, large=False)
        jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        mariadb = int(db.pid_file.read_text().strip())
        probe = _Probe()

        warm = bench.warm_up(ctx)
        probe.snapshot(ctx, warm, "bench_snap_warm.sbtest", noop=True)  # the no-op path warm too

        sbtest_rows = 100_000 if ns.quick else 1_000_000
        bench.load_sbtest(db, "breakdown", sbtest_rows)
        lineitem_rows = load_lineitem(db, "breakdown_tpch", 0.01 if ns.quick else 0.1, work)
        for database, table, split, rows in (
            ("breakdown", "sbtest", "id", sbtest_rows),
            ("breakdown_tpch", "lineitem", "l_orderkey", lineitem_rows),
        ):
            _breakdown(ctx, probe, jvm, mariadb, database, table, split, rows, ns.rounds)
    finally:
        db.destroy()


def _breakdown(ctx, probe: _Probe, jvm: int, mariadb: int, database, table, split, rows, rounds) -> None:
    bench.warm_pages(ctx.mariadb, database, table)
    config = bench.binlake_config(ctx, database, table)
    name = f"{database}.{table}"
    chunks = bench.binlake_snapshot(ctx, config, name)[1]

    variants = {
        "jdbc->delta": lambda i: bench.jdbc_to_delta(
            ctx, database, table, split, chunks, str(ctx.workdir / f"jdbc_{table}_{i}")
        ),
        "jdbc->noop": lambda i: (
            bench.jdbc_read(ctx, database, table, split, chunks).write.format("noop").mode("overwrite").save()
        ),
        "run_snapshot rows->noop": lambda i: probe.snapshot(ctx, config, name, noop=True),
        "run_snapshot": lambda i: probe.snapshot(ctx, config, name, noop=False),
    }
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for i in range(rounds):
        for variant, run in variants.items():
            probe.rows_seconds = 0.0
            before, began = _cpu(jvm, mariadb), time.monotonic()
            run(i)
            wall, after = time.monotonic() - began, _cpu(jvm, mariadb)
            runs[variant].append(
                {"wall": wall, "rows": probe.rows_seconds, **{k: after[k] - before[k] for k in before}}
            )
    print(f"== {name}: {rows:,} rows, {chunks} chunks; best of {rounds} (median wall), CPU seconds of that run")
    for variant, measured in runs.items():
        best = min(measured, key=lambda m: m["wall"])
        median = statistics.median(m["wall"] for m in measured)
        print(
            f"{variant:24} {best['wall']:5.2f} s ({median:5.2f})  rows phase {best['rows']:5.2f} s | JVM "
            f"{best['jvm']:5.2f}  workers {best['workers']:5.2f}  MariaDB {best['mariadb']:5.2f}  "
            f"driver {best['driver']:5.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
