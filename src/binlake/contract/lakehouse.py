"""Where binlake's Delta tables live, and their schemas: the contract between the layers.

Locally tables are directories under ``lakehouse.path``::

    <path>/bronze/changelog            every binlog change, DDL and capture heartbeat
    <path>/bronze/snapshot_plan        the planned chunks of each snapshot
    <path>/bronze/snapshots/<db>/<table>/<snapshot_id>  rows read by one snapshot's chunks, typed
    <path>/bronze/snapshot_rows        rows read by snapshot chunks before typed rows (map form)
    <path>/bronze/snapshot_chunks      the chunk manifest: one row per completed chunk
    <path>/bronze/schema_history       each table's schema versions with their binlog position
    <path>/silver/<db>/<table>         current state with tombstones
    <path>/silver/<db>/<table>__history  one row per version (tables history.tables names),
                                       with __history_events and __history_facts beside it
    <path>/gold/<db>/<table>           validated current state
    <path>/gold/<db>/<table>__history  the history as of the same publish
    <path>/system/silver_progress      what silver has applied, per table
    <path>/system/publish_log          one row per table per publish
    <path>/system/check_results        Great Expectations' validation result per table per publish
    <path>/system/quarantine/<db>/<table>  rows dropped by checks with severity drop
    <path>/system/metrics              one row per command run, step and table (health)
    <path>/system/leases               which process writes which layer (binlake.contract.leases)
    <path>/system/files/continuous     the continuous mode's state (a JSON file)

So silver and gold hold only mirrored tables; binlake's own tables are in ``system``. On
Databricks the same tables are Unity Catalog tables ``<catalog>.<schema>.<name>``: the bronze,
silver, gold and system schemas, ``<db>__<table>`` names in silver and gold,
``quarantine__<db>__<table>`` in system, and the files are in the ``lakehouse.system_path``
volume. Earlier binlake versions kept the system tables in gold and silver (with leading
underscores); :mod:`binlake.contract.layout` moves them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from binlake.config import Config
from binlake.contract.delta_sql import DeltaSql
from binlake.contract.sql import quote_ident, spark_string
from binlake.errors import LakehouseError
from binlake.spark import is_connect

# The change sequence as SQL users see it: sortable, unique, totally ordered.
CDC_SEQ_TYPE = "STRUCT<file_index: BIGINT, pos: BIGINT, row: INT>"

CHANGELOG_SCHEMA = (
    "db STRING, `table` STRING, op STRING, "
    "file_index BIGINT, pos BIGINT, `row` INT, binlog_file STRING, "
    "before MAP<STRING, STRING>, after MAP<STRING, STRING>, "
    "commit_ts TIMESTAMP, gtid STRING, server_id BIGINT, schema_version STRING, "
    "ddl STRING, captured_at TIMESTAMP"
)
"""bronze/changelog: one row per :class:`ChangeRow`; ``op`` is one of the ops below.
Heartbeats (db and table NULL) mark the end of each capture batch: the transaction
boundary up to which the log is complete, also when no captured table changed.

A row image (``before``, ``after``) maps each column the binlog event carried to its
canonical text (NULL for SQL NULL). Under ``binlog_row_image=FULL`` that is every column;
a writer session with ``MINIMAL`` or ``NOBLOB`` logs fewer, and a column missing from the
map was not logged, which is not the same as NULL."""

# The change log's ops. Row changes:
INSERT, UPDATE, DELETE = "insert", "update", "delete"
DATA_OPS = (INSERT, UPDATE, DELETE)
# What a DDL statement did to a table's rows:
DDL_OP = "ddl"  # the schema (or nothing about the rows) changed
TRUNCATE_OP = "truncate"  # every row is gone, the table stays
DROP_OP = "drop"  # the table is gone under this name (DROP TABLE, or renamed away)
RENAMED_INTO_OP = "renamed_into"  # another table's rows now live under this name
DDL_OPS = (DDL_OP, TRUNCATE_OP, DROP_OP, RENAMED_INTO_OP)
EMPTYING_OPS = (TRUNCATE_OP, DROP_OP, RENAMED_INTO_OP)
"""Ops after which none of the table's older rows exist any more under its name."""
# Row changes the binlog holds as SQL text, not rows (a writer session that set
# binlog_format=STATEMENT or MIXED): ``ddl`` holds the statement. Their effect on the rows is
# unknown, so silver cannot apply them; they are kept so that it can say so and which table.
STATEMENT_OP = "statement"
HEARTBEAT_OP = "heartbeat"  # the end of a capture batch


class ChangeRow(NamedTuple):
    """One row of bronze/changelog, in :data:`CHANGELOG_SCHEMA` order."""

    db: str | None
    table: str | None
    op: str
    file_index: int
    pos: int
    row: int
    binlog_file: str
    before: dict | None
    after: dict | None
    commit_ts: datetime | None
    gtid: str | None
    server_id: int | None
    schema_version: str | None
    ddl: str | None
    captured_at: datetime | None


def heartbeat_row(
    position,
    note: str | None = None,
    captured_at: datetime | None = None,
    server_id: int | None = None,
    gtid: str | None = None,
) -> ChangeRow:
    """The row that ends a capture batch at ``position`` (a BinlogPosition), with the server
    it was read from and, on MariaDB, the GTID state at that position (what capture resumes
    from on another server)."""
    from binlake.contract.position import HEARTBEAT_ROW

    return ChangeRow(
        None,
        None,
        HEARTBEAT_OP,
        position.log_index,
        position.pos,
        HEARTBEAT_ROW,
        position.file,
        None,
        None,
        None,
        gtid,
        server_id,
        None,
        note,
        captured_at or datetime.now(timezone.utc),
    )


SNAPSHOT_PLAN_SCHEMA = (
    "snapshot_id STRING, db STRING, `table` STRING, chunk_id INT, "
    "key_columns ARRAY<STRING>, start_key STRING, end_key STRING, "
    "schema_version STRING, planned_at TIMESTAMP"
)
"""bronze/snapshot_plan. Keys are JSON arrays of canonical texts; NULL means unbounded."""

SNAPSHOT_ROWS_SCHEMA = (
    "snapshot_id STRING, db STRING, `table` STRING, chunk_id INT, attempt_id STRING, "
    "lw_file_index BIGINT, lw_pos BIGINT, schema_version STRING, `row` MAP<STRING, STRING>, "
    "chunk_stats MAP<STRING, STRING>"
)
"""bronze/snapshot_rows. A data row has ``row`` set and ``chunk_stats`` NULL. Each chunk read
also writes one marker row with ``row`` NULL and ``chunk_stats`` holding the chunk's hw_file,
hw_pos, row_count and checksum, so even an empty chunk leaves its watermarks behind."""

SNAPSHOT_ROWS_PARTITIONS = (
    "snapshot_id",
    "db",
    "table",
    "chunk_id",
    "attempt_id",
    "lw_file_index",
    "lw_pos",
    "schema_version",
)
"""The snapshot_rows columns that hold one value per chunk attempt, which new lakehouses
partition the table by. One Spark task reads one chunk attempt, so this adds no files (one
per task either way), and Parquet no longer stores eight values per row that Delta keeps
once per file. Readers (silver, the marker read-back) filter on these columns, which becomes
partition pruning."""

# Table properties of snapshot_rows that make writing it cheaper (set at creation; the
# layout migration sets them on tables an earlier binlake created):
# - Delta computes min/max/null-count statistics for the first 32 columns of every file it
#   writes, a good part of the write's CPU. Readers only ever filter snapshot_rows on the
#   per-chunk columns (silver on snapshot_id, db and table; the marker read-back on
#   attempt_id): in a table partitioned by them (SNAPSHOT_ROWS_PARTITIONS) that is partition
#   pruning and no column needs statistics; an unpartitioned table (created before the
#   partitions) keeps them on snapshot_id and attempt_id (Delta refuses statistics on
#   partition columns).
# - Parquet tries a dictionary for the row images' values, which are mostly distinct (ids,
#   texts) and overflow it after a few thousand rows, then rewrites them as plain values;
#   plain from the start is cheaper and barely bigger (pages are compressed either way).
#   Delta hands table properties to the Parquet writer, so a column-scoped key works.
# - binlake.layout says which of the two tables this is without asking Delta for its
#   details (a DESCRIBE DETAIL costs more than reading the properties).
SNAPSHOT_ROWS_LAYOUT = "binlake.layout"
_PLAIN_ROW_VALUES = {"parquet.enable.dictionary#row.key_value.value": "false"}
SNAPSHOT_ROWS_PROPERTIES = {
    SNAPSHOT_ROWS_LAYOUT: "per-chunk-partitions",
    "delta.dataSkippingNumIndexedCols": "0",
    **_PLAIN_ROW_VALUES,
}
UNPARTITIONED_SNAPSHOT_ROWS_PROPERTIES = {
    "delta.dataSkippingStatsColumns": "snapshot_id,attempt_id",
    **_PLAIN_ROW_VALUES,
}

SNAPSHOT_CHUNKS_SCHEMA = (
    "snapshot_id STRING, db STRING, `table` STRING, chunk_id INT, attempt_id STRING, "
    "key_columns ARRAY<STRING>, start_key STRING, end_key STRING, "
    "lw_file STRING, lw_file_index BIGINT, lw_pos BIGINT, hw_file STRING, hw_file_index BIGINT, hw_pos BIGINT, "
    "row_count BIGINT, checksum STRING, schema_version STRING, committed_at TIMESTAMP, "
    "row_format STRING, zero_dates BIGINT"
)
"""bronze/snapshot_chunks. Silver trusts only rows whose (snapshot_id, chunk_id, attempt_id)
has a row here, so a chunk half-written by a killed run is invisible. ``row_format`` says
where the chunk's rows are: :data:`TYPED_ROWS` in the snapshot's own typed table
(:meth:`Lakehouse.snapshot_table`), NULL (chunks written before typed rows) as row images in
``snapshot_rows``. ``zero_dates``: how many zero dates the chunk's rows held (typed rows hold
NULL there; NULL for map-form chunks, whose texts still show them)."""

TYPED_ROWS = "typed"
"""``snapshot_chunks.row_format`` of a chunk whose rows are in its snapshot's typed table."""

# The columns a typed snapshot table adds to the snapshot's columns (the stored schema of the
# snapshot's schema version, typed as silver types them). A data row has the chunk's identity
# and NULL stats; each chunk attempt also writes one marker row: every source column NULL and
# ``_cdc_chunk_stats`` holding the chunk's snapshot_id, watermarks, row count, checksum and
# zero dates, so even an empty chunk leaves them behind. Everything else that is the same for
# a whole chunk (snapshot, table, schema version, low watermark) is in the manifest row.
SNAPSHOT_CHUNK_ID = "_cdc_chunk_id"
SNAPSHOT_ATTEMPT_ID = "_cdc_attempt_id"
SNAPSHOT_CHUNK_STATS = "_cdc_chunk_stats"
TYPED_SNAPSHOT_META = (
    (SNAPSHOT_CHUNK_ID, "INT", "The chunk of the snapshot this row was read by."),
    (SNAPSHOT_ATTEMPT_ID, "STRING", "The attempt that read it: only attempts with a manifest row count."),
    (SNAPSHOT_CHUNK_STATS, "MAP<STRING, STRING>", "NULL for a data row; the chunk's stats on its marker row."),
)
SNAPSHOT_VERSION_PROPERTY = "binlake.schema_version"
"""A typed snapshot table's property: the schema version its columns are."""
# Typed snapshot tables: source column names as they are (column mapping), statistics only on
# the chunk identity (silver and the marker read-back select by it), no partitions: each of a
# wave's tasks (at most snapshot.parallelism) writes one file of the chunks it read.
TYPED_SNAPSHOT_PROPERTIES = {
    "delta.columnMapping.mode": "name",
    "delta.dataSkippingStatsColumns": f"{SNAPSHOT_CHUNK_ID},{SNAPSHOT_ATTEMPT_ID}",
}


class ManifestRow(NamedTuple):
    """One row of bronze/snapshot_chunks, in :data:`SNAPSHOT_CHUNKS_SCHEMA` order."""

    snapshot_id: str
    db: str
    table: str
    chunk_id: int
    attempt_id: str
    key_columns: list
    start_key: str | None
    end_key: str | None
    lw_file: str
    lw_file_index: int
    lw_pos: int
    hw_file: str
    hw_file_index: int
    hw_pos: int
    row_count: int
    checksum: str
    schema_version: str
    committed_at: datetime
    row_format: str | None = None
    zero_dates: int | None = None


SCHEMA_HISTORY_SCHEMA = (
    "db STRING, `table` STRING, schema_version STRING, file_index BIGINT, pos BIGINT, "
    "ddl STRING, schema_json STRING, recorded_at TIMESTAMP"
)

SILVER_METADATA_COLUMNS = (
    ("_cdc_seq", CDC_SEQ_TYPE, "Binlog change sequence (file_index, pos, row); snapshot rows use (low watermark, -1)."),
    ("_cdc_op", "STRING", "Last operation applied: insert, update, delete, truncate or snapshot."),
    ("_cdc_deleted", "BOOLEAN", "True for a tombstone: the row was deleted at _cdc_seq."),
    ("_cdc_commit_ts", "TIMESTAMP", "Source commit time of the last change (NULL for snapshot rows)."),
)

HISTORY_SUFFIX = "__history"
HISTORY_TABLE_SUFFIXES = (HISTORY_SUFFIX, f"{HISTORY_SUFFIX}_events", f"{HISTORY_SUFFIX}_facts")
"""The names a table's history tables add to its own (history, its events, its facts)."""

HISTORY_METADATA_COLUMNS = (
    ("_cdc_valid_from", CDC_SEQ_TYPE, "The change sequence of the record that opened this version."),
    ("_cdc_valid_to", CDC_SEQ_TYPE, "The change sequence of the record that ended it (NULL while current)."),
    ("_cdc_valid_from_ts", "TIMESTAMP", "Source commit time of _cdc_valid_from (NULL for a snapshot row)."),
    (
        "_cdc_valid_to_ts",
        "TIMESTAMP",
        "Source commit time of _cdc_valid_to (NULL while current, or when a snapshot "
        "row or a chunk reconciliation ended the version).",
    ),
    ("_cdc_is_current", "BOOLEAN", "True for the key's live version (no _cdc_valid_to)."),
    ("_cdc_ended_by_delete", "BOOLEAN", "True when the version ended because the row was deleted."),
)
"""The columns a history table adds to the source table's (docs/history.md)."""

PROGRESS_SCHEMA = (
    "db STRING, `table` STRING, changelog_version BIGINT, chunks_version BIGINT, "
    "applied_file STRING, applied_file_index BIGINT, applied_pos BIGINT, zero_dates BIGINT, updated_at TIMESTAMP, "
    "silver_version BIGINT, stopped STRING, history_version BIGINT"
)
"""system/silver_progress, one row per table. ``silver_version`` is the silver table's version once
the run that wrote the row had applied its batch; ``stopped`` is why silver stopped the table
and the command that recovers it (NULL while the table is applied)."""
PROGRESS_COMMENT = "binlake: what silver has applied, per table"


class ProgressRow(NamedTuple):
    """One row of system/silver_progress, in :data:`PROGRESS_SCHEMA` order."""

    db: str
    table: str
    changelog_version: int | None
    chunks_version: int | None
    applied_file: str | None
    applied_file_index: int | None
    applied_pos: int | None
    zero_dates: int
    updated_at: datetime
    silver_version: int | None
    stopped: str | None = None
    history_version: int | None = None  # the history table's version after that run (history tables only)


PUBLISH_LOG_SCHEMA = (
    "publish_id STRING, db STRING, `table` STRING, gold_version BIGINT, silver_version BIGINT, "
    "binlog_file STRING, file_index BIGINT, pos BIGINT, gtid STRING, source_time TIMESTAMP, "
    "published_at TIMESTAMP, row_count BIGINT, checks STRING, status STRING, silver_rows BIGINT, "
    "publish_group STRING"
)
"""system/publish_log: one row per table per publish attempt. ``row_count``: the rows gold
holds; ``silver_rows``: silver's live rows at ``silver_version`` (they differ by the rows drop
checks hold back)."""
# Its change data feed lets the last publish be found in the newest commits (last_published).
PUBLISH_LOG_PROPERTIES = {"delta.enableChangeDataFeed": "true"}
PUBLISH_LOG_COMMENT = "binlake: one row per table per publish (gold's commit point)"


CHECK_RESULTS_SCHEMA = (
    "publish_id STRING, publish_group STRING, db STRING, `table` STRING, status STRING, success BOOLEAN, "
    "checked_at TIMESTAMP, ge_version STRING, result STRING"
)
"""system/check_results: Great Expectations' validation result (``result``: the
``ExpectationSuiteValidationResult`` JSON GE produces) of each table a publish attempt checked
with expectations, linked to the publish log by ``publish_id``; ``status`` is the attempt's.
A publish repeated after a kill appends its results again: the newest ``checked_at`` of a
``publish_id`` and table is the one that stands."""


METRICS_SCHEMA = (
    "run_id STRING, command STRING, step STRING, `table` STRING, publish_group STRING, "
    "started_at TIMESTAMP, seconds DOUBLE, status STRING, rows_in BIGINT, changes_applied BIGINT, "
    "rows_out BIGINT, position STRING, lag_bytes BIGINT, lag_seconds DOUBLE, checks_failed INT, "
    "checks_warned INT, detail STRING, job_run_id STRING, host STRING"
)
"""system/metrics: one row per command run and step (``table`` NULL) and per table a step
touched. ``lag_bytes``/``lag_seconds``: how far the step's position is behind the source's
binlog end when the run finished (seconds: 0 when caught up, else an upper bound)."""
METRICS_COMMENT = "binlake: one row per command run, step and table"

LEASES_SCHEMA = (
    "layer STRING, holder_id STRING, command STRING, host STRING, pid BIGINT, job_id STRING, job_run_id STRING, "
    "acquired_at TIMESTAMP, renewed_at TIMESTAMP, expires_at TIMESTAMP"
)
"""system/leases: one row per layer with a single writer (capture, silver, gold): who holds
it (``holder_id``, one per process and command; the rest describes it) and until when. A lease
whose ``expires_at`` has passed is free (:mod:`binlake.contract.leases`)."""


@dataclass(frozen=True)
class TableRef:
    """A Delta table by path (local) or by Unity Catalog name (Databricks)."""

    path: str | None = None
    name: str | None = None

    @property
    def sql(self) -> str:
        """How to name the table in Spark SQL."""
        if self.name:
            return self.name
        return "delta.`" + str(self.path).replace("`", "``") + "`"

    def __str__(self) -> str:
        return self.name or str(self.path)

    def _local_path(self) -> str:
        """The directory of a table named by path (every TableRef has a name or a path)."""
        assert self.path is not None, "a TableRef needs a name or a path"
        return self.path

    def read(self, spark):
        return spark.read.table(self.name) if self.name else spark.read.format("delta").load(self.path)

    def latest_version(self, spark) -> int:
        """The table's newest version (one Delta log read)."""
        return self.newest_commit(spark)[0]

    def newest_commit(self, spark) -> tuple[int, object]:
        """``(version, commit time)`` of the table's newest commit: names one state of the
        table, even across a table dropped and created again at the same place."""
        if self.path:
            found = _log_head(spark, self.path)
            if found is not None:
                return found
        row = self.delta(spark).history(1).select("version", "timestamp").first()
        return int(row["version"]), row["timestamp"]

    def last_commit(self, spark, since: int | None = None) -> tuple[int, dict[str, int]]:
        """(version, integer metrics) of the newest commit; metrics are ``{}`` when no commit
        came after version ``since`` (Delta commits nothing for a MERGE that matched nothing)."""
        row = self.newest_commit_info(spark)
        version = int(row["version"])
        if since is not None and version <= since:
            return version, {}
        metrics = {}
        for k, v in (row["operationMetrics"] or {}).items():
            try:
                metrics[k] = int(v)
            except (TypeError, ValueError):
                pass
        return version, metrics

    def newest_commit_info(self, spark) -> dict:
        """The newest commit as :meth:`commits` describes one: from the log's newest commit
        file where the session has a JVM, a Spark job less than ``history(1)``."""
        version = self.latest_version(spark)
        return self.commits(spark, version, version)[-1]

    def description(self, spark) -> str:
        """The table's comment (Delta's ``description``): from the log's cached metadata where
        the session has a JVM, else ``DESCRIBE DETAIL`` (which computes the table's file
        statistics to answer, a few Spark jobs)."""
        snapshot = _log_snapshot(spark, self.path) if self.path else None
        if snapshot is not None:
            return snapshot.metadata().description() or ""
        return spark.sql(f"DESCRIBE DETAIL {self.sql}").select("description").first()[0] or ""

    def commits(self, spark, first: int, last: int | None = None) -> list[dict]:
        """The commits of versions ``first`` to ``last`` (default: the newest), oldest first:
        ``version``, ``timestamp`` (ms), ``operation``, ``operationParameters``, ``userMetadata``
        and ``operationMetrics``. Read from the log's commit files by Delta's log object where the
        session has a JVM (no Spark job), else from ``DESCRIBE HISTORY``."""
        found = _log_commits(spark, self, first, last)
        if found is not None:
            return found
        newest = self.latest_version(spark)
        last = newest if last is None else last
        if last < first:
            return []
        rows = (
            self.delta(spark)
            .history(newest - first + 1)
            .select("version", "timestamp", "operation", "operationParameters", "userMetadata", "operationMetrics")
            .collect()
        )
        commits = [r.asDict() | {"timestamp": int(r["timestamp"].timestamp() * 1000)} for r in rows]
        return sorted((c for c in commits if first <= c["version"] <= last), key=lambda c: c["version"])

    def properties(self, spark) -> dict[str, str]:
        """The table's properties (``SHOW TBLPROPERTIES``: the cached log's metadata, no job)."""
        return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {self.sql}").collect()}

    def is_empty(self, spark) -> bool:
        return not self.read(spark).limit(1).collect()

    def read_changes(self, spark, start: int, end: int, inserts_only: bool = True):
        """Its change data feed over versions ``[start, end]``: the rows inserted (bronze tables
        are append-only, so inserts are all there is), or every change with ``inserts_only=False``
        (``_change_type``: insert, delete, update_preimage, update_postimage)."""
        from pyspark.sql import functions as F

        reader = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", start)
            .option("endingVersion", end)
        )
        df = reader.table(self.name) if self.name else reader.load(self.path)
        return df.where(F.col("_change_type") == "insert") if inserts_only else df

    def read_at(self, spark, version: int):
        """The table as of ``version``: the latest state when that is it (Delta's cached
        snapshot, where time travel would compute the same snapshot again), else time travel."""
        if self.latest_version(spark) == version:
            df = self.read(spark)  # resolves (and pins) the latest snapshot now
            if self.latest_version(spark) == version:
                return df
        return self.read_version(spark, version)

    def read_version(self, spark, version: int):
        """The table as of an earlier version (Delta time travel)."""
        reader = spark.read.format("delta").option("versionAsOf", int(version))
        return reader.table(self.name) if self.name else reader.load(self.path)

    def delta(self, spark):
        """Delta's ``DeltaTable`` on a classic session; on a Spark Connect session the same
        calls as Delta SQL commands (:class:`binlake.contract.delta_sql.DeltaSql`), which need
        no Delta plugin on the server. Conditions and assignments are SQL text either way."""
        if is_connect(spark):
            return DeltaSql(spark, self.sql)
        from delta.tables import DeltaTable

        return DeltaTable.forName(spark, self.name) if self.name else DeltaTable.forPath(spark, self.path)

    def exists(self, spark) -> bool:
        if self.name:
            return spark.catalog.tableExists(self.name)
        path = self._local_path()
        log_dir = Path(path, "_delta_log")
        # A table exists from its first commit: a log directory without one is a table another
        # process is creating right now (reading it fails), or one whose creation was killed.
        if (log_dir / "00000000000000000000.json").is_file() or (log_dir / "_last_checkpoint").is_file():
            return True
        if log_dir.is_dir() and not any(p.suffix == ".json" or ".checkpoint." in p.name for p in log_dir.iterdir()):
            return False
        if is_connect(spark):
            return _is_delta_path(spark, self.sql)
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(spark, path)

    def drop(self, spark) -> None:
        """Remove the table and its files (a path table's directory; ``DROP TABLE`` by name)."""
        if self.name:
            spark.sql(f"DROP TABLE IF EXISTS {self.name}")
        elif Path(self._local_path()).exists():
            import shutil

            shutil.rmtree(self._local_path())

    def save(self, writer) -> None:
        """Finish a ``df.write.format('delta')...`` chain against this table."""
        if self.name:
            writer.saveAsTable(self.name)
        else:
            writer.save(self.path)

    def create_if_missing(
        self,
        spark,
        schema_ddl: str,
        properties: dict[str, str] | None = None,
        comment: str = "",
        partitioned_by: Sequence[str] = (),
    ) -> None:
        props = {"delta.appendOnly": "false", **(properties or {})}
        tbl = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
        cmt = f" COMMENT {spark_string(comment)}" if comment else ""
        parts = f" PARTITIONED BY ({', '.join(f'`{c}`' for c in partitioned_by)})" if partitioned_by else ""
        spark.sql(f"CREATE TABLE IF NOT EXISTS {self.sql} ({schema_ddl}) USING DELTA{parts}{cmt} TBLPROPERTIES ({tbl})")


# What this process computed from a table's content, by the table's newest commit (version and
# commit time, which names one state of the table even where a log was cut back and written
# again): a table at the same commit holds the same rows, so a loop that reads a slowly
# changing table (schema history) every time asks Delta only for its newest commit.
_BY_VERSION: dict[tuple[str, str], tuple[tuple, Any]] = {}


def once_per_version(spark, ref: TableRef, what: str, compute: Callable[[int], _T]) -> _T:
    """``compute(version)`` of the table's newest version, computed once per commit per
    process (``what`` names the computation). ``compute`` must read the table at ``version``."""
    head = ref.newest_commit(spark)
    key = (str(ref), what)
    hit = _BY_VERSION.get(key)
    if hit is not None and hit[0] == head:
        return hit[1]
    value = compute(head[0])
    _BY_VERSION[key] = (head, value)
    return value


# What a step of this process learnt about positions of a change log from rows it read anyway
# (silver's aggregate over the new commits): the GTID and the source commit time of the last
# change at or before a position P. The change log is append-only, so a fact never goes
# stale, and gold, publishing at P, need not read the change log again for them. A process
# that runs for weeks (``run --continuous``) learns one position a round: the most recent
# ones are kept, which are those gold asks for, and the oldest are forgotten (a forgotten
# fact costs gold one read of the change log), as the snapshot encoders bound their memos.
_POSITION_FACTS: dict[tuple[str, tuple[int, int]], tuple[str | None, str | None]] = {}
POSITION_FACTS_KEPT = 1024


def position_fact_columns() -> list:
    """The aggregate columns a change log read computes the facts from: ``g``, the newest
    ``(file_index, pos, gtid)`` with a GTID, and ``t``, the newest ``(file_index, pos, ts)``
    with a commit time (microseconds, as text)."""
    from pyspark.sql import functions as F

    commit_time = F.date_format("commit_ts", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("ts")
    return [
        F.max(F.when(F.col("gtid").isNotNull(), F.struct("file_index", "pos", "gtid"))).alias("g"),
        F.max(F.when(F.col("commit_ts").isNotNull(), F.struct("file_index", "pos", commit_time))).alias("t"),
    ]


def remember_position_facts(changelog: TableRef, p, gtid: str | None, source_time: str | None) -> None:
    """Record ``(gtid, source_time)`` of the last change at or before ``p`` (a BinlogPosition),
    None where no change at or before ``p`` has one (a source without GTIDs)."""
    key = (str(changelog), p.key())
    _POSITION_FACTS.pop(key, None)  # a dict keeps insertion order: this one is now the newest
    _POSITION_FACTS[key] = (gtid, source_time)
    while len(_POSITION_FACTS) > POSITION_FACTS_KEPT:
        del _POSITION_FACTS[next(iter(_POSITION_FACTS))]


def position_facts(changelog: TableRef, p) -> tuple[str | None, str | None] | None:
    """What :func:`remember_position_facts` recorded for ``p``, or None if nothing was."""
    return _POSITION_FACTS.get((str(changelog), p.key()))


# The same facts over every commit of the change log up to a version, as the aggregate's
# ``g`` and ``t`` structs, so that a later read of the commits after it completes them: a
# source without GTIDs (or a batch without any) then needs no read of the whole log.
_FACTS_THROUGH: dict[str, tuple[int, int, Any, Any]] = {}


def remember_facts_through(spark, changelog: TableRef, version: int, g, t) -> None:
    """Record the newest ``g`` and ``t`` (:func:`position_fact_columns`) over the commits up
    to ``version``. Only where Delta's log object answers for the commit's time: asking
    history instead would cost a query every run (Spark Connect)."""
    when = _commit_time(spark, changelog, version)
    if when is not None:
        _FACTS_THROUGH[str(changelog)] = (version, when, g, t)


def facts_through(spark, changelog: TableRef, version: int) -> tuple[Any, Any] | None:
    """What :func:`remember_facts_through` recorded for ``version``, or None. The commit's
    time tells it from another commit written at that version since (a table recreated)."""
    if version < 0:
        return None, None
    hit = _FACTS_THROUGH.get(str(changelog))
    if hit is None or hit[0] != version:
        return None
    when = _commit_time(spark, changelog, version)
    return (hit[2], hit[3]) if when is not None and when == hit[1] else None


def _commit_time(spark, ref: TableRef, version: int) -> int | None:
    """The commit time (ms) of ``version`` from Delta's log object, or None where it does not answer."""
    found = _log_commits(spark, ref, version, version)
    return found[0]["timestamp"] if found and len(found) == 1 else None


def _delta_log(spark, path: str):
    """Delta's log object for the table at ``path`` (the JVM keeps one per table)."""
    # The class by its full name, in one call: walking `_jvm.org.apache...` asks the JVM about
    # each package name in turn, and each one that is not a class sends its class loader
    # through every jar on the class path.
    return getattr(spark.sparkContext._jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, str(path)
    )


def _log_snapshot(spark, path: str):
    """The newest snapshot of the Delta table at ``path`` from Delta's own log object, which the
    JVM keeps between calls (a listing of the log, no Spark job); None where that object is
    not reachable (a Spark Connect session has no JVM to ask, another Delta build may lack it)."""
    if is_connect(spark):
        return None
    try:
        log = _delta_log(spark, path)
        return log.update(False, getattr(log, "update$default$2")(), getattr(log, "update$default$3")())
    except Exception:  # noqa: BLE001 - py4j errors of any kind mean: ask Spark SQL instead
        return None


def _log_head(spark, path: str) -> tuple[int, int] | None:
    """(version, commit time in ms) of the newest commit of the Delta table at ``path``, from
    :func:`_log_snapshot`: a few milliseconds where ``history(1)`` runs a Spark job. None
    where the log object is not reachable: the caller asks history."""
    snapshot = _log_snapshot(spark, path)
    return None if snapshot is None else (int(snapshot.version()), int(snapshot.timestamp()))


def _log_commits(spark, ref: TableRef, first: int, last: int | None) -> list[dict] | None:
    """:meth:`TableRef.commits` through Delta's log object (``DeltaLog.getChanges``), or None
    where it is not reachable (Spark Connect, a table known only by name, another Delta build)."""
    if is_connect(spark) or not ref.path:
        return None
    try:
        delta_log = _delta_log(spark, ref.path)
        changes = delta_log.getChanges(int(first), False)
        out = []
        while changes.hasNext():
            pair = changes.next()
            version, actions = int(pair._1()), pair._2()
            if last is not None and version > last:
                break
            for i in range(actions.size()):
                action = actions.apply(i)
                if action.getClass().getSimpleName() != "CommitInfo":
                    continue
                metadata, metrics = action.userMetadata(), action.operationMetrics()
                out.append(
                    {
                        "version": version,
                        "timestamp": int(action.timestamp().getTime()),
                        "operation": action.operation(),
                        "operationParameters": _scala_map(action.operationParameters()),
                        "userMetadata": metadata.get() if metadata.isDefined() else None,
                        "operationMetrics": _scala_map(metrics.get()) if metrics.isDefined() else None,
                    }
                )
        return out
    except Exception:  # noqa: BLE001 - py4j errors of any kind mean: ask history() instead
        return None


def _scala_map(m) -> dict[str, str]:
    out = {}
    keys = m.keys().iterator()
    while keys.hasNext():
        k = keys.next()
        out[k] = m.apply(k)
    return out


def _is_delta_path(spark, table_sql: str) -> bool:
    """Whether a path that is not a local directory holds a Delta table, asked in SQL (a
    Spark Connect session has no ``DeltaTable.isDeltaTable``): Delta refuses ``DESCRIBE
    DETAIL`` of a path without a Delta log."""
    from pyspark.errors import AnalysisException

    try:
        return spark.sql(f"DESCRIBE DETAIL {table_sql}").select("format").first()[0] == "delta"
    except AnalysisException:
        return False


_T = TypeVar("_T")
_RETRIES = 6
log = logging.getLogger("binlake.lakehouse")


def is_write_conflict(exc: BaseException) -> bool:
    """True when a Delta write lost a race with a concurrent writer (retrying is safe for
    every binlake write, each being conditional or idempotent)."""
    names = {type(exc).__name__} | {c.__name__ for c in type(exc).__mro__}
    text = str(exc)
    return any(
        "Concurrent" in n or n in ("MetadataChangedException", "ProtocolChangedException") for n in names
    ) or any(
        marker in text
        for marker in (
            "ConcurrentAppendException",
            "ConcurrentDeleteReadException",
            "ConcurrentDeleteDeleteException",
            "ConcurrentTransactionException",
            "DELTA_CONCURRENT_",
            # Two processes creating the same table: the one whose first commit lost.
            "ProtocolChangedException",
            "DELTA_PROTOCOL_CHANGED",
            "MetadataChangedException",
            "DELTA_METADATA_CHANGED",
        )
    )


def with_retry(what: str, fn: Callable[[], _T], retries: int = _RETRIES) -> _T:
    """Run a Delta write, retrying when a concurrent writer (OPTIMIZE, another job) won the race.

    Only for writes that are correct when re-run against a newer table version: conditional
    on ``_cdc_seq`` (silver) or replacing what they write (progress, gold).
    """
    for attempt in range(1, retries + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == retries or not is_write_conflict(exc):
                raise
            wait = min(0.5 * 2 ** (attempt - 1), 8.0)
            log.warning(
                "%s conflicted with a concurrent write (%s); retry %d in %.1fs", what, type(exc).__name__, attempt, wait
            )
            time.sleep(wait)
    raise AssertionError("unreachable")


def delete_where(spark, ref: TableRef, condition, what: str, metric: str = "numDeletedRows") -> int:
    """One Delta DELETE of ``condition`` (SQL text or Column), retried against a concurrent
    writer; returns the commit's ``metric`` (0 when nothing matched: Delta then commits nothing)."""

    def delete() -> int:
        before = ref.latest_version(spark)
        ref.delta(spark).delete(condition)
        return int(ref.last_commit(spark, since=before)[1].get(metric, 0) or 0)

    return with_retry(what, delete)


class Lakehouse:
    """Table locations for one config."""

    def __init__(self, config: Config):
        self.config = config
        lh = config.lakehouse
        self.root = config.lakehouse_root  # None on Unity Catalog
        self.catalog = lh.catalog

    def _schema_sql(self, layer: str) -> str:
        """A layer's Unity Catalog schema in Spark SQL (the config requires a catalog wherever
        it has no path)."""
        schema = {
            "bronze": self.config.lakehouse.bronze_schema,
            "silver": self.config.lakehouse.silver_schema,
            "gold": self.config.lakehouse.gold_schema,
            "system": self.config.lakehouse.system_schema,
        }[layer]
        return f"{quote_ident(str(self.catalog))}.{quote_ident(str(schema))}"

    def _ref(self, layer: str, *parts: str) -> TableRef:
        if self.root is not None:
            return TableRef(path=str(Path(self.root, layer, *parts)))
        return TableRef(name=f"{self._schema_sql(layer)}.{quote_ident('__'.join(parts))}")

    # bronze
    @property
    def changelog(self) -> TableRef:
        return self._ref("bronze", "changelog")

    @property
    def snapshot_plan(self) -> TableRef:
        return self._ref("bronze", "snapshot_plan")

    @property
    def snapshot_rows(self) -> TableRef:
        return self._ref("bronze", "snapshot_rows")

    def snapshot_table(self, db: str, table: str, snapshot_id: str) -> TableRef:
        """The typed rows of one snapshot of ``db.table`` (every chunk attempt of it)."""
        return self._ref("bronze", "snapshots", db, table, snapshot_id)

    def snapshot_tables(self, spark, db: str, table: str) -> dict[str, TableRef]:
        """The typed snapshot tables of ``db.table`` that exist, by snapshot id (found by
        listing: a snapshot killed before its manifest has one too)."""
        if self.root is not None:
            base = Path(self.root, "bronze", "snapshots", db, table)
            # A table whose first commit is still being written (a snapshot beside) is not one yet.
            found = (
                sorted(d.parent.name for d in base.glob("*/_delta_log") if (d / "00000000000000000000.json").exists())
                if base.is_dir()
                else []
            )
            return {sid: self.snapshot_table(db, table, sid) for sid in found}
        prefix = f"snapshots__{db}__{table}__"
        rows = spark.sql(f"SHOW TABLES IN {self._schema_sql('bronze')}").collect()
        return {
            r["tableName"][len(prefix) :]: self.snapshot_table(db, table, r["tableName"][len(prefix) :])
            for r in rows
            if r["tableName"].lower().startswith(prefix.lower())
        }

    @property
    def snapshot_chunks(self) -> TableRef:
        return self._ref("bronze", "snapshot_chunks")

    @property
    def schema_history(self) -> TableRef:
        return self._ref("bronze", "schema_history")

    # silver
    def silver(self, db: str, table: str) -> TableRef:
        return self._ref("silver", db, table)

    # silver history (docs/history.md): only for the tables history.tables names
    def silver_history(self, db: str, table: str) -> TableRef:
        """One row per version of each key (SCD type 2)."""
        return self._ref("silver", db, f"{table}{HISTORY_TABLE_SUFFIXES[0]}")

    def silver_history_events(self, db: str, table: str) -> TableRef:
        """Every record silver applied to the table, a set by (key, ``_cdc_seq``)."""
        return self._ref("silver", db, f"{table}{HISTORY_TABLE_SUFFIXES[1]}")

    def silver_history_facts(self, db: str, table: str) -> TableRef:
        """The table's TRUNCATE-like sequences and completed snapshot chunks."""
        return self._ref("silver", db, f"{table}{HISTORY_TABLE_SUFFIXES[2]}")

    # gold
    def gold(self, db: str, table: str) -> TableRef:
        return self._ref("gold", db, table)

    def gold_history(self, db: str, table: str) -> TableRef:
        """The published SCD type 2 history: silver's, as of the publish's position."""
        return self._ref("gold", db, f"{table}{HISTORY_SUFFIX}")

    # system: binlake's own tables, apart from the mirrored ones
    @property
    def silver_progress(self) -> TableRef:
        return self._ref("system", "silver_progress")

    @property
    def publish_log(self) -> TableRef:
        return self._ref("system", "publish_log")

    @property
    def check_results(self) -> TableRef:
        return self._ref("system", "check_results")

    @property
    def metrics(self) -> TableRef:
        return self._ref("system", "metrics")

    def quarantine(self, db: str, table: str) -> TableRef:
        return self._ref("system", "quarantine", db, table)

    @property
    def leases(self) -> TableRef:
        """Who writes which layer; also carries the lakehouse's layout version."""
        return self._ref("system", "leases")

    # files
    @property
    def system_path(self) -> str:
        if self.config.lakehouse.system_path:
            return self.config.lakehouse.system_path
        return str(Path(self.root or ".", "system", "files"))

    def system_dir(self, name: str) -> str:
        """A directory of files (not tables) in the system location, such as the continuous
        mode's state."""
        return str(Path(self.system_path, name))

    # Where earlier binlake versions (layout 0) kept the system tables: in gold and silver,
    # with leading underscores. Only the layout migration (binlake.contract.layout) reads these.

    def layout_0_table(self, name: str) -> TableRef:
        """Where layout 0 kept system table ``name`` (``silver_progress``, ``publish_log``,
        ``check_results`` or ``metrics``)."""
        layer, old = _LAYOUT_0_PLACES[name]
        return self._ref(layer, old)

    def layout_0_quarantine(self, spark) -> list[tuple[TableRef, TableRef]]:
        """``(where layout 0 kept it, where it is now)`` of each quarantine table an earlier
        binlake wrote (found by listing)."""
        if self.root is not None:
            old = Path(self.root, "gold", "_quarantine")
            found = sorted(old.glob("*/*/_delta_log")) if old.is_dir() else []
            return [(TableRef(path=str(d.parent)), self.quarantine(d.parent.parent.name, d.parent.name)) for d in found]
        # On Unity Catalog `_quarantine__<db>__<table>` cannot be split back into db and
        # table when either holds "__"; the new name keeps the same tail.
        pairs = []
        for row in spark.sql(f"SHOW TABLES IN {self._schema_sql('gold')} LIKE '_quarantine__*'").collect():
            name = row["tableName"]
            tail = name[len("_quarantine__") :]
            pairs.append((self._ref("gold", name), self._ref("system", f"quarantine__{tail}")))
        return pairs

    def layout_0_markers(self) -> list[TableRef]:
        """Tables only an earlier binlake writes (the system tables at their layout 0 places),
        found without listing anything. Bronze's tables say nothing: this binlake's layer
        functions write them too, before any command has recorded a layout."""
        return [self.layout_0_table(name) for name in _LAYOUT_0_PLACES]

    @property
    def layout_0_files(self) -> str | None:
        """The local files directory of layout 0 (``<path>/_system``); None when the config
        names ``lakehouse.system_path``, which did not move."""
        if self.config.lakehouse.system_path or self.root is None:
            return None
        return str(Path(self.root, "_system"))


_LAYOUT_0_PLACES = {
    "silver_progress": ("silver", "_progress"),
    "publish_log": ("gold", "_publish_log"),
    "check_results": ("gold", "_check_results"),
    "metrics": ("gold", "_metrics"),
}


def name_clashes(tables: Iterable[tuple[str, str]]) -> list[str]:
    """One line per pair of source tables that would share a lakehouse table, with the fix.

    A table ``db.t`` becomes ``<db>__<t>`` on Unity Catalog (also ``<db>__<t>__history`` and
    the history's events and facts, whether or not history is enabled now, so enabling it later
    cannot clash), and Unity Catalog compares names without case. So ``a__b.c`` and ``a.b__c``
    clash, as do ``shop.x__history`` and ``shop.x``'s history, and ``Shop.Orders`` and
    ``shop.orders``. Checked for every lakehouse, local ones too: a config that works on a
    laptop must work on Databricks."""

    def role(suffix: str, db: str, table: str) -> str:
        kind = suffix[2:].replace("_", " ") + " table" if suffix else "table"
        return f"the {kind} of {db}.{table}"

    owner: dict[str, tuple[str, str, str]] = {}
    clashes = []
    for db, table in sorted(set(tables)):
        for suffix in ("", *HISTORY_TABLE_SUFFIXES):
            name = f"{db}__{table}{suffix}".lower()
            other = owner.setdefault(name, (db, table, suffix))
            if other[:2] == (db, table):
                continue
            clashes.append(
                f"source tables {other[0]}.{other[1]} and {db}.{table} would share the lakehouse table {name} "
                f"({role(other[2], *other[:2])} and {role(suffix, db, table)}; Unity Catalog names are "
                "<db>__<table>, compared without case): exclude one of them with source.exclude"
            )
            break
    return clashes


# What the JVM's file systems say when the lakehouse refuses a write (java.io, Hadoop, the
# cloud connectors); the path, when present, sits just before the reason.
_STORAGE_FAILURE = re.compile(
    r"(?:(?P<path>(?:[a-z0-9]+:)?/[^\s():]+)[: ]*\(?)?"
    r"(?P<reason>Operation not permitted|Permission denied|Access ?Denied|No space left on device|"
    r"Read-only file system|Disk quota exceeded)",
    re.IGNORECASE,
)


def storage_error(exc: BaseException) -> LakehouseError | None:
    """A :class:`LakehouseError` when ``exc`` is a refused write to the lakehouse (permissions,
    a read-only mount, a full disk), else None. Spark aborts such a job before Delta commits,
    so the step that raised it committed nothing."""
    if isinstance(exc, LakehouseError):
        return exc
    refused = storage_refusal(exc)
    if refused is None:
        return None
    return LakehouseError(
        f"cannot write {refused}; nothing of this step was committed: "
        "fix the location's permissions or free space, then run the same command again"
    )


def storage_refusal(exc: BaseException) -> str | None:
    """``"<path>: <reason>"`` of a refused lakehouse write in ``exc``'s text, else None."""
    m = _STORAGE_FAILURE.search(str(exc))
    if m is None:
        return None
    return f"{m.group('path') or 'the lakehouse location'}: {m.group('reason')}"
