"""Creating the bronze tables and recording schema versions (shared by snapshot and capture)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from binlake.contract.changelog import CHANGELOG_SCHEMA
from binlake.contract.memo import once_per_version
from binlake.contract.schemas import SCHEMA_HISTORY_SCHEMA, SNAPSHOT_CHUNKS_SCHEMA, SNAPSHOT_PLAN_SCHEMA
from binlake.contract.tables import Lakehouse
from binlake.contract.types import TableSchema
from binlake.contract.write_errors import with_retry

if TYPE_CHECKING:
    from binlake.spark import SparkLike

# Silver reads the change log and the chunk manifest incrementally through the change
# data feed; the log is append-only by contract.
_CDF = {"delta.enableChangeDataFeed": "true"}


def ensure_bronze_tables(spark: SparkLike, lh: Lakehouse) -> bool:
    """Create every bronze table that does not exist yet (idempotent, safe to race); True if
    any was created. Snapshot rows go to one typed table per snapshot, created by the snapshot
    (``snapshot_rows``, their map form before, is only read where an earlier binlake wrote it)."""
    from concurrent.futures import ThreadPoolExecutor

    tables = [
        (
            lh.changelog,
            CHANGELOG_SCHEMA,
            {**_CDF, "delta.appendOnly": "true"},
            "binlake bronze: every binlog row change, DDL and capture heartbeat",
            (),
        ),
        (lh.snapshot_plan, SNAPSHOT_PLAN_SCHEMA, None, "binlake bronze: planned snapshot chunks", ()),
        (lh.snapshot_chunks, SNAPSHOT_CHUNKS_SCHEMA, _CDF, "binlake bronze: manifest of completed snapshot chunks", ()),
        (
            lh.schema_history,
            SCHEMA_HISTORY_SCHEMA,
            None,
            "binlake bronze: table schema versions by binlog position",
            (),
        ),
    ]
    # Telling a table exists is a file-system (or catalog) look-up; a CREATE TABLE IF NOT
    # EXISTS reads the table's log even when it is there, on every run of every command.
    missing = [t for t in tables if not t[0].exists(spark)]
    if not missing:
        return False
    # Creating a Delta table is driver-side latency (commit, log listing), not cluster work,
    # so the missing tables are created side by side rather than one after another.
    with ThreadPoolExecutor(len(missing)) as pool:
        created = [
            pool.submit(ref.create_if_missing, spark, schema, properties, comment=comment, partitioned_by=parts)
            for ref, schema, properties, comment, parts in missing
        ]
        for future in created:
            future.result()  # re-raises the first failure here
    return True


def known_schema_versions(spark: SparkLike, lh: Lakehouse) -> set[tuple[str, str, str]]:
    """(db, table, schema_version) already in schema_history."""

    def compute(version: int) -> frozenset[tuple[str, str, str]]:
        # A few rows per table: deduplicated here rather than by a shuffle stage.
        rows = lh.schema_history.read_version(spark, version).select("db", "table", "schema_version").collect()
        return frozenset((r["db"], r["table"], r["schema_version"]) for r in rows)

    return set(once_per_version(spark, lh.schema_history, "known versions", compute))


def record_schemas(spark: SparkLike, lh: Lakehouse, entries: list[tuple[TableSchema, int, int, str | None]]) -> int:
    """Append (schema, file_index, pos, ddl) entries whose version is new; returns how many.

    A version is identified by the table's column names, Spark types and key
    (:meth:`TableSchema.version`), so the snapshot and the binlog agree on it.
    """
    from binlake.contract.schemas import SCHEMA_HISTORY_SCHEMA
    from binlake.timing import utc_now

    if not entries:
        return 0
    known = known_schema_versions(spark, lh)
    now = utc_now()
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


def latest_schemas(spark: SparkLike, lh: Lakehouse) -> dict[tuple[str, str], TableSchema]:
    """Every table's most recent schema version (by binlog position), from one read (once
    per version of schema_history in a process)."""

    def compute(version: int) -> dict[tuple[str, str], TableSchema]:
        rows = (
            lh.schema_history.read_version(spark, version)
            .select("db", "table", "file_index", "pos", "recorded_at", "schema_json")
            .collect()
        )
        latest: dict[tuple[str, str], tuple] = {}
        for r in rows:
            rank = (r["file_index"] or 0, r["pos"] or 0, r["recorded_at"])
            key = (r["db"], r["table"])
            if key not in latest or rank > latest[key][0]:
                latest[key] = (rank, r["schema_json"])
        return {key: TableSchema.from_json(text) for key, (_, text) in latest.items()}

    return dict(once_per_version(spark, lh.schema_history, "latest schemas", compute))


def latest_schema(spark: SparkLike, lh: Lakehouse, db: str, table: str) -> TableSchema | None:
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


@contextmanager
def changelog_deletable(spark: SparkLike, lh: Lakehouse) -> Iterator[None]:
    """Lift the change log's append-only guard for the deletes inside the block (retention,
    erasure), and put it back even when they fail; readers take only its inserts. A process
    killed inside leaves it lifted: :func:`restore_append_only` puts it back."""
    _set_append_only(spark, lh, False)
    try:
        yield
    finally:
        _set_append_only(spark, lh, True)


def restore_append_only(spark: SparkLike, lh: Lakehouse) -> None:
    """Put the change log's append-only guard back if a killed process left it lifted."""
    if lh.changelog.exists(spark) and lh.changelog.properties(spark).get("delta.appendOnly") == "false":
        _set_append_only(spark, lh, True)


def _set_append_only(spark: SparkLike, lh: Lakehouse, on: bool) -> None:
    value = "true" if on else "false"
    with_retry(
        "change-log append-only guard",
        lambda: spark.sql(f"ALTER TABLE {lh.changelog.sql} SET TBLPROPERTIES ('delta.appendOnly' = '{value}')"),
    )
