"""Where a run's time went, per table: the results' ``seconds``; the clock binlake stamps rows with."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

T = TypeVar("T")


def timed(result: Any, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``, its wall time added to ``result.seconds`` (None counts as 0), also when
    it raises: a table's work may be timed in several calls (silver: prepare, then apply)."""
    started = time.perf_counter()
    try:
        return work(*args)
    finally:
        result.seconds = (result.seconds or 0.0) + time.perf_counter() - started


def utc_now() -> datetime:
    """Now in UTC as a naive ``datetime``: how binlake's TIMESTAMP_NTZ columns and Delta's
    commit times (read back as UTC) are compared."""
    return datetime.now(timezone.utc).replace(tzinfo=None)
