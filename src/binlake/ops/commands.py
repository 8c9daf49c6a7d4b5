"""binlake's commands as the CLI and the public API run them.

Every command that writes first brings the lakehouse to this binlake's layout
(:mod:`binlake.contract.layout`: the migration runs once, the first time this binlake meets a
lakehouse an earlier one laid out), and the commands that write capture, silver or gold hold
that layer's lease while they run (:mod:`binlake.contract.leases`), so a second writer of the
same layer refuses instead of running beside the first:

=============================  ==========================
command                        leases
=============================  ==========================
``capture``                    capture
``snapshot --reset-capture``   capture
``silver``                     silver
``gold``                       gold
``run``, ``run --continuous``  capture, silver, gold
``migrate``                    all three, while it moves
=============================  ==========================

``snapshot``, ``verify``, ``maintain`` and ``erase`` take none: a snapshot writes bronze beside
capture by design, and the others are safe beside every writer (docs/maintenance.md,
docs/security.md). The layer functions underneath (``binlake.bronze.capture.run_capture``, ...)
do neither the layout check nor the leases; these do.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from binlake.config import Config, require_config
from binlake.console import QUIET, Console
from binlake.contract.layout import LAYOUT_VERSION, Step, ensure_current_layout
from binlake.contract.leases import CAPTURE, GOLD, LAYERS, SILVER, Holder, Leases, holding
from binlake.contract.tables import Lakehouse
from binlake.ops.metrics import JOB_RUN_ENV

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.commands")

JOB_ID_ENV = "BINLAKE_JOB_ID"
"""The Databricks job the process runs in (``binlake-job --job-id``): a later run of the same
job may take over the leases of an earlier one that was killed."""


def _holder(command: str) -> Holder:
    return Holder(command, job_id=os.environ.get(JOB_ID_ENV) or None, job_run_id=os.environ.get(JOB_RUN_ENV) or None)


def _checked(config) -> Config:
    return require_config(config)


@dataclass
class MigrateResult:
    """What ``binlake migrate`` (or the first writing command on an earlier layout) did."""

    before: int
    after: int = LAYOUT_VERSION
    steps: list[Step] = field(default_factory=list)

    def summary(self) -> str:
        if not self.steps:
            return f"lakehouse layout {self.after}: up to date, nothing to migrate"
        done = "; ".join(s.what for s in self.steps)
        return f"lakehouse layout {self.before} -> {self.after}: {done}"


def prepare_lakehouse(spark: SparkLike, config: Config, command: str = "migrate") -> MigrateResult:
    """Bring the lakehouse to this binlake's layout (a no-op after the first call in a process)."""
    steps = ensure_current_layout(spark, Lakehouse(_checked(config)), _holder(command))
    result = MigrateResult(steps[0].number - 1 if steps else LAYOUT_VERSION, steps=steps)
    if result.steps:
        log.warning("%s", result.summary())
    return result


def migrate_lakehouse(spark: SparkLike, config: Config) -> MigrateResult:
    """``binlake migrate``: move a lakehouse an earlier binlake laid out to this binlake's layout
    (:mod:`binlake.contract.layout` lists the steps); every writing command does it too."""
    return prepare_lakehouse(spark, config)


@contextmanager
def _writing(spark: SparkLike, config: Config, command: str, layers: Sequence[str], on_lost=None) -> Iterator[Leases]:
    lh = Lakehouse(_checked(config))
    prepare_lakehouse(spark, config, command)
    with holding(spark, lh, layers, _holder(command), on_lost=on_lost) as leases:
        yield leases
    leases.raise_if_lost()


def _interrupt_main() -> None:
    """Stop ``capture --continuous`` as Ctrl-C would (it loops until interrupted)."""
    import _thread

    _thread.interrupt_main()


def run_snapshot(spark: SparkLike, config: Config, tables: Sequence[str] | None = None, console: Console = QUIET):
    from binlake.bronze import snapshot

    prepare_lakehouse(spark, _checked(config), "snapshot")
    return snapshot.run_snapshot(spark, config, tables=tables, console=console)


def recover_from_purge(spark: SparkLike, config: Config, tables: Sequence[str] | None = None, console: Console = QUIET):
    from binlake.bronze import capture

    with _writing(spark, config, "snapshot --reset-capture", (CAPTURE,)):
        return capture.recover_from_purge(spark, config, tables=tables, console=console)


def run_capture(spark: SparkLike, config: Config, continuous: bool = False, console: Console = QUIET):
    from binlake.bronze import capture

    command = "capture --continuous" if continuous else "capture"
    with _writing(spark, config, command, (CAPTURE,), on_lost=_interrupt_main if continuous else None):
        return capture.run_capture(spark, config, continuous=continuous, console=console)


def run_silver(spark: SparkLike, config: Config, console: Console = QUIET):
    from binlake.silver import run

    with _writing(spark, config, "silver", (SILVER,)):
        return run.run_silver(spark, config, console=console)


def run_gold(spark: SparkLike, config: Config, console: Console = QUIET):
    from binlake.gold import publish

    with _writing(spark, config, "gold", (GOLD,)):
        return publish.run_gold(spark, config, console=console)


def run_pipeline(spark: SparkLike, config: Config, console: Console = QUIET):
    """``binlake run``: snapshot what needs it, capture until now, silver, gold."""
    from binlake.ops import pipeline

    with _writing(spark, config, "run", LAYERS):
        return pipeline.run_pipeline(spark, config, console=console)


def run_continuous(
    spark: SparkLike,
    config: Config,
    console: Console = QUIET,
    poll_seconds: float | None = None,
    max_loops: int | None = None,
    stop: threading.Event | None = None,
):
    """``binlake run --continuous``; a lost lease ends it after the loop in progress."""
    from binlake.ops import continuous

    stop = stop or threading.Event()
    extra = {} if poll_seconds is None else {"poll_seconds": poll_seconds}
    with _writing(spark, config, "run --continuous", LAYERS, on_lost=stop.set):
        return continuous.run_continuous(spark, config, console=console, max_loops=max_loops, stop=stop, **extra)


def run_verify(
    spark: SparkLike,
    config: Config,
    repair: bool = False,
    tables: Sequence[str] | None = None,
    console: Console = QUIET,
):
    from binlake.ops import verify

    prepare_lakehouse(spark, _checked(config), "verify")
    return verify.run_verify(spark, config, repair=repair, tables=tables, console=console)


def run_maintain(spark: SparkLike, config: Config):
    from binlake.ops import maintain

    prepare_lakehouse(spark, _checked(config), "maintain")
    return maintain.run_maintain(spark, config)


def run_erase(spark: SparkLike, config: Config, table: str, key_pairs: Sequence[str]):
    from binlake.ops import erase

    prepare_lakehouse(spark, _checked(config), "erase")
    return erase.run_erase(spark, config, table, key_pairs)
