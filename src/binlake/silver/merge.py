"""Applying a batch to a silver table: dedup, the conditional MERGE, and the tombstones of
TRUNCATE and completed snapshot chunks (docs/architecture.md, "Silver").

1. keep the latest record per key (``ROW_NUMBER() OVER (PARTITION BY key ORDER BY
   _cdc_seq DESC) = 1``), the batch's own records and the changes foreign-key actions
   derived for it alike;
2. MERGE: update only where ``s._cdc_seq > t._cdc_seq``, insert when absent; deletes are
   tombstones, never physical deletes;
3. TRUNCATE and completed snapshot chunks tombstone what they prove is gone.

Every write is conditional on ``_cdc_seq``, so applying a batch twice, or an old batch after
a newer one, changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from binlake import faults
from binlake.contract.changelog import TRUNCATE_OP
from binlake.contract.position import DERIVED_ROW, SNAPSHOT_ROW, seq_literal, seq_text
from binlake.contract.sql import quote_ident, spark_literal, spark_string
from binlake.contract.tables import TableRef
from binlake.contract.types import TableSchema
from binlake.contract.write_errors import with_retry
from binlake.silver import schema_evolution as se
from binlake.silver.batch import TableBatch
from binlake.silver.cascade import derived_records
from binlake.silver.ranges import reconcile_range_sql

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.silver")


@dataclass
class Applied:
    """What applying one batch did (rows, as Delta's commit metrics count them)."""

    merged: int = 0
    cascaded: int = 0
    truncated: int = 0
    reconciled: int = 0
    zero_dates: int = 0
    bulk_loaded: bool = False
    history: int = 0  # history rows written or removed


def apply(spark: SparkLike, batch: TableBatch, derived=None, floors=None, history=None) -> Applied:
    """Apply the batch and the changes foreign-key actions derived for it (``derived``, or
    None): a bulk load when it can, else the MERGE and the tombstones of TRUNCATE and
    completed chunks. ``history``: for a table that keeps history, called last with the
    records applied (the batch's and the derived ones), and ``first_load=True`` after a bulk
    load; returns the history rows it wrote (:func:`binlake.silver.history.record_history`)."""
    if derived is None and bulk_loadable(batch):
        out = bulk_load(spark, batch)
        if history is not None:
            out.history = history(batch.records, first_load=True)
        return out
    out = Applied()
    records = batch.records
    if derived is not None:
        records = records.unionByName(derived_records(derived, batch.schema))
        out.cascaded = derived.count()
    if batch.pending or derived is not None:
        source = latest_per_key(records, batch.schema, batch.truncated)
        # The records the batch holds bound its keys: cascaded ones are counted in apart.
        expected = batch.change_count * 2 + batch.snapshot_rows + out.cascaded
        m, out.zero_dates = merge_into_silver(spark, batch.ref, batch.schema, source, expected_rows=expected)
        # Typed snapshot rows hold their zero dates as NULL: the chunks counted them when read.
        out.zero_dates += batch.snapshot_zero_dates
        out.merged = m.get("num_inserted_rows", 0) + m.get("num_updated_rows", 0)
    if batch.batch_truncate is not None and batch.truncated is not None:  # the one is set when the other is
        out.truncated = apply_truncate(spark, batch.ref, batch.truncated)
    # Chunks of a snapshot that recovers changes the binlog holds only in part are reconciled
    # again, though an earlier run applied them (binlake.silver.partial).
    out.reconciled = reconcile_chunks(spark, batch.ref, batch.schema, batch.chunks + batch.rereconcile, floors)
    if history is not None:
        out.history = history(records)
    return out


def bulk_loadable(batch: TableBatch) -> bool:
    """A table's first load: an empty silver table, and a batch of one snapshot's chunks, each
    with one committed attempt, and nothing else (no change-log record, no TRUNCATE bound).
    Every key is then in exactly one chunk read once, so there is nothing to dedup, nothing
    newer to lose to and nothing to tombstone."""
    if not (batch.fresh and batch.snapshots_only and batch.chunks):
        return False
    chunk_ids = [(c["snapshot_id"], c["chunk_id"]) for c in batch.chunks]
    return len({sid for sid, _ in chunk_ids}) == 1 and len(set(chunk_ids)) == len(chunk_ids)


def bulk_load(spark: SparkLike, batch: TableBatch) -> Applied:
    """Append the snapshot rows: one read of bronze, one write (typed snapshot rows need no
    decode; map-form ones from an earlier binlake are decoded on the way).

    A run killed after the append finds the table no longer empty and MERGEs the same rows,
    which changes nothing (none is newer than itself). Two runs that both found the table
    empty cannot both append: the append is a Delta idempotent write keyed by the table and
    its newest manifest version, so the later one is skipped (or conflicts, and its run
    fails and is repeated) instead of doubling every key."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    columns = [quote_ident(c.name) for c in batch.schema.columns] + [
        "_cdc_seq",
        "_cdc_op",
        "_cdc_deleted",
        "_cdc_commit_ts",
    ]
    counted = Observation("binlake_bulk_load")
    rows = batch.records.observe(
        counted, F.count(F.lit(1)).alias("rows"), F.sum("_zero_dates").alias("zero")
    ).selectExpr(*columns)
    written = append_once(spark, batch.ref, rows, f"binlake.silver.bulk_load:{batch.name}", first_load_version(batch))
    faults.point("silver.after_bulk_load")
    if not written:
        # Delta skipped the write: another run loaded this snapshot first. The observation
        # never fires for a write that did not run, so it must not be waited for.
        log.info("silver %s: the bulk load was already written by another run", batch.name)
        return Applied(bulk_loaded=True)
    got = counted.get
    log.info("silver %s: bulk load of %s snapshot rows", batch.name, got.get("rows"))
    zero = int(got.get("zero") or 0) + batch.snapshot_zero_dates
    return Applied(merged=int(got.get("rows") or 0), zero_dates=zero, bulk_loaded=True)


def first_load_version(batch: TableBatch) -> int:
    """The idempotent-write version of a table's first load: its newest manifest version."""
    return max(int(c["_commit_version"]) for c in batch.chunks)


def append_once(spark: SparkLike, ref: TableRef, rows, app_id: str, version: int) -> bool:
    """Append ``rows`` to ``ref`` as a Delta idempotent write (``app_id``, ``version``);
    False when Delta skipped it because a run before this one wrote it.

    Silver's optimized writes (kept for its MERGEs) would funnel a whole first load through
    one task into one file, which gold's first publish then also reads with one task: off
    here, so there is one file per input split of the snapshot's files, written and read in
    parallel."""
    import uuid

    tag = f"binlake {app_id} {uuid.uuid4().hex}"
    since = ref.latest_version(spark)
    ref.save(
        rows.write.format("delta")
        .mode("append")
        .option("optimizeWrite", "false")
        .option("txnAppId", app_id)
        .option("txnVersion", str(version))
        .option("userMetadata", tag)
    )
    return _committed(spark, ref, since, tag)


def _committed(spark: SparkLike, ref: TableRef, since: int, tag: str) -> bool:
    """Whether a commit after version ``since`` carries ``tag`` as its user metadata."""
    latest = ref.latest_version(spark)
    if latest <= since:
        return False
    return any(c["userMetadata"] == tag for c in ref.commits(spark, since + 1, latest))


def latest_per_key(records, schema: TableSchema, truncated: tuple | None):
    """The MERGE source: one row per key, its latest record."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    if truncated is not None:
        # Anything older than a TRUNCATE is gone, whatever order the batches arrive in.
        older = F.col("_cdc_seq") < F.expr(seq_literal(truncated))
        records = (
            records.withColumn("_cdc_deleted", F.when(older, F.lit(True)).otherwise(F.col("_cdc_deleted")))
            .withColumn("_cdc_op", F.when(older, F.lit(TRUNCATE_OP)).otherwise(F.col("_cdc_op")))
            .withColumn("_cdc_seq", F.when(older, F.expr(seq_literal(truncated))).otherwise(F.col("_cdc_seq")))
        )
    w = Window.partitionBy(*[F.col(quote_ident(k)) for k in schema.key]).orderBy(
        F.col("_cdc_seq").desc(), F.col("_prio").desc()
    )
    return records.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn", "_prio")


MAX_KEY_INTERVALS = 16


def is_numeric_type(spark_type: str) -> bool:
    t = spark_type.upper()
    return t.startswith(("TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL", "FLOAT", "DOUBLE"))


# Up to this many distinct keys, the gaps between them are found on the driver: one quick
# job on the batch instead of a sort and a window over it.
DRIVER_KEYS = 10_000


def key_intervals(
    df, column: str, numeric: bool, most: int = MAX_KEY_INTERVALS, bounds: tuple | None = None, rows: int | None = None
) -> list[tuple]:
    """Closed intervals ``[(lo, hi), ...]`` that hold every value of ``column`` in ``df``.

    One interval, the batch's min and max, can span a whole table: a typical batch updates
    recent rows and inserts keys far above them, and ``[min, max]`` then covers everything
    in between. For a numeric column the ``most - 1`` widest gaps between consecutive
    distinct values are cut out. Every value stays inside by construction: an interval
    runs from one cut's upper value to the value just below the next cut.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lo, hi = (
        bounds
        if bounds is not None
        else tuple(df.agg(F.min(F.col(column)).alias("lo"), F.max(F.col(column)).alias("hi")).first())
    )
    if lo is None:
        return []
    if not numeric or most < 2 or lo == hi:
        return [(lo, hi)]
    keys = df.select(F.col(column).alias("k")).distinct()
    if rows is not None and rows <= DRIVER_KEYS:
        return cut_intervals([r["k"] for r in keys.collect()], most)
    # Doubles for the gap only: it ranks the cuts, while the bounds keep the exact values
    # (and BIGINT differences near 2^63 would overflow under ANSI mode).
    gaps = (
        keys.select("k", F.lag("k").over(Window.orderBy("k")).alias("below"))
        .where(F.col("below").isNotNull())
        .withColumn("gap", F.col("k").cast("double") - F.col("below").cast("double"))
        .orderBy(F.col("gap").desc())
        .limit(most - 1)
        .collect()
    )
    return _intervals(lo, hi, sorted((r["k"], r["below"]) for r in gaps))


def cut_intervals(values, most: int = MAX_KEY_INTERVALS) -> list[tuple]:
    """:func:`key_intervals` of numeric values already on the driver (NULLs ignored)."""
    distinct = sorted({v for v in values if v is not None})
    if not distinct:
        return []
    if most < 2 or len(distinct) == 1:
        return [(distinct[0], distinct[-1])]
    widest = sorted(zip(distinct[1:], distinct[:-1]), key=lambda kb: float(kb[0]) - float(kb[1]), reverse=True)
    return _intervals(distinct[0], distinct[-1], sorted(widest[: most - 1]))


def _intervals(lo, hi, cuts) -> list[tuple]:
    out = []
    for k, below in cuts:
        out.append((lo, below))
        lo = k
    out.append((lo, hi))
    return out


def merge_into_silver(
    spark: SparkLike, ref: TableRef, schema: TableSchema, source, expected_rows: int | None = None
) -> tuple[dict[str, int], int]:
    """The idempotent MERGE: newer sequence wins, absent keys are inserted, nothing is deleted.

    Returns Delta's metrics (``num_inserted_rows``, ``num_updated_rows``, ...) and how many
    zero dates the source's rows held (``_zero_dates``). ``expected_rows``: at most how many
    records the source holds, when known: a small batch's keys then come to the driver with
    its counts, in one query."""
    from pyspark.sql import functions as F

    cols = [c.name for c in schema.columns] + ["_cdc_seq", "_cdc_op", "_cdc_deleted", "_cdc_commit_ts"]
    assign = {quote_ident(c): f"s.{quote_ident(c)}" for c in cols}
    # SQL text, not Columns: a Delta command on a Spark Connect session takes only text.
    on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in schema.key)
    # Delta prunes target files only by predicates on the target alone: bounding the
    # leading key column by the batch's own key intervals lets the clustered layout skip
    # every file outside them, so a batch costs the same on 1M or 10M rows.
    first = schema.key[0]
    typ = schema.column(first).spark_type
    numeric = is_numeric_type(typ)
    small = numeric and expected_rows is not None and expected_rows <= DRIVER_KEYS
    source = source.persist()
    try:
        stats = source.agg(
            F.min(F.col(quote_ident(first))).alias("lo"),
            F.max(F.col(quote_ident(first))).alias("hi"),
            F.coalesce(F.sum("_zero_dates"), F.lit(0)).alias("zero"),
            F.count(F.lit(1)).alias("n"),
            *([F.collect_set(F.col(quote_ident(first))).alias("keys")] if small else []),
        ).first()
        if small:
            intervals = cut_intervals(stats["keys"])
        else:
            intervals = key_intervals(
                source, quote_ident(first), numeric=numeric, bounds=(stats["lo"], stats["hi"]), rows=stats["n"]
            )
        if intervals:
            tk = f"t.{quote_ident(first)}"
            inside = [
                f"({tk} >= {spark_literal(lo, typ)} AND {tk} <= {spark_literal(hi, typ)})" for lo, hi in intervals
            ]
            on = f"{on} AND ({' OR '.join(inside)})"

        def run():
            return (
                ref.delta(spark)
                .alias("t")
                .merge(source.alias("s"), on)
                .whenMatchedUpdate(condition="s._cdc_seq > t._cdc_seq", set=assign)
                .whenNotMatchedInsert(values=assign)
                .execute()
                .first()
            )

        faults.point("silver.before_merge")
        metrics = with_retry(f"MERGE into {ref}", run)
    finally:
        source.unpersist()
    return {k: int(v or 0) for k, v in metrics.asDict().items()}, int(stats["zero"] or 0)


def reconcile_chunks(
    spark: SparkLike,
    ref: TableRef,
    schema: TableSchema,
    chunks: list[dict],
    floors: dict[str, tuple[int, int]] | None = None,
    group: int = 64,
) -> int:
    """Tombstone keys a completed chunk proves gone: inside [start, end) and older than the
    *snapshot's* first low watermark ``T`` (``floors[snapshot_id]``; default: the smallest lw
    among ``chunks`` of that snapshot).

    Runs after the MERGE. Every key any chunk of the snapshot returned carries a sequence
    >= ``(T, -1)``, so a row that only sorts into this chunk's range in Spark (a string key
    under a case- or accent-insensitive collation; MySQL put it in a neighbouring chunk) is
    never tombstoned once its own chunk is in. The tombstone sits at ``(T, -2)``: the row was
    gone at T (absent at this chunk's lw, and no binlog event since T), and a neighbouring
    chunk of the same snapshot committed later (lw >= T) still wins over it.
    """
    if not chunks:
        return 0
    floors = floors or {}
    by_snapshot: dict[str, list[dict]] = {}
    for c in chunks:
        by_snapshot.setdefault(c["snapshot_id"], []).append(c)
    total = 0
    for snapshot_id, members in sorted(by_snapshot.items()):
        floor = floors.get(snapshot_id) or min((c["lw_file_index"], c["lw_pos"]) for c in members)
        older = f"_cdc_seq < {seq_literal((*floor, SNAPSHOT_ROW))}"
        for i in range(0, len(members), group):
            inside = " OR ".join(
                reconcile_range_sql(schema, c["start_key"], c["end_key"]) for c in members[i : i + group]
            )
            condition = f"NOT _cdc_deleted AND {older} AND ({inside})"

            def run(condition=condition, floor=floor):
                ref.delta(spark).update(
                    condition,
                    {
                        "_cdc_seq": seq_literal((*floor, DERIVED_ROW)),
                        "_cdc_deleted": "TRUE",
                        "_cdc_op": "'delete'",
                        "_cdc_commit_ts": "CAST(NULL AS TIMESTAMP)",
                    },
                )

            before = ref.latest_version(spark)
            with_retry(f"chunk reconciliation of {ref}", run)
            total += ref.last_commit(spark, since=before)[1].get("numUpdatedRows", 0)
    return total


def apply_truncate(spark: SparkLike, ref: TableRef, seq: tuple[int, int, int]) -> int:
    lit = seq_literal(seq)

    def run():
        ref.delta(spark).update(
            f"NOT _cdc_deleted AND _cdc_seq < {lit}",
            {"_cdc_seq": lit, "_cdc_deleted": "TRUE", "_cdc_op": spark_string(TRUNCATE_OP)},
        )

    before = ref.latest_version(spark)
    with_retry(f"TRUNCATE of {ref}", run)
    n = ref.last_commit(spark, since=before)[1].get("numUpdatedRows", 0)
    se.set_table_property(spark, ref, se.TRUNCATED_SEQ_PROPERTY, seq_text(seq))
    return n
