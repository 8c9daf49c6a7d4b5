"""The lock-free, parallel, chunked snapshot into bronze (``binlake snapshot``).

Per table: record the schema in ``schema_history`` at the binlog position taken before
planning, plan key-range chunks (:mod:`binlake.bronze.chunking`), persist the plan in
``snapshot_plan``, then read the chunks in waves of ``snapshot.wave_size`` as Spark tasks
(:mod:`binlake.bronze.snapshot_source`). A chunk is read with one known schema version, so
its rows are stored typed: each snapshot has its own Delta table
(:meth:`~binlake.contract.tables.Lakehouse.snapshot_table`), whose rows are the stored
schema's columns plus the chunk's identity. A wave is one Delta append of its rows and marker
rows per snapshot in it (side by side); only then are its manifest rows, built from the
markers (collected by a Spark observation of that write, else read back), appended to
``snapshot_chunks``: the per-chunk constants (watermarks, schema version, checksum) live
there, not on the rows. A chunk without a manifest row is invisible
to silver, so a run killed anywhere leaves nothing half-trusted, and the next run reads
exactly the chunks of the open snapshot that have no manifest row, under a new attempt id.

Which tables a run snapshots:

- ``run_snapshot(spark, config)``: tables that never completed a snapshot get a new one;
  an unfinished (open) snapshot is resumed, or re-planned if the table's schema changed.
- ``run_snapshot(spark, config, tables=["db.t"])``: a new snapshot of those tables, even
  if they have one and even while capture runs (rows are ordered by their low watermark).
- ``fresh=True``: a new snapshot of every target, complete or not (after a purge,
  :func:`binlake.bronze.capture.recover_from_purge` restarts capture and then does this).

Example::

    >>> result = run_snapshot(spark, config)                       # doctest: +SKIP
    >>> print(result.summary())                                    # doctest: +SKIP
    snapshot: 2 tables, 12/12 chunks, 80,000 rows in 9.1s (8,791 rows/s)
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from binlake import faults
from binlake.bronze.capture_state import current_epoch
from binlake.bronze.chunking import (
    Chunk,
    boundary_query,
    choose_arithmetic,
    is_integer_key,
    key_from_json,
    min_max_query,
    plan_arithmetic,
    plan_by_boundaries,
)
from binlake.bronze.snapshot_source import FORMAT, SnapshotDataSource, reader_options, typed_columns
from binlake.bronze.tables import (
    ensure_bronze_tables,
    record_schemas,
)
from binlake.config import Config, require_config
from binlake.console import QUIET, Console
from binlake.contract.columns import stored_schema
from binlake.contract.memo import once_per_version
from binlake.contract.position import epoch_of, file_index, log_index
from binlake.contract.schemas import (
    SNAPSHOT_ATTEMPT_ID,
    SNAPSHOT_CHUNK_ID,
    SNAPSHOT_CHUNK_STATS,
    SNAPSHOT_CHUNKS_SCHEMA,
    SNAPSHOT_PLAN_SCHEMA,
    SNAPSHOT_VERSION_PROPERTY,
    TYPED_ROWS,
    TYPED_SNAPSHOT_META,
    TYPED_SNAPSHOT_PROPERTIES,
    ManifestRow,
)
from binlake.contract.sql import spark_string
from binlake.contract.tables import Lakehouse
from binlake.contract.types import TableSchema, encode_value
from binlake.errors import LakehouseError, PreflightError
from binlake.source.catalog import table_arguments, table_schema
from binlake.source.mysql import connect, master_status, query, server_id
from binlake.spark import require_binlake_on_workers
from binlake.timing import utc_now

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake")

# Testing only: a directory through which readers pause between watermarks (see
# snapshot_source._barrier). Read on the driver because executors may not share its env.
BARRIER_ENV = "BINLAKE_TEST_SNAPSHOT_BARRIER"


@dataclass
class TableSnapshot:
    """What one run did for one table."""

    db: str
    table: str
    snapshot_id: str
    chunks_total: int
    chunks_read: int = 0
    rows: int = 0
    mode: str = "new"  # new, resumed, replanned (open snapshot whose schema changed), repair

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


@dataclass
class SnapshotResult:
    tables: list[TableSnapshot] = field(default_factory=list)
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # tables whose snapshot was already complete

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def chunks_read(self) -> int:
        return sum(t.chunks_read for t in self.tables)

    def summary(self) -> str:
        if not self.tables:
            return f"snapshot: nothing to do ({len(self.skipped)} tables already have a complete snapshot)"
        total = sum(t.chunks_total for t in self.tables)
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        lines = [
            f"snapshot: {len(self.tables)} table{'s' if len(self.tables) != 1 else ''}, "
            f"{self.chunks_read}/{total} chunks read, {self.rows:,} rows in {self.seconds:,.1f}s ({rate:,.0f} rows/s)"
        ]
        for t in self.tables:
            lines.append(
                f"  {t.name}: {t.mode} snapshot {t.snapshot_id}, {t.chunks_read} chunks read "
                f"of {t.chunks_total}, {t.rows:,} rows"
            )
        if self.skipped:
            lines.append(f"  already complete: {', '.join(self.skipped)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Pending:
    """A planned chunk still without a manifest row: ``schema`` is the source's (the reader
    decodes with it), ``version`` the schema binlake stores, its column rule applied."""

    snapshot_id: str
    schema: TableSchema
    chunk_id: int
    start_key: str | None
    end_key: str | None
    version: str

    def as_option(self) -> dict:
        return {
            "snapshot_id": self.snapshot_id,
            "db": self.schema.database,
            "table": self.schema.table,
            "chunk_id": self.chunk_id,
            "start_key": self.start_key,
            "end_key": self.end_key,
            "schema_version": self.version,
        }


# ---------------------------------------------------------------------------------------
# Public entry points


def run_snapshot(
    spark: SparkLike, config: Config, tables: Sequence[str] | None = None, fresh: bool = False, console: Console = QUIET
) -> SnapshotResult:
    """Snapshot captured tables into bronze; see the module docstring for which ones.

    ``fresh``: plan a new snapshot of every target, whatever is complete or open (named
    ``tables`` are always planned anew)."""
    require_config(config)
    if tables is not None and (isinstance(tables, str) or not all(isinstance(t, str) for t in tables)):
        raise TypeError('tables must be a list of "db.table" strings or None')
    started = time.monotonic()
    lh = Lakehouse(config)
    ensure_bronze_tables(spark, lh)

    result = SnapshotResult()
    plan_committed: Future | None = None
    with connect(config.source) as conn:
        targets = table_arguments(conn, config.source, tables or ())
        force = bool(tables) or fresh
        # A forced run plans every target anew: what is open does not matter then.
        state = {} if force else _open_state(spark, lh, targets)
        to_plan: list[tuple[TableSchema, str]] = []
        pending: list[_Pending] = []
        for db, t in targets:
            latest = state.get((db, t))
            if not force and latest is not None and latest["complete"]:
                result.skipped.append(f"{db}.{t}")  # nothing asked of the source for it
                continue
            current = table_schema(conn, config.source, db, t)
            version = stored_schema(config.source, current).version()
            if force or latest is None:
                to_plan.append((current, "new"))
            elif latest["schema_version"] != version:
                to_plan.append((current, "replanned"))
            else:
                chunks = _unmanifested(spark, lh, latest["snapshot_id"])
                pending.extend(_Pending(latest["snapshot_id"], current, cid, s, e, version) for cid, s, e in chunks)
                result.tables.append(TableSnapshot(db, t, latest["snapshot_id"], latest["planned"], mode="resumed"))
        source = _source_epoch(spark, lh, conn) if (to_plan or pending) else (0, 0)
        if to_plan:
            planned, plan_committed = _plan(spark, config, lh, conn, to_plan, source)
            for schema, snapshot_id, planned_chunks, mode in planned:
                version = stored_schema(config.source, schema).version()
                pending.extend(
                    _Pending(snapshot_id, schema, c.chunk_id, c.start_json, c.end_json, version) for c in planned_chunks
                )
                result.tables.append(
                    TableSnapshot(schema.database, schema.table, snapshot_id, len(planned_chunks), mode=mode)
                )
    _read_waves(spark, config, lh, pending, result, console, plan_committed, source)
    result.seconds = time.monotonic() - started
    return result


def _source_epoch(spark: SparkLike, lh: Lakehouse, conn) -> tuple[int, int]:
    """(source epoch, server id) the chunks' watermarks are read in: the server capture
    reads, or a clear error when the source switched and capture has not followed yet."""
    sid = server_id(conn)
    return current_epoch(spark, lh, sid), sid


def resnapshot_chunks(
    spark: SparkLike,
    config: Config,
    db: str,
    table: str,
    chunks: Sequence[tuple[str | None, str | None]],
    console: Console = QUIET,
) -> SnapshotResult:
    """Re-read only the given ``[start_key, end_key)`` ranges of one table as a new snapshot.

    ``chunks`` are (start_key, end_key) pairs as stored in ``snapshot_chunks`` (JSON arrays
    of canonical texts, ``None`` = unbounded). The new snapshot's chunk ids are 0..n-1 in
    the given order; its manifest rows (``snapshot_chunks``) carry the same bounds, so
    silver reconciles exactly those ranges. Used by ``verify --repair``.
    """
    require_config(config)
    if not isinstance(db, str) or not db or not isinstance(table, str) or not table:
        raise ValueError("db and table must be non-empty strings")
    ranges = list(chunks)
    if not ranges:
        raise ValueError("chunks is empty: pass at least one (start_key, end_key) pair")
    started = time.monotonic()
    lh = Lakehouse(config)
    ensure_bronze_tables(spark, lh)
    result = SnapshotResult()
    with connect(config.source) as conn:
        schema = table_schema(conn, config.source, db, table)
        _require_key(schema)
        planned: list[Chunk] = []
        for i, pair in enumerate(ranges):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"chunks[{i}] must be a (start_key, end_key) pair, got {pair!r}")
            start, end = (key_from_json(k) for k in pair)
            for bound in (start, end):
                if bound is not None and len(bound) != len(schema.key):
                    raise ValueError(
                        f"chunks[{i}] bound {list(bound)} has {len(bound)} values but "
                        f"{db}.{table} has {len(schema.key)} key columns {list(schema.key)}"
                    )
            planned.append(Chunk(i, start, end))
        source = _source_epoch(spark, lh, conn)
        [(schema, snapshot_id, plan, _)], plan_committed = _plan(
            spark, config, lh, conn, [(schema, "repair")], source, fixed={schema.name: planned}
        )
    version = stored_schema(config.source, schema).version()
    pending = [_Pending(snapshot_id, schema, c.chunk_id, c.start_json, c.end_json, version) for c in plan]
    result.tables.append(TableSnapshot(db, table, snapshot_id, len(plan), mode="repair"))
    _read_waves(spark, config, lh, pending, result, console, plan_committed, source)
    result.seconds = time.monotonic() - started
    return result


# ---------------------------------------------------------------------------------------
# Planning


def plan_table(conn, schema: TableSchema, chunk_size: int) -> list[Chunk]:
    """Plan one table's chunks against the live source (index-only queries, flat memory)."""
    _require_key(schema)
    keys = schema.key_columns
    db, t = schema.database, schema.table
    if is_integer_key(keys):
        r = query(conn, min_max_query(db, t, keys[0]))[0]
        if r["lo"] is None:
            return [Chunk(0, None, None)]
        est = query(
            conn,
            "SELECT TABLE_ROWS AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (db, t),
        )
        estimated = int(est[0]["n"] or 0) if est else 0
        if choose_arithmetic(int(r["lo"]), int(r["hi"]), estimated, chunk_size):
            return plan_arithmetic(int(r["lo"]), int(r["hi"]), chunk_size)

    def next_boundary(start):
        sql, params = boundary_query(db, t, keys, start, chunk_size)
        with conn.cursor() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
        return None if row is None else tuple(encode_value(c, v) for c, v in zip(keys, row))

    return plan_by_boundaries(next_boundary)


def _require_key(schema: TableSchema) -> None:
    if not schema.key:
        raise PreflightError(
            [
                f"{schema.name} has no primary key: add one, or set source.chunk_keys: "
                f'{{"{schema.name}": [unique NOT NULL columns]}}'
            ]
        )


def _new_snapshot_id() -> str:
    # Sortable by start time, unique across concurrent runs.
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex[:8]


def _plan(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    conn,
    tables: list[tuple[TableSchema, str]],
    source: tuple[int, int],
    fixed: dict[str, list[Chunk]] | None = None,
) -> tuple[list[tuple[TableSchema, str, list[Chunk], str]], Future]:
    """Record schemas, plan chunks and start persisting the plan (one Delta append for all
    tables); the future is done when the plan is committed."""
    for schema, _ in tables:
        _require_key(schema)
    # Recorded before planning, so capture (which starts at or before every lw) decodes
    # any event after this position with at least this schema.
    position = master_status(conn).in_epoch(source[0])
    stored = {s.name: stored_schema(config.source, s) for s, _ in tables}
    record_schemas(spark, lh, [(stored[s.name], position.log_index, position.pos, None) for s, _ in tables])
    now = utc_now()
    out = []
    rows = []
    for schema, mode in tables:
        chunks = (fixed or {}).get(schema.name) or plan_table(conn, schema, config.snapshot.chunk_size)
        snapshot_id = _new_snapshot_id()
        out.append((schema, snapshot_id, chunks, mode))
        for c in chunks:
            rows.append(
                (
                    snapshot_id,
                    schema.database,
                    schema.table,
                    c.chunk_id,
                    list(schema.key),
                    c.start_json,
                    c.end_json,
                    stored[schema.name].version(),
                    now,
                )
            )
        log.info("snapshot %s of %s: %d chunks planned", snapshot_id, schema.name, len(chunks))

    def commit() -> None:
        lh.snapshot_plan.save(spark.createDataFrame(rows, SNAPSHOT_PLAN_SCHEMA).write.format("delta").mode("append"))
        faults.point("snapshot.after_plan")

    # The plan commit is driver-side Delta latency, so it runs while the first wave reads.
    # Only manifest rows must wait for it (a resumed run finds its chunks through the plan);
    # rows committed without a plan are orphans like those of any unfinished wave.
    pool = ThreadPoolExecutor(1, thread_name_prefix="binlake-plan")
    try:
        return out, pool.submit(commit)
    finally:
        pool.shutdown(wait=False)


def _open_state(spark: SparkLike, lh: Lakehouse, targets: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """Per table: its latest snapshot (by plan time), whether every planned chunk has a
    manifest row, and its planned schema version."""
    from pyspark.sql import functions as F

    if not targets:
        return {}
    names = [f"{db}.{t}" for db, t in targets]
    # Once per version of each table in a process: a loop that finds nothing new to snapshot
    # asks Delta only for the newest commits.
    digest = hashlib.sha1("\n".join(sorted(names)).encode()).hexdigest()

    def planned(version: int) -> list:
        # The latest plan per table first, then the manifest counts of just those snapshots:
        # no shuffle join, and a first snapshot (no plan rows yet) costs one quick job.
        return (
            lh.snapshot_plan.read_version(spark, version)
            .where(F.concat_ws(".", "db", "table").isin(names))
            .groupBy("db", "table", "snapshot_id")
            # One plan row per chunk (a plan is one append), so count() needs no distinct.
            .agg(
                F.max("planned_at").alias("planned_at"),
                F.count(F.lit(1)).alias("planned"),
                F.first("schema_version").alias("schema_version"),
            )
            .collect()
        )

    plans = once_per_version(spark, lh.snapshot_plan, f"plans of {digest}", planned)
    latest: dict[tuple[str, str], dict] = {}
    for r in plans:
        key = (r["db"], r["table"])
        if key in latest and (latest[key]["planned_at"], latest[key]["snapshot_id"]) >= (
            r["planned_at"],
            r["snapshot_id"],
        ):
            continue
        latest[key] = {
            "snapshot_id": r["snapshot_id"],
            "planned_at": r["planned_at"],
            "planned": r["planned"],
            "schema_version": r["schema_version"],
        }
    if latest:
        ids = sorted(v["snapshot_id"] for v in latest.values())

        def manifested(version: int) -> dict:
            return {
                r["snapshot_id"]: r["done"]
                for r in lh.snapshot_chunks.read_version(spark, version)
                .where(F.col("snapshot_id").isin(ids))
                # Runs racing on one snapshot may both commit a chunk: count chunk ids once.
                .groupBy("snapshot_id")
                .agg(F.size(F.collect_set("chunk_id")).alias("done"))
                .collect()
            }

        ids_key = hashlib.sha1("\n".join(ids).encode()).hexdigest()
        done = once_per_version(spark, lh.snapshot_chunks, f"chunks of {ids_key}", manifested)
        for v in latest.values():
            v["complete"] = done.get(v["snapshot_id"], 0) >= v["planned"]
    return latest


def _unmanifested(spark: SparkLike, lh: Lakehouse, snapshot_id: str) -> list[tuple[int, str | None, str | None]]:
    from pyspark.sql import functions as F

    plan = (
        lh.snapshot_plan.read(spark)
        .where(F.col("snapshot_id") == snapshot_id)
        .select("chunk_id", "start_key", "end_key")
    )
    done = lh.snapshot_chunks.read(spark).where(F.col("snapshot_id") == snapshot_id).select("chunk_id")
    rows = plan.join(done, "chunk_id", "left_anti").dropDuplicates(["chunk_id"]).orderBy("chunk_id").collect()
    return [(r["chunk_id"], r["start_key"], r["end_key"]) for r in rows]


# ---------------------------------------------------------------------------------------
# Reading


def _read_waves(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    pending: list[_Pending],
    result: SnapshotResult,
    console: Console,
    plan_committed: Future | None,
    source: tuple[int, int],
) -> None:
    if not pending:
        if plan_committed is not None:
            plan_committed.result()
        return
    require_binlake_on_workers(spark)  # the chunks are read by binlake code on the Spark side
    spark.dataSource.register(SnapshotDataSource)
    by_table = {t.name: t for t in result.tables}
    wave_size = config.snapshot.wave_size
    barrier = os.environ.get(BARRIER_ENV)
    # A wave's snapshots are written side by side (one Delta append each): a wave of many
    # small tables is many small Spark jobs, whose driver-side latency overlaps.
    threads = max(1, min(config.snapshot.parallelism, 8))
    with (
        console.bar("snapshot", total=len(pending), unit="chunks") as bar,
        ThreadPoolExecutor(threads, thread_name_prefix="binlake-snapshot") as pool,
    ):
        for i in range(0, len(pending), wave_size):
            wave = pending[i : i + wave_size]
            # A fresh attempt id per wave: rows of a killed earlier attempt of the same chunk
            # stay in the snapshot's table but never match a manifest row.
            attempt_id = uuid.uuid4().hex
            stats = _write_wave(spark, config, lh, pool, wave, attempt_id, barrier, source)
            faults.point("snapshot.before_manifest")
            if plan_committed is not None:
                plan_committed.result()  # re-raises a failed plan commit before any manifest row
            manifest = _manifest_rows(lh, wave, stats, attempt_id)
            for row in manifest:
                t = by_table[f"{row.db}.{row.table}"]
                t.chunks_read += 1
                t.rows += row.row_count
            lh.snapshot_chunks.save(
                spark.createDataFrame(manifest, SNAPSHOT_CHUNKS_SCHEMA).write.format("delta").mode("append")
            )
            bar.advance(len(wave), items=sum(row.row_count for row in manifest))


def _write_wave(
    spark: SparkLike, config: Config, lh: Lakehouse, pool, wave: list[_Pending], attempt_id: str, barrier, source
) -> dict[tuple[str, int], dict]:
    """A wave's rows, one Delta append per snapshot in it, side by side; returns each chunk's
    marker stats by (snapshot id, chunk id)."""
    groups: dict[str, list[_Pending]] = {}
    for p in wave:
        groups.setdefault(p.snapshot_id, []).append(p)
    writes = [
        pool.submit(_write_snapshot_rows, spark, config, lh, chunks, attempt_id, barrier, source)
        for chunks in groups.values()
    ]
    by_chunk: dict[tuple[str, int], dict] = {}
    for future in writes:
        by_chunk.update(future.result())  # re-raises the first failed write
    return by_chunk


def _manifest_rows(
    lh: Lakehouse, wave: list[_Pending], stats: dict[tuple[str, int], dict], attempt_id: str
) -> list[ManifestRow]:
    """The wave's manifest rows, from the marker stats its writes observed: a chunk without one
    wrote nothing the manifest could name, which stops the snapshot before any is committed."""
    now = utc_now()
    manifest = []
    for p in wave:
        s = stats.get((p.snapshot_id, p.chunk_id))
        if s is None:
            raise LakehouseError(
                f"snapshot chunk {p.schema.name}#{p.chunk_id} left no marker row in "
                f"{lh.snapshot_table(p.schema.database, p.schema.table, p.snapshot_id)}: "
                "re-run binlake snapshot"
            )
        lw_index = int(s["lw_file_index"])
        manifest.append(
            ManifestRow(
                snapshot_id=p.snapshot_id,
                db=p.schema.database,
                table=p.schema.table,
                chunk_id=p.chunk_id,
                attempt_id=attempt_id,
                key_columns=list(p.schema.key),
                start_key=p.start_key,
                end_key=p.end_key,
                lw_file=s["lw_file"],
                lw_file_index=lw_index,
                lw_pos=int(s["lw_pos"]),
                hw_file=s["hw_file"],
                hw_file_index=log_index(epoch_of(lw_index), file_index(s["hw_file"])),
                hw_pos=int(s["hw_pos"]),
                row_count=int(s["row_count"]),
                checksum=s["checksum"],
                schema_version=p.version,
                committed_at=now,
                row_format=TYPED_ROWS,
                zero_dates=int(s.get("zero_dates") or 0),
            )
        )
    return manifest


def _write_snapshot_rows(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    chunks: list[_Pending],
    attempt_id: str,
    barrier: str | None,
    source: tuple[int, int],
) -> dict[tuple[str, int], dict]:
    """Read chunks of one snapshot and append their rows, typed, and their marker rows to the
    snapshot's table (one Delta append); returns each chunk's stats by (snapshot, chunk)."""
    first = chunks[0]
    schema = first.schema
    stored = stored_schema(config.source, schema)
    ref = lh.snapshot_table(schema.database, schema.table, first.snapshot_id)
    if not ref.exists(spark):
        create_snapshot_table(spark, ref, stored, first.snapshot_id)
    opts = reader_options(
        config.source,
        [p.as_option() for p in chunks],
        {schema.name: schema.to_json()},
        attempt_id,
        barrier,
        epoch=source[0],
        server_id=source[1],
        stored=stored,
    )
    rows = spark.read.format(FORMAT).options(**opts).load()
    if len(chunks) > config.snapshot.parallelism:
        # One task per slot, each reading its share of the chunks in turn: at most
        # `parallelism` reads against the source, a file per task instead of per chunk (a
        # billion rows make a few thousand files, not tens of thousands), and fewer tasks.
        rows = rows.coalesce(config.snapshot.parallelism)
    typed = rows.selectExpr(*typed_columns(stored))
    df, observed = observe_markers(typed, attempt_id)
    try:
        ref.save(df.write.format("delta").mode("append"))
    except Exception as exc:  # noqa: BLE001 - re-raised as one line without the options
        raise _wave_error(exc, chunks) from None
    stats = _observed_markers(observed, chunks) or _read_back_markers(spark, ref, attempt_id)
    return {(first.snapshot_id, chunk_id): s for chunk_id, s in stats.items()}


def create_snapshot_table(spark: SparkLike, ref, stored: TableSchema, snapshot_id: str) -> None:
    """Create a snapshot's typed table: ``stored``'s columns and the chunk identity."""
    from binlake.contract.sql import quote_ident

    columns = [f"{quote_ident(c.name)} {c.spark_type}" for c in stored.columns]
    columns += [f"{name} {typ} COMMENT {spark_string(comment)}" for name, typ, comment in TYPED_SNAPSHOT_META]
    ref.create_if_missing(
        spark,
        ", ".join(columns),
        {**TYPED_SNAPSHOT_PROPERTIES, SNAPSHOT_VERSION_PROPERTY: stored.version()},
        comment=f"binlake bronze: rows of snapshot {snapshot_id} of {stored.name}, typed",
    )


def observe_markers(df, attempt_id: str):
    """``df`` with a Spark observation that collects its marker rows while the write runs.

    Spark merges an observation from the one successful attempt of each write task, the
    attempt whose file Delta commits, so the markers it returns are the committed ones;
    reading them back from the table instead costs a Spark job per wave."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observed = Observation(f"binlake-snapshot-markers-{attempt_id}-{uuid.uuid4().hex[:8]}")
    marker = F.when(F.col(SNAPSHOT_CHUNK_STATS).isNotNull(), F.struct(SNAPSHOT_CHUNK_ID, SNAPSHOT_CHUNK_STATS))
    return df.observe(observed, F.to_json(F.collect_list(marker)).alias("markers")), observed


def _observed_markers(observed, chunks: list[_Pending]) -> dict[int, dict] | None:
    """The chunks' stats by chunk id from the observation, or None when it has not got
    exactly one marker per chunk (then the caller reads them back)."""
    import json

    try:
        if not _arrived(observed):
            return None
        markers = json.loads(observed.get["markers"])
    except Exception:  # any failure here only costs the read-back
        log.debug("snapshot markers not observed; reading them back", exc_info=True)
        return None
    by_chunk = {m[SNAPSHOT_CHUNK_ID]: m[SNAPSHOT_CHUNK_STATS] for m in markers}
    if len(by_chunk) != len(markers) or set(by_chunk) != {p.chunk_id for p in chunks}:
        return None
    return by_chunk


# How long to wait for an observation that has not arrived when the write returned.
_OBSERVATION_WAIT_S = 5.0


def _arrived(observed) -> bool:
    """Whether the observation's metrics are there, waiting a little for them: classic Spark
    may deliver them a moment after the write returns, and its ``get`` would hang for good
    on a Spark that never delivers them. Spark Connect has them with the write's response."""
    jo = getattr(observed, "_jo", None)
    if jo is None:
        return True
    deadline = time.monotonic() + _OBSERVATION_WAIT_S
    while not jo.future().isCompleted():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _read_back_markers(spark: SparkLike, ref, attempt_id: str) -> dict[int, dict]:
    """The attempt's markers read from the snapshot's table: what the observation holds, at
    the cost of a job."""
    from pyspark.sql import functions as F

    # Marker rows are the ones with stats; the attempt id's statistics skip every other file.
    markers = (
        ref.read(spark)
        .where((F.col(SNAPSHOT_ATTEMPT_ID) == attempt_id) & F.col(SNAPSHOT_CHUNK_STATS).isNotNull())
        .select(SNAPSHOT_CHUNK_ID, SNAPSHOT_CHUNK_STATS)
        .collect()
    )
    return {m[SNAPSHOT_CHUNK_ID]: dict(m[SNAPSHOT_CHUNK_STATS]) for m in markers}


def _wave_error(exc: Exception, wave: list[_Pending]) -> Exception:
    """One line naming the chunks and the root cause; never the reader options (password)."""
    from binlake.errors import (
        BinlakeError,
        SchemaChangeError,
        SourceChangedError,
        SourceConnectionError,
    )

    text = str(exc)
    names = sorted({p.schema.name for p in wave})
    for cls in (SchemaChangeError, SourceConnectionError, SourceChangedError):
        marker = f"{cls.__name__}: "
        if marker in text:
            return cls(text.split(marker, 1)[1].splitlines()[0])
    last = next(
        (ln.strip() for ln in reversed(text.splitlines()) if "Error" in ln or "error" in ln),
        text.splitlines()[0] if text else "",
    )
    return BinlakeError(
        f"snapshot wave of {', '.join(names)} failed: {last[:300]} (re-run binlake snapshot to continue)"
    )
