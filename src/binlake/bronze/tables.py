"""Creating the bronze tables and recording schema versions (shared by snapshot and capture)."""

from __future__ import annotations

from binlake.lakehouse import (
    CHANGELOG_SCHEMA,
    SCHEMA_HISTORY_SCHEMA,
    SNAPSHOT_CHUNKS_SCHEMA,
    SNAPSHOT_PLAN_SCHEMA,
    SNAPSHOT_ROWS_SCHEMA,
    Lakehouse,
)
from binlake.source.types import TableSchema

# Silver reads the change log and the chunk manifest incrementally through the change
# data feed; the log is append-only by contract.
_CDF = {"delta.enableChangeDataFeed": "true"}


def ensure_bronze_tables(spark, lh: Lakehouse) -> None:
    """Create every bronze table that does not exist yet (idempotent, safe to race)."""
    from concurrent.futures import ThreadPoolExecutor

    tables = [
        (lh.changelog, CHANGELOG_SCHEMA, {**_CDF, "delta.appendOnly": "true"},
         "binlake bronze: every binlog row change, DDL and capture heartbeat"),
        (lh.snapshot_plan, SNAPSHOT_PLAN_SCHEMA, None, "binlake bronze: planned snapshot chunks"),
        (lh.snapshot_rows, SNAPSHOT_ROWS_SCHEMA, None, "binlake bronze: rows read by snapshot chunks"),
        (lh.snapshot_chunks, SNAPSHOT_CHUNKS_SCHEMA, _CDF, "binlake bronze: manifest of completed snapshot chunks"),
        (lh.schema_history, SCHEMA_HISTORY_SCHEMA, None, "binlake bronze: table schema versions by binlog position"),
    ]
    # Creating a Delta table is driver-side latency (commit, log listing), not cluster work:
    # the five at once took 5-6 s where one after another took 11-15 s.
    with ThreadPoolExecutor(len(tables)) as pool:
        created = [pool.submit(ref.create_if_missing, spark, schema, properties, comment=comment)
                   for ref, schema, properties, comment in tables]
        for future in created:
            future.result()  # re-raises the first failure here


def known_schema_versions(spark, lh: Lakehouse) -> set[tuple[str, str, str]]:
    """(db, table, schema_version) already in schema_history."""
    # A few rows per table: deduplicated here rather than by a shuffle stage.
    rows = lh.schema_history.read(spark).select("db", "table", "schema_version").collect()
    return {(r["db"], r["table"], r["schema_version"]) for r in rows}


def record_schemas(spark, lh: Lakehouse, entries: list[tuple[TableSchema, int, int, str | None]]) -> int:
    """Append (schema, file_index, pos, ddl) entries whose version is new; returns how many.

    A version is identified by the table's column names, Spark types and key
    (:meth:`TableSchema.version`), so the snapshot and the binlog agree on it.
    """
    from datetime import datetime, timezone

    from binlake.lakehouse import SCHEMA_HISTORY_SCHEMA

    if not entries:
        return 0
    known = known_schema_versions(spark, lh)
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    rows = []
    for schema, file_index, pos, ddl in entries:
        key = (schema.database, schema.table, schema.version())
        if key in known and ddl is None:
            continue
        known.add(key)
        rows.append((schema.database, schema.table, schema.version(), file_index, pos, ddl, schema.to_json(), now))
    if rows:
        df = spark.createDataFrame(rows, SCHEMA_HISTORY_SCHEMA.replace("TIMESTAMP", "TIMESTAMP"))
        lh.schema_history.save(df.write.format("delta").mode("append"))
    return len(rows)


def latest_schema(spark, lh: Lakehouse, db: str, table: str) -> TableSchema | None:
    """The most recent schema version recorded for a table (by binlog position)."""
    from pyspark.sql import functions as F

    rows = (
        lh.schema_history.read(spark)
        .where((F.col("db") == db) & (F.col("table") == table))
        .orderBy(F.col("file_index").desc(), F.col("pos").desc(), F.col("recorded_at").desc())
        .limit(1)
        .collect()
    )
    return TableSchema.from_json(rows[0]["schema_json"]) if rows else None
