"""A concurrent OLTP write load during the snapshot and the capture (docs/architecture.md).

sysbench (Debian's package, ``make setup`` installs it) writes to two 20k-row tables
without pause: ``oltp_write_only`` (index and non-index UPDATEs, DELETE + re-INSERT of the
same key in one transaction), ``oltp_insert`` (new auto-increment keys past the planned
chunks) and ``oltp_delete`` (plain DELETEs). While it runs, ``binlake capture --until-now``
fixes the capture start, then capture runs in a loop (with a binlog rotation now and then)
while ``binlake snapshot`` reads the tables in 1,000-row chunks, so writes commit while the
chunks are being read (each chunk's watermark is the exact position its read sees). When the
load stops, ``binlake capture``, ``silver`` and ``gold`` catch up, and every silver and gold
table must equal its source table value for value: no key missing, none extra, no column different.

The commands run through :func:`binlake.cli.main` in this process (a second JVM per command
would double the runtime on a 2-core machine); the kill -9 tests cover the CLI processes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

import pytest

from binlake.bronze.capture import run_capture
from binlake.cli import main as binlake_cli
from binlake.config import load_config
from binlake.contract.tables import Lakehouse

TABLES = 2
TABLE_SIZE = 20_000
CHUNK_SIZE = 1_000
ROUND_SECONDS = 5  # sysbench runs in back-to-back rounds, each ending with its own totals
# (workload, extra sysbench options): rates are per second for all threads of a workload.
WORKLOADS = (
    ("oltp_write_only", ["--threads=3", "--rate=40"]),
    ("oltp_insert", ["--threads=1", "--rate=8"]),
    ("oltp_delete", ["--threads=1", "--rate=5"]),
)
PAUSE_SECONDS = 1.0  # between background captures, so the snapshot gets the cores too
_TOTALS = re.compile(r"transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)")
_IGNORED = re.compile(r"ignored errors:\s+(\d+)")


def sysbench_binary() -> str:
    path = shutil.which("sysbench")
    if path is None:
        pytest.fail(
            "sysbench is not installed: run `make setup` (it installs Debian's sysbench package)", pytrace=False
        )
    return path


@dataclass
class Round:
    workload: str
    started: float
    ended: float
    returncode: int
    output: str

    @property
    def transactions(self) -> int:
        m = _TOTALS.search(self.output)
        return int(m.group(1)) if m else 0

    @property
    def ignored_errors(self) -> int:
        m = _IGNORED.search(self.output)
        return int(m.group(1)) if m else 0


class Load(threading.Thread):
    """Back-to-back sysbench rounds of every workload until :meth:`stop`."""

    def __init__(self, base: list[str], logs: Path):
        super().__init__(daemon=True)
        self.base, self.logs = base, logs
        self.rounds: list[Round] = []
        self.procs: list[subprocess.Popen] = []
        self.started = threading.Event()  # the first round's first per-second report is out
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            n = 0
            while not self.stop_event.is_set():
                begun = time.monotonic()
                runs = []
                for workload, options in WORKLOADS:
                    log = self.logs / f"sysbench-{n}-{workload}.log"
                    with log.open("w") as out:
                        proc = subprocess.Popen(
                            [
                                *self.base,
                                workload,
                                *options,
                                f"--time={ROUND_SECONDS}",
                                "--report-interval=1",
                                "--mysql-ignore-errors=all",
                                "run",
                            ],
                            stdout=out,
                            stderr=subprocess.STDOUT,
                        )
                    runs.append((workload, log, proc))
                self.procs = [p for _, _, p in runs]
                while n == 0 and not self.started.is_set() and all(p.poll() is None for p in self.procs):
                    if "[ 1s ]" in runs[0][1].read_text():
                        self.started.set()
                    time.sleep(0.05)
                for workload, log, proc in runs:
                    proc.wait(timeout=ROUND_SECONDS + 60)
                    self.rounds.append(Round(workload, begun, time.monotonic(), proc.returncode, log.read_text()))
                n += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self.error = exc
        finally:
            self.started.set()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=ROUND_SECONDS + 90)
        for p in self.procs:  # only if the join timed out: never leave a load behind
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.error is not None:
            raise self.error

    def running_at(self, instant: float) -> bool:
        # Rounds follow each other within milliseconds: a gap under a second is no pause.
        return any(r.started <= instant <= r.ended + 1.0 for r in self.rounds)


class CaptureLoop(threading.Thread):
    """``capture --until-now`` over and over, with a binlog rotation every third run."""

    def __init__(self, spark, config, mariadb):
        super().__init__(daemon=True)
        self.spark, self.config, self.mariadb = spark, config, mariadb
        self.runs: list[tuple[float, float, object]] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                if len(self.runs) % 3 == 2:
                    self.mariadb.execute("FLUSH BINARY LOGS")
                begun = time.monotonic()
                result = run_capture(self.spark, self.config)
                self.runs.append((begun, time.monotonic(), result))
                self.stop_event.wait(PAUSE_SECONDS)
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=600)
        if self.error is not None:
            raise self.error


def source_rows(mariadb, db: str, table: str) -> tuple[list[str], dict]:
    with mariadb.root_connection(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        return names, {row[0]: tuple(row) for row in cur.fetchall()}


def lake_rows(df, names: list[str]) -> dict:
    rows = df.select(*names).collect()
    out = {r[0]: tuple(r) for r in rows}
    assert len(out) == len(rows), "a key appears twice"
    return out


def differences(expected: dict, got: dict) -> str:
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(got.keys() - expected.keys())
    different = sorted(k for k in expected.keys() & got.keys() if expected[k] != got[k])
    if not (missing or extra or different):
        return ""
    lines = [f"{len(missing)} missing, {len(extra)} extra, {len(different)} different of {len(expected)} source rows"]
    lines += [f"  missing {expected[k]}" for k in missing[:5]]
    lines += [f"  extra {got[k]}" for k in extra[:5]]
    lines += [f"  source {expected[k]}\n  lake   {got[k]}" for k in different[:5]]
    return "\n".join(lines)


def cli(config_path: Path, *args: str) -> None:
    """The real command line, in this process (its Spark session is the test's)."""
    assert binlake_cli(["--config", str(config_path), *args]) == 0, f"binlake {' '.join(args)} failed"


def test_oltp_load_during_snapshot_and_capture_is_mirrored_value_for_value(spark, mariadb, database, tmp_path):
    db = database
    base = [
        sysbench_binary(),
        "--db-driver=mysql",
        f"--mysql-socket={mariadb.socket_path}",
        "--mysql-user=root",
        f"--mysql-db={db}",
        f"--tables={TABLES}",
        f"--table-size={TABLE_SIZE}",
    ]
    prepared = subprocess.run([*base, "oltp_write_only", "prepare"], capture_output=True, text=True, timeout=300)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    tables = [f"sbtest{i}" for i in range(1, TABLES + 1)]

    config_path = tmp_path / "binlake.yml"
    config_path.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lake"),
            [f"{db}.*"],
            server_id=5711,
            snapshot={"chunk_size": CHUNK_SIZE, "parallelism": 2, "chunks_per_commit": 16},
            capture={"max_batch_rows": 3000},  # several batches (each ends on a transaction boundary) per run
        )
    )
    config = load_config(config_path)
    lh = Lakehouse(config)

    load = Load(base, tmp_path)
    capture = CaptureLoop(spark, config, mariadb)
    load.start()
    try:
        assert load.started.wait(60), "sysbench did not start"
        assert load.error is None, "sysbench did not start"
        assert load.rounds == [], "sysbench did not start"
        # The first capture fixes the start position (before any chunk's low watermark),
        # under load; from then on capture runs in a loop next to the snapshot.
        cli(config_path, "capture", "--until-now")
        capture.start()
        snap_start = time.monotonic()
        cli(config_path, "snapshot")
        snap_end = time.monotonic()
        # One more capture under load, after the snapshot.
        while capture.is_alive() and not any(begun > snap_end for begun, _, _ in capture.runs):
            time.sleep(0.2)
    finally:
        load.stop()
        capture.stop()
    load_end = max(r.ended for r in load.rounds)

    # Catch up through the CLI, as a scheduled job would.
    cli(config_path, "capture", "--until-now")
    cli(config_path, "silver")
    cli(config_path, "gold")

    # What ran: sysbench's own totals, and from the binlog, the changes of a chunk's table
    # that committed after its watermark while the snapshot was still reading.
    by_workload = {w: sum(r.transactions for r in load.rounds if r.workload == w) for w, _ in WORKLOADS}
    first_start = min(r.started for r in load.rounds)
    chunks = lh.snapshot_chunks.read(spark).where(f"db = '{db}'").collect()
    changes = (
        lh.changelog.read(spark)
        .where(f"db = '{db}' AND op IN ('insert', 'update', 'delete')")
        .select("table", "file_index", "pos", "gtid")
        .collect()
    )
    lw = min((c["lw_file_index"], c["lw_pos"]) for c in chunks)
    hw = max((c["hw_file_index"], c["hw_pos"]) for c in chunks)
    during = {c["gtid"] for c in changes if lw <= (c["file_index"], c["pos"]) <= hw}
    by_table: dict[str, list[tuple[int, int]]] = {}
    for c in changes:
        by_table.setdefault(c["table"], []).append((c["file_index"], c["pos"]))
    for positions in by_table.values():
        positions.sort()
    windows_hit = sum(
        1
        for ch in chunks
        if bisect_right(by_table.get(ch["table"], []), hw)
        > bisect_right(by_table.get(ch["table"], []), (ch["lw_file_index"], ch["lw_pos"]))
    )
    total, seconds = sum(by_workload.values()), load_end - first_start
    print(
        f"oltp load: {total} sysbench transactions in {seconds:.1f}s ({total / seconds:.0f}/s; {by_workload}; "
        f"ignored errors {sum(r.ignored_errors for r in load.rounds)}); snapshot {snap_end - snap_start:.1f}s, "
        f"{len(chunks)} chunks, {windows_hit} with a change of their table after their watermark; {len(during)} "
        f"transactions between the first lw and the last hw; {len(capture.runs)} background captures"
    )

    for t in tables:
        names, expected = source_rows(mariadb, db, t)
        silver = lh.silver(db, t).read(spark)
        live = lake_rows(silver.where("NOT _cdc_deleted"), names)
        assert not differences(expected, live), (
            f"silver {db}.{t} differs from the source:\n{differences(expected, live)}"
        )
        gold = lh.gold(db, t).read(spark)
        assert "_cdc_deleted" not in gold.columns
        got = lake_rows(gold, names)
        assert not differences(expected, got), f"gold {db}.{t} differs from the source:\n{differences(expected, got)}"
        assert silver.count() > len(expected)  # the plain deletes left tombstones

    # The load really ran, across the whole snapshot, and the windows saw its writes.
    assert all(r.returncode == 0 for r in load.rounds), [r.output[-500:] for r in load.rounds if r.returncode]
    assert all(n > 0 for n in by_workload.values()), by_workload
    assert first_start < snap_start
    assert load.running_at(snap_start)
    assert load.running_at(snap_end)
    assert len(capture.runs) >= 2
    assert any(begun < snap_end and end > snap_start for begun, end, _ in capture.runs), (
        "no capture ran during the snapshot"
    )
    assert len(chunks) > TABLES * TABLE_SIZE // CHUNK_SIZE
    assert len(during) > 0, (len(during), windows_hit)
    assert windows_hit > 0, (len(during), windows_hit)
    assert all((c["lw_file_index"], c["lw_pos"]) == (c["hw_file_index"], c["hw_pos"]) for c in chunks)  # exact
