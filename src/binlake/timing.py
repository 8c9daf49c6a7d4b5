"""Where a run's time went, per table: the results' ``seconds``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def adding_seconds(result: Any) -> Iterator[None]:
    """Add the block's wall time to ``result.seconds`` (None counts as 0), also when it raises:
    a table's work may be timed in several blocks (silver: prepare, then apply)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        result.seconds = (result.seconds or 0.0) + time.perf_counter() - started
