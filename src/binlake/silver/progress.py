"""``system/silver_progress``: what silver has applied, one row per table.

A row names the change-log and manifest versions the table has taken, the binlog position
its change log is applied up to (a transaction boundary: gold's Invariant S reads it), and
the silver table's version once that run had applied its batch. Progress is written last,
in one commit for all tables: a run killed before it re-applies the same records, which
changes nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from binlake.contract.memo import Memo
from binlake.contract.schemas import PROGRESS_COMMENT, PROGRESS_SCHEMA, ProgressRow
from binlake.contract.tables import Lakehouse
from binlake.contract.write_errors import with_retry

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.silver")

# Delta operations that change a table's rows (as opposed to its metadata or file layout).
_ROW_WRITES = ("MERGE", "UPDATE", "WRITE", "DELETE", "STREAMING UPDATE", "RESTORE")

# The rows this process last wrote or read of each progress table, with that newest commit
# (version and commit time): at the same commit the table holds exactly them, so a loop that
# wrote progress (silver) and then reads it (gold, the next silver run) asks Delta only for
# its newest commit, not for a snapshot of the table and a scan.
_known: Memo[dict[tuple[str, str], ProgressRow]] = Memo()


def read_progress(spark: SparkLike, lh: Lakehouse) -> dict[tuple[str, str], ProgressRow]:
    """Every table's progress row by ``(db, table)``; creates the table when missing."""
    ref = lh.silver_progress
    if ref.exists(spark):
        rows = progress_rows(spark, lh)
        if rows is not None:  # None only when the table went away since exists()
            return rows
    ref.create_if_missing(spark, PROGRESS_SCHEMA, comment=PROGRESS_COMMENT)
    return _read(spark, lh)


def progress_rows(spark: SparkLike, lh: Lakehouse) -> dict[tuple[str, str], ProgressRow] | None:
    """The progress rows as they stand (None when there is no progress table yet)."""
    ref = lh.silver_progress
    if not ref.exists(spark):
        return None
    head = ref.newest_commit(spark)
    known = _known.get(str(ref), head)
    if known is not None:
        return dict(known)
    return _read(spark, lh, head)


def _read(spark: SparkLike, lh: Lakehouse, head: tuple | None = None) -> dict[tuple[str, str], ProgressRow]:
    ref = lh.silver_progress
    head = ref.newest_commit(spark) if head is None else head
    fields = ProgressRow._fields
    rows: dict[tuple[str, str], ProgressRow] = {}
    for r in ref.read_version(spark, head[0]).collect():
        row = ProgressRow(*(r[f] for f in fields))
        key = (row.db, row.table)
        # A lakehouse from before progress was one row per table may hold several: the latest counts.
        if key not in rows or progress_rank(row) > progress_rank(rows[key]):
            rows[key] = row
    _known.put(str(ref), rows, head)
    return dict(rows)


def progress_rank(row: ProgressRow) -> tuple:
    """How recent a progress row is: its applied position, then when it was written."""
    return (row.applied_file_index or 0, row.applied_pos or 0, row.updated_at or datetime.min)


def write_progress(
    spark: SparkLike, lh: Lakehouse, rows: list[ProgressRow], previous: dict[tuple[str, str], ProgressRow]
) -> None:
    """Replace the table's content with ``rows`` and the ``previous`` rows they do not
    replace: one small overwrite (a row per table), which costs a fraction of a MERGE."""
    if not rows:
        return
    written = {(r.db, r.table) for r in rows}
    kept = [r for key, r in sorted(previous.items()) if key not in written]
    df = spark.createDataFrame(rows + kept, PROGRESS_SCHEMA).coalesce(1)

    def run():
        lh.silver_progress.save(df.write.format("delta").mode("overwrite"))

    ref = lh.silver_progress
    before = ref.newest_commit(spark)
    with_retry("silver progress", run)
    after = ref.newest_commit(spark)
    if after[0] == before[0] + 1:  # this write's commit, no other in between: its rows are the table
        _known.put(str(ref), {(r.db, r.table): r for r in rows + kept}, after)


def state_after_last_run(spark: SparkLike, ref, schema, recorded: ProgressRow | None, fresh: bool):
    """The silver table as the last completed run left it.

    Normally that is the table as it stands (this run has not merged yet). After a run that
    was killed once it had merged some tables, it is the version the progress row recorded,
    so what is computed from it (foreign-key actions) comes out the same whatever the killed
    run applied. ``fresh``: the table was created or rebuilt by this run (empty before it).
    """
    if fresh or recorded is None:
        return ref.read(spark).where("false")
    version = recorded.silver_version
    current = ref.read(spark)
    if version is None:  # progress written before silver_version existed
        return current
    latest = ref.latest_version(spark)
    if latest <= version:
        return current
    ops = [c["operation"] for c in ref.commits(spark, version + 1, latest)]
    if any("CREATE" in op or "REPLACE" in op for op in ops):
        return ref.read(spark).where("false")
    if not any(op in _ROW_WRITES for op in ops):
        return current
    then = ref.read_version(spark, version)
    missing = [c.name for c in schema.columns if c.name not in then.columns]
    if missing:
        log.warning(
            "%s: columns %s are newer than silver version %d; foreign-key actions start from the current table",
            ref,
            missing,
            version,
        )
        return current
    return then
