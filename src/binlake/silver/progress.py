"""``system/silver_progress``: what silver has applied, one row per table.

A row names the change-log and manifest versions the table has taken, the binlog position
its change log is applied up to (a transaction boundary: gold's Invariant S reads it), and
the silver table's version once that run had applied its batch. Progress is written last,
in one commit for all tables: a run killed before it re-applies the same records, which
changes nothing.
"""

from __future__ import annotations

import logging

from binlake.contract.lakehouse import (
    PROGRESS_COMMENT,
    PROGRESS_SCHEMA,
    Lakehouse,
    ProgressRow,
    with_retry,
)

log = logging.getLogger("binlake.silver")

# Delta operations that change a table's rows (as opposed to its metadata or file layout).
_ROW_WRITES = ("MERGE", "UPDATE", "WRITE", "DELETE", "STREAMING UPDATE", "RESTORE")


def read_progress(spark, lh: Lakehouse) -> dict[tuple[str, str], ProgressRow]:
    """Every table's progress row by ``(db, table)``; creates the table when missing."""
    lh.silver_progress.create_if_missing(spark, PROGRESS_SCHEMA, comment=PROGRESS_COMMENT)
    current = lh.silver_progress.read(spark)
    fields = ProgressRow._fields
    return {(r["db"], r["table"]): ProgressRow(*(r[f] for f in fields)) for r in current.collect()}


def write_progress(spark, lh: Lakehouse, rows: list[ProgressRow], previous: dict[tuple[str, str], ProgressRow]) -> None:
    """Replace the table's content with ``rows`` and the ``previous`` rows they do not
    replace: one small overwrite (a row per table), which costs a fraction of a MERGE."""
    if not rows:
        return
    written = {(r.db, r.table) for r in rows}
    kept = [r for key, r in sorted(previous.items()) if key not in written]
    df = spark.createDataFrame(rows + kept, PROGRESS_SCHEMA).coalesce(1)

    def run():
        lh.silver_progress.save(df.write.format("delta").mode("overwrite"))

    with_retry("silver progress", run)


def state_after_last_run(spark, ref, schema, recorded: ProgressRow | None, fresh: bool):
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
    ops = [r["operation"] for r in ref.delta(spark).history(latest - version).select("operation").collect()]
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
