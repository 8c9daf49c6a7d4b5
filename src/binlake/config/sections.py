"""The sections of ``binlake.yml`` beside source and gold: snapshot, capture, lakehouse,
maintenance, health and history."""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from binlake.config.vocabulary import (
    BINLOG_POSITION,
    PATTERN_FIX,
    TABLE_PATTERN,
    Hint,
    OneOrMoreColumns,
    Text,
    Whole,
    declared,
    lower,
    refuse,
)
from binlake.errors import ConfigError

# ---------------------------------------------------------------------------------------
# snapshot, capture


@declared("snapshot")
class SnapshotConfig:
    chunk_size: Annotated[
        Whole, Hint(bad="must be between 1 and 10000000 rows, got {input}: 50000 is a good start")
    ] = Field(50000, ge=1, le=10_000_000, description="Rows per snapshot chunk (one keyset-paged SELECT)")
    parallelism: Annotated[
        Whole, Hint(bad="must be between 1 and 1024, got {input}: use the number of executor cores")
    ] = Field(2, ge=1, le=1024, description="Chunks read at once (Spark tasks)")
    # Each write (a "wave") also costs fixed seconds (reader planning, three Spark jobs, two
    # commits), so the default gives every task slot 16 chunks per wave: the fixed part
    # stays small next to the reading, and a crash re-reads about 16 chunk-times of work.
    chunks_per_commit: Annotated[Whole, Hint(bad="must be >= 0 (0 = 16 x parallelism), got {input}")] = Field(
        0, ge=0, description="Chunks committed per Delta write, the most a crash re-reads (0 = 16 x parallelism)"
    )

    @property
    def wave_size(self) -> int:
        return self.chunks_per_commit or 16 * self.parallelism


class StartupMode(str, enum.Enum):
    """Where the first capture starts when no resume offset exists yet."""

    INITIAL = "initial"  # snapshot, and capture from before the first chunk
    LATEST = "latest"  # the server's current position, no snapshot
    POSITION = "position"  # a given file:pos
    TIMESTAMP = "timestamp"  # the first binlog file whose first event is >= the time


class PurgePolicy(str, enum.Enum):
    """What capture does when the binlog it must resume from has been purged."""

    FAIL = "fail"
    RESNAPSHOT = "resnapshot"
    ARCHIVE = "archive"  # read the purged files from capture.archive, then go on on the server


@declared("capture")
class CaptureConfig:
    startup: Annotated[StartupMode, BeforeValidator(lower)] = Field(
        StartupMode.INITIAL,
        description="Where the first capture starts: initial (snapshot), latest, position or timestamp",
    )
    start_position: Text | None = Field(
        None, description='For startup: position, FILE:POS such as "mysql-bin.000003:4"'
    )
    start_timestamp: Text | None = Field(None, description="For startup: timestamp, ISO-8601 with a zone")
    on_purge: Annotated[PurgePolicy, BeforeValidator(lower)] = Field(
        PurgePolicy.FAIL,
        description="When the resume binlog is purged: fail, resnapshot, or archive (read it from capture.archive)",
    )
    archive: Text | None = Field(
        None,
        description="A directory of binlog files kept by mysqlbinlog --read-from-remote-server --raw "
        "--stop-never (or downloaded from the cloud provider); relative to the config file; a volume on Databricks",
    )
    purge_warning_files: Annotated[Whole, Hint(bad="must be >= 0, got {input}")] = Field(
        2, ge=0, description="Warn when the resume file is this close (in files) to the oldest one"
    )
    max_batch_rows: Annotated[Whole, Hint(bad="must be >= 1, got {input}")] = Field(
        200_000, ge=1, description="A batch ends at the first transaction boundary after this many row changes"
    )

    @model_validator(mode="after")
    def _start(self) -> CaptureConfig:
        if self.startup is StartupMode.POSITION and not BINLOG_POSITION.match(self.start_position or ""):
            raise ConfigError(
                'capture.startup is "position" but capture.start_position is missing or not FILE:POS: '
                'set it like "mysql-bin.000003:4"'
            )
        if self.on_purge is PurgePolicy.ARCHIVE and not self.archive:
            raise ConfigError(
                "capture.on_purge is archive but capture.archive is not set: set it to the directory your "
                "archive keeper (mysqlbinlog --read-from-remote-server --raw --stop-never) writes"
            )
        if self.startup is StartupMode.TIMESTAMP:
            if not self.start_timestamp:
                raise ConfigError(
                    'capture.startup is "timestamp" but capture.start_timestamp is missing: '
                    'set an ISO-8601 time with a zone, e.g. "2026-11-01T00:00:00Z"'
                )
            from datetime import datetime

            try:
                ts = datetime.fromisoformat(self.start_timestamp.replace("Z", "+00:00"))
            except ValueError:
                raise ConfigError(
                    f"capture.start_timestamp {self.start_timestamp!r} is not ISO-8601: "
                    "write it like 2026-11-01T00:00:00Z"
                ) from None
            if ts.tzinfo is None:
                raise ConfigError(f"capture.start_timestamp {self.start_timestamp!r} has no time zone: add Z or +HH:MM")
        return self


# ---------------------------------------------------------------------------------------
# lakehouse


@declared("lakehouse")
class LakehouseConfig:
    """Where the tables live: a local directory, or Unity Catalog on Databricks."""

    path: Text | None = Field(None, description="Local Delta directory (relative to the config file); or catalog")
    catalog: Text | None = Field(None, description="Unity Catalog name on Databricks; or path")
    bronze_schema: Text = Field("bronze", description="Schema of the bronze tables (Unity Catalog)")
    silver_schema: Text = Field("silver", description="Schema of the silver tables (Unity Catalog)")
    gold_schema: Text = Field("gold", description="Schema of the gold tables (Unity Catalog)")
    system_schema: Text = Field(
        "binlake_system",
        description="binlake's own tables (publish log, check results, metrics, quarantine, leases): "
        "a schema on Unity Catalog, the system/ folder locally",
    )
    system_path: Text | None = Field(
        None,
        description="Files that are not tables: <path>/system/files locally; a UC volume path with catalog",
    )

    @model_validator(mode="after")
    def _one_place(self) -> LakehouseConfig:
        if (self.path is None) == (self.catalog is None):
            raise ConfigError(
                "lakehouse needs exactly one of path (local Delta directory, e.g. .local/lakehouse) "
                "or catalog (Unity Catalog name on Databricks)"
            )
        if self.catalog is not None and not self.system_path:
            raise ConfigError(
                "lakehouse.system_path is required with lakehouse.catalog: "
                "set a Unity Catalog volume path such as /Volumes/main/binlake/system"
            )
        schemas = {
            "bronze_schema": self.bronze_schema,
            "silver_schema": self.silver_schema,
            "gold_schema": self.gold_schema,
            "system_schema": self.system_schema,
        }
        for key, name in schemas.items():
            if not name or not name.strip():
                raise ConfigError(f"lakehouse.{key} is empty: name a schema, or drop the key for its default")
        if self.catalog is not None:
            seen: dict[str, str] = {}
            for key, name in schemas.items():
                if name.lower() in seen:
                    raise ConfigError(
                        f"lakehouse.{key} and lakehouse.{seen[name.lower()]} are both {name!r}: each layer "
                        "needs a schema of its own (a table of one would take the name of another's)"
                    )
                seen[name.lower()] = key
        return self


# ---------------------------------------------------------------------------------------
# maintenance, health, history


@declared("maintenance")
class MaintenanceConfig:
    """``binlake maintain``: compaction, retention and VACUUM (docs/maintenance.md)."""

    optimize_min_files: Whole = Field(
        64, ge=2, description="A table is compacted (OPTIMIZE) once it has at least this many data files"
    )
    tombstone_retention_hours: Whole = Field(
        168, ge=0, description="Silver tombstones older than this (by source commit time) are removed"
    )
    changelog_retention_days: Whole = Field(
        30, ge=0, description="Bronze change records older than this that silver applied are removed"
    )
    vacuum_retention_hours: Annotated[
        Whole,
        Hint(
            bad="must be at least 168 (Delta's safety check: a reader or writer older than that would lose its "
            "files), got {input}"
        ),
    ] = Field(168, ge=168, description="VACUUM keeps the files of this many hours of versions (time travel)")


@declared("health")
class HealthConfig:
    """When is binlake unhealthy: ``binlake status --check`` and the bundle's lag alert."""

    max_lag_seconds: Whole = Field(
        3600, ge=1, description="Unhealthy when capture or a table's gold is behind the source by more than this"
    )


def _history_entry(value: Any) -> Any:
    return {"table": value} if isinstance(value, str) else value


_HISTORY_COLUMNS = Hint(invalid="must be a list of column names, e.g. [status, amount]")


@declared("history.tables")
class HistoryTable:
    """One entry of ``history.tables``: the tables a pattern names keep every version.

    ``track_columns`` (only these columns open a version) and ``except_columns`` (every
    column but these does) exclude each other; with neither, every column is tracked."""

    pattern: Annotated[Text, Hint(missing="{entry} needs table: a db.table pattern such as shop.orders")] = Field(
        alias="table", description="db.table pattern"
    )
    track_columns: Annotated[OneOrMoreColumns, _HISTORY_COLUMNS] | None = Field(
        None, description="Only changes of these columns open a version"
    )
    except_columns: Annotated[OneOrMoreColumns, _HISTORY_COLUMNS] = Field(
        (), description="Changes of every column but these open a version"
    )

    @model_validator(mode="after")
    def _one_choice(self) -> HistoryTable:
        if not TABLE_PATTERN.match(self.pattern):
            raise ConfigError(f"history.tables entry {self.pattern!r} is not a db.table pattern: {PATTERN_FIX}")
        if self.track_columns is not None and self.except_columns:
            raise ConfigError(
                f"history.tables entry {self.pattern!r} sets both track_columns and except_columns: keep one of them"
            )
        if self.track_columns is not None and not self.track_columns:
            raise ConfigError(
                f"history.tables entry {self.pattern!r} has an empty track_columns: list the columns "
                "whose changes open a version, or drop the key to track every column"
            )
        if any(not c for c in self.track_columns or ()) or any(not c for c in self.except_columns):
            raise refuse(
                f"{{where}}.{'track_columns' if self.track_columns else 'except_columns'} "
                "must be a list of column names, e.g. [status, amount]"
            )
        return self

    def tracked(self, columns: Sequence[str]) -> tuple[str, ...]:
        """The columns among ``columns`` (a table's, in order) whose changes open a version."""
        if self.track_columns is not None:
            return tuple(c for c in columns if c in self.track_columns)
        return tuple(c for c in columns if c not in self.except_columns)


@declared("history")
class HistoryConfig:
    """``history``: the tables silver also keeps as SCD type 2 history tables (docs/history.md).

    Example::

        history:
          tables:
            - shop.orders                              # every column tracked
            - {table: "crm.*", except_columns: [updated_at]}
            - {table: shop.customers, track_columns: [email, tier]}

    The first entry whose pattern matches a table applies to it."""

    tables: Annotated[
        tuple[
            Annotated[
                HistoryTable,
                BeforeValidator(_history_entry),
                Hint(
                    invalid='must be a "db.table" pattern or a mapping such as '
                    "{table: shop.orders, except_columns: [updated_at]}"
                ),
            ],
            ...,
        ],
        Hint(
            invalid='must be a list of "db.table" patterns or {table: ..., track_columns: [...]} '
            'entries, e.g. ["shop.orders"]'
        ),
    ] = Field(
        (), description="Tables that keep every version: db.table patterns or {table, track_columns|except_columns}"
    )

    def table(self, db: str, table: str) -> HistoryTable | None:
        name = f"{db}.{table}"
        return next((t for t in self.tables if fnmatch.fnmatchcase(name, t.pattern)), None)
