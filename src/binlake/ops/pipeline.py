"""``binlake run``: what a scheduled job does, in order, stopping at the first failure.

1. snapshot: only tables never snapshotted, or whose snapshot is unfinished (``tables=None``);
2. capture the binlog up to the server's current position (``continuous=False``);
3. silver: apply what bronze has;
4. gold: check and publish at one binlog position.

Every step is idempotent and resumes where a killed run stopped (docs/architecture.md,
"Failure behaviour"), so a failed run is fixed by fixing the cause and running again. The
failing step's own exception propagates unchanged (the CLI exits with its code); the steps
that completed before it are logged, and attached to the exception as
``exc.pipeline_result``. One exception to stopping at once: when silver stopped some tables
and applied the others, gold still runs (it publishes the groups none of them is in), and the
run then fails with silver's error.

Example::

    >>> result = run_pipeline(spark, config)      # doctest: +SKIP
    >>> print(result.summary())                   # doctest: +SKIP
    snapshot (4.1s): ...
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from binlake.config import Config, require_config
from binlake.console import QUIET, Console
from binlake.errors import BinlakeError

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.pipeline")

STEPS = ("snapshot", "capture", "silver", "gold")


@dataclass
class StepResult:
    name: str
    seconds: float
    result: Any = None
    error: BaseException | None = None

    def summary(self) -> str:
        if self.error is not None:
            return f"{self.name} ({self.seconds:.1f}s): FAILED: {self.error}"
        text = self.result.summary() if hasattr(self.result, "summary") else str(self.result)
        first, *rest = str(text).splitlines() or [""]
        return "\n".join([f"{self.name} ({self.seconds:.1f}s): {first}", *("  " + line for line in rest)])


@dataclass
class PipelineResult:
    steps: list[StepResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.error is None for s in self.steps) and len(self.steps) == len(STEPS)

    @property
    def failed_step(self) -> str | None:
        return next((s.name for s in self.steps if s.error is not None), None)

    def summary(self) -> str:
        return "\n".join(s.summary() for s in self.steps)


NO_SNAPSHOT = (
    "none: the source is a binlog archive (source.archive), which holds the changes in its files and no "
    "table's rows from before its first file"
)


def snapshot_what_needs_it(spark: SparkLike, config: Config, console: Console = QUIET):
    """The run's first step: snapshot the captured tables whose snapshot is missing or open
    (none for a binlog archive, which has no server to read tables from)."""
    if config.source.archive is not None:
        return NO_SNAPSHOT
    from binlake.bronze.capture import follow_source
    from binlake.bronze.snapshot import run_snapshot
    from binlake.errors import SourceChangedError

    try:
        return run_snapshot(spark, config, tables=None, console=console)
    except SourceChangedError:
        # The source switched since capture's last batch: capture follows it first (or stops
        # with the recovery), then the snapshot's watermarks are comparable with its positions.
        follow_source(spark, config)
        return run_snapshot(spark, config, tables=None, console=console)


def pipeline_steps(spark: SparkLike, config: Config, console) -> list[tuple[str, Callable[[], Any]]]:
    from binlake.spark import small_plans

    # The round's input, which sizes silver's and gold's plans: the snapshot's rows and the
    # row changes capture committed.
    rows: list[int] = []

    def snapshot():
        result = snapshot_what_needs_it(spark, config, console)
        rows.append(getattr(result, "rows", 0))
        return result

    def capture():
        from binlake.bronze.capture import run_capture

        result = run_capture(spark, config, continuous=False, console=console)
        rows.append(result.changes)
        return result

    def round_rows() -> int | None:
        return sum(rows) if len(rows) == 2 else None

    def silver():
        from binlake.silver.run import run_silver

        with small_plans(spark, round_rows()):
            return run_silver(spark, config, console=console)

    def gold():
        from binlake.gold.publish import run_gold

        with small_plans(spark, round_rows()):
            return run_gold(spark, config, console=console)

    return [("snapshot", snapshot), ("capture", capture), ("silver", silver), ("gold", gold)]


def went_on(exc: BaseException) -> bool:
    """Whether a failed step did the rest of its work: silver stopped some tables and applied
    the others (its error carries what it did), so the steps after it still have something to
    do (gold publishes the groups the stopped tables are not in)."""
    from binlake.silver.run import SilverResult

    return isinstance(getattr(exc, "result", None), SilverResult)


def run_steps(steps: Sequence[tuple[str, Callable[[], Any]]]) -> PipelineResult:
    """Run named steps in order; on the first exception, log what completed and re-raise it.
    A step that stopped only some tables (:func:`went_on`) lets the steps after it run first."""
    result = PipelineResult()
    first: BaseException | None = None
    for name, step in steps:
        started = time.monotonic()
        log.info("run: %s", name)
        try:
            outcome = step()
        except BaseException as exc:
            result.steps.append(StepResult(name, time.monotonic() - started, getattr(exc, "result", None), exc))
            if first is None and went_on(exc):
                first = exc
                log.error("run: %s: %s; the steps after it go on", name, exc)
                continue
            if first is not None and isinstance(exc, Exception):
                # The run fails with the first error, the one that names the cause; this one
                # (a gold group blocked by the table silver stopped, typically) is logged.
                log.error("run: %s: %s", name, exc)
                exc = first
            _stopped_at(result, name, exc)
            raise exc
        step_result = StepResult(name, time.monotonic() - started, result=outcome)
        result.steps.append(step_result)
        log.info("%s", step_result.summary())
    if first is not None:
        _stopped_at(result, result.failed_step or "", first)
        raise first
    return result


def _stopped_at(result: PipelineResult, name: str, exc: BaseException) -> None:
    """Log what completed, and attach it to the error the run raises."""
    done = [s for s in result.steps if s.error is None]
    log.error(
        "run failed at %s%s",
        name,
        "; completed:\n" + "\n".join(s.summary() for s in done) if done else " (first step)",
    )
    if isinstance(exc, BinlakeError):
        exc.pipeline_result = result
        return
    # Any other exception (Spark's, Python's) carries it too, undeclared.
    with contextlib.suppress(AttributeError):  # exceptions with __slots__
        setattr(exc, "pipeline_result", result)  # noqa: B010


def run_pipeline(spark: SparkLike, config: Config, console: Console = QUIET) -> PipelineResult:
    """snapshot (only what needs it), capture until now, silver, gold; stops at the first failure."""
    require_config(config)
    return run_steps(pipeline_steps(spark, config, console))
