"""What silver learnt about positions of the change log, for gold: the GTID and the source
commit time of the last change at or before a position, so that gold publishing there need not
read the change log again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from binlake.contract.delta_log import commit_time
from binlake.contract.memo import Memo

if TYPE_CHECKING:
    from binlake.contract.tables import TableRef
    from binlake.spark import SparkLike


# What a step of this process learnt about positions of a change log from rows it read anyway
# (silver's aggregate over the new commits): the GTID and the source commit time of the last
# change at or before a position P. The change log is append-only, so a fact never goes
# stale, and gold, publishing at P, need not read the change log again for them. A process
# that runs for weeks (``run --continuous``) learns one position a round: the most recent
# ones are kept, which are those gold asks for, and the oldest are forgotten (a forgotten
# fact costs gold one read of the change log), as the snapshot encoders bound their memos.
POSITION_FACTS_KEPT = 1024
_POSITION_FACTS: Memo[tuple[str | None, str | None]] = Memo(kept=POSITION_FACTS_KEPT)


def position_fact_columns() -> list:
    """The aggregate columns a change log read computes the facts from: ``g``, the newest
    ``(file_index, pos, gtid)`` with a GTID, and ``t``, the newest ``(file_index, pos, ts)``
    with a commit time (microseconds, as text)."""
    from pyspark.sql import functions as F

    commit_time = F.date_format("commit_ts", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("ts")
    return [
        F.max(F.when(F.col("gtid").isNotNull(), F.struct("file_index", "pos", "gtid"))).alias("g"),
        F.max(F.when(F.col("commit_ts").isNotNull(), F.struct("file_index", "pos", commit_time))).alias("t"),
    ]


def remember_position_facts(changelog: TableRef, p, gtid: str | None, source_time: str | None) -> None:
    """Record ``(gtid, source_time)`` of the last change at or before ``p`` (a BinlogPosition),
    None where no change at or before ``p`` has one (a source without GTIDs)."""
    _POSITION_FACTS.put((str(changelog), p.key()), (gtid, source_time))


def position_facts(changelog: TableRef, p) -> tuple[str | None, str | None] | None:
    """What :func:`remember_position_facts` recorded for ``p``, or None if nothing was."""
    return _POSITION_FACTS.get((str(changelog), p.key()))


# The same facts over every commit of the change log up to a version, as the aggregate's
# ``g`` and ``t`` structs, so that a later read of the commits after it completes them: a
# source without GTIDs (or a batch without any) then needs no read of the whole log.
_FACTS_THROUGH: Memo[tuple[Any, Any]] = Memo()


def remember_facts_through(spark: SparkLike, changelog: TableRef, version: int, g, t) -> None:
    """Record the newest ``g`` and ``t`` (:func:`position_fact_columns`) over the commits up
    to ``version``. Only where Delta's log object answers for the commit's time: asking
    history instead would cost a query every run (Spark Connect)."""
    when = commit_time(spark, changelog.path, version)
    if when is not None:
        _FACTS_THROUGH.put(str(changelog), (g, t), (version, when))


def facts_through(spark: SparkLike, changelog: TableRef, version: int) -> tuple[Any, Any] | None:
    """What :func:`remember_facts_through` recorded for ``version``, or None. The commit's
    time tells it from another commit written at that version since (a table recreated)."""
    if version < 0:
        return None, None
    hit = _FACTS_THROUGH.peek(str(changelog))
    if hit is None or hit[0][0] != version:
        return None
    when = commit_time(spark, changelog.path, version)
    return hit[1] if when is not None and when == hit[0][1] else None
