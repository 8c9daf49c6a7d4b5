"""``binlake run --continuous``: one long-lived process that keeps capture, silver and gold moving.

The three steps run as three stages, each in its own thread, handing over only through what
the stage before committed: capture commits a batch and tells silver; silver commits its
progress and tells gold; each starts its next round as soon as the one before it committed,
not when the slowest of them is done. So a change waits for the stages one after the other
but no stage waits for the others' unrelated work, and under a steady write load freshness
follows the slowest stage rather than the sum of all three. Every stage commits exactly as
its batch command does, so a kill -9 anywhere leaves nothing the next run (continuous or
not) cannot finish. The Spark session, the Python workers and the JVM's compiled code stay
warm between rounds; gold runs on a session of its own where one can be made (its MERGEs
carry a session-wide writer tag that must not reach silver's; binlake.contract.commit_tag).

- Tables that never completed a snapshot are snapshotted first.
- Capture asks the server again after ``poll_seconds`` when it found nothing new; silver and
  gold wait for the stage before them.
- Gold not ready (a snapshot still running) or a failed ``fail`` check is logged and retried
  after ``poll_seconds``; capture and silver go on. Any other failure in any stage ends the
  process with its exit code: a continuous job's scheduler restarts it, and it resumes where
  it stopped.

A *loop* is one gold round: its report says what capture and silver did since the last one.
Stage rounds that moved something, and one idle capture round a minute, are recorded in the
metrics table (:mod:`binlake.ops.metrics`), appended once a minute and when the process stops.

After each loop the process writes its state to ``<system_path>/continuous/state.json``
(the lakehouse's system location: a Unity Catalog volume on Databricks): the loop count,
what each step did, the gold position, and the freshness of the last publish (how long
after the source committed its newest change gold published it). ``binlake status`` shows
it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from binlake.bronze.capture import run_capture
from binlake.config import Config, require_config
from binlake.console import QUIET, Console
from binlake.contract.tables import Lakehouse
from binlake.errors import NotReadyError, QualityCheckFailed
from binlake.gold.publish import run_gold
from binlake.ops.metrics import MetricsRecorder, source_head
from binlake.ops.pipeline import snapshot_what_needs_it
from binlake.silver.run import run_silver
from binlake.spark import small_plans
from binlake.timing import utc_now

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.continuous")

POLL_SECONDS = 1.0
# How many loops' freshness figures the state keeps (for status's median and maximum).
RECENT_LOOPS = 120


@dataclass
class LoopReport:
    """One loop: what each step did, in seconds and rows."""

    loop: int
    started_at: str
    seconds: float
    captured: int  # row changes
    silver_tables: int  # tables silver applied records to
    gold: str  # published, unchanged, not ready, check failed
    position: str | None = None  # gold's position after the loop
    freshness_seconds: float | None = None  # the last publish: published_at - source commit time
    steps: dict = field(default_factory=dict)  # step -> seconds


@dataclass
class ContinuousState:
    """What ``state.json`` holds."""

    pid: int
    host: str
    started_at: str
    loops: int = 0
    last: LoopReport | None = None
    recent_freshness: list = field(default_factory=list)


def state_path(lh: Lakehouse) -> Path:
    return Path(lh.system_dir("continuous")) / "state.json"


def read_state(lh: Lakehouse) -> dict | None:
    """The last state a continuous process wrote, or None."""
    path = state_path(lh)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_state(lh: Lakehouse, state: ContinuousState) -> None:
    path = state_path(lh)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".state.{os.getpid()}.json")
    tmp.write_text(json.dumps(asdict(state), default=str, indent=1))
    os.replace(tmp, path)  # readers see the old state or the new one, never half of one


def _now() -> str:
    return utc_now().isoformat(sep=" ", timespec="milliseconds")


def _freshness(gold) -> float | None:
    """Seconds from the source commit of the newest change at P to now (just published)."""
    if gold is None or not gold.source_time:
        return None
    committed = datetime.fromisoformat(str(gold.source_time))
    return round((utc_now() - committed).total_seconds(), 3)


def run_continuous(
    spark: SparkLike,
    config: Config,
    console: Console = QUIET,
    poll_seconds: float = POLL_SECONDS,
    max_loops: int | None = None,
    stop: threading.Event | None = None,
) -> ContinuousState:
    """Run capture, silver and gold as three stages until interrupted, ``stop`` is set or
    ``max_loops`` gold rounds ran; returns the last state. SIGTERM sets ``stop`` (each stage
    finishes the round in progress, the last loop is recorded); Ctrl-C, or a second SIGTERM,
    ends it at once, between commits."""
    require_config(config)
    lh = Lakehouse(config)
    state = ContinuousState(pid=os.getpid(), host=socket.gethostname(), started_at=_now())
    metrics = MetricsRecorder(config, "run --continuous")
    log.info("continuous: snapshotting the tables that need it")
    began = time.monotonic()
    snapshot = snapshot_what_needs_it(spark, config, console)
    metrics.add("snapshot", snapshot, time.monotonic() - began)
    stop = stop or threading.Event()
    # Silver's first round also loads what the snapshot read: a big round when it read much.
    stages = _Stages(
        spark, config, lh, state, metrics, console, poll_seconds, max_loops, stop, getattr(snapshot, "rows", 0)
    )
    restore = _stop_on_sigterm(stop)
    try:
        stages.run()
        if stop.is_set():
            log.info("continuous: stopped after loop %d; every step's commit is in place", state.loops)
    except KeyboardInterrupt:
        stop.set()
        log.info("continuous: interrupted after loop %d; every step's commit is in place", state.loops)
    finally:
        restore()
        metrics.flush(spark)
    return state


class _Stages:
    """Capture, silver and gold, each looping in a thread, handing over by two events."""

    def __init__(
        self, spark: SparkLike, config, lh, state, metrics, console, poll_seconds, max_loops, stop, snapshot_rows=0
    ):
        self.spark, self.config, self.lh, self.state = spark, config, lh, state
        self.metrics, self.console, self.poll = metrics, console, poll_seconds
        self.max_loops, self.stop = max_loops, stop
        self.silver_due, self.gold_due = threading.Event(), threading.Event()
        # What happened since the last gold round, for its loop report.
        self._since = {"captured": 0, "silver_tables": 0}
        # Row changes handed on and not yet applied by the next stage: each round's size class.
        self._pending_rows = snapshot_rows
        self._gold_rows = 0
        self._steps: dict[str, float] = {}
        self._lock = threading.Lock()
        self.failure: BaseException | None = None

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._guarded, args=(stage,), name=f"binlake-{stage.__name__[1:]}", daemon=True)
            for stage in (self._capture, self._silver, self._gold)
        ]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.5)
        finally:
            self.stop.set()
        if self.failure is not None:
            raise self.failure

    def _guarded(self, stage) -> None:
        try:
            stage()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread, which owns the exit code
            with self._lock:
                self.failure = self.failure or exc
            self.stop.set()
            self.silver_due.set()
            self.gold_due.set()

    def _timed(self, name: str, fn):
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            with self._lock:
                self._steps[name] = round(time.monotonic() - t0, 3)

    def _record(self, name: str, result, started: str, error: BaseException | None = None) -> None:
        self.metrics.add(
            name, result, self._steps.get(name), error, datetime.fromisoformat(started), source_head(self.config)
        )

    def _capture(self) -> None:
        first = True
        while not self.stop.is_set():
            started = _now()
            captured = self._timed(
                "capture", lambda: run_capture(self.spark, self.config, continuous=False, console=self.console)
            )
            if captured.batches or first:  # the first round: silver and gold start from what it found
                with self._lock:
                    self._since["captured"] += captured.changes
                    self._pending_rows += captured.changes
                self.silver_due.set()
            first = False
            if captured.batches or self.metrics.sample_due():
                self._record("capture", captured, started)
            if not captured.batches:
                self.stop.wait(self.poll)

    def _silver(self) -> None:
        session = _own_session(self.spark)  # its own plan settings per round (small_plans)
        while not self.stop.is_set():
            if not _wait(self.silver_due, self.stop):
                return
            self.silver_due.clear()
            started = _now()
            with self._lock:
                rows = self._pending_rows
                self._pending_rows = 0
            with small_plans(session, rows):
                silver = self._timed("silver", lambda: run_silver(session, self.config, console=self.console))
            with self._lock:
                self._gold_rows += rows
            moved = sum(1 for t in silver.tables if t.merged or t.cascaded or t.truncated or t.reconciled)
            with self._lock:
                self._since["silver_tables"] += moved
            if moved or silver.applied is not None:
                self._record("silver", silver, started)
            self.gold_due.set()

    def _gold(self) -> None:
        # Gold's MERGEs tag their commits through a session-wide setting: its own session
        # (same context and cache, its own SQL settings) keeps the tag off silver's commits;
        # on a shared (Spark Connect) session binlake.contract.commit_tag keeps them apart.
        session = _own_session(self.spark)
        retry = False
        while not self.stop.is_set():
            if not _wait(self.gold_due, self.stop, self.poll if retry else None):
                return
            self.gold_due.clear()
            started, began = _now(), time.monotonic()
            report = LoopReport(self.state.loops + 1, started, 0.0, 0, 0, "unchanged")
            with self._lock:
                rows = self._gold_rows
                self._gold_rows = 0
            try:
                with small_plans(session, rows):
                    gold = self._timed("gold", lambda: run_gold(session, self.config, console=self.console))
                report.gold, report.position = gold.status, str(gold.position)
                if gold.status != "unchanged" and not all(t.reused for t in gold.tables):
                    report.freshness_seconds = _freshness(gold)
                    self._record("gold", gold, started)
                retry = False
            except NotReadyError as exc:
                # Silver may be what it waits for (snapshot chunks committed since): ask it too.
                report.gold, retry = "not ready", True
                self.silver_due.set()
                self._record("gold", None, started, exc)
                log.warning("continuous: %s", exc)
            except QualityCheckFailed as exc:
                report.gold, retry = "check failed", True
                self._record("gold", None, started, exc)
                log.error("continuous: %s", exc)
            self._finish_loop(report, began)

    def _finish_loop(self, report: LoopReport, began: float) -> None:
        with self._lock:
            report.captured, report.silver_tables = self._since["captured"], self._since["silver_tables"]
            self._since = {"captured": 0, "silver_tables": 0}
            report.steps = dict(self._steps)
        report.seconds = round(time.monotonic() - began, 3)
        state = self.state
        state.loops, state.last = report.loop, report
        if report.freshness_seconds is not None:
            state.recent_freshness = [*state.recent_freshness, report.freshness_seconds][-RECENT_LOOPS:]
        _write_state(self.lh, state)
        if self.metrics.due():
            self.metrics.flush(self.spark)
        log.info(
            "continuous loop %d: %d change(s) captured, %d silver table(s), gold %s%s%s in %.1fs",
            report.loop,
            report.captured,
            report.silver_tables,
            report.gold,
            f" at {report.position}" if report.gold == "published" and report.position else "",
            f" (freshness {report.freshness_seconds:.1f}s)" if report.freshness_seconds is not None else "",
            report.seconds,
        )
        if self.max_loops is not None and state.loops >= self.max_loops:
            self.stop.set()


def _own_session(spark: SparkLike):
    """A session sharing ``spark``'s context and cache with SQL settings of its own (the same
    session where one cannot be made: a Spark Connect client)."""
    try:
        return spark.newSession()
    except Exception:  # noqa: BLE001 - PySpark's Connect client may refuse it
        return spark


def _wait(due: threading.Event, stop: threading.Event, timeout: float | None = None) -> bool:
    """Wait until ``due`` is set (or ``timeout`` passed); False once ``stop`` is set."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not stop.is_set():
        if due.wait(0.2):
            return not stop.is_set()
        if deadline is not None and time.monotonic() >= deadline:
            return True
    return False


def _stop_on_sigterm(stop: threading.Event):
    """Make SIGTERM (how a job scheduler stops a task) set ``stop``: the loop in progress
    finishes, records its state and metrics, and the process exits 0. An exception raised
    into whatever the loop is doing could land inside a call to the JVM and leave its
    connection unusable for the final metrics flush. A second SIGTERM ends it at once, like
    Ctrl-C (and a scheduler's kill -9 after its grace period is safe anyway). Returns the
    function that puts the old handler back. Only the main thread may set handlers:
    elsewhere SIGTERM keeps its default."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_sigterm(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt(f"signal {signum}")
        log.info("continuous: SIGTERM: stopping after the loop in progress")
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    return lambda: signal.signal(signal.SIGTERM, previous)
