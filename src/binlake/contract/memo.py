"""What a process remembers between the steps of a run, or the loops of ``run --continuous``:
values computed from a table's content, valid while the table's newest commit is the same.

:class:`Memo` is the one helper: a value per key, stamped with what it was computed from, kept
for at most ``kept`` keys (the least recently stored go first), so a process that runs for weeks
holds a bounded amount.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from binlake.contract.tables import TableRef
    from binlake.spark import SparkLike

_T = TypeVar("_T")
_V = TypeVar("_V")
_MISSING: Any = object()


class Memo(Generic[_V]):
    """Values by key, each valid while its stamp is the one asked with (a table's newest
    commit, the versions it was read at); at most ``kept`` keys."""

    def __init__(self, kept: int = 256):
        self.kept = kept
        self._entries: OrderedDict[Hashable, tuple[Any, _V]] = OrderedDict()

    def get(self, key: Hashable, stamp: Any = None, default: Any = None) -> _V | Any:
        """The value stored for ``key`` with ``stamp``, else ``default``."""
        hit = self._entries.get(key, _MISSING)
        if hit is _MISSING or hit[0] != stamp:
            return default
        return hit[1]

    def put(self, key: Hashable, value: _V, stamp: Any = None) -> _V:
        self._entries.pop(key, None)  # stored last: the newest
        self._entries[key] = (stamp, value)
        while len(self._entries) > self.kept:
            self._entries.popitem(last=False)
        return value

    def keys(self) -> list[Any]:
        return list(self._entries)

    def peek(self, key: Hashable) -> tuple[Any, _V] | None:
        """``(stamp, value)`` stored for ``key``, whatever its stamp, or None."""
        return self._entries.get(key)

    def forget(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


# What this process computed from a table's content, by the table's newest commit (version and
# commit time, which names one state of the table even where a log was cut back and written
# again): a table at the same commit holds the same rows, so a loop that reads a slowly
# changing table (schema history) every time asks Delta only for its newest commit.
_BY_VERSION: Memo[Any] = Memo(kept=1024)


def once_per_version(spark: SparkLike, ref: TableRef, what: str, compute: Callable[[int], _T]) -> _T:
    """``compute(version)`` of the table's newest version, computed once per commit per
    process (``what`` names the computation). ``compute`` must read the table at ``version``."""
    head = ref.newest_commit(spark)
    key = (str(ref), what)
    hit = _BY_VERSION.get(key, head, _MISSING)
    if hit is not _MISSING:
        return hit
    return _BY_VERSION.put(key, compute(head[0]), head)
