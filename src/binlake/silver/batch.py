"""A silver table's batch: its new bronze records, read and decoded to typed records.

What is new for a table is what bronze committed after the versions its progress row
names: change-log rows (the change data feed of ``bronze/changelog``) and rows of snapshot
chunks whose manifest row is new (``bronze/snapshot_chunks`` joined to the snapshot's typed
table, or to ``snapshot_rows`` for chunks an earlier binlake wrote as row images). Each row
image is decoded with the schema version it was written under, to the table's latest schema
(:class:`Decoder`), so a rename or an added column reads the same from any image. Typed
snapshot rows need no decode: their columns are only renamed, added or widened to the latest
schema (:func:`typed_snapshot_records`). Nothing here writes rows; :mod:`binlake.silver.merge`
applies a batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from binlake.contract.changelog import DATA_OPS, DELETE, UPDATE
from binlake.contract.position import (
    CHANGELOG_SEQ_SQL,
    DERIVED_ROW,
    SNAPSHOT_ROW,
    parse_seq,
    seq_literal,
    seq_sql,
)
from binlake.contract.schemas import (
    SNAPSHOT_ATTEMPT_ID,
    SNAPSHOT_CHUNK_ID,
    SNAPSHOT_CHUNK_STATS,
    TYPED_ROWS,
    ProgressRow,
)
from binlake.contract.sql import quote_ident, spark_string
from binlake.contract.tables import Lakehouse, TableRef
from binlake.contract.types import TableSchema, is_zero_date_sql, spark_decode_sql
from binlake.errors import NotReadyError, SchemaChangeError
from binlake.silver import backfill, partial
from binlake.silver import schema_evolution as se
from binlake.silver.cascade import PRIO_DERIVED, new, old
from binlake.silver.progress import state_after_last_run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from binlake.spark import SparkLike

log = logging.getLogger("binlake.silver")

PRIO_LOGGED = 2
"""Ties on ``_cdc_seq`` inside a table: a logged record beats one silver derived for it
(:data:`~binlake.silver.cascade.PRIO_DERIVED`)."""


class Decoder:
    """Typed decoding of row images written under any recorded schema version."""

    def __init__(
        self, target: TableSchema, name_maps: dict[str, dict[str, str]], defaults: dict[str, str] | None = None
    ):
        self.target = target
        self.name_maps = name_maps
        # {column: canonical text} an image of a version without the column holds in it: the
        # DEFAULT its ADD COLUMN gave every row older than the DDL (binlake.silver.backfill).
        self.defaults = defaults or {}

    def absent_sql(self, col_name: str) -> str:
        """The value of a column in an image written before the column was added."""
        text = self.defaults.get(col_name)
        return "NULL" if text is None else spark_decode_sql(self.target.column(col_name), spark_string(text))

    def column_sql(self, col_name: str, img: str = "img") -> str:
        col = self.target.column(col_name)
        cases = []
        default = spark_decode_sql(col, f"try_element_at({img}, {spark_string(col_name)})")
        for version, mapping in self.name_maps.items():
            source = mapping.get(col_name)
            if source == col_name:
                continue
            expr = (
                self.absent_sql(col_name)
                if source is None
                else spark_decode_sql(col, f"try_element_at({img}, {spark_string(source)})")
            )
            cases.append(f"WHEN {spark_string(version)} THEN {expr}")
        if not cases:
            return default
        return f"CASE schema_version {' '.join(cases)} ELSE {default} END"

    def carried_sql(self, col_name: str, img: str) -> str:
        """SQL that is true where the row image ``img`` carries the column (its name in the
        image's schema version): a writer session with ``binlog_row_image=MINIMAL`` or
        ``NOBLOB`` logs fewer columns, and a missing one was not logged, which is not NULL. A
        column that did not exist in that version counts as carried (its value is what
        :meth:`column_sql` decodes for it); an absent image carries nothing."""
        cases = []
        default = f"map_contains_key({img}, {spark_string(col_name)})"
        for version, mapping in self.name_maps.items():
            source = mapping.get(col_name)
            if source == col_name:
                continue
            expr = "true" if source is None else f"map_contains_key({img}, {spark_string(source)})"
            cases.append(f"WHEN {spark_string(version)} THEN {expr}")
        test = f"CASE schema_version {' '.join(cases)} ELSE {default} END" if cases else default
        return f"coalesce({test}, false)"

    def zero_dates_sql(self, img: str = "img") -> str:
        parts = []
        for col in self.target.columns:
            versions = {v: m.get(col.name) for v, m in self.name_maps.items()}
            text = f"try_element_at({img}, {spark_string(col.name)})"
            if any(src not in (None, col.name) for src in versions.values()):
                whens = " ".join(
                    f"WHEN {spark_string(v)} THEN try_element_at({img}, {spark_string(src)})"
                    for v, src in versions.items()
                    if src not in (None, col.name)
                )
                text = f"(CASE schema_version {whens} ELSE {text} END)"
            z = is_zero_date_sql(col, text)
            if z:
                parts.append(f"CASE WHEN {z} THEN 1 ELSE 0 END")
        return " + ".join(parts) if parts else "0"


@dataclass
class TableBatch:
    """One table's new bronze records, decoded and ready to apply (see :func:`prepare`)."""

    db: str
    table: str
    ref: TableRef
    schema: TableSchema
    records: DataFrame  # typed records before dedup (batch_records)
    changes: DataFrame | None  # logged updates and deletes with before/after values, or None
    truncated: tuple[int, int, int] | None  # everything older is gone (this batch's or an earlier TRUNCATE)
    batch_truncate: tuple[int, int, int] | None  # a TRUNCATE-like record in this batch
    emptied: tuple  # sequences of every TRUNCATE-like record that bounds this batch's rows
    chunks: list  # new manifest rows
    fresh: bool  # empty before this run (created or rebuilt by it, or never written)
    pending: bool  # records to MERGE
    change_count: int = 0
    snapshot_rows: int = 0
    snapshot_zero_dates: int = 0  # zero dates typed snapshot rows held (counted when read)
    schema_changes: list = field(default_factory=list)
    backfilled: dict = field(default_factory=dict)  # {column: rows given their ADD COLUMN's default}
    rebuilt: bool = False  # replaced from a snapshot after an incompatible schema change
    snapshots_only: bool = False  # no change-log record and no TRUNCATE bounds this batch
    # Chunks applied by earlier runs to reconcile again: the snapshot that recovers changes
    # the binlog holds only in part (binlake.silver.partial).
    rereconcile: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


def changelog_records(cl, db: str, table: str, start_version: int):
    """The table's rows of the change feed ``cl`` from ``start_version`` on."""
    from pyspark.sql import functions as F

    return cl.where((F.col("db") == db) & (F.col("table") == table) & (F.col("_commit_version") >= start_version))


def is_typed(chunk: dict) -> bool:
    """Whether a manifest row's chunk has its rows in its snapshot's typed table."""
    return chunk.get("row_format") == TYPED_ROWS


def typed_snapshot_records(
    spark: SparkLike,
    lh: Lakehouse,
    chunks: list[dict],
    target: TableSchema,
    name_maps: dict,
    defaults: dict | None = None,
):
    """Records (as :func:`batch_records` returns them) of the given (trusted) typed chunks of one
    table: each snapshot's typed rows of the manifest's attempts, at the chunk's low watermark,
    their columns projected to ``target`` (``name_maps``: a renamed column's values land in the
    new name, an added one is the DEFAULT its ADD gave older rows (``defaults``, from
    :attr:`Decoder.defaults`) or NULL, a widened one is cast). No value is decoded."""
    from pyspark.sql import functions as F

    parts = []
    for snapshot_id in sorted({c["snapshot_id"] for c in chunks}):
        mine = [c for c in chunks if c["snapshot_id"] == snapshot_id]
        manifest = spark.createDataFrame(
            [(c["chunk_id"], c["attempt_id"], c["lw_file_index"], c["lw_pos"]) for c in mine],
            f"{SNAPSHOT_CHUNK_ID} INT, {SNAPSHOT_ATTEMPT_ID} STRING, `__lw_file_index` BIGINT, `__lw_pos` BIGINT",
        )
        rows = (
            lh.snapshot_table(mine[0]["db"], mine[0]["table"], snapshot_id)
            .read(spark)
            .where(F.col(SNAPSHOT_CHUNK_STATS).isNull())
            .join(F.broadcast(manifest), [SNAPSHOT_CHUNK_ID, SNAPSHOT_ATTEMPT_ID])
        )
        names = name_maps.get(mine[0]["schema_version"]) or {c.name: c.name for c in target.columns}
        have = set(rows.columns)
        typed = []
        for col in target.columns:
            source = names.get(col.name)
            if source is not None and source in have:
                value: str = quote_ident(source)
            elif source is None and col.name in (defaults or {}):
                value = spark_decode_sql(col, spark_string((defaults or {})[col.name]))
            else:
                value = "NULL"
            typed.append(f"CAST({value} AS {col.spark_type}) AS {quote_ident(col.name)}")
        parts.append(
            rows.selectExpr(
                *typed,
                seq_sql("`__lw_file_index`", "`__lw_pos`", str(SNAPSHOT_ROW)) + " AS _cdc_seq",
                "'snapshot' AS _cdc_op",
                "false AS _cdc_deleted",
                "CAST(NULL AS TIMESTAMP) AS _cdc_commit_ts",
                f"{PRIO_LOGGED} AS _prio",
                "0 AS _zero_dates",
            )
        )
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def snapshot_records(spark: SparkLike, lh: Lakehouse, chunks: list[dict]):
    """Data rows of the given (trusted) chunks of one table that an earlier binlake wrote as
    row images to ``snapshot_rows``."""
    from pyspark.sql import functions as F

    manifest = spark.createDataFrame(
        [(c["snapshot_id"], c["chunk_id"], c["attempt_id"]) for c in chunks],
        "snapshot_id STRING, chunk_id INT, attempt_id STRING",
    )
    snapshot_ids = sorted({c["snapshot_id"] for c in chunks})
    rows = (
        lh.snapshot_rows.read(spark)
        .where(F.col("snapshot_id").isin(snapshot_ids) & F.col("row").isNotNull())
        .where((F.col("db") == chunks[0]["db"]) & (F.col("table") == chunks[0]["table"]))
    )
    return rows.join(F.broadcast(manifest), ["snapshot_id", "chunk_id", "attempt_id"], "left_semi")


def batch_records(schema: TableSchema, decoder: Decoder, changes, snaps, typed=None):
    """Typed records of the batch, before dedup: the table's columns plus ``_cdc_seq``,
    ``_cdc_op``, ``_cdc_deleted``, ``_cdc_commit_ts``, ``_prio`` (ties on ``_cdc_seq``) and
    ``_zero_dates`` (how many zero dates the record's image held). ``changes``: change-log
    rows, or None; ``snaps``: map-form snapshot rows, or None; ``typed``: typed snapshot
    records (:func:`typed_snapshot_records`), or None. A batch of typed snapshot records only
    is those records as they are: no decode at all."""
    if changes is None and snaps is None and typed is not None:
        return typed
    unified = changes.selectExpr(
        "op",
        "schema_version",
        f"{CHANGELOG_SEQ_SQL} AS seq",
        f"CASE WHEN op = '{DELETE}' THEN before ELSE after END AS img",
        "commit_ts",
        f"{PRIO_LOGGED} AS prio",
    )
    # A key change is one update record; its before image names the key that is gone.
    key_diff = " OR ".join(
        f"NOT ({decoder.column_sql(k, 'before')} <=> {decoder.column_sql(k, 'after')})" for k in schema.key
    )
    moved = changes.where(f"op = '{UPDATE}' AND ({key_diff})").selectExpr(
        f"'{DELETE}' AS op",
        "schema_version",
        f"{CHANGELOG_SEQ_SQL} AS seq",
        "before AS img",
        "commit_ts",
        f"{PRIO_DERIVED} AS prio",
    )
    parts = [unified, moved]
    if snaps is not None:
        parts.append(
            snaps.selectExpr(
                "'snapshot' AS op",
                "schema_version",
                seq_sql("lw_file_index", "lw_pos", str(SNAPSHOT_ROW)) + " AS seq",
                "`row` AS img",
                "CAST(NULL AS TIMESTAMP) AS commit_ts",
                f"{PRIO_LOGGED} AS prio",
            )
        )
    records = parts[0]
    for p in parts[1:]:
        records = records.unionByName(p)

    columns = [f"{decoder.column_sql(c.name)} AS {quote_ident(c.name)}" for c in schema.columns]
    # Zero dates become NULL; how many is counted where the records are applied.
    zero = f"CASE WHEN op = '{DELETE}' THEN 0 ELSE {decoder.zero_dates_sql('img')} END"
    decoded = records.selectExpr(
        *columns,
        "seq AS _cdc_seq",
        "op AS _cdc_op",
        f"op = '{DELETE}' AS _cdc_deleted",
        "commit_ts AS _cdc_commit_ts",
        "prio AS _prio",
        f"{zero} AS _zero_dates",
    )
    return decoded if typed is None else decoded.unionByName(typed)


def logged_changes(schema: TableSchema, decoder: Decoder, changes):
    """The batch's updates and deletes with typed before (``o__``) and after (``n__``) values
    of every column: what foreign-key actions of this table's children start from."""
    cols = [c.name for c in schema.columns]
    return changes.where(f"op IN ('{UPDATE}', '{DELETE}')").selectExpr(
        "op AS kind",
        f"{CHANGELOG_SEQ_SQL} AS seq",
        "commit_ts AS ts",
        *[f"{decoder.column_sql(c, 'before')} AS {quote_ident(old(c))}" for c in cols],
        *[
            f"CASE WHEN op = '{UPDATE}' THEN {decoder.column_sql(c, 'after')} END AS {quote_ident(new(c))}"
            for c in cols
        ],
    )


@dataclass
class Prepared:
    """What creating or evolving a silver table did (:func:`_prepare_table`)."""

    cutoff: tuple | None  # change-log rows below it are dropped (a re-snapshot recovered the table)
    fresh: bool  # new or rebuilt: empty before
    schema_changes: list
    rebuilt: bool
    resolved: dict  # the added columns' backfills (binlake.silver.backfill.resolve)
    backfilled: dict  # {column: silver rows given their ADD's default by this run}


def _prepare_table(
    spark: SparkLike, lh: Lakehouse, ref: TableRef, history, new_chunks, name: str, applied_before: bool
):
    """Create or evolve the silver table, giving the rows older than an ADD COLUMN its value."""
    target = history[-1]
    db, table = name.split(".", 1)
    if se.create_silver_table(spark, ref, target.schema):
        resolved = backfill.resolve(spark, lh, db, table, history, {})
        _check_new_table(resolved, history, new_chunks, name)
        if resolved:
            se.set_table_property(spark, ref, backfill.BACKFILL_PROPERTY, backfill.property_value(resolved))
        return Prepared(None, True, [], False, resolved, {})
    known = backfill.cached(ref.properties(spark))
    resolved = backfill.resolve(spark, lh, db, table, history, known)
    if not applied_before:
        _check_new_table(resolved, history, new_chunks, name)
    backfilled: dict = {}
    extra = {backfill.BACKFILL_PROPERTY: backfill.property_value(resolved)} if resolved != known else {}

    def applied(entry) -> None:
        nonlocal resolved
        rows = backfill.update_older_rows(spark, ref, entry.schema, entry, resolved)
        backfilled.update(rows)
        if rows:  # kept with the schema version, in evolve's last commit
            resolved = backfill.with_rows(resolved, entry, rows)
            extra[backfill.BACKFILL_PROPERTY] = backfill.property_value(resolved)

    try:
        changes = se.evolve(
            spark,
            ref,
            history,
            check=lambda entry: backfill.check(entry, resolved, name),
            applied=applied,
            properties=extra,
        )
        if extra and not changes:  # no step to set them with (a run killed after creating the table)
            se.set_table_properties(spark, ref, extra)
        return Prepared(None, False, [d for d in changes if d], False, resolved, backfilled)
    except SchemaChangeError:
        # Recovery: a snapshot taken with the new schema replaces the table's content.
        fresh = [
            c
            for c in new_chunks
            if c["schema_version"] == target.version
            and (c["lw_file_index"], c["lw_pos"]) >= (target.file_index or 0, target.pos or 0)
        ]
        if not fresh:
            raise
        log.warning(
            "%s: incompatible schema change recovered by snapshot %s: rebuilding silver", name, fresh[0]["snapshot_id"]
        )
        se.create_silver_table(spark, ref, target.schema, replace=True)
        se.set_table_properties(
            spark,
            ref,
            {se.SCHEMA_VERSION_PROPERTY: target.version, backfill.BACKFILL_PROPERTY: backfill.property_value(resolved)},
        )
        return Prepared(target.seq, True, [], True, resolved, {})


def _check_new_table(resolved: dict, history: list, new_chunks: list[dict], name: str) -> None:
    """A table silver fills for the first time takes every record since capture began: those
    older than an ADD COLUMN whose value binlake cannot know would publish NULL for it, unless
    a snapshot read after the ADD supersedes them."""
    for _, entry, _ in backfill.adding_steps(history):
        for a in resolved.get(backfill.step_key(entry), []):
            if a.unknown and not any((c["lw_file_index"], c["lw_pos"]) >= a.boundary[:2] for c in new_chunks):
                raise backfill.unknown_error(name, a, entry)


@dataclass(frozen=True)
class TableNews:
    """What the change log's new commits hold for one table (one aggregate for all tables)."""

    changes: int = 0  # inserts, updates and deletes
    updates_deletes: int = 0
    ddl: int = 0  # DDL, TRUNCATE, DROP, RENAME records
    emptied: tuple = ()  # each TRUNCATE-like record: its _cdc_seq's parts and commit_ts
    partial: int = 0  # inserts, updates and deletes whose images lack columns of their version
    # Statement-format DML that may have changed the table (its own, and its database's where
    # capture could not tell the table): how many, and the first and last as
    # {"seq": (file_index, pos, row), "binlog_file": ..., "ddl": ...}.
    statements: int = 0
    first_statement: dict | None = None
    last_statement: dict | None = None

    @property
    def any(self) -> bool:
        return bool(self.changes or self.ddl or self.statements)

    def with_statements(self, found: list[dict]) -> TableNews:
        """These news and the statements ``found`` (dicts as :attr:`first_statement`)."""
        if not found:
            return self
        known = [s for s in (self.first_statement, self.last_statement, *found) if s is not None]
        return replace(
            self,
            statements=self.statements + len(found),
            first_statement=min(known, key=lambda s: s["seq"]),
            last_statement=max(known, key=lambda s: s["seq"]),
        )


def prepare(
    spark: SparkLike,
    lh: Lakehouse,
    db: str,
    table: str,
    history: list,
    cl,
    cl_start: int | None,
    news: TableNews,
    new_chunks: list[dict],
    applied_before: bool,
    recorded: ProgressRow | None = None,
) -> TableBatch:
    """Bring the table's schema up to date and decode its new records; writes no rows.

    ``history``: its schema versions (:func:`schema_evolution.load_history`); ``cl``: the
    change feed of the change log read by this run (or None); ``cl_start``: the first version
    new to this table (or None); ``news``: what those versions hold for it; ``new_chunks``:
    its new manifest rows; ``applied_before``: a completed run applied it (it has progress);
    ``recorded``: its progress row, whose silver version partial row images are completed
    from. Raises :class:`~binlake.errors.IncompleteChangeError` for changes the binlog holds
    only in part that silver cannot apply exactly (:mod:`binlake.silver.partial`).
    """
    name = f"{db}.{table}"
    ref = lh.silver(db, table)
    if not history:
        raise NotReadyError(f"{name} has no schema in bronze schema_history yet: run binlake snapshot or capture")
    schema = history[-1].schema
    done = _prepare_table(spark, lh, ref, history, new_chunks, name, applied_before)
    cutoff, fresh, schema_changes, rebuilt = done.cutoff, done.fresh, done.schema_changes, done.rebuilt
    decoder = Decoder(schema, se.name_maps(history, schema), backfill.defaults_of(history, done.resolved, schema))

    records = _new_records(cl, db, table, cl_start, news, cutoff)
    if cutoff is not None:
        new_chunks = [c for c in new_chunks if c["schema_version"] == history[-1].version]
    cut = _truncations(spark, ref, fresh, news, cutoff)
    # A table no completed run applied may still hold rows: a killed run's bulk load.
    empty = fresh or (not applied_before and ref.is_empty(spark))

    typed_chunks = [c for c in new_chunks if is_typed(c)]
    map_chunks = [c for c in new_chunks if not is_typed(c)]
    snaps = snapshot_records(spark, lh, map_chunks) if map_chunks else None
    typed = (
        typed_snapshot_records(spark, lh, typed_chunks, schema, decoder.name_maps, decoder.defaults)
        if typed_chunks
        else None
    )
    decoded, changes, rereconcile = _decode(
        spark,
        lh,
        schema,
        decoder,
        news,
        _Parts(records, snaps, typed, new_chunks),
        cut,
        lambda: state_after_last_run(spark, ref, schema, recorded, empty),
    )
    return TableBatch(
        db=db,
        table=table,
        ref=ref,
        schema=schema,
        records=decoded,
        changes=changes,
        truncated=cut.truncated,
        batch_truncate=cut.batch_truncate,
        emptied=cut.emptied,
        chunks=new_chunks,
        fresh=empty,
        pending=bool(news.changes) or bool(new_chunks),
        change_count=news.changes,
        snapshot_rows=sum(int(c["row_count"]) for c in new_chunks),
        snapshot_zero_dates=sum(int(c.get("zero_dates") or 0) for c in typed_chunks),
        schema_changes=schema_changes,
        backfilled=done.backfilled,
        rebuilt=rebuilt,
        snapshots_only=not news.changes and cut.stored is None and not cut.bounds,
        rereconcile=rereconcile,
    )


def _new_records(cl, db: str, table: str, cl_start: int | None, news: TableNews, cutoff) -> DataFrame | None:
    """The table's data records of the change feed ``cl`` from ``cl_start``, those at or
    after ``cutoff`` (a rebuild's) when there is one; None when it has no new changes."""
    from pyspark.sql import functions as F

    if cl is None or cl_start is None or not news.changes:
        return None
    records = changelog_records(cl, db, table, cl_start).where(F.col("op").isin(*DATA_OPS))
    if cutoff is not None:
        records = records.where(F.expr(f"{CHANGELOG_SEQ_SQL} >= {seq_literal(cutoff)}"))
    return records


class _Truncations(NamedTuple):
    """The TRUNCATE-like bounds a batch applies: the silver table's stored one, the batch's."""

    stored: tuple | None  # the table's stored TRUNCATE (TRUNCATED_SEQ_PROPERTY), unless fresh
    bounds: list  # the batch's, sorted
    batch_truncate: tuple | None  # the batch's last
    truncated: tuple | None  # the later of the stored and the batch's last
    emptied: tuple  # every bound, the stored one too


def _truncations(spark: SparkLike, ref: TableRef, fresh: bool, news: TableNews, cutoff) -> _Truncations:
    stored = None if fresh else parse_seq(ref.properties(spark).get(se.TRUNCATED_SEQ_PROPERTY))
    # pos is where the statement's event ends: a snapshot whose low watermark is that same
    # position was read after it, and its rows, at (lw, -1), must outlive it. So the boundary
    # sorts just below them; no row event ends at a DDL statement's position.
    bounds = sorted(
        (t["file_index"], t["pos"], DERIVED_ROW)
        for t in news.emptied
        if cutoff is None or (t["file_index"], t["pos"], DERIVED_ROW) >= cutoff
    )
    batch_truncate = bounds[-1] if bounds else None
    truncated = max(stored or batch_truncate, batch_truncate) if batch_truncate else stored
    emptied = tuple(sorted({*bounds, *([stored] if stored else [])}))
    return _Truncations(stored, bounds, batch_truncate, truncated, emptied)


class _Parts(NamedTuple):
    """A batch's new records before decoding: the change-log records and the snapshot rows."""

    records: DataFrame | None  # change-log data records, or None
    snaps: DataFrame | None  # rows of map-encoded snapshot chunks, or None
    typed: DataFrame | None  # rows of typed snapshot chunks, or None
    chunks: list[dict]  # the new manifest rows


def _decode(
    spark: SparkLike,
    lh: Lakehouse,
    schema: TableSchema,
    decoder: Decoder,
    news: TableNews,
    parts: _Parts,
    cut: _Truncations,
    base: Callable[[], DataFrame],
) -> tuple[DataFrame, DataFrame | None, list]:
    """The batch's records decoded, its logged changes (for foreign-key actions) and the
    ranges to reconcile again; changes the binlog holds only in part are completed first
    (:mod:`binlake.silver.partial`; ``base``: silver as the last completed run left it)."""
    records, snaps, typed = parts.records, parts.snaps, parts.typed
    completed = None
    if news.partial or news.statements:
        records = records if records is not None else _no_changes(spark)
        snapshot_part = None
        if snaps is not None or typed is not None:
            snapshot_part = batch_records(schema, decoder, _no_changes(spark), snaps, typed)
        completed = partial.complete(
            spark,
            lh,
            schema,
            decoder,
            records,
            snapshot_part,
            news,
            base,
            cut.emptied,
            cut.truncated,
            parts.chunks,
        )
        records = completed.changes
    if records is None and (snaps is not None or typed is None):
        records = _no_changes(spark)
    rereconcile = completed.rereconcile if completed is not None else []
    if completed is not None and completed.records is not None:
        return completed.records, completed.cascade, rereconcile
    decoded = batch_records(schema, decoder, records, snaps, typed)
    changes = logged_changes(schema, decoder, records) if news.updates_deletes else None
    return decoded, changes, rereconcile


def _no_changes(spark: SparkLike):
    """An empty frame of change-log rows, for a batch of snapshot rows only."""
    return spark.createDataFrame(
        [],
        "op STRING, schema_version STRING, file_index BIGINT, pos BIGINT, `row` INT, binlog_file STRING, "
        "before MAP<STRING,STRING>, after MAP<STRING,STRING>, commit_ts TIMESTAMP",
    )
