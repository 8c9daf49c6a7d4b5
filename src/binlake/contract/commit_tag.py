"""User metadata on Delta commits made through a session other threads commit through too.

A DataFrame write tags its own commit (``.option("userMetadata", tag)``). A Delta command
(MERGE, DELETE, UPDATE, RESTORE) has no such option, in DeltaTable's API or in SQL: Delta
takes its tag from the session setting ``spark.databricks.delta.commitInfo.userMetadata``.
Where threads share one session (a Spark Connect client cannot make a second one:
``binlake run --continuous`` then runs capture, silver and gold on the same), a command's
tag set there would land on every other thread's commit of that moment.

So tagged commands run inside :func:`tagged_commands`, and every other commit binlake makes
on a Spark Connect session (:meth:`TableRef.save`, the Delta commands of
:class:`~binlake.contract.delta_sql.DeltaSql`) inside :func:`committing`: the two never
overlap in one process. Commits of one kind run together (gold's tables still write in
parallel, capture and silver still commit side by side); a waiting tagged command goes
before new untagged ones, so a busy capture cannot keep gold waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from binlake.spark import SparkLike

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


class _Gate:
    """Two kinds of holders that exclude each other; holders of one kind share it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._untagged = 0
        self._tagged = 0
        self._tag: str | None = None
        self._tagged_waiting = 0
        self._mine = threading.local()

    def _depth(self, kind: str) -> int:
        return getattr(self._mine, kind, 0)

    @contextmanager
    def hold(self, kind: str, tag: str | None = None) -> Iterator[None]:
        """Hold the gate as ``kind`` ("tagged" or "untagged"); a thread's nested holds pass
        at once."""
        if self._depth("tagged") or self._depth("untagged"):
            if kind == "tagged" and not self._depth("tagged"):
                raise RuntimeError("a tagged Delta command inside an untagged commit: the tag would reach it")
            setattr(self._mine, kind, self._depth(kind) + 1)
            try:
                yield
            finally:
                setattr(self._mine, kind, self._depth(kind) - 1)
            return
        with self._cond:
            if kind == "tagged":
                self._tagged_waiting += 1
                try:
                    self._cond.wait_for(lambda: self._untagged == 0 and self._tag in (None, tag))
                finally:
                    self._tagged_waiting -= 1
                self._tagged += 1
                self._tag = tag
            else:
                self._cond.wait_for(lambda: self._tagged == 0 and self._tagged_waiting == 0)
                self._untagged += 1
        setattr(self._mine, kind, 1)
        try:
            yield
        finally:
            setattr(self._mine, kind, 0)
            with self._cond:
                if kind == "tagged":
                    self._tagged -= 1
                    if self._tagged == 0:
                        self._tag = None
                else:
                    self._untagged -= 1
                self._cond.notify_all()


_GATE = _Gate()
_CONF_LOCK = threading.Lock()
_conf_holders = 0


@contextmanager
def tagged_commands(spark: SparkLike, tag: str) -> Iterator[None]:
    """Delta commands run inside carry ``tag`` as their commit's user metadata, and no other
    commit of this process made through :func:`committing` runs meanwhile."""
    global _conf_holders
    with _GATE.hold("tagged", tag):
        with _CONF_LOCK:
            _conf_holders += 1
            if _conf_holders == 1:
                spark.conf.set(USER_METADATA_CONF, tag)
        try:
            yield
        finally:
            with _CONF_LOCK:
                _conf_holders -= 1
                if _conf_holders == 0:
                    spark.conf.unset(USER_METADATA_CONF)


@contextmanager
def committing(spark: SparkLike) -> Iterator[None]:
    """An untagged commit: on a Spark Connect session, it waits for the tagged commands of
    other threads (the session, and so the tag setting, may be theirs too). A classic
    session's threads that tag commands have sessions of their own."""
    from binlake.spark import is_connect

    if not is_connect(spark):
        yield
        return
    with _GATE.hold("untagged"):
        yield
