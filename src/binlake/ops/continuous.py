"""``binlake run --continuous``: one long-lived process that loops capture -> silver -> gold.

Each loop runs the same steps as ``binlake run``, with the Spark session, the Python workers
and the JVM's compiled code kept warm between loops, so a change reaches gold seconds after
it commits. Every step commits exactly as the batch command does, so a kill -9 anywhere
leaves nothing the next run (continuous or not) cannot finish.

- Tables that never completed a snapshot are snapshotted first.
- A loop that captured nothing and left nothing for silver or gold to do sleeps
  ``poll_seconds`` before asking the server again.
- Gold not ready (a snapshot still running) or a failed ``fail`` check is logged and retried
  on the next loop; capture and silver go on. Any other failure ends the process with its
  exit code: a continuous job's scheduler restarts it, and it resumes where it stopped.

Loops that moved something, and one idle loop a minute, are recorded in the metrics table
(:mod:`binlake.ops.metrics`), appended once a minute and when the process stops.

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
from datetime import datetime, timezone
from pathlib import Path

from binlake.bronze.capture import run_capture
from binlake.config import Config
from binlake.contract.lakehouse import Lakehouse
from binlake.errors import NotReadyError, QualityCheckFailed
from binlake.gold.publish import run_gold
from binlake.ops.metrics import MetricsRecorder, source_head
from binlake.ops.pipeline import snapshot_what_needs_it
from binlake.silver.run import run_silver

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
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(sep=" ", timespec="milliseconds")


def _freshness(gold) -> float | None:
    """Seconds from the source commit of the newest change at P to now (just published)."""
    if gold is None or not gold.source_time:
        return None
    committed = datetime.fromisoformat(str(gold.source_time))
    return round((datetime.now(timezone.utc).replace(tzinfo=None) - committed).total_seconds(), 3)


def run_continuous(
    spark,
    config: Config,
    progress=None,
    poll_seconds: float = POLL_SECONDS,
    max_loops: int | None = None,
    stop: threading.Event | None = None,
) -> ContinuousState:
    """Loop capture -> silver -> gold until interrupted, ``stop`` is set or ``max_loops`` loops
    ran; returns the last state. SIGTERM sets ``stop`` (the loop in progress finishes and is
    recorded); Ctrl-C, or a second SIGTERM, ends it at once, between commits."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be a binlake.config.Config, got {type(config).__name__}")
    lh = Lakehouse(config)
    state = ContinuousState(pid=os.getpid(), host=socket.gethostname(), started_at=_now())
    metrics = MetricsRecorder(config, "run --continuous")
    log.info("continuous: snapshotting the tables that need it")
    began = time.monotonic()
    snapshot = snapshot_what_needs_it(spark, config, progress)
    metrics.add("snapshot", snapshot, time.monotonic() - began)
    pending = True  # silver and gold have not run yet in this process
    stop = stop or threading.Event()
    restore = _stop_on_sigterm(stop)
    try:
        while (max_loops is None or state.loops < max_loops) and not stop.is_set():
            report = _loop(spark, config, state.loops + 1, pending, progress, metrics)
            if metrics.due():
                metrics.flush(spark)
            state.loops, state.last = report.loop, report
            if report.freshness_seconds is not None:
                state.recent_freshness = (state.recent_freshness + [report.freshness_seconds])[-RECENT_LOOPS:]
            _write_state(lh, state)
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
            pending = report.gold in ("not ready", "check failed")
            if not report.captured and not pending:
                stop.wait(poll_seconds)
        if stop.is_set():
            log.info("continuous: stopped after loop %d; every step's commit is in place", state.loops)
    except KeyboardInterrupt:
        log.info("continuous: interrupted after loop %d; every step's commit is in place", state.loops)
    finally:
        restore()
        metrics.flush(spark)
    return state


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


def _loop(spark, config: Config, number: int, pending: bool, progress, metrics: MetricsRecorder) -> LoopReport:
    started, began = _now(), time.monotonic()
    steps: dict[str, float] = {}
    outcomes: dict[str, tuple] = {}  # step -> (result, error) for the metrics

    def timed(name, fn):
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            steps[name] = round(time.monotonic() - t0, 3)

    captured = timed("capture", lambda: run_capture(spark, config, continuous=False, progress=progress))
    report = LoopReport(number, started, 0.0, captured.changes, 0, "idle", steps=steps)
    outcomes["capture"] = (captured, None)
    if captured.batches or pending or number == 1:
        silver = timed("silver", lambda: run_silver(spark, config, progress=progress))
        outcomes["silver"] = (silver, None)
        report.silver_tables = sum(1 for t in silver.tables if t.merged or t.cascaded or t.truncated or t.reconciled)
        try:
            gold = timed("gold", lambda: run_gold(spark, config, progress=progress))
            outcomes["gold"] = (gold, None)
            report.gold, report.position = gold.status, str(gold.position)
            if gold.status != "unchanged" and not all(t.reused for t in gold.tables):
                report.freshness_seconds = _freshness(gold)
        except NotReadyError as exc:
            outcomes["gold"] = (None, exc)
            report.gold = "not ready"
            log.warning("continuous: %s", exc)
        except QualityCheckFailed as exc:
            outcomes["gold"] = (None, exc)
            report.gold = "check failed"
            log.error("continuous: %s", exc)
    report.seconds = round(time.monotonic() - began, 3)
    # Loops that moved something are recorded; an idle process records one loop a minute,
    # so lag and freshness stay charted while nothing changes.
    if len(outcomes) > 1 or metrics.sample_due():
        head = source_head(config)
        at = datetime.fromisoformat(started)
        for name, (result, error) in outcomes.items():
            metrics.add(name, result, steps.get(name), error, at, head)
    return report
