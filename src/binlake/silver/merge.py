"""``binlake silver``: apply what is new in bronze to one current-state Delta table per source table.

Per run and table:

1. read only what bronze committed since the table's progress: the change data feed of
   ``bronze/changelog`` and of ``bronze/snapshot_chunks`` (joined to ``snapshot_rows``);
2. bring the silver schema up to the latest ``schema_history`` version (schema_evolution);
3. decode every row image with the schema version it was written with, to typed columns;
4. keep the latest record per key (``ROW_NUMBER() OVER (PARTITION BY key ORDER BY
   _cdc_seq DESC) = 1``) and MERGE: update only where ``s._cdc_seq > t._cdc_seq``, insert
   when absent; deletes are tombstones;
5. TRUNCATE and completed snapshot chunks tombstone what they prove is gone;
6. after every table: foreign-key actions MySQL does not log (cascade module);
7. last, the progress rows. A run killed anywhere before that simply re-applies the same
   records, which changes nothing: every write is conditional on ``_cdc_seq``.

Example::

    >>> result = run_silver(spark, config)      # doctest: +SKIP
    >>> print(result.summary())                 # doctest: +SKIP
"""

from __future__ import annotations

from binlake import faults
from binlake.bronze.binlog_source import EMPTYING_OPS

import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone

from binlake.config import Config
from binlake.errors import NotReadyError, SchemaChangeError
from binlake.lakehouse import PROGRESS_SCHEMA, Lakehouse, TableRef
from binlake.silver import schema_evolution as se
from binlake.silver.cascade import CascadeTable, derive
from binlake.silver.ranges import reconcile_range_predicate, sql_string
from binlake.source.types import TableSchema, is_zero_date_sql, spark_decode_sql

log = logging.getLogger("binlake.silver")

DATA_OPS = ("insert", "update", "delete")
# Ties on _cdc_seq: a real record beats a tombstone silver derived for the same position.
_PRIO_REAL = 2
_PRIO_DERIVED = 1
_RETRIES = 6
# Silver tables applied at the same time by one run (see run_silver).
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
    applied: tuple[str | None, int | None, int | None] = (None, None, None)

    @property
    def failed(self) -> list[TableResult]:
        return [t for t in self.tables if t.error]

    def table(self, name: str) -> TableResult:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    def summary(self) -> str:
        file, _, pos = self.applied
        where = f"{file}:{pos}" if file else "no heartbeat yet"
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


# ---------------------------------------------------------------------------------------
# Helpers


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _latest_version(spark, ref: TableRef) -> int:
    return int(ref.delta(spark).history(1).select("version").first()[0])


def read_cdf(spark, ref: TableRef, start: int, end: int):
    """Rows inserted into ``ref`` in versions ``[start, end]`` (bronze tables are append-only)."""
    from pyspark.sql import functions as F

    reader = (spark.read.format("delta").option("readChangeFeed", "true")
              .option("startingVersion", start).option("endingVersion", end))
    df = reader.table(ref.name) if ref.name else reader.load(ref.path)
    return df.where(F.col("_change_type") == "insert")


def _is_conflict(exc: Exception) -> bool:
    names = {type(exc).__name__} | {c.__name__ for c in type(exc).__mro__}
    text = str(exc)
    return any("Concurrent" in n or n in ("MetadataChangedException", "ProtocolChangedException") for n in names) or any(
        marker in text for marker in ("ConcurrentAppendException", "ConcurrentDeleteReadException",
                                      "ConcurrentDeleteDeleteException", "ConcurrentTransactionException",
                                      "DELTA_CONCURRENT_")
    )


def with_retry(what: str, fn, retries: int = _RETRIES):
    """Run a Delta write, retrying when a concurrent writer (OPTIMIZE, another job) won the race.

    Every silver write is conditional on ``_cdc_seq``, so re-running it against the newer
    table version is always correct.
    """
    for attempt in range(1, retries + 1):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - filtered by _is_conflict
            if attempt == retries or not _is_conflict(exc):
                raise
            wait = min(0.5 * 2 ** (attempt - 1), 8.0)
            log.warning("%s conflicted with a concurrent write (%s); retry %d in %.1fs", what, type(exc).__name__,
                        attempt, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def _seq_sql(fi: str, pos: str, row: str) -> str:
    return f"named_struct('file_index', CAST({fi} AS BIGINT), 'pos', CAST({pos} AS BIGINT), 'row', CAST({row} AS INT))"


def _seq_lit(seq: tuple[int, int, int]) -> str:
    return _seq_sql(str(int(seq[0])), str(int(seq[1])), str(int(seq[2])))


def _parse_seq(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    a, b, c = (int(x) for x in text.split(","))
    return (a, b, c)


def _last_metrics(spark, ref: TableRef, since: int | None = None) -> dict[str, int]:
    """Metrics of the last commit, or {} when no commit came after version ``since``
    (Delta skips the commit of a MERGE or UPDATE that matched nothing)."""
    row = ref.delta(spark).history(1).select("version", "operationMetrics").first()
    if since is not None and row["version"] <= since:
        return {}
    metrics = row["operationMetrics"] or {}
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = int(v)
        except (TypeError, ValueError):
            pass
    return out


class Decoder:
    """Typed decoding of row images written under any recorded schema version."""

    def __init__(self, target: TableSchema, name_maps: dict[str, dict[str, str]]):
        self.target = target
        self.name_maps = name_maps

    def column_sql(self, col_name: str, img: str = "img") -> str:
        col = self.target.column(col_name)
        cases = []
        default = spark_decode_sql(col, f"try_element_at({img}, {sql_string(col_name)})")
        for version, mapping in self.name_maps.items():
            source = mapping.get(col_name)
            if source == col_name:
                continue
            expr = "NULL" if source is None else spark_decode_sql(col, f"try_element_at({img}, {sql_string(source)})")
            cases.append(f"WHEN {sql_string(version)} THEN {expr}")
        if not cases:
            return default
        return f"CASE schema_version {' '.join(cases)} ELSE {default} END"

    def zero_dates_sql(self, img: str = "img") -> str:
        parts = []
        for col in self.target.columns:
            versions = {v: m.get(col.name) for v, m in self.name_maps.items()}
            text = f"try_element_at({img}, {sql_string(col.name)})"
            if any(src not in (None, col.name) for src in versions.values()):
                whens = " ".join(f"WHEN {sql_string(v)} THEN try_element_at({img}, {sql_string(src)})"
                                 for v, src in versions.items() if src not in (None, col.name))
                text = f"(CASE schema_version {whens} ELSE {text} END)"
            z = is_zero_date_sql(col, text)
            if z:
                parts.append(f"CASE WHEN {z} THEN 1 ELSE 0 END")
        return " + ".join(parts) if parts else "0"


# ---------------------------------------------------------------------------------------
# One table


@dataclass
class TableBatch:
    """One table's new bronze records, decoded and ready to apply (see :func:`_prepare`)."""

    db: str
    table: str
    ref: TableRef
    schema: TableSchema
    records: object  # typed records before dedup (batch_records)
    changes: object | None  # logged updates and deletes with before/after values, or None
    truncated: tuple | None  # everything older is gone (this batch's or an earlier TRUNCATE)
    batch_truncate: tuple | None  # a TRUNCATE-like record in this batch
    emptied: tuple  # sequences of every TRUNCATE-like record that bounds this batch's rows
    chunks: list
    fresh: bool  # created or rebuilt by this run: empty before it
    pending: bool  # records to MERGE

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


def _changelog_records(cl, db: str, table: str, start_version: int):
    from pyspark.sql import functions as F

    return cl.where((F.col("db") == db) & (F.col("table") == table) & (F.col("_commit_version") >= start_version))


def _snapshot_records(spark, lh: Lakehouse, chunks: list[dict]):
    """Data rows of the given (trusted) chunks."""
    from pyspark.sql import functions as F

    manifest = spark.createDataFrame(
        [(c["snapshot_id"], c["chunk_id"], c["attempt_id"]) for c in chunks],
        "snapshot_id STRING, chunk_id INT, attempt_id STRING",
    )
    snapshot_ids = sorted({c["snapshot_id"] for c in chunks})
    rows = (lh.snapshot_rows.read(spark)
            .where(F.col("snapshot_id").isin(snapshot_ids) & F.col("row").isNotNull())
            .where((F.col("db") == chunks[0]["db"]) & (F.col("table") == chunks[0]["table"])))
    return rows.join(F.broadcast(manifest), ["snapshot_id", "chunk_id", "attempt_id"], "left_semi")


def batch_records(schema: TableSchema, decoder: Decoder, changes, snaps):
    """Typed records of the batch, before dedup: the table's columns plus ``_cdc_seq``,
    ``_cdc_op``, ``_cdc_deleted``, ``_cdc_commit_ts`` and ``_prio`` (ties on ``_cdc_seq``)."""
    unified = changes.selectExpr(
        "op",
        "schema_version",
        f"{_seq_sql('file_index', 'pos', '`row`')} AS seq",
        "CASE WHEN op = 'delete' THEN before ELSE after END AS img",
        "commit_ts",
        f"{_PRIO_REAL} AS prio",
    )
    # A key change is one update record; its before image names the key that is gone.
    key_diff = " OR ".join(
        f"NOT ({decoder.column_sql(k, 'before')} <=> {decoder.column_sql(k, 'after')})" for k in schema.key
    )
    moved = changes.where(f"op = 'update' AND ({key_diff})").selectExpr(
        "'delete' AS op", "schema_version", f"{_seq_sql('file_index', 'pos', '`row`')} AS seq",
        "before AS img", "commit_ts", f"{_PRIO_DERIVED} AS prio",
    )
    parts = [unified, moved]
    if snaps is not None:
        parts.append(snaps.selectExpr(
            "'snapshot' AS op", "schema_version", _seq_sql("lw_file_index", "lw_pos", "-1") + " AS seq",
            "`row` AS img", "CAST(NULL AS TIMESTAMP) AS commit_ts", f"{_PRIO_REAL} AS prio",
        ))
    records = parts[0]
    for p in parts[1:]:
        records = records.unionByName(p)

    typed = [f"{decoder.column_sql(c.name)} AS {_q(c.name)}" for c in schema.columns]
    return records.selectExpr(*typed, "seq AS _cdc_seq", "op AS _cdc_op", "op = 'delete' AS _cdc_deleted",
                              "commit_ts AS _cdc_commit_ts", "prio AS _prio")


def logged_changes(schema: TableSchema, decoder: Decoder, changes):
    """The batch's updates and deletes with typed before (``o__``) and after (``n__``) values
    of every column: what foreign-key actions of this table's children start from."""
    from binlake.silver.cascade import new, old

    cols = [c.name for c in schema.columns]
    return changes.where("op IN ('update', 'delete')").selectExpr(
        "op AS kind", f"{_seq_sql('file_index', 'pos', '`row`')} AS seq", "commit_ts AS ts",
        *[f"{decoder.column_sql(c, 'before')} AS {_q(old(c))}" for c in cols],
        *[f"CASE WHEN op = 'update' THEN {decoder.column_sql(c, 'after')} END AS {_q(new(c))}" for c in cols],
    )


def latest_per_key(records, schema: TableSchema, truncated: tuple | None):
    """The MERGE source: one row per key, its latest record."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    if truncated is not None:
        # Anything older than a TRUNCATE is gone, whatever order the batches arrive in.
        older = F.col("_cdc_seq") < F.expr(_seq_lit(truncated))
        records = (records
                   .withColumn("_cdc_deleted", F.when(older, F.lit(True)).otherwise(F.col("_cdc_deleted")))
                   .withColumn("_cdc_op", F.when(older, F.lit("truncate")).otherwise(F.col("_cdc_op")))
                   .withColumn("_cdc_seq", F.when(older, F.expr(_seq_lit(truncated))).otherwise(F.col("_cdc_seq"))))
    w = Window.partitionBy(*[F.col(_q(k)) for k in schema.key]).orderBy(F.col("_cdc_seq").desc(), F.col("_prio").desc())
    return records.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn", "_prio")


# The most key intervals a MERGE condition names (see key_intervals).
MAX_KEY_INTERVALS = 16


def _is_numeric(spark_type: str) -> bool:
    t = spark_type.upper()
    return t.startswith(("TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL", "FLOAT", "DOUBLE"))


def key_intervals(df, column: str, numeric: bool, most: int = MAX_KEY_INTERVALS) -> list[tuple]:
    """Closed intervals ``[(lo, hi), ...]`` that hold every value of ``column`` in ``df``.

    One interval, the batch's min and max, can span a whole table: a typical batch updates
    recent rows and inserts keys far above them, and ``[min, max]`` then covers everything
    in between. For a numeric column the ``most - 1`` widest gaps between consecutive
    distinct values are cut out. Every value stays inside by construction: an interval
    runs from one cut's upper value to the value just below the next cut.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    bounds = df.agg(F.min(F.col(column)).alias("lo"), F.max(F.col(column)).alias("hi")).first()
    if bounds["lo"] is None:
        return []
    if not numeric or most < 2 or bounds["lo"] == bounds["hi"]:
        return [(bounds["lo"], bounds["hi"])]
    keys = df.select(F.col(column).alias("k")).distinct()
    # Doubles for the gap only: it ranks the cuts, while the bounds keep the exact values
    # (and BIGINT differences near 2^63 would overflow under ANSI mode).
    gaps = (keys.select("k", F.lag("k").over(Window.orderBy("k")).alias("below"))
            .where(F.col("below").isNotNull())
            .withColumn("gap", F.col("k").cast("double") - F.col("below").cast("double"))
            .orderBy(F.col("gap").desc()).limit(most - 1).collect())
    cuts = sorted((r["k"], r["below"]) for r in gaps)
    out, lo = [], bounds["lo"]
    for k, below in cuts:
        out.append((lo, below))
        lo = k
    out.append((lo, bounds["hi"]))
    return out


def merge_into_silver(spark, ref: TableRef, schema: TableSchema, source) -> dict[str, int]:
    """The idempotent MERGE: newer sequence wins, absent keys are inserted, nothing is deleted."""
    cols = [c.name for c in schema.columns] + ["_cdc_seq", "_cdc_op", "_cdc_deleted", "_cdc_commit_ts"]
    assign = {_q(c): f"s.{_q(c)}" for c in cols}
    from pyspark.sql import functions as F

    on = F.expr(" AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in schema.key))
    # Delta prunes target files only by predicates on the target alone: bounding the
    # leading key column by the batch's own key intervals lets the clustered layout skip
    # every file outside them, so a batch costs the same on 1M or 10M rows.
    first = schema.key[0]
    typ = schema.column(first).spark_type
    source = source.persist()
    intervals = key_intervals(source, _q(first), numeric=_is_numeric(typ))
    if intervals:
        tk = F.col(f"t.{_q(first)}")
        inside = [(tk >= F.lit(lo).cast(typ)) & (tk <= F.lit(hi).cast(typ)) for lo, hi in intervals]
        on = on & functools.reduce(lambda a, b: a | b, inside)

    def run():
        (ref.delta(spark).alias("t").merge(source.alias("s"), on)
         .whenMatchedUpdate(condition="s._cdc_seq > t._cdc_seq", set=assign)
         .whenNotMatchedInsert(values=assign)
         .execute())

    before = _latest_version(spark, ref)
    try:
        faults.point("silver.before_merge")
        with_retry(f"MERGE into {ref}", run)
    finally:
        source.unpersist()
    return _last_metrics(spark, ref, since=before)


def reconcile_chunks(spark, ref: TableRef, schema: TableSchema, chunks: list[dict],
                     floors: dict[str, tuple[int, int]] | None = None, group: int = 64) -> int:
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
    from pyspark.sql import functions as F

    if not chunks:
        return 0
    floors = floors or {}
    by_snapshot: dict[str, list[dict]] = {}
    for c in chunks:
        by_snapshot.setdefault(c["snapshot_id"], []).append(c)
    total = 0
    for snapshot_id, members in sorted(by_snapshot.items()):
        floor = floors.get(snapshot_id) or min((c["lw_file_index"], c["lw_pos"]) for c in members)
        older = F.col("_cdc_seq") < F.expr(_seq_lit((*floor, -1)))
        for i in range(0, len(members), group):
            inside = F.lit(False)
            for c in members[i : i + group]:
                inside = inside | reconcile_range_predicate(schema, c["start_key"], c["end_key"])
            condition = (~F.col("_cdc_deleted")) & older & inside

            def run(condition=condition, floor=floor):
                ref.delta(spark).update(condition, {
                    "_cdc_seq": F.expr(_seq_lit((*floor, -2))), "_cdc_deleted": F.lit(True),
                    "_cdc_op": F.lit("delete"), "_cdc_commit_ts": F.lit(None).cast("timestamp"),
                })

            before = _latest_version(spark, ref)
            with_retry(f"chunk reconciliation of {ref}", run)
            total += _last_metrics(spark, ref, since=before).get("numUpdatedRows", 0)
    return total


def apply_truncate(spark, ref: TableRef, seq: tuple[int, int, int]) -> int:
    from pyspark.sql import functions as F

    lit = F.expr(_seq_lit(seq))

    def run():
        ref.delta(spark).update((~F.col("_cdc_deleted")) & (F.col("_cdc_seq") < lit), {
            "_cdc_seq": lit, "_cdc_deleted": F.lit(True), "_cdc_op": F.lit("truncate"),
        })

    before = _latest_version(spark, ref)
    with_retry(f"TRUNCATE of {ref}", run)
    n = _last_metrics(spark, ref, since=before).get("numUpdatedRows", 0)
    se.set_table_property(spark, ref, se.TRUNCATED_SEQ_PROPERTY, ",".join(str(x) for x in seq))
    return n


def _prepare_table(spark, lh, ref, history, new_chunks, result: TableResult):
    """Create or evolve the silver table; returns ``(cutoff, fresh)``: the seq below which
    changelog rows are dropped (after a re-snapshot recovered an incompatible change) or
    None, and whether the table is new or rebuilt (empty before this run)."""
    target = history[-1]
    if se.create_silver_table(spark, ref, target.schema):
        return None, True
    try:
        result.schema_changes = [d for d in se.evolve(spark, ref, history) if d]
        return None, False
    except SchemaChangeError:
        # Recovery: a snapshot taken with the new schema replaces the table's content.
        fresh = [c for c in new_chunks if c["schema_version"] == target.version
                 and (c["lw_file_index"], c["lw_pos"]) >= (target.file_index or 0, target.pos or 0)]
        if not fresh:
            raise
        log.warning("%s: incompatible schema change recovered by snapshot %s: rebuilding silver",
                    result.name, fresh[0]["snapshot_id"])
        se.create_silver_table(spark, ref, target.schema, replace=True)
        se.set_table_property(spark, ref, se.SCHEMA_VERSION_PROPERTY, target.version)
        result.recreated = True
        return target.seq, True


def _prepare(spark, lh, db, table, cl, cl_start, new_chunks, result: TableResult) -> TableBatch:
    """Bring the table's schema up to date and decode its new records; writes no rows."""
    from pyspark.sql import functions as F

    ref = lh.silver(db, table)
    history = se.load_history(spark, lh, db, table)
    if not history:
        raise NotReadyError(f"{db}.{table} has no schema in bronze schema_history yet: run binlake snapshot or capture")
    schema = history[-1].schema
    cutoff, fresh = _prepare_table(spark, lh, ref, history, new_chunks, result)
    decoder = Decoder(schema, se.name_maps(history, schema))

    if cl is not None and cl_start is not None:
        records = _changelog_records(cl, db, table, cl_start)
    else:
        records = None
    if records is not None and cutoff is not None:
        records = records.where(F.expr(f"{_seq_sql('file_index', 'pos', '`row`')} >= {_seq_lit(cutoff)}"))
    if cutoff is not None:
        new_chunks = [c for c in new_chunks if c["schema_version"] == history[-1].version]

    stored_truncate = _parse_seq(se.table_property(spark, ref, se.TRUNCATED_SEQ_PROPERTY))
    truncated, batch_truncate, emptied = stored_truncate, None, ()
    changes = None
    stats = {"n": 0, "ud": 0, "t": [], "z": 0}
    if records is not None:
        changes = records.where(F.col("op").isin(*DATA_OPS))
        # TRUNCATE, DROP TABLE and a RENAME away or into this name all end every older row.
        emptying = ", ".join(f"'{op}'" for op in EMPTYING_OPS)
        agg = records.where(F.col("op").isin(*DATA_OPS, *EMPTYING_OPS)).selectExpr(
            "coalesce(sum(CASE WHEN op IN ('insert', 'update', 'delete') THEN 1 ELSE 0 END), 0) AS n",
            "coalesce(sum(CASE WHEN op IN ('update', 'delete') THEN 1 ELSE 0 END), 0) AS ud",
            f"collect_list(CASE WHEN op IN ({emptying}) THEN {_seq_sql('file_index', 'pos', '`row`')} END) AS t",
            f"coalesce(sum(CASE WHEN op IN ('insert', 'update') THEN {decoder.zero_dates_sql('after')} ELSE 0 END), 0) AS z",
        ).first()
        stats = {"n": agg["n"], "ud": agg["ud"], "t": agg["t"] or [], "z": agg["z"]}
        # pos is where the statement's event ends: a snapshot whose low watermark is that
        # same position was read after it, and its rows, at (lw, -1), must outlive it. So the
        # boundary sorts just below them; no row event ends at a DDL statement's position.
        bounds = sorted((t["file_index"], t["pos"], -2) for t in stats["t"])
        if bounds:
            batch_truncate = bounds[-1]
            truncated = max(truncated or batch_truncate, batch_truncate)
        emptied = tuple(bounds)
    if stored_truncate is not None:
        emptied = tuple(sorted({*emptied, stored_truncate}))

    snaps = _snapshot_records(spark, lh, new_chunks) if new_chunks else None
    snap_count, snap_zero = 0, 0
    if snaps is not None:
        s = snaps.selectExpr("count(*) AS n", f"coalesce(sum({decoder.zero_dates_sql('`row`')}), 0) AS z").first()
        snap_count, snap_zero = s["n"], s["z"]

    result.changes = int(stats["n"])
    result.snapshot_rows = int(snap_count)
    result.chunks = len(new_chunks)
    result.zero_dates = int(stats["z"] or 0) + int(snap_zero or 0)

    if changes is None:
        changes = spark.createDataFrame(
            [], "op STRING, schema_version STRING, file_index BIGINT, pos BIGINT, `row` INT, "
                "before MAP<STRING,STRING>, after MAP<STRING,STRING>, commit_ts TIMESTAMP")
    return TableBatch(
        db=db, table=table, ref=ref, schema=schema,
        records=batch_records(schema, decoder, changes, snaps),
        changes=logged_changes(schema, decoder, changes) if stats["ud"] else None,
        truncated=truncated, batch_truncate=batch_truncate, emptied=emptied, chunks=new_chunks, fresh=fresh,
        pending=bool(stats["n"]) or bool(snap_count),
    )


def _apply(spark, batch: TableBatch, derived, result: TableResult, floors=None) -> None:
    """MERGE the batch (and the changes foreign-key actions derived for it), then the
    tombstones of TRUNCATE and completed chunks."""
    from binlake.silver.cascade import derived_records

    records = batch.records
    if derived is not None:
        records = records.unionByName(derived_records(derived, batch.schema))
        result.cascaded = derived.count()
    if batch.pending or derived is not None:
        source = latest_per_key(records, batch.schema, batch.truncated)
        m = merge_into_silver(spark, batch.ref, batch.schema, source)
        result.merged = m.get("numTargetRowsInserted", 0) + m.get("numTargetRowsUpdated", 0)
    if batch.batch_truncate is not None:
        result.truncated = apply_truncate(spark, batch.ref, batch.truncated)
    result.reconciled = reconcile_chunks(spark, batch.ref, batch.schema, batch.chunks, floors)


# Delta operations that change a table's rows (as opposed to its metadata or layout).
_ROW_WRITES = ("MERGE", "UPDATE", "WRITE", "DELETE", "STREAMING UPDATE", "RESTORE")


def _base_state(spark, batch: TableBatch, recorded: dict | None):
    """Silver as the last completed run left it, for deriving foreign-key actions.

    Normally that is the table as it stands (this run has not merged yet). After a run that
    was killed once it had merged some tables, it is the version the progress row recorded,
    so the same changes are derived again whatever the killed run applied.
    """
    ref = batch.ref
    if batch.fresh or recorded is None:
        return ref.read(spark).where("false")
    version = recorded.get("silver_version")
    current = ref.read(spark)
    if version is None:  # progress written before silver_version existed
        return current
    latest = _latest_version(spark, ref)
    if latest <= version:
        return current
    ops = [r["operation"] for r in ref.delta(spark).history(latest - version).select("operation").collect()]
    if any("CREATE" in op or "REPLACE" in op for op in ops):
        return ref.read(spark).where("false")
    if not any(op in _ROW_WRITES for op in ops):
        return current
    then = ref.read_version(spark, version)
    missing = [c.name for c in batch.schema.columns if c.name not in then.columns]
    if missing:
        log.warning("%s: columns %s are newer than silver version %d; foreign-key actions start from the "
                    "current table", batch.name, missing, version)
        return current
    return then


# ---------------------------------------------------------------------------------------
# The run


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


def _read_progress(spark, lh: Lakehouse) -> dict[tuple[str, str], dict]:
    lh.silver_progress.create_if_missing(spark, PROGRESS_SCHEMA, comment="binlake silver: what silver has applied, per table")
    current = lh.silver_progress.read(spark)
    if "silver_version" not in current.columns:
        # Lakehouses from before silver_version: the column is added, NULL until each table's next run.
        spark.sql(f"ALTER TABLE {lh.silver_progress.sql} ADD COLUMNS (silver_version BIGINT)")
        current = lh.silver_progress.read(spark)
    return {(r["db"], r["table"]): r.asDict() for r in current.collect()}


def _write_progress(spark, lh: Lakehouse, rows: list[tuple]) -> None:
    if not rows:
        return
    df = spark.createDataFrame(rows, PROGRESS_SCHEMA)

    def run():
        (lh.silver_progress.delta(spark).alias("t")
         .merge(df.alias("s"), "t.db = s.db AND t.`table` = s.`table`")
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    with_retry("silver progress", run)


def run_silver(spark, config: Config, progress=None) -> SilverResult:
    """Apply every new bronze record to silver; returns what was done per table.

    Raises :class:`SchemaChangeError` after all other tables were processed and their
    progress written, if any table was stopped by an incompatible schema change.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if not isinstance(config, Config):
        raise TypeError(f"config must be a binlake.config.Config, got {type(config).__name__}")
    lh = Lakehouse(config)
    for ref, what in ((lh.changelog, "bronze changelog"), (lh.snapshot_chunks, "bronze snapshot_chunks"),
                      (lh.schema_history, "bronze schema_history")):
        if not ref.exists(spark):
            raise NotReadyError(f"{what} does not exist at {ref}: run binlake snapshot or binlake capture first")

    cl_end = _latest_version(spark, lh.changelog)
    ch_end = _latest_version(spark, lh.snapshot_chunks)
    prog = _read_progress(spark, lh)
    tables = _captured_tables(spark, lh, config)

    def next_version(key, col, end):
        row = prog.get(key)
        start = 0 if row is None or row[col] is None else int(row[col]) + 1
        return start if start <= end else None

    cl_starts = {t: next_version(t, "changelog_version", cl_end) for t in tables}
    ch_starts = {t: next_version(t, "chunks_version", ch_end) for t in tables}

    cl = None
    heartbeats: list = []
    starts = [s for s in cl_starts.values() if s is not None]
    if starts:
        cl = read_cdf(spark, lh.changelog, min(starts), cl_end).persist(StorageLevel.MEMORY_AND_DISK)
        heartbeats = (cl.where(F.col("op") == "heartbeat")
                      .groupBy("_commit_version")
                      .agg(F.max(F.struct("file_index", "pos", "binlog_file")).alias("hb"))
                      .collect())
    chunk_rows: list[dict] = []
    ch_min = [s for s in ch_starts.values() if s is not None]
    if ch_min:
        chunk_rows = [r.asDict() for r in read_cdf(spark, lh.snapshot_chunks, min(ch_min), ch_end).collect()]
    floors = _snapshot_floors(spark, lh, {c["snapshot_id"] for c in chunk_rows})

    now = datetime.now(timezone.utc).replace(tzinfo=None)

    def prepare_one(db, table, res: TableResult) -> TableBatch | None:
        """Decode one table's batch; None if the table stopped."""
        ch_start = ch_starts[(db, table)]
        new_chunks = [c for c in chunk_rows if ch_start is not None and c["_commit_version"] >= ch_start
                      and c["db"] == db and c["table"] == table]
        try:
            return _prepare(spark, lh, db, table, cl, cl_starts[(db, table)], new_chunks, res)
        except (SchemaChangeError, NotReadyError) as exc:
            res.error = str(exc)
            log.error("%s", exc)
            return None

    def apply_one(batch: TableBatch, res: TableResult) -> tuple:
        """Apply one table's batch; returns its progress row."""
        _apply(spark, batch, derived.get(batch.name), res, floors)
        key = (batch.db, batch.table)
        cl_start = cl_starts[key]
        prev = prog.get(key) or {}
        hb = [h["hb"] for h in heartbeats if cl_start is not None and h["_commit_version"] >= cl_start]
        top = max(hb, key=lambda h: (h["file_index"], h["pos"])) if hb else None
        applied = ((top["binlog_file"], top["file_index"], top["pos"]) if top else
                   (prev.get("applied_file"), prev.get("applied_file_index"), prev.get("applied_pos")))
        return (
            batch.db, batch.table,
            cl_end if cl_start is not None else prev.get("changelog_version"),
            ch_end if ch_starts[key] is not None else prev.get("chunks_version"),
            applied[0], applied[1], applied[2],
            int(prev.get("zero_dates") or 0) + res.zero_dates, now, _latest_version(spark, batch.ref),
        )

    results = {f"{db}.{table}": TableResult(name=f"{db}.{table}") for db, table in tables}
    derived: dict = {}
    progress_rows = []
    overall = (None, None, None)
    try:
        with ExitStack() as stack:
            task = stack.enter_context(progress.task("silver", len(tables), "tables")) if progress is not None else None
            # Most of a small table's time is driver-side latency (Delta log reads, commits),
            # so several tables are decoded and applied at once. Every write is conditional on
            # _cdc_seq: a failure in one leaves the others correct, and the progress rows are
            # written only when all have finished.
            pool = stack.enter_context(ThreadPoolExecutor(max(1, min(TABLE_THREADS, len(tables))),
                                                          thread_name_prefix="silver"))
            prepared = [(pool.submit(prepare_one, db, table, results[f"{db}.{table}"])) for db, table in tables]
            batches = {b.name: b for b in (f.result() for f in prepared) if b is not None}
            for _ in range(len(tables) - len(batches)):
                if task:
                    task.advance()  # stopped tables

            # Foreign-key actions become change records of the child tables, derived before
            # any table is merged, from silver as the last completed run left it.
            derived = derive(spark, {
                name: CascadeTable(schema=b.schema, records=b.records, changes=b.changes, emptied=b.emptied,
                                   base=functools.partial(_base_state, spark, b, prog.get((b.db, b.table))))
                for name, b in batches.items()
            })

            futures = {pool.submit(apply_one, b, results[name]): name for name, b in batches.items()}
            for _ in as_completed(futures):
                if task:
                    task.advance()
            for future in futures:
                row = future.result()  # re-raises an unexpected failure, after the others ended
                progress_rows.append(row)
                if row[5] is not None and (overall[1] is None or (row[5], row[6]) > (overall[1], overall[2])):
                    overall = (row[4], row[5], row[6])

        faults.point("silver.before_progress")
        _write_progress(spark, lh, progress_rows)
    finally:
        if cl is not None:
            cl.unpersist()
    result = SilverResult(list(results.values()), overall)
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
