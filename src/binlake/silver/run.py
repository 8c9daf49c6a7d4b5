"""``binlake silver``: apply what is new in bronze to one current-state Delta table per source table.

One run:

1. reads what bronze committed since each table's progress: the change data feed of
   ``bronze/changelog`` (once, for all tables) and the new rows of ``bronze/snapshot_chunks``;
2. per table, brings the silver schema up to date and decodes its new records
   (:mod:`binlake.silver.batch`);
3. derives the foreign-key actions InnoDB applied without logging them, as records of the
   child tables (:mod:`binlake.silver.cascade`);
4. per table, dedups and MERGEs, then tombstones what TRUNCATE and completed chunks prove
   gone (:mod:`binlake.silver.merge`), and, for the tables ``history.tables`` names, adds
   the records to their history tables (:mod:`binlake.silver.history`);
5. last, the progress rows (:mod:`binlake.silver.progress`). A run killed anywhere before
   that simply re-applies the same records, which changes nothing.

A table stopped by an incompatible schema change, by a change the binlog holds only in part
(:mod:`binlake.silver.partial`), or by an error of its own while it was prepared or applied,
keeps its progress and the reason; every other table is applied and its progress written, and
the run then raises :class:`~binlake.errors.SchemaChangeError` (or
:class:`~binlake.errors.IncompleteChangeError` when every stop is one, or
:class:`~binlake.errors.SilverTableError` when a table stopped for another reason) naming
each stopped table and why.

Example::

    >>> result = run_silver(spark, config)      # doctest: +SKIP
    >>> print(result.summary())                 # doctest: +SKIP
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from binlake import faults
from binlake.config import Config, require_config
from binlake.console import QUIET, Console
from binlake.contract.changelog import (
    DATA_OPS,
    DDL_OPS,
    DELETE,
    EMPTYING_OPS,
    HEARTBEAT_OP,
    INSERT,
    STATEMENT_OP,
    UPDATE,
)
from binlake.contract.columns import rule_digest
from binlake.contract.position import BinlogPosition
from binlake.contract.position_facts import (
    facts_through,
    position_fact_columns,
    remember_facts_through,
    remember_position_facts,
)
from binlake.contract.schemas import ProgressRow
from binlake.contract.tables import Lakehouse
from binlake.errors import (
    BinlakeError,
    IncompleteChangeError,
    NotReadyError,
    SchemaChangeError,
    SilverTableError,
    cause_of,
)
from binlake.silver import history as hist
from binlake.silver import schema_evolution as se
from binlake.silver.batch import TableBatch, TableNews, prepare
from binlake.silver.cascade import CascadeTable, derive, links_between
from binlake.silver.merge import apply
from binlake.silver.progress import read_progress, state_after_last_run, write_progress
from binlake.spark import TABLE_THREADS
from binlake.timing import timed, utc_now

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from binlake.spark import SparkLike

log = logging.getLogger("binlake.silver")

# A TRUNCATE-like record as TableNews.emptied holds it: its _cdc_seq's parts and its commit time.
EMPTIED_SQL = "named_struct('file_index', file_index, 'pos', pos, 'row', `row`, 'commit_ts', commit_ts)"
# A statement-format change as TableNews holds it (its database's ones also with their commit version).
STATEMENT_SQL = (
    "named_struct('file_index', file_index, 'pos', pos, 'row', `row`, 'binlog_file', binlog_file, 'ddl', ddl)"
)
DATABASE_STATEMENT_SQL = (
    "named_struct('version', _commit_version, 'file_index', file_index, 'pos', pos, 'row', `row`, "
    "'binlog_file', binlog_file, 'ddl', ddl)"
)
# A change whose row image lacks columns of its schema version (``_widths``: the column count
# of each of the table's versions): a writer session with binlog_row_image MINIMAL or NOBLOB.
PARTIAL_SQL = (
    f"CASE WHEN op IN ('{INSERT}', '{UPDATE}', '{DELETE}') THEN (CASE op WHEN '{INSERT}' THEN size(after) "
    f"WHEN '{DELETE}' THEN size(before) ELSE least(size(before), size(after)) END) "
    "< try_element_at(_widths, schema_version) END"
)


T = TypeVar("T")


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
    backfilled: dict[str, int] = field(default_factory=dict)  # {added column: rows given its DEFAULT}
    error: str | None = None  # why the table was stopped (it keeps its progress)
    error_class: type | None = None  # the stop's error class (None: an error of its own)
    unexpected: bool = False  # stopped by an error of its own, not by a schema change
    recreated: bool = False
    bulk_loaded: bool = False
    history: int = 0  # history rows written or removed
    # Wall time spent on this table (its read, decode and writes). Tables run TABLE_THREADS at
    # a time, so the tables' seconds add up to more than the run's.
    seconds: float = 0.0


@dataclass
class SilverResult:
    """Outcome of :func:`run_silver`; ``failed`` tables were stopped (``error`` says why)."""

    tables: list[TableResult]
    applied: BinlogPosition | None = None  # the change log is applied up to here
    untouched: int = 0  # tables with nothing new: not read, not written

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
        idle = f" ({self.untouched} with nothing new)" if self.untouched else ""
        lines = [f"silver: {len(self.tables)} table(s){idle}, change log applied up to {where}"]
        for t in self.tables:
            if not (
                t.error or t.changes or t.snapshot_rows or t.merged or t.cascaded or t.schema_changes or t.backfilled
            ):
                continue
            if t.error:
                lines.append(f"  {t.name}: STOPPED: {t.error}")
                continue
            extra = "".join(
                f", {n} {label}"
                for n, label in (
                    (t.reconciled, "reconciled tombstones"),
                    (t.truncated, "truncated"),
                    (t.cascaded, "cascaded"),
                    (t.zero_dates, "zero dates -> NULL"),
                    (len(t.schema_changes), "schema changes"),
                    (sum(t.backfilled.values()), "rows backfilled with an added column's default"),
                    (t.history, "history rows"),
                )
                if n
            )
            how = "bulk-loaded" if t.bulk_loaded else "merged"
            lines.append(
                f"  {t.name}: {t.changes} changes, {t.snapshot_rows} snapshot rows in {t.chunks} chunks, "
                f"{t.merged} rows {how}{extra} ({t.seconds:.1f} s)"
            )
        return "\n".join(lines)


@dataclass
class NewBronze:
    """What bronze committed since silver's progress, read once for all tables."""

    changelog_end: int
    chunks_end: int
    changelog_start: dict  # (db, table) -> first change-log version new to it, or None
    chunks_start: dict  # (db, table) -> first manifest version new to it, or None
    changes: DataFrame | None = None  # the change log's feed from the smallest start (persisted), or None
    news: dict = field(default_factory=dict)  # (db, table) -> TableNews, for tables with new records
    applied: BinlogPosition | None = None  # the largest heartbeat among the new commits
    manifest: list = field(default_factory=list)  # new manifest rows

    def chunks_of(self, db: str, table: str) -> list[dict]:
        start = self.chunks_start[(db, table)]
        if start is None:
            return []
        return [c for c in self.manifest if c["_commit_version"] >= start and c["db"] == db and c["table"] == table]

    def touches(self, db: str, table: str) -> bool:
        return (db, table) in self.news or bool(self.chunks_of(db, table))


def _learn_position_facts(spark: SparkLike, lh: Lakehouse, new: NewBronze, start: int, rows) -> None:
    """Remember the GTID and commit time of the last change at or before the applied position,
    from the new commits' aggregate: gold publishes them without reading the change log. They
    are known when the new commits hold both, or when the facts up to the commit before them
    are (this process read those): commits append in binlog order, so the newest wins."""

    def newest(*structs):
        found = [s for s in structs if s is not None]
        return max(found, key=lambda s: (s["file_index"], s["pos"])) if found else None

    g = newest(*(r["g"] for r in rows))
    t = newest(*(r["t"] for r in rows))
    before = facts_through(spark, lh.changelog, start - 1)
    if before is not None:
        g, t = newest(before[0], g), newest(before[1], t)
    elif g is None or t is None:
        return  # gold reads the change log for what is missing
    remember_facts_through(spark, lh.changelog, new.changelog_end, g, t)
    if new.applied is not None:
        remember_position_facts(lh.changelog, new.applied, g["gtid"] if g else None, t["ts"] if t else None)


def _read_new_bronze(
    spark: SparkLike, lh: Lakehouse, progress: dict, tables: list[tuple[str, str]], widths: dict
) -> NewBronze:
    """The new commits of the change log and the manifest, summed up per table in one pass:
    a table with nothing new costs no Spark job after this. ``widths``: per table, the column
    count of each schema version (how a partial row image is told)."""
    from pyspark import StorageLevel

    cl_end = lh.changelog.latest_version(spark)
    ch_end = lh.snapshot_chunks.latest_version(spark)

    def next_version(key, column: str, end: int) -> int | None:
        row = progress.get(key)
        done = None if row is None else getattr(row, column)
        start = 0 if done is None else int(done) + 1
        return start if start <= end else None

    new = NewBronze(
        cl_end,
        ch_end,
        {t: next_version(t, "changelog_version", cl_end) for t in tables},
        {t: next_version(t, "chunks_version", ch_end) for t in tables},
    )
    starts = {t: s for t, s in new.changelog_start.items() if s is not None}
    if starts:
        new.changes = lh.changelog.read_changes(spark, min(starts.values()), cl_end).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        rows = _summarise_changes(spark, new.changes, starts, widths)
        top = max((r["hb"] for r in rows if r["hb"] is not None), default=None)
        new.applied = BinlogPosition.from_log(top["binlog_file"], top["file_index"], top["pos"]) if top else None
        _learn_position_facts(spark, lh, new, min(starts.values()), rows)
        new.news.update(_table_news(rows, starts))
    ch_starts = [s for s in new.chunks_start.values() if s is not None]
    if ch_starts:
        new.manifest = [r.asDict() for r in lh.snapshot_chunks.read_changes(spark, min(ch_starts), ch_end).collect()]
    return new


def _summarise_changes(spark: SparkLike, changes: DataFrame, starts: dict, widths: dict) -> list:
    """The aggregate of the new commits ``changes``: one row per (db, table) in them.
    ``starts``: each table's first version new to it; ``widths``: its column counts."""
    from pyspark.sql import functions as F

    firsts = spark.createDataFrame(
        [(db, t, v, widths.get((db, t), {})) for (db, t), v in sorted(starts.items())],
        "db STRING, `table` STRING, _first BIGINT, _widths MAP<STRING, INT>",
    )
    # One pass over the new commits: per table what they hold for it (from its own first
    # version), and, over everything, the largest heartbeat (commits append heartbeats in
    # binlog order, so the newest is the largest; it is where the change log is applied
    # up to) and the GTID and commit time of the last change there, which gold publishes.
    data, emptying = _in_list(DATA_OPS), _in_list(EMPTYING_OPS)
    statement = f"op = '{STATEMENT_OP}'"
    own = "_first IS NOT NULL AND _commit_version >= _first"
    return (
        changes.join(F.broadcast(firsts), ["db", "table"], "left")
        .groupBy("db", "table")
        .agg(
            F.expr(f"count_if({own} AND op IN ({data}))").alias("changes"),
            F.expr(f"count_if({own} AND op IN ('{UPDATE}', '{DELETE}'))").alias("updates_deletes"),
            F.expr(f"count_if({own} AND op IN ({_in_list(DDL_OPS)}))").alias("ddl"),
            F.expr(f"collect_list(CASE WHEN {own} AND op IN ({emptying}) THEN {EMPTIED_SQL} END)").alias("emptied"),
            F.expr(f"count_if({own} AND {PARTIAL_SQL})").alias("partial"),
            F.expr(f"count_if({own} AND {statement})").alias("statements"),
            F.expr(f"min(CASE WHEN {own} AND {statement} THEN {STATEMENT_SQL} END)").alias("first_statement"),
            F.expr(f"max(CASE WHEN {own} AND {statement} THEN {STATEMENT_SQL} END)").alias("last_statement"),
            # Capture could not tell the table: every captured table of the database.
            F.expr(f"collect_list(CASE WHEN `table` IS NULL AND {statement} THEN {DATABASE_STATEMENT_SQL} END)").alias(
                "database_statements"
            ),
            F.max(F.when(F.col("op") == HEARTBEAT_OP, F.struct("file_index", "pos", "binlog_file"))).alias("hb"),
            *position_fact_columns(),
        )
        .collect()
    )


def _table_news(rows: list, starts: dict) -> dict[tuple[str, str], TableNews]:
    """Per table of ``starts`` with new records, the TableNews of the aggregate ``rows`` (a
    statement whose table capture could not tell is news to every table of its database)."""
    found: dict[tuple[str, str], TableNews] = {}
    for r in rows:
        if r["db"] is None or (r["db"], r["table"]) not in starts:
            continue
        news = TableNews(
            int(r["changes"]),
            int(r["updates_deletes"]),
            int(r["ddl"]),
            tuple(r["emptied"] or ()),
            partial=int(r["partial"]),
            statements=int(r["statements"]),
            first_statement=_statement(r["first_statement"]),
            last_statement=_statement(r["last_statement"]),
        )
        if news.any:
            found[(r["db"], r["table"])] = news
    database_statements = {r["db"]: r["database_statements"] for r in rows if r["db"] and r["table"] is None}
    for (db, t), start in starts.items():
        # collect_list keeps no nulls: every struct found is a statement.
        mine = [m for s in database_statements.get(db) or () if s["version"] >= start if (m := _statement(s))]
        if mine:
            found[(db, t)] = found.get((db, t), TableNews()).with_statements(mine)
    return found


def _statement(found) -> dict | None:
    """A statement struct of the aggregate as TableNews holds it."""
    if found is None:
        return None
    return {
        "seq": (found["file_index"], found["pos"], found["row"]),
        "binlog_file": found["binlog_file"],
        "ddl": found["ddl"],
    }


def _in_list(values) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _links(histories: dict, tables: list[tuple[str, str]]):
    schemas = {f"{db}.{t}": h[-1].schema for (db, t), h in histories.items() if (db, t) in set(tables) and h}
    return links_between(schemas)


def _descendants(links, parents: set[str]) -> set[str]:
    """The tables foreign-key actions starting at ``parents`` reach: their children, the
    children's children, ... (derived changes are parent changes in turn)."""
    found: set[str] = set()
    frontier = set(parents)
    while frontier:
        frontier = {link.child for link in links if link.parent in frontier} - found
        found |= frontier
    return found


def _to_prepare(new: NewBronze, histories: dict, tables: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The tables with new records, and the tables foreign-key actions can reach from them."""
    touched = {t for t in tables if new.touches(*t)}
    # Actions start at a parent's logged update or delete, and derived changes go on down.
    starts = {f"{db}.{t}" for (db, t), n in new.news.items() if n.updates_deletes}
    touched |= {
        (db, t) for db, _, t in (name.partition(".") for name in _descendants(_links(histories, tables), starts))
    }
    return sorted(t for t in touched if t in set(tables))


def held_back(links, stopped: dict[str, str], news: dict) -> dict[str, str]:
    """{child: why} for the tables that must wait for a parent silver stopped by an error of its
    own (``stopped``: {table: error}) whose new updates or deletes may act on them: applied
    without the parent's actions, a child would move its progress past changes the engine
    made to it and never derive them once the parent is applied. (A parent stopped by a
    schema change waits for a re-snapshot, which the child takes with it: docs/silver.md.)"""
    out: dict[str, str] = {}
    for parent, error in sorted(stopped.items()):
        if not news.get(tuple(parent.split(".", 1)), TableNews()).updates_deletes:
            continue
        for child in sorted(_descendants(links, {parent}) - set(stopped)):
            out.setdefault(
                child,
                f"silver held {child} back: its foreign-key parent {parent} is stopped, and the actions "
                f"of the parent's changes on it are not derived yet ({error})",
            )
    return out


def stop_reason(name: str, exc: Exception) -> str:
    """The one line a table stopped by an unexpected error keeps (``status`` shows it)."""
    return (
        f"silver stopped {name}: {cause_of(exc)}; the other tables go on; once the cause is fixed, "
        "binlake silver applies it"
    )


def _snapshot_floors(spark: SparkLike, lh: Lakehouse, snapshot_ids: set[str]) -> dict[str, tuple[int, int]]:
    """Per snapshot: the smallest low watermark among all its committed chunks, this run's
    and earlier ones. Waves commit in order, so a chunk committed later has a later lw."""
    from pyspark.sql import functions as F

    if not snapshot_ids:
        return {}
    rows = (
        lh.snapshot_chunks.read(spark)
        .where(F.col("snapshot_id").isin(sorted(snapshot_ids)))
        .groupBy("snapshot_id")
        .agg(F.min(F.struct("lw_file_index", "lw_pos")).alias("lw"))
        .collect()
    )
    return {r["snapshot_id"]: (r["lw"]["lw_file_index"], r["lw"]["lw_pos"]) for r in rows}


def _progress_row(
    new: NewBronze,
    key: tuple[str, str],
    previous: ProgressRow | None,
    now,
    silver_version: int | None,
    zero_dates: int = 0,
    history_version: int | None = None,
) -> ProgressRow:
    applied = new.applied if new.changelog_start[key] is not None else None
    return ProgressRow(
        db=key[0],
        table=key[1],
        changelog_version=new.changelog_end
        if new.changelog_start[key] is not None
        else (previous.changelog_version if previous else None),
        chunks_version=new.chunks_end
        if new.chunks_start[key] is not None
        else (previous.chunks_version if previous else None),
        applied_file=applied.file if applied else (previous.applied_file if previous else None),
        applied_file_index=applied.log_index if applied else (previous.applied_file_index if previous else None),
        applied_pos=applied.pos if applied else (previous.applied_pos if previous else None),
        zero_dates=(int(previous.zero_dates or 0) if previous else 0) + zero_dates,
        updated_at=now,
        silver_version=silver_version,
        history_version=history_version
        if history_version is not None
        else (previous.history_version if previous else None),
    )


def run_silver(spark: SparkLike, config: Config, console: Console = QUIET) -> SilverResult:
    """Apply every new bronze record to silver; returns what was done per table.

    Raises :class:`SchemaChangeError` (:class:`IncompleteChangeError` when every stop is one)
    after all other tables were processed and their progress written, if any table was stopped
    by an incompatible schema change or a change the binlog holds only in part.
    """
    require_config(config)
    lh = Lakehouse(config)
    for ref, what in (
        (lh.changelog, "bronze changelog"),
        (lh.snapshot_chunks, "bronze snapshot_chunks"),
        (lh.schema_history, "bronze schema_history"),
    ):
        if not ref.exists(spark):
            raise NotReadyError(f"{what} does not exist at {ref}: run binlake snapshot or binlake capture first")

    run = _SilverRun(spark, config, lh)
    rows: list[ProgressRow] = []
    try:
        rows = run.write_progress(run.apply_tables(console))
    finally:
        if run.new.changes is not None:
            run.new.changes.unpersist()
    result = run.result(rows)
    if result.failed:
        # The CLI prints only the error line; the per-table summary goes to the log.
        log.warning("%s", result.summary())
        raise stopped_error(result)
    return result


class _SilverRun:
    """One silver run: what bronze committed since silver's progress (read when the run is
    made), and the phases that apply it table by table: prepare, hold back, derive the
    foreign-key actions, apply, write the progress rows."""

    def __init__(self, spark: SparkLike, config: Config, lh: Lakehouse) -> None:
        self.spark, self.config, self.lh = spark, config, lh
        self.previous = read_progress(spark, lh)
        self.histories = se.load_histories(spark, lh)
        self.tables = sorted(t for t in self.histories if config.source.captures(*t))
        widths = {t: {e.version: len(e.schema.columns) for e in self.histories[t]} for t in self.tables}
        self.new = _read_new_bronze(spark, lh, self.previous, self.tables, widths)
        # A table new to silver is prepared even with nothing to apply: that creates its table.
        self.work = sorted(
            set(_to_prepare(self.new, self.histories, self.tables)) | {t for t in self.tables if t not in self.previous}
        )
        self.floors = _snapshot_floors(spark, lh, {c["snapshot_id"] for c in self.new.manifest})
        self.now = utc_now()
        self.results = {f"{db}.{table}": TableResult(name=f"{db}.{table}") for db, table in self.tables}
        self.specs: dict[str, hist.HistorySpec] = {}  # the tables that keep history

    def apply_tables(self, console: Console) -> list[ProgressRow]:
        """Prepare and apply every table with work, TABLE_THREADS at a time; the progress rows
        of the tables applied."""
        work, results = self.work, self.results
        # Every write is conditional on _cdc_seq: a failure in one table leaves the others
        # correct, and the progress rows are written only when all have finished.
        with (
            console.bar("silver", len(work), "tables") as bar,
            ThreadPoolExecutor(max(1, min(TABLE_THREADS, len(work))), thread_name_prefix="silver") as pool,
        ):
            prepared = [_submit(pool, results[f"{db}.{table}"], self.prepare_one, db, table) for db, table in work]
            batches = {b.name: b for b in (f.result() for f in prepared) if b is not None}
            _hold_back(batches, results, _links(self.histories, self.tables), self.new.news)
            bar.advance(len(work) - len(batches))  # stopped tables
            derived = self.derive(batches)
            futures = [
                _submit(pool, results[name], self.apply_one, b, derived.get(name)) for name, b in batches.items()
            ]
            for _ in as_completed(futures):
                bar.advance()
            # Re-raises a run-wide failure, after the other tables ended.
            return [r for r in (f.result() for f in futures) if r is not None]

    def prepare_one(self, db: str, table: str) -> TableBatch:
        spark, lh, new, config = self.spark, self.lh, self.new, self.config
        res = self.results[f"{db}.{table}"]
        history = se.load_history(spark, lh, db, table, self.histories)
        if history and history[-1].schema.column_rules != rule_digest(config.source, db, table):
            # The config's rule is not the one bronze's rows were read under: applying them
            # would publish what the new rule hides (or hide what it now shows).
            raise se.rules_changed_error(f"{db}.{table}")
        batch = prepare(
            spark,
            lh,
            db,
            table,
            history,
            new.changes,
            new.changelog_start[(db, table)],
            new.news.get((db, table), TableNews()),
            new.chunks_of(db, table),
            applied_before=(db, table) in self.previous,
            recorded=self.previous.get((db, table)),
        )
        res.changes, res.snapshot_rows, res.chunks = batch.change_count, batch.snapshot_rows, len(batch.chunks)
        res.schema_changes, res.recreated = batch.schema_changes, batch.rebuilt
        res.backfilled = batch.backfilled
        rule = config.history.table(db, table)
        if rule is not None:
            self.specs[batch.name] = spec = hist.HistorySpec.of(rule, batch.schema)
            hist.prepare_history(spark, lh, db, table, history, batch.ref, batch.schema, spec, batch.fresh)
        return batch

    def derive(self, batches: dict[str, TableBatch]) -> dict[str, DataFrame]:
        """Foreign-key actions become records of the child tables, derived before any table
        is merged, from silver as the last completed run left it."""
        spark, previous = self.spark, self.previous
        return derive(
            spark,
            {
                name: CascadeTable(
                    schema=b.schema,
                    records=b.records,
                    changes=b.changes,
                    emptied=b.emptied,
                    base=functools.partial(
                        state_after_last_run, spark, b.ref, b.schema, previous.get((b.db, b.table)), b.fresh
                    ),
                )
                for name, b in batches.items()
            },
        )

    def apply_one(self, batch: TableBatch, derived: DataFrame | None) -> ProgressRow:
        spark, lh = self.spark, self.lh
        spec = self.specs.get(batch.name)
        done = apply(spark, batch, derived, self.floors, history=self._history_recorder(batch, spec))
        res = self.results[batch.name]
        res.merged, res.cascaded, res.truncated, res.reconciled = (
            done.merged,
            done.cascaded,
            done.truncated,
            done.reconciled,
        )
        res.zero_dates, res.bulk_loaded, res.history = done.zero_dates, done.bulk_loaded, done.history
        key = (batch.db, batch.table)
        # Gold publishes the history table as of this version, the one matching silver's.
        history_version = lh.silver_history(*key).latest_version(spark) if spec is not None else None
        return _progress_row(
            self.new,
            key,
            self.previous.get(key),
            self.now,
            batch.ref.latest_version(spark),
            done.zero_dates,
            history_version,
        )

    def _history_recorder(self, batch: TableBatch, spec: hist.HistorySpec | None) -> Callable[..., int] | None:
        """What records the table's history as the batch is applied, for a table that keeps history."""
        if spec is None:
            return None
        emptied = self.new.news.get((batch.db, batch.table), TableNews()).emptied
        spark, lh, floors = self.spark, self.lh, self.floors
        return lambda records, first_load=False: hist.record_history(
            spark, lh, batch, records, floors, spec, emptied, first_load
        )

    def write_progress(self, applied: list[ProgressRow]) -> list[ProgressRow]:
        """Write the progress rows: ``applied`` and those of the tables not applied; returns them all."""
        new, previous, results, now = self.new, self.previous, self.results, self.now
        rows = list(applied)
        # Tables with nothing new move their progress forward without being touched.
        stopped = {tuple(r.name.split(".", 1)) for r in results.values() if r.error}
        done = {(r.db, r.table) for r in rows}
        rows += [
            _progress_row(new, t, previous.get(t), now, previous[t].silver_version)
            for t in self.tables
            if t not in done and t not in stopped and t in previous
        ]
        # A stopped table keeps its progress, with the reason: status, gold and the job's
        # result name it and the command that recovers it.
        rows += [
            previous[t]._replace(stopped=results[f"{t[0]}.{t[1]}"].error, updated_at=now)
            for t in sorted(stopped)
            if t in previous and previous[t].stopped != results[f"{t[0]}.{t[1]}"].error
        ]
        faults.point("silver.before_progress")
        if new.changes is not None or new.manifest or done or any(r.stopped for r in rows):  # else no commit
            write_progress(self.spark, self.lh, rows, previous)
        return rows

    def result(self, rows: list[ProgressRow]) -> SilverResult:
        positions = [
            BinlogPosition.from_log(r.applied_file, r.applied_file_index, r.applied_pos)
            for r in rows
            if r.applied_file and r.applied_file_index is not None and r.applied_pos is not None  # set together
        ]
        return SilverResult(
            list(self.results.values()),
            max(positions) if positions else None,
            untouched=len(self.tables) - len(self.work),
        )


def stopped_error(result: SilverResult) -> SchemaChangeError | SilverTableError | IncompleteChangeError:
    """The run's one-line error naming each stopped table and why: a schema change's exit code
    when schema changes stopped them all, else :class:`SilverTableError`'s."""
    failed = result.failed
    error: type[SchemaChangeError | SilverTableError | IncompleteChangeError] = SchemaChangeError
    if any(t.unexpected for t in failed):
        error = SilverTableError
    elif all(t.error_class is IncompleteChangeError for t in failed):
        error = IncompleteChangeError
    return error(
        f"{len(failed)} silver table(s) stopped, the others were applied: " + " | ".join(t.error or "" for t in failed),
        result=result,
    )


def _hold_back(batches: dict, results: dict[str, TableResult], links, news: dict) -> None:
    """Take out of ``batches`` the tables :func:`held_back` names, stopped with its reason."""
    unexpected = {r.name: r.error for r in results.values() if r.unexpected and r.error}
    for name, why in held_back(links, unexpected, news).items():
        if batches.pop(name, None) is not None:
            results[name].error, results[name].unexpected = why, True
            log.error("%s", why)


def _submit(pool, res: TableResult, work: Callable[..., T], *args):
    """``work(*args)`` in the pool, timed as the table's, stopping only the table if it fails."""
    return pool.submit(timed, res, _own_trouble, res, work, *args)


def _own_trouble(res: TableResult, work: Callable[..., T], *args) -> T | None:
    """``work(*args)`` for the table of ``res``; None when the table is stopped instead. A
    schema change it cannot apply, or an error of its own (Spark's, Delta's), stops that table:
    the reason goes into ``res.error`` and the other tables go on (every write is conditional
    on ``_cdc_seq``, so what the table did write before it stopped is re-applied harmlessly).
    A run-wide problem (the config, a lease) stops the run."""
    try:
        return work(*args)
    except (SchemaChangeError, IncompleteChangeError, NotReadyError) as exc:
        res.error, res.error_class = str(exc), type(exc)
        log.error("%s", exc)
    except BinlakeError:
        raise
    except Exception as exc:  # one table's trouble must not stop the others
        res.error, res.unexpected = stop_reason(res.name, exc), True
        log.error("%s", res.error)
        log.debug("%s: what stopped it", res.name, exc_info=exc)
    return None
