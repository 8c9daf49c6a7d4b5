"""``binlake silver``: apply what is new in bronze to one current-state Delta table per source table.

One run:

1. reads what bronze committed since each table's progress: the change data feed of
   ``bronze/changelog`` (once, for all tables) and the new rows of ``bronze/snapshot_chunks``;
2. per table, brings the silver schema up to date and decodes its new records
   (:mod:`binlake.silver.batch`);
3. derives the foreign-key actions InnoDB applied without logging them, as records of the
   child tables (:mod:`binlake.silver.cascade`);
4. per table, dedups and MERGEs, then tombstones what TRUNCATE and completed chunks prove
   gone (:mod:`binlake.silver.merge`);
5. last, the progress rows (:mod:`binlake.silver.progress`). A run killed anywhere before
   that simply re-applies the same records, which changes nothing.

A table stopped by an incompatible schema change keeps its progress; every other table is
applied, and the run then raises :class:`~binlake.errors.SchemaChangeError`.

Example::

    >>> result = run_silver(spark, config)      # doctest: +SKIP
    >>> print(result.summary())                 # doctest: +SKIP
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone

from binlake import faults
from binlake.config import Config
from binlake.contract.lakehouse import HEARTBEAT_OP, Lakehouse, ProgressRow
from binlake.contract.position import BinlogPosition
from binlake.errors import NotReadyError, SchemaChangeError
from binlake.silver.batch import TableBatch, prepare
from binlake.silver.cascade import CascadeTable, derive
from binlake.silver.merge import apply
from binlake.silver.progress import read_progress, state_after_last_run, write_progress

log = logging.getLogger("binlake.silver")

# Silver tables decoded and applied at the same time by one run: most of a small table's
# time is driver-side latency (Delta log reads, commits), not work.
TABLE_THREADS = 4


@dataclass
class TableResult:
    """What one run did to one silver table."""

    name: str
    changes: int = 0
    snapshot_rows: int = 0
    chunks: int = 0
    merged: int = 0
    reconciled: int = 0
    truncated: int = 0
    cascaded: int = 0
    zero_dates: int = 0
    schema_changes: list[str] = field(default_factory=list)
    error: str | None = None
    recreated: bool = False


@dataclass
class SilverResult:
    """Outcome of :func:`run_silver`; ``failed`` tables were stopped by a schema change."""

    tables: list[TableResult]
    applied: BinlogPosition | None = None  # the change log is applied up to here

    @property
    def failed(self) -> list[TableResult]:
        return [t for t in self.tables if t.error]

    def table(self, name: str) -> TableResult:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    def summary(self) -> str:
        where = str(self.applied) if self.applied else "no heartbeat yet"
        lines = [f"silver: {len(self.tables)} table(s), change log applied up to {where}"]
        for t in self.tables:
            if t.error:
                lines.append(f"  {t.name}: STOPPED: {t.error}")
                continue
            extra = "".join(
                f", {n} {label}" for n, label in (
                    (t.reconciled, "reconciled tombstones"), (t.truncated, "truncated"), (t.cascaded, "cascaded"),
                    (t.zero_dates, "zero dates -> NULL"), (len(t.schema_changes), "schema changes"),
                ) if n
            )
            lines.append(f"  {t.name}: {t.changes} changes, {t.snapshot_rows} snapshot rows in {t.chunks} chunks, "
                         f"{t.merged} rows merged{extra}")
        return "\n".join(lines)


@dataclass
class NewBronze:
    """What bronze committed since silver's progress, read once for all tables."""

    changelog_end: int
    chunks_end: int
    changelog_start: dict  # (db, table) -> first change-log version new to it, or None
    chunks_start: dict  # (db, table) -> first manifest version new to it, or None
    changes: object | None  # the change log's feed from the smallest start (persisted), or None
    heartbeats: list  # per change-log commit: its largest heartbeat
    manifest: list[dict]  # new manifest rows

    def chunks_of(self, db: str, table: str) -> list[dict]:
        start = self.chunks_start[(db, table)]
        if start is None:
            return []
        return [c for c in self.manifest if c["_commit_version"] >= start and c["db"] == db and c["table"] == table]

    def applied_position(self, db: str, table: str) -> BinlogPosition | None:
        """The largest heartbeat among the table's new change-log commits."""
        start = self.changelog_start[(db, table)]
        beats = [h["hb"] for h in self.heartbeats if start is not None and h["_commit_version"] >= start]
        if not beats:
            return None
        top = max(beats, key=lambda h: (h["file_index"], h["pos"]))
        return BinlogPosition(top["binlog_file"], int(top["pos"]))


def _read_new_bronze(spark, lh: Lakehouse, progress: dict, tables: list[tuple[str, str]]) -> NewBronze:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    cl_end = lh.changelog.latest_version(spark)
    ch_end = lh.snapshot_chunks.latest_version(spark)

    def next_version(key, column: str, end: int) -> int | None:
        row = progress.get(key)
        done = None if row is None else getattr(row, column)
        start = 0 if done is None else int(done) + 1
        return start if start <= end else None

    new = NewBronze(cl_end, ch_end, {t: next_version(t, "changelog_version", cl_end) for t in tables},
                    {t: next_version(t, "chunks_version", ch_end) for t in tables}, None, [], [])
    starts = [s for s in new.changelog_start.values() if s is not None]
    if starts:
        new.changes = lh.changelog.read_changes(spark, min(starts), cl_end).persist(StorageLevel.MEMORY_AND_DISK)
        new.heartbeats = (new.changes.where(F.col("op") == HEARTBEAT_OP)
                          .groupBy("_commit_version")
                          .agg(F.max(F.struct("file_index", "pos", "binlog_file")).alias("hb"))
                          .collect())
    ch_starts = [s for s in new.chunks_start.values() if s is not None]
    if ch_starts:
        new.manifest = [r.asDict() for r in lh.snapshot_chunks.read_changes(spark, min(ch_starts), ch_end).collect()]
    return new


def _snapshot_floors(spark, lh: Lakehouse, snapshot_ids: set[str]) -> dict[str, tuple[int, int]]:
    """Per snapshot: the smallest low watermark among all its committed chunks, this run's
    and earlier ones. Waves commit in order, so a chunk committed later has a later lw."""
    from pyspark.sql import functions as F

    if not snapshot_ids:
        return {}
    rows = (lh.snapshot_chunks.read(spark).where(F.col("snapshot_id").isin(sorted(snapshot_ids)))
            .groupBy("snapshot_id").agg(F.min(F.struct("lw_file_index", "lw_pos")).alias("lw")).collect())
    return {r["snapshot_id"]: (r["lw"]["lw_file_index"], r["lw"]["lw_pos"]) for r in rows}


def _captured_tables(spark, lh: Lakehouse, config: Config) -> list[tuple[str, str]]:
    rows = lh.schema_history.read(spark).select("db", "table").distinct().collect()
    return sorted((r["db"], r["table"]) for r in rows if config.source.captures(r["db"], r["table"]))


def _progress_row(spark, new: NewBronze, batch: TableBatch, previous: ProgressRow | None, now) -> ProgressRow:
    key = (batch.db, batch.table)
    applied = new.applied_position(batch.db, batch.table)
    return ProgressRow(
        db=batch.db, table=batch.table,
        changelog_version=new.changelog_end if new.changelog_start[key] is not None else (
            previous.changelog_version if previous else None),
        chunks_version=new.chunks_end if new.chunks_start[key] is not None else (
            previous.chunks_version if previous else None),
        applied_file=applied.file if applied else (previous.applied_file if previous else None),
        applied_file_index=applied.file_index if applied else (previous.applied_file_index if previous else None),
        applied_pos=applied.pos if applied else (previous.applied_pos if previous else None),
        zero_dates=(int(previous.zero_dates or 0) if previous else 0) + batch.zero_dates,
        updated_at=now,
        silver_version=batch.ref.latest_version(spark),
    )


def run_silver(spark, config: Config, progress=None) -> SilverResult:
    """Apply every new bronze record to silver; returns what was done per table.

    Raises :class:`SchemaChangeError` after all other tables were processed and their
    progress written, if any table was stopped by an incompatible schema change.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a binlake.config.Config, got {type(config).__name__}")
    lh = Lakehouse(config)
    for ref, what in ((lh.changelog, "bronze changelog"), (lh.snapshot_chunks, "bronze snapshot_chunks"),
                      (lh.schema_history, "bronze schema_history")):
        if not ref.exists(spark):
            raise NotReadyError(f"{what} does not exist at {ref}: run binlake snapshot or binlake capture first")

    previous = read_progress(spark, lh)
    tables = _captured_tables(spark, lh, config)
    new = _read_new_bronze(spark, lh, previous, tables)
    floors = _snapshot_floors(spark, lh, {c["snapshot_id"] for c in new.manifest})
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    results = {f"{db}.{table}": TableResult(name=f"{db}.{table}") for db, table in tables}

    def prepare_one(db: str, table: str) -> TableBatch | None:
        res = results[f"{db}.{table}"]
        try:
            batch = prepare(spark, lh, db, table, new.changes, new.changelog_start[(db, table)], new.chunks_of(db, table))
        except (SchemaChangeError, NotReadyError) as exc:
            res.error = str(exc)
            log.error("%s", exc)
            return None
        res.changes, res.snapshot_rows, res.chunks = batch.change_count, batch.snapshot_rows, len(batch.chunks)
        res.zero_dates, res.schema_changes, res.recreated = batch.zero_dates, batch.schema_changes, batch.rebuilt
        return batch

    def apply_one(batch: TableBatch, derived) -> ProgressRow:
        done = apply(spark, batch, derived, floors)
        res = results[batch.name]
        res.merged, res.cascaded, res.truncated, res.reconciled = done.merged, done.cascaded, done.truncated, done.reconciled
        return _progress_row(spark, new, batch, previous.get((batch.db, batch.table)), now)

    rows: list[ProgressRow] = []
    try:
        with ExitStack() as stack:
            task = stack.enter_context(progress.task("silver", len(tables), "tables")) if progress is not None else None
            # Every write is conditional on _cdc_seq: a failure in one table leaves the others
            # correct, and the progress rows are written only when all have finished.
            pool = stack.enter_context(ThreadPoolExecutor(max(1, min(TABLE_THREADS, len(tables))),
                                                          thread_name_prefix="silver"))
            prepared = [pool.submit(prepare_one, db, table) for db, table in tables]
            batches = {b.name: b for b in (f.result() for f in prepared) if b is not None}
            if task:
                task.advance(len(tables) - len(batches))  # stopped tables

            # Foreign-key actions become records of the child tables, derived before any
            # table is merged, from silver as the last completed run left it.
            derived = derive(spark, {
                name: CascadeTable(schema=b.schema, records=b.records, changes=b.changes, emptied=b.emptied,
                                   base=functools.partial(state_after_last_run, spark, b.ref, b.schema,
                                                          previous.get((b.db, b.table)), b.fresh))
                for name, b in batches.items()
            })
            futures = [pool.submit(apply_one, b, derived.get(name)) for name, b in batches.items()]
            for _ in as_completed(futures):
                if task:
                    task.advance()
            rows = [f.result() for f in futures]  # re-raises an unexpected failure, after the others ended

        faults.point("silver.before_progress")
        write_progress(spark, lh, rows)
    finally:
        if new.changes is not None:
            new.changes.unpersist()
    positions = [BinlogPosition(r.applied_file, r.applied_pos) for r in rows if r.applied_file]
    result = SilverResult(list(results.values()), max(positions) if positions else None)
    failed = result.failed
    if failed:
        # The CLI prints only the error line; the per-table summary goes to the log.
        log.warning("%s", result.summary())
        exc = SchemaChangeError(
            f"{len(failed)} silver table(s) stopped, the others were applied: " + " | ".join(t.error for t in failed)
        )
        exc.result = result  # type: ignore[attr-defined]
        raise exc
    return result
