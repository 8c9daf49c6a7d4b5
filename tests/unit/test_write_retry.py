"""A Delta write conflicting with a concurrent writer is retried; other failures are not."""

from __future__ import annotations

import pytest

from binlake.contract import write_errors


class ConcurrentAppendException(Exception):
    """Same class name as delta.exceptions' (what a concurrent OPTIMIZE raises)."""


def test_a_concurrent_write_conflict_is_retried_until_it_succeeds(monkeypatch):
    monkeypatch.setattr(write_errors.time, "sleep", lambda s: None)
    calls = []

    def write():
        calls.append(1)
        if len(calls) < 3:
            raise ConcurrentAppendException("Files were added to the root of the table by a concurrent update")
        return "done"

    assert write_errors.with_retry("MERGE into t", write) == "done"
    assert len(calls) == 3


def test_other_errors_are_not_retried_and_retries_are_bounded(monkeypatch):
    monkeypatch.setattr(write_errors.time, "sleep", lambda s: None)
    calls = []

    def broken():
        calls.append(1)
        raise ValueError("bad data")

    with pytest.raises(ValueError, match=r"^bad data$"):
        write_errors.with_retry("MERGE into t", broken)
    assert len(calls) == 1

    def always_conflicting():
        calls.append(1)
        raise ConcurrentAppendException("conflict")

    with pytest.raises(ConcurrentAppendException):
        write_errors.with_retry("MERGE into t", always_conflicting, retries=3)
    assert len(calls) == 4
