"""What each test costs its worker's Spark session: Spark jobs and the session JVM's CPU.

The suite's time is the sessions' Spark work (docs/development.md, "Measuring the suite's
time"), which pytest's durations do not separate from waiting.
``BINLAKE_TEST_COSTS=costs.csv make test`` appends one row per test to ``costs.csv``: the
test, its seconds, the jobs it ran and the CPU seconds of its worker's session JVM (Linux
only; empty elsewhere). A test's costs include its fixtures' setup and teardown, so a
module's shared lakehouse is its first test's, and the session's start is the first Spark
test's of each worker."""

from __future__ import annotations

import csv
import fcntl
import io
import os
import time
from collections.abc import Callable
from pathlib import Path

COLUMNS = ("test", "seconds", "spark_jobs", "jvm_cpu_s")


def session_costs() -> tuple[int, float | None] | None:
    """(jobs started so far, CPU seconds of the JVM) of this process's Spark session; None
    before one exists. Neither starts a Spark job."""
    sc = _session()
    if sc is None:
        return None
    return _jobs_started(sc), _cpu_seconds(_jvm_pid(sc))


def jobs_run(step: Callable[[], object]) -> int:
    """Spark jobs that ``step()`` started in this process's session (which must exist)."""
    before = _jobs_started(_session())
    step()
    return _jobs_started(_session()) - before


def _session():
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def _jobs_started(sc) -> int:
    return int(sc._jsc.sc().dagScheduler().nextJobId())


def _jvm_pid(sc) -> int:
    pid = getattr(sc, "_binlake_jvm_pid", None)
    if pid is None:  # one py4j call per session, not per test
        pid = sc._binlake_jvm_pid = int(sc._jvm.java.lang.ProcessHandle.current().pid())
    return pid


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(path: str | Path, test: str) -> Callable[[], None]:
    """Start measuring ``test``; the returned function appends its row to ``path``."""
    before, started = session_costs(), time.monotonic()

    def done() -> None:
        after = session_costs()
        jobs = cpu = ""
        if after is not None:  # a test that started the session pays for its start
            jobs_before, cpu_before = before or (0, 0.0)
            jobs = str(after[0] - jobs_before)
            if after[1] is not None and cpu_before is not None:
                cpu = f"{after[1] - cpu_before:.2f}"
        _append(Path(path), [test, f"{time.monotonic() - started:.2f}", jobs, cpu])

    return done


def _append(path: Path, row: list[str]) -> None:
    with open(path, "a", newline="") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # the workers append to one file: one header, whole lines
        f.seek(0, os.SEEK_END)
        lines = io.StringIO()
        writer = csv.writer(lines, lineterminator="\n")  # test ids hold commas and quotes
        if f.tell() == 0:
            writer.writerow(COLUMNS)
        writer.writerow(row)
        f.write(lines.getvalue())
