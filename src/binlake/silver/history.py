"""SCD type 2 history tables for the tables ``history.tables`` names (docs/history.md).

A history table ``silver/<db>/<table>__history`` holds one row per version of each key: the
table's columns plus :data:`~binlake.contract.schemas.HISTORY_METADATA_COLUMNS`. It is
built from the same records silver applies (:func:`binlake.silver.merge.apply`), after
silver's own writes, in three steps:

1. **Facts**: the batch's TRUNCATE-like sequences and its completed snapshot chunks (range,
   low watermark, the snapshot's floor) are MERGEd, insert-if-absent, into
   ``<table>__history_facts``.
2. **Events**: the batch's records, the foreign-key actions derived for it included, are
   MERGEd by ``(key, _cdc_seq)`` into ``<table>__history_events``: insert when absent, and
   on a tie the record silver's dedup would pick (a logged one over a derived one). The
   store is a set: duplicates and arrival order leave it the same.
3. **Versions**: the history of every key the batch touched is derived again from all of
   its events and the facts (:func:`versions`), and replaces those keys' rows in one MERGE.

A version cannot be derived from the stored versions alone: a late record that falls
between two versions needs the records the versions absorbed. Deriving from the event set
makes the history a pure function of what silver was given, whatever the batches' order,
duplication or a kill in between (each step is idempotent, and a re-run re-applies the
batch). Silver's own tombstones for TRUNCATE and chunk reconciliation are computed against
silver's state, which depends on the order; here they are facts applied in the derivation:

- TRUNCATE (and DROP, RENAME) at ``T``: every key with a record older than ``T`` gets a
  delete at ``T``;
- a completed chunk of a snapshot with floor ``F`` (its first low watermark): a key in the
  chunk's range with a record older than ``(F, -1)`` and no row from that snapshot gets a
  delete at ``(F, -2)``, as :func:`binlake.silver.merge.reconcile_chunks` tombstones it.

Cost: a table no pattern names costs nothing. Otherwise a batch costs two MERGEs of its own
size, a read of its keys' events, and one MERGE into the history; a batch with a TRUNCATE
derives every key again, and one with completed chunks every key in their ranges. A first
load that silver bulk-loads is three appends instead (:func:`load_first_history`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from binlake import faults
from binlake.config import HistoryTable
from binlake.contract.changelog import CDC_SEQ_TYPE, DELETE, TRUNCATE_OP
from binlake.contract.position import DERIVED_ROW, SNAPSHOT_ROW, parse_seq, seq_literal
from binlake.contract.schemas import HISTORY_METADATA_COLUMNS, SILVER_METADATA_COLUMNS
from binlake.contract.sql import quote_ident, spark_literal
from binlake.contract.tables import Lakehouse, TableRef
from binlake.contract.types import TableSchema
from binlake.contract.write_errors import with_retry
from binlake.errors import ConfigError, SchemaChangeError
from binlake.silver import schema_evolution as se
from binlake.silver.ranges import reconcile_range_predicate

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.silver")

EVENT_METADATA_COLUMNS = (
    *SILVER_METADATA_COLUMNS,
    ("_cdc_prio", "INT", "Ties on _cdc_seq: a logged record (2) beats one silver derived for it (1)."),
)
FACTS_SCHEMA = (
    f"kind STRING, seq {CDC_SEQ_TYPE}, snapshot_id STRING, chunk_id INT, attempt_id STRING, "
    f"start_key STRING, end_key STRING, lw {CDC_SEQ_TYPE}, ts TIMESTAMP"
)
"""``<table>__history_facts``: ``kind`` 'truncate' (everything older than ``seq`` is gone) or
'chunk' (a completed chunk ``[start_key, end_key)`` whose rows sit at ``lw``; ``seq`` is
where its reconciliation deletes: ``(floor, -2)``); ``ts``: a TRUNCATE's commit time."""
TRUNCATE_FACT, CHUNK_FACT = "truncate", "chunk"
TRACKED_PROPERTY = "binlake.history_tracked"
"""The tracked columns (JSON) the history table's versions were derived with."""
SEEDED_PROPERTY = "binlake.history_seeded"
"""Set on the history table once it holds the versions of silver's rows from before history
was enabled (see :func:`prepare_history`)."""
# A delete the derivation adds for a fact loses a tie to any record silver was given.
_PRIO_FACT = 0
_META = [name for name, _, _ in EVENT_METADATA_COLUMNS]


@dataclass(frozen=True)
class HistorySpec:
    """How one table keeps history: its tracked columns, resolved against its schema."""

    tracked: tuple[str, ...]

    @staticmethod
    def of(rule: HistoryTable, schema: TableSchema) -> HistorySpec:
        """The spec of ``rule`` for ``schema``; a configured column the table lacks is a
        config error, named with its fix."""
        names = [c.name for c in schema.columns]
        for key in ("track_columns", "except_columns"):
            missing = [c for c in (getattr(rule, key) or ()) if c not in names]
            if missing:
                raise ConfigError(
                    f"history.tables entry {rule.pattern!r}: {key} names {missing[0]!r}, which "
                    f"{schema.name} does not have: use its columns ({', '.join(names)})"
                )
        tracked = rule.tracked(names)
        return HistorySpec(tracked=tracked or tuple(schema.key))


def refs(lh: Lakehouse, db: str, table: str) -> tuple[TableRef, TableRef, TableRef]:
    """(history, events, facts) of one table."""
    return lh.silver_history(db, table), lh.silver_history_events(db, table), lh.silver_history_facts(db, table)


# ---------------------------------------------------------------------------------------
# Tables: created, evolved with silver, rebuilt with it


def prepare_history(
    spark: SparkLike,
    lh: Lakehouse,
    db: str,
    table: str,
    entries: list,
    silver: TableRef,
    schema: TableSchema,
    spec: HistorySpec,
    fresh: bool,
) -> None:
    """Create the history tables or bring them to silver's schema, before the batch applies.

    A compatible schema change is applied to the history and the event store as to silver
    (:func:`schema_evolution.evolve`). An incompatible one reaches here only once silver was
    rebuilt from a snapshot: the history tables are rebuilt too, empty, and the snapshot
    opens each key's first version again (the versions before it cannot be typed under the
    new schema). A table that already has silver rows when history is enabled (``fresh``:
    silver was empty before this run) starts with one version per row, from silver's rows,
    seeded once (:data:`SEEDED_PROPERTY`). When the tracked columns change (the config, or
    a column added under ``except_columns``), every key's history is derived again.
    """
    history, events, facts = refs(lh, db, table)
    tracked = json.dumps(list(spec.tracked))
    # Created after the event store, as seeded when there is nothing to seed: a kill between
    # the two leaves no history table, and the next run creates it the same way.
    born = {SEEDED_PROPERTY: "true", TRACKED_PROPERTY: tracked} if fresh else None
    for ref, meta, props in ((events, EVENT_METADATA_COLUMNS, None), (history, HISTORY_METADATA_COLUMNS, born)):
        if se.create_silver_table(spark, ref, schema, metadata=meta, properties=props):
            continue
        if ref.properties(spark).get(se.SCHEMA_VERSION_PROPERTY) == entries[-1].version:
            continue
        try:
            se.evolve(spark, ref, entries)
        except SchemaChangeError:
            log.warning("%s: rebuilt with silver after an incompatible schema change; earlier versions dropped", ref)
            se.create_silver_table(spark, ref, schema, replace=True, metadata=meta, properties=props)
            if ref == events:
                _drop_facts(spark, facts)
    facts.create_if_missing(
        spark, FACTS_SCHEMA, comment=f"binlake history: TRUNCATEs and completed chunks of {db}.{table}"
    )
    props = history.properties(spark)
    seeded = props.get(SEEDED_PROPERTY) == "true"
    if seeded and props.get(TRACKED_PROPERTY) == tracked:
        return
    if not seeded:
        _seed(spark, silver, schema, events, facts)
    rederive(spark, lh, db, table, schema, spec, None)
    # Last: a run killed before this does all of it again, which changes nothing.
    se.set_table_property(spark, history, TRACKED_PROPERTY, tracked)
    se.set_table_property(spark, history, SEEDED_PROPERTY, "true")


def _drop_facts(spark: SparkLike, facts: TableRef) -> None:
    if facts.exists(spark):
        with_retry(f"reset of {facts}", lambda: facts.delta(spark).delete())


def _seed(spark: SparkLike, silver: TableRef, schema: TableSchema, events: TableRef, facts: TableRef) -> None:
    """Silver's rows as events: what the table held before history was enabled; and its last
    TRUNCATE, which a record older than it that arrives later must still meet."""
    if not silver.exists(spark):
        return
    from pyspark.sql import functions as F

    truncated = parse_seq(silver.properties(spark).get(se.TRUNCATED_SEQ_PROPERTY))
    if truncated is not None:
        merge_facts(
            spark,
            facts,
            spark.createDataFrame(
                [(TRUNCATE_FACT, _seq(truncated), None, None, None, None, None, None, None)], FACTS_SCHEMA
            ),
        )
    rows = silver.read(spark).select(
        *[F.col(quote_ident(c.name)) for c in schema.columns],
        "_cdc_seq",
        "_cdc_op",
        "_cdc_deleted",
        "_cdc_commit_ts",
        F.lit(2).alias("_cdc_prio"),
    )
    merge_events(spark, events, schema, rows)


# ---------------------------------------------------------------------------------------
# Applying a batch


def record_history(
    spark: SparkLike,
    lh: Lakehouse,
    batch,
    records,
    floors: dict | None,
    spec: HistorySpec,
    emptied: tuple = (),
    first_load: bool = False,
) -> int:
    """Write what ``batch`` (a :class:`~binlake.silver.batch.TableBatch`) and its ``records``
    (the batch's and the derived ones, before dedup) add to the table's history; returns
    the number of history rows written or removed. ``emptied``: the batch's TRUNCATE-like
    records with their commit times (:attr:`~binlake.silver.batch.TableNews.emptied`);
    ``first_load``: silver bulk-loaded the batch (:func:`binlake.silver.merge.bulk_load`).
    Idempotent: run after silver's writes, and again by a re-run after a kill."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    schema = batch.schema
    history, events, facts = refs(lh, batch.db, batch.table)
    if first_load and all(ref.latest_version(spark) == 0 for ref in (history, events, facts)):
        return load_first_history(spark, batch, records, floors, (history, events, facts))
    # Facts only from a batch that brings them: the stored TRUNCATE is in every later batch.
    new_facts = _facts(spark, batch, floors, emptied) if batch.batch_truncate is not None or batch.chunks else None
    if new_facts is not None:
        merge_facts(spark, facts, new_facts)
    merge_events(spark, events, schema, _as_events(records, schema))
    keys = None  # a TRUNCATE ends every key's version
    if batch.batch_truncate is None:
        keys = _key_frame(records, schema)
        if batch.chunks:
            # A completed chunk may end any key in its range that it did not return.
            inside = F.lit(False)
            for c in batch.chunks:
                inside = inside | reconcile_range_predicate(schema, c["start_key"], c["end_key"])
            keys = keys.unionByName(_key_frame(events.read(spark).where(inside), schema)).distinct()
        keys = keys.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        faults.point("silver.before_history")
        return rederive(spark, lh, batch.db, batch.table, schema, spec, keys)
    finally:
        if keys is not None:
            keys.unpersist()


def load_first_history(spark: SparkLike, batch, records, floors: dict | None, tables) -> int:
    """The history of a table's first load, into empty history tables, as three appends.

    Silver bulk-loads a batch only when every key is in exactly one chunk of one snapshot,
    read once, and nothing else (:func:`binlake.silver.merge.bulk_loadable`): each key then
    has one event, and the derivation would give it one open version from it, with no delete
    implied by a fact (no key has a record older than the snapshot). So the facts, events and
    versions are written as they are, without the three MERGEs and the derivation. Each
    append is an idempotent write keyed like silver's load; a run killed between them finds
    silver no longer empty and takes the MERGE path, which completes the rest."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from binlake.silver.merge import append_once, first_load_version

    history, events, facts = tables
    schema, version = batch.schema, first_load_version(batch)
    app = f"binlake.silver.history_load:{batch.name}"
    columns = [F.col(quote_ident(c.name)) for c in schema.columns]
    chunk_facts = _facts(spark, batch, floors, ())
    if chunk_facts is not None:
        append_once(spark, facts, chunk_facts, f"{app}:facts", version)
    append_once(spark, events, _as_events(records, schema), f"{app}:events", version)
    faults.point("silver.before_history")
    counted = Observation("binlake_history_load")
    opened = records.select(
        *columns,
        F.col("_cdc_seq").alias("_cdc_valid_from"),
        F.lit(None).cast(CDC_SEQ_TYPE).alias("_cdc_valid_to"),
        F.col("_cdc_commit_ts").alias("_cdc_valid_from_ts"),
        F.lit(None).cast("timestamp").alias("_cdc_valid_to_ts"),
        F.lit(True).alias("_cdc_is_current"),
        F.lit(False).alias("_cdc_ended_by_delete"),
    ).observe(counted, F.count(F.lit(1)).alias("rows"))
    if not append_once(spark, history, opened, f"{app}:versions", version):
        return 0  # another run wrote it; the observation never fires for a skipped write
    return int(counted.get.get("rows") or 0)


def _as_events(records, schema: TableSchema):
    """Silver's records (:func:`binlake.silver.batch.batch_records`) as rows of the event store."""
    from pyspark.sql import functions as F

    return records.select(
        *[F.col(quote_ident(c.name)) for c in schema.columns],
        "_cdc_seq",
        "_cdc_op",
        "_cdc_deleted",
        "_cdc_commit_ts",
        F.col("_prio").alias("_cdc_prio"),
    )


def rederive(spark: SparkLike, lh: Lakehouse, db: str, table: str, schema: TableSchema, spec: HistorySpec, keys) -> int:
    """Derive the versions of ``keys`` (None: every key) from their events and the facts,
    and replace their history rows with them; returns the rows written or removed."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    history, events, facts = refs(lh, db, table)
    bounds = None
    if keys is not None:
        first = quote_ident(schema.key[0])
        bounds = tuple(keys.agg(F.min(F.col(first)), F.max(F.col(first))).first())
        if bounds[0] is None:
            return 0
    inputs, cached = _derive_inputs(spark, events, facts, schema, keys, bounds)
    # Materialized once, as the touched keys' versions are few: the MERGE reads its source twice.
    rows = versions(inputs, schema, spec.tracked).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return replace_versions(spark, history, schema, keys, bounds, rows)
    finally:
        for df in (rows, *cached):
            df.unpersist()


def _within(df, schema: TableSchema, bounds):
    """``df`` limited to the leading key column's ``bounds``: a predicate on the table's own
    column, which lets Delta skip the files outside them (the tables cluster by key)."""
    from pyspark.sql import functions as F

    if bounds is None:
        return df
    return df.where(F.col(quote_ident(schema.key[0])).between(F.lit(bounds[0]), F.lit(bounds[1])))


def _key_frame(df, schema: TableSchema):
    from pyspark.sql import functions as F

    return df.select(*[F.col(quote_ident(k)) for k in schema.key]).distinct()


def _facts(spark: SparkLike, batch, floors: dict | None, emptied: tuple):
    """The batch's facts as a DataFrame of :data:`FACTS_SCHEMA` rows, or None."""
    times = {(int(t["file_index"]), int(t["pos"])): t["commit_ts"] for t in emptied}
    rows: list[tuple] = [
        (TRUNCATE_FACT, _seq(t), None, None, None, None, None, None, times.get((t[0], t[1]))) for t in batch.emptied
    ]
    by_snapshot: dict[str, list[dict]] = {}
    for c in batch.chunks:
        by_snapshot.setdefault(c["snapshot_id"], []).append(c)
    for snapshot_id, members in sorted(by_snapshot.items()):
        # The floor reconcile_chunks measures against: the snapshot's first low watermark.
        floor = (floors or {}).get(snapshot_id) or min((c["lw_file_index"], c["lw_pos"]) for c in members)
        for c in members:
            rows.append(
                (
                    CHUNK_FACT,
                    _seq((*floor, DERIVED_ROW)),
                    snapshot_id,
                    int(c["chunk_id"]),
                    c["attempt_id"],
                    c["start_key"],
                    c["end_key"],
                    _seq((c["lw_file_index"], c["lw_pos"], SNAPSHOT_ROW)),
                    None,
                )
            )
    return spark.createDataFrame(rows, FACTS_SCHEMA) if rows else None


def _seq(t) -> dict:
    return {"file_index": int(t[0]), "pos": int(t[1]), "row": int(t[2])}


def merge_facts(spark: SparkLike, facts: TableRef, rows) -> None:
    on = (
        "t.kind = s.kind AND t.seq = s.seq AND t.snapshot_id <=> s.snapshot_id AND t.chunk_id <=> s.chunk_id "
        "AND t.attempt_id <=> s.attempt_id"
    )
    rows = rows.dropDuplicates(["kind", "seq", "snapshot_id", "chunk_id", "attempt_id"])
    # A TRUNCATE known without its time (from before history was enabled) gains it if it comes.
    with_retry(
        f"MERGE into {facts}",
        lambda: (
            facts.delta(spark)
            .alias("t")
            .merge(rows.alias("s"), on)
            .whenMatchedUpdate(condition="t.ts IS NULL AND s.ts IS NOT NULL", set={"ts": "s.ts"})
            .whenNotMatchedInsertAll()
            .execute()
        ),
    )


def merge_events(spark: SparkLike, events: TableRef, schema: TableSchema, rows) -> None:
    """Add ``rows`` to the event set: one event per (key, ``_cdc_seq``), the higher
    ``_cdc_prio`` on a tie, whatever order rows arrive in."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    key = [quote_ident(k) for k in schema.key]
    # Equal (key, seq, prio) twins are the same record read twice: any one of them will do.
    w = Window.partitionBy(*[F.col(k) for k in key], F.col("_cdc_seq")).orderBy(F.col("_cdc_prio").desc())
    rows = rows.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn")
    on = " AND ".join([f"t.{k} = s.{k}" for k in key] + ["t._cdc_seq = s._cdc_seq"])
    cols = [quote_ident(c.name) for c in schema.columns] + _META
    assign = {c: f"s.{c}" for c in cols}
    with_retry(
        f"MERGE into {events}",
        lambda: (
            events.delta(spark)
            .alias("t")
            .merge(rows.alias("s"), on)
            .whenMatchedUpdate(condition="s._cdc_prio > t._cdc_prio", set=assign)
            .whenNotMatchedInsert(values=assign)
            .execute()
        ),
    )


# ---------------------------------------------------------------------------------------
# Deriving versions


def _derive_inputs(spark: SparkLike, events: TableRef, facts: TableRef, schema: TableSchema, keys, bounds):
    """The events of ``keys`` (None: every key) with the deletes the facts imply, and the
    frames cached for it (to unpersist once used)."""
    from pyspark.sql import functions as F

    ev = events.read(spark)
    if keys is not None:
        ev = _within(ev, schema, bounds).join(keys, list(schema.key), "left_semi")
    # A facts table still at its creating commit holds nothing: no job to find out.
    fact_rows = (
        [] if facts.latest_version(spark) == 0 else [r.asDict(recursive=True) for r in facts.read(spark).collect()]
    )
    if not fact_rows:
        return ev, []
    ev = ev.persist()
    key = [quote_ident(k) for k in schema.key]
    first_seq = ev.groupBy(*key).agg(F.min("_cdc_seq").alias("_first"))
    synthetic = []
    truncates: dict[tuple, object] = {}
    for f in fact_rows:
        if f["kind"] == TRUNCATE_FACT:
            truncates[_tuple(f["seq"])] = truncates.get(_tuple(f["seq"])) or f["ts"]
    for t, ts in sorted(truncates.items()):
        synthetic.append(
            _deletes(first_seq.where(F.col("_first") < F.expr(seq_literal(t))), schema, t, TRUNCATE_OP, ts)
        )
    snapshots: dict[str, list[dict]] = {}
    for f in fact_rows:
        if f["kind"] == CHUNK_FACT:
            snapshots.setdefault(f["snapshot_id"], []).append(f)
    for _, chunks in sorted(snapshots.items()):
        at = _tuple(chunks[0]["seq"])  # (floor, -2), the same for every chunk of the snapshot
        inside = F.lit(False)
        for c in chunks:
            inside = inside | reconcile_range_predicate(schema, c["start_key"], c["end_key"])
        lws = sorted({_tuple(c["lw"]) for c in chunks})
        own_rows = ev.where(F.col("_cdc_seq").isin(*[F.expr(seq_literal(lw)) for lw in lws])).select(*key)
        older = first_seq.where(F.col("_first") < F.expr(seq_literal((at[0], at[1], SNAPSHOT_ROW))))
        gone = older.where(inside).join(own_rows, list(schema.key), "left_anti")
        synthetic.append(_deletes(gone, schema, at, DELETE))
    out = ev
    for part in synthetic:
        out = out.unionByName(part)
    return out, [ev]


def _tuple(seq) -> tuple[int, int, int]:
    return (int(seq["file_index"]), int(seq["pos"]), int(seq["row"]))


def _deletes(keys, schema: TableSchema, seq: tuple[int, int, int], op: str, ts=None):
    from pyspark.sql import functions as F

    others = [F.lit(None).cast(c.spark_type).alias(c.name) for c in schema.columns if c.name not in schema.key]
    return keys.select(
        *[F.col(quote_ident(k)) for k in schema.key],
        *others,
        F.expr(seq_literal(seq)).alias("_cdc_seq"),
        F.lit(op).alias("_cdc_op"),
        F.lit(True).alias("_cdc_deleted"),
        F.lit(ts).cast("timestamp").alias("_cdc_commit_ts"),
        F.lit(_PRIO_FACT).alias("_cdc_prio"),
    )


def versions(events, schema: TableSchema, tracked: tuple[str, ...]):
    """History rows from events: per key, in ``_cdc_seq`` order, a live record whose tracked
    values differ from the live record before it (or that follows a delete, or nothing) opens
    a version; a delete after a live record ends it. A version carries the values of its
    last record (untracked columns change in place), and ends where the next opens or a
    delete closes it."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    key = [F.col(quote_ident(k)) for k in schema.key]
    # One event per (key, seq): the one silver's dedup would keep, the first in this order.
    # Ordered within the key's own window, not one of (key, seq): every step below then runs
    # on the one shuffle by key, instead of a shuffle by (key, seq) first.
    tie = Window.partitionBy(*key).orderBy("_cdc_seq", F.col("_cdc_prio").desc())
    repeated = F.coalesce(F.lag("_cdc_seq").over(tie) == F.col("_cdc_seq"), F.lit(False))
    ev = events.withColumn("_repeated", repeated).where(~F.col("_repeated")).drop("_repeated")
    w = Window.partitionBy(*key).orderBy("_cdc_seq")
    value = F.struct(*[F.col(quote_ident(c)) for c in tracked])
    prev_deleted, prev_value = F.lag("_cdc_deleted").over(w), F.lag(value).over(w)
    opens = ~F.col("_cdc_deleted") & (prev_deleted.isNull() | prev_deleted | ~prev_value.eqNullSafe(value))
    closes = F.col("_cdc_deleted") & (prev_deleted == F.lit(False))
    marked = (
        ev.withColumn("_opens", opens)
        .withColumn("_closes", F.coalesce(closes, F.lit(False)))
        .withColumn(
            "_group",
            F.sum(F.when(F.col("_opens") | F.col("_closes"), 1).otherwise(0)).over(
                w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
            ),
        )
    )
    columns = [c.name for c in schema.columns]
    others = [c for c in columns if c not in schema.key]  # none in a table that is all key
    last = (
        [F.max_by(F.struct(*[F.col(quote_ident(c)).alias(c) for c in others]), "_cdc_seq").alias("_last")]
        if others
        else []
    )
    groups = (
        marked.where("_group > 0")
        .groupBy(*key, "_group")
        .agg(
            F.min("_cdc_seq").alias("_cdc_valid_from"),
            F.min_by("_cdc_commit_ts", "_cdc_seq").alias("_cdc_valid_from_ts"),
            F.min_by("_opens", "_cdc_seq").alias("_opens"),
            *last,
        )
    )
    g = Window.partitionBy(*key).orderBy("_group")
    return (
        groups.withColumn("_cdc_valid_to", F.lead("_cdc_valid_from").over(g))
        .withColumn("_cdc_valid_to_ts", F.lead("_cdc_valid_from_ts").over(g))
        .withColumn("_cdc_ended_by_delete", F.coalesce(~F.lead("_opens").over(g), F.lit(False)))
        .where("_opens")
        .select(
            *key,
            *[F.col(f"_last.{quote_ident(c)}").alias(c) for c in others],
            "_cdc_valid_from",
            "_cdc_valid_to",
            "_cdc_valid_from_ts",
            "_cdc_valid_to_ts",
            F.col("_cdc_valid_to").isNull().alias("_cdc_is_current"),
            "_cdc_ended_by_delete",
        )
        .select(*[quote_ident(c) for c in columns], *[name for name, _, _ in HISTORY_METADATA_COLUMNS])
    )


def replace_versions(spark: SparkLike, history: TableRef, schema: TableSchema, keys, bounds, rows) -> int:
    """Make the history rows of ``keys`` (None: every key) exactly ``rows``, in one MERGE: a
    version no longer derived (a late record made it part of the one before, or a late
    TRUNCATE ended it sooner) is deleted, a changed one updated, a new one inserted.
    Returns the rows written or removed."""
    from pyspark.sql import functions as F

    key = [quote_ident(k) for k in schema.key]
    existing = history.read(spark).select(*key, "_cdc_valid_from")
    if keys is not None:
        existing = _within(existing, schema, bounds).join(keys, list(schema.key), "left_semi")
    stale = existing.join(rows.select(*key, "_cdc_valid_from"), [*schema.key, "_cdc_valid_from"], "left_anti")
    cols = [quote_ident(c.name) for c in schema.columns] + [name for name, _, _ in HISTORY_METADATA_COLUMNS]
    source = rows.withColumn("_drop", F.lit(False)).unionByName(
        stale.withColumn("_drop", F.lit(True)), allowMissingColumns=True
    )
    # SQL text, not Columns: a Delta command on a Spark Connect session takes only text.
    on = " AND ".join([f"t.{k} = s.{k}" for k in key] + ["t._cdc_valid_from = s._cdc_valid_from"])
    if bounds is not None:
        typ = schema.column(schema.key[0]).spark_type
        on += f" AND t.{key[0]} BETWEEN {spark_literal(bounds[0], typ)} AND {spark_literal(bounds[1], typ)}"
    same = " AND ".join(f"t.{c} <=> s.{c}" for c in cols)
    assign = {c: f"s.{c}" for c in cols}
    metrics = with_retry(
        f"MERGE into {history}",
        lambda: (
            history.delta(spark)
            .alias("t")
            .merge(source.alias("s"), on)
            .whenMatchedDelete(condition="s._drop")
            .whenMatchedUpdate(condition=f"NOT ({same})", set=assign)
            .whenNotMatchedInsert(condition="NOT s._drop", values=assign)
            .execute()
            .first()
        ),
    )
    return int(metrics["num_affected_rows"] or 0)
