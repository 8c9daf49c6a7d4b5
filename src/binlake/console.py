"""Where long work reports to the person running it: rich progress bars on a terminal, plain
log lines in CI and on Databricks, or nothing (:data:`QUIET`, what a command called without a
console uses). Not to be confused with silver's progress table (:mod:`binlake.silver.progress`)."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from binlake.spark import on_databricks

log = logging.getLogger("binlake")


def interactive() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI") and not on_databricks()


class ProgressBar:
    """One unit of long work with a known total; reports rate and ETA (a rich bar, a log line
    every 5 seconds, or nothing when ``quiet``)."""

    def __init__(self, description: str, total: int, unit: str, bar=None, bar_id=None, quiet: bool = False):
        self.description = description
        self.total = total
        self.unit = unit
        self.done = 0
        self.items = 0  # secondary counter, e.g. rows while ``done`` counts chunks
        self.started = time.monotonic()
        self._bar = bar
        self._bar_id = bar_id
        self._quiet = quiet
        self._last_log = 0.0

    def advance(self, n: int = 1, items: int = 0) -> None:
        self.done += n
        self.items += items
        if self._quiet:
            return
        if self._bar is not None:
            self._bar.update(self._bar_id, completed=self.done, description=f"{self.description} {self.rate_text()}")
            return
        now = time.monotonic()
        if now - self._last_log >= 5 or self.done >= self.total:
            self._last_log = now
            log.info("%s: %d/%d %s, %s", self.description, self.done, self.total, self.unit, self.rate_text())

    def rate_text(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.items / elapsed if self.items else self.done / elapsed
        unit = "rows/s" if self.items else f"{self.unit}/s"
        remaining = self.total - self.done
        eta = remaining * elapsed / self.done if self.done else float("nan")
        eta_text = f"ETA {eta:,.0f}s" if self.done and remaining > 0 else "done" if remaining <= 0 else "ETA ?"
        return f"{rate:,.0f} {unit}, {eta_text}"


class Console:
    """Progress bars when ``bars`` (by default: on an interactive terminal), else log lines."""

    def __init__(self, bars: bool | None = None):
        self.bars = interactive() if bars is None else bars

    @contextmanager
    def bar(self, description: str, total: int, unit: str = "items") -> Iterator[ProgressBar]:
        if not self.bars:
            log.info("%s: %d %s to do", description, total, unit)
            yield ProgressBar(description, total, unit)
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        with RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False
        ) as rich_bar:
            bar_id = rich_bar.add_task(description, total=total)
            yield ProgressBar(description, total, unit, rich_bar, bar_id)


class _QuietConsole(Console):
    """The console that shows nothing: bars that only count."""

    def __init__(self) -> None:
        self.bars = False

    @contextmanager
    def bar(self, description: str, total: int, unit: str = "items") -> Iterator[ProgressBar]:
        yield ProgressBar(description, total, unit, quiet=True)


# What every command uses when it is given no console (the API's default; the CLI passes Console()).
QUIET: Console = _QuietConsole()


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s binlake %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "pyspark", "urllib3", "databricks"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
