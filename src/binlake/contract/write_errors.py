"""What a Delta write's failure means: a lost race with a concurrent writer (retried, every
binlake write being conditional or idempotent) or a lakehouse that refuses writes (a
:class:`~binlake.errors.LakehouseError`, never retried)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TypeVar

from binlake.errors import LakehouseError

_T = TypeVar("_T")
_RETRIES = 6
log = logging.getLogger("binlake.lakehouse")


def is_write_conflict(exc: BaseException) -> bool:
    """True when a Delta write lost a race with a concurrent writer (retrying is safe for
    every binlake write, each being conditional or idempotent)."""
    names = {type(exc).__name__} | {c.__name__ for c in type(exc).__mro__}
    text = str(exc)
    return any(
        "Concurrent" in n or n in ("MetadataChangedException", "ProtocolChangedException") for n in names
    ) or any(
        marker in text
        for marker in (
            "ConcurrentAppendException",
            "ConcurrentDeleteReadException",
            "ConcurrentDeleteDeleteException",
            "ConcurrentTransactionException",
            "DELTA_CONCURRENT_",
            # Two processes creating the same table: the one whose first commit lost.
            "ProtocolChangedException",
            "DELTA_PROTOCOL_CHANGED",
            "MetadataChangedException",
            "DELTA_METADATA_CHANGED",
        )
    )


def with_retry(what: str, fn: Callable[[], _T], retries: int = _RETRIES) -> _T:
    """Run a Delta write, retrying when a concurrent writer (OPTIMIZE, another job) won the race.

    Only for writes that are correct when re-run against a newer table version: conditional
    on ``_cdc_seq`` (silver) or replacing what they write (progress, gold).
    """
    for attempt in range(1, retries + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == retries or not is_write_conflict(exc):
                raise
            wait = min(0.5 * 2 ** (attempt - 1), 8.0)
            log.warning(
                "%s conflicted with a concurrent write (%s); retry %d in %.1fs", what, type(exc).__name__, attempt, wait
            )
            time.sleep(wait)
    raise AssertionError("unreachable")


_STORAGE_FAILURE = re.compile(
    r"(?:(?P<path>(?:[a-z0-9]+:)?/[^\s():]+)[: ]*\(?)?"
    r"(?P<reason>Operation not permitted|Permission denied|Access ?Denied|No space left on device|"
    r"Read-only file system|Disk quota exceeded)",
    re.IGNORECASE,
)


def storage_error(exc: BaseException) -> LakehouseError | None:
    """A :class:`LakehouseError` when ``exc`` is a refused write to the lakehouse (permissions,
    a read-only mount, a full disk), else None. Spark aborts such a job before Delta commits,
    so the step that raised it committed nothing."""
    if isinstance(exc, LakehouseError):
        return exc
    refused = storage_refusal(exc)
    if refused is None:
        return None
    return LakehouseError(
        f"cannot write {refused}; nothing of this step was committed: "
        "fix the location's permissions or free space, then run the same command again"
    )


def storage_refusal(exc: BaseException) -> str | None:
    """``"<path>: <reason>"`` of a refused lakehouse write in ``exc``'s text, else None."""
    m = _STORAGE_FAILURE.search(str(exc))
    if m is None:
        return None
    return f"{m.group('path') or 'the lakehouse location'}: {m.group('reason')}"
