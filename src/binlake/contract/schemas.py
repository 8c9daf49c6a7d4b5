"""The schemas and row types of binlake's Delta tables beside the change log: the snapshot's
plan, rows and manifest, schema history, silver's metadata columns and progress, gold's publish
log and check results, metrics and leases."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from binlake.contract.changelog import CDC_SEQ_TYPE

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
