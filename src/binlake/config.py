"""``binlake.yml``: loaded into frozen dataclasses and checked on load.

Every check raises :class:`~binlake.errors.ConfigError` with a one-line message naming the
key and saying how to fix it. Values may reference environment variables as ``${NAME}``;
the password may also be a Databricks secret reference ``{{secrets/<scope>/<key>}}``,
read through databricks-sdk when a connection first needs it (see :mod:`binlake.secrets`).

Example::

    >>> cfg = load_config_text('''
    ... source: {host: 127.0.0.1, port: 3307, user: cdc, password: pw, server_id: 5401,
    ...          tables: ["shop.*"]}
    ... lakehouse: {path: .local/lakehouse}
    ... ''')
    >>> cfg.snapshot.chunk_size
    50000
"""

from __future__ import annotations

import enum
import fnmatch
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from binlake.column_rules import HASH, MASKS, NULL, ColumnRuleLogic
from binlake.errors import ConfigError
from binlake.expectations import Expectation, Severity, SuiteFile, read_suite_file
from binlake.secrets import Secret

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# db.table: MySQL names may hold inner spaces ("my db"), never a dot; leading or trailing
# whitespace is almost always a typo, so it is refused.
_NAME_PART = r"[^.\s](?:[^.]*[^.\s])?"
_TABLE_PATTERN = re.compile(rf"^{_NAME_PART}\.{_NAME_PART}$")
_BINLOG_POSITION = re.compile(r"^(?P<file>[^:\s]+\.\d+):(?P<pos>\d+)$")


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


@dataclass(frozen=True)
class TlsConfig:
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify_identity: bool = True

    @property
    def enabled(self) -> bool:
        return self.ca is not None


@dataclass(frozen=True)
class ColumnRule(ColumnRuleLogic):
    """Which columns of the tables ``pattern`` matches binlake keeps and masks; what it does
    is :class:`binlake.column_rules.ColumnRuleLogic`."""

    pattern: str
    include: tuple[str, ...] | None = None  # None: every column not excluded
    exclude: tuple[str, ...] = ()
    mask: Mapping[str, str] = field(default_factory=dict)  # column -> hash | null
    mask_key: bool = False

    def __post_init__(self) -> None:
        self.check_consistent()

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "ColumnRule":
        return ColumnRule(
            pattern=d["pattern"],
            include=tuple(d["include"]) if d["include"] is not None else None,
            exclude=tuple(d["exclude"]),
            mask=dict(d["mask"]),
            mask_key=bool(d["mask_key"]),
        )


BINLOG_READERS = 32
"""The most binlog dumps one capture batch opens: reader ``i`` registers as server id
``server_id + 1 + i`` (the driver's own probes use ``server_id``), so a deployment takes
the ids ``server_id .. server_id + BINLOG_READERS``."""
# Server ids are 32-bit; the readers' ids above server_id must stay valid, with room to spare.
_MAX_SERVER_ID = 2**32 - 1 - 2 * BINLOG_READERS


@dataclass(frozen=True)
class SourceConfig:
    host: str
    port: int
    user: str
    password: Secret
    server_id: int
    tables: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    # For tables without a primary key: a unique NOT NULL column list to chunk and merge by.
    chunk_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    tls: TlsConfig = field(default_factory=TlsConfig)
    connect_timeout: int = 10
    # Which columns binlake keeps and masks, per table pattern (binlake.contract.columns);
    # the salt of the ``hash`` masks is a secret like the password.
    columns: tuple[ColumnRule, ...] = ()
    mask_salt: Secret = field(default_factory=Secret)

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigError("source.host is empty: set it to the MySQL host name or IP, e.g. 127.0.0.1")
        if not 1 <= self.port <= 65535:
            raise ConfigError(
                f"source.port must be between 1 and 65535, got {self.port}: set the server's TCP port, e.g. 3306"
            )
        if not self.user:
            raise ConfigError("source.user is empty: set the MySQL user binlake logs in as, e.g. cdc")
        if not self.password:
            raise ConfigError(
                "source.password is empty: set it, e.g. password: ${MYSQL_PASSWORD} and export MYSQL_PASSWORD"
            )
        if not 1 <= self.server_id <= _MAX_SERVER_ID:
            raise ConfigError(
                f"source.server_id must be between 1 and {_MAX_SERVER_ID}, got {self.server_id}: "
                "pick a number no other replica or binlog reader of this server uses"
            )
        if not self.tables:
            raise ConfigError('source.tables is empty: list include patterns such as ["shop.*", "crm.customers"]')
        for key, pats in (("tables", self.tables), ("exclude", self.exclude)):
            for pattern in pats:
                if not _TABLE_PATTERN.match(pattern):
                    raise ConfigError(
                        f"source.{key} entry {pattern!r} is not a db.table pattern: write it as "
                        '"db.table", "db.*" or "db.prefix_*"'
                    )
        for table, cols in self.chunk_keys.items():
            if not _TABLE_PATTERN.match(table) or not cols:
                raise ConfigError(
                    f"source.chunk_keys entry {table!r} must map db.table to a non-empty list of unique NOT NULL columns"
                )
        for rule in self.columns:
            if not _TABLE_PATTERN.match(rule.pattern):
                raise ConfigError(
                    f"source.columns entry {rule.pattern!r} is not a db.table pattern: write it as "
                    '"db.table", "db.*" or "db.prefix_*"'
                )
        hashed = [f"{r.pattern}.{c}" for r in self.columns for c, how in r.mask.items() if how == HASH]
        if hashed and not self.mask_salt:
            raise ConfigError(
                f"source.columns masks {hashed[0]} with hash but source.mask_salt is not set: set it to a "
                "secret reference {{secrets/scope/key}} or ${MASK_SALT}, the same in every deployment "
                "whose hashes must join"
            )

    def captures(self, db: str, table: str) -> bool:
        """True if ``db.table`` matches an include pattern and no exclude pattern."""
        name = f"{db}.{table}"
        return any(fnmatch.fnmatchcase(name, p) for p in self.tables) and not any(
            fnmatch.fnmatchcase(name, p) for p in self.exclude
        )

    def column_rule(self, db: str, table: str) -> ColumnRule | None:
        """The column rule of ``db.table`` (the first matching ``source.columns`` entry), or None."""
        return next((r for r in self.columns if r.matches(db, table)), None)

    def salt_for(self, rule: ColumnRule | None) -> str:
        """The revealed ``mask_salt`` if ``rule`` hashes a column, else "": a salt nothing
        hashes with stays out of schema digests and executor options."""
        return self.mask_salt.reveal() if rule is not None and rule.hashes else ""

    def salt_for_any(self) -> str:
        """:meth:`salt_for` of a reader of every table: the salt if any column rule hashes."""
        return self.mask_salt.reveal() if any(r.hashes for r in self.columns) else ""

    @property
    def databases(self) -> tuple[str, ...]:
        """Database-name patterns that may hold captured tables (for binlog filtering)."""
        return tuple(sorted({p.split(".", 1)[0] for p in self.tables}))

    def executor_options(self) -> dict[str, str]:
        """This config as the options of a Spark data source whose readers run on executors:
        ``source`` (JSON, without the password) and ``password`` (and ``mask_salt_secret``),
        option keys Spark's ``spark.redaction.regex`` masks in plan text and the UI."""
        salt = self.salt_for_any()
        return {
            "source": json.dumps(
                {
                    "host": self.host,
                    "port": self.port,
                    "user": self.user,
                    "server_id": self.server_id,
                    "tables": list(self.tables),
                    "exclude": list(self.exclude),
                    "chunk_keys": {k: list(v) for k, v in self.chunk_keys.items()},
                    "tls": asdict(self.tls),
                    "connect_timeout": self.connect_timeout,
                    "columns": [r.to_dict() for r in self.columns],
                }
            ),
            "password": self.password.reveal(),
            **({"mask_salt_secret": salt} if salt else {}),
        }

    @staticmethod
    def from_executor_options(options: Mapping[str, str]) -> "SourceConfig":
        """The inverse of :meth:`executor_options`, on an executor."""
        d = json.loads(options["source"])
        return SourceConfig(
            host=d["host"],
            port=int(d["port"]),
            user=d["user"],
            password=Secret(options["password"]),
            server_id=int(d["server_id"]),
            tables=tuple(d["tables"]),
            exclude=tuple(d["exclude"]),
            chunk_keys={k: tuple(v) for k, v in d["chunk_keys"].items()},
            tls=TlsConfig(**d["tls"]),
            connect_timeout=int(d["connect_timeout"]),
            columns=tuple(ColumnRule.from_dict(r) for r in d.get("columns", ())),
            mask_salt=Secret(options.get("mask_salt_secret")),
        )


@dataclass(frozen=True)
class SnapshotConfig:
    chunk_size: int = 50000
    parallelism: int = 2
    # Chunks committed per Delta write: a crash re-reads at most this many chunks. Each
    # write (a "wave") also costs fixed seconds (reader planning, three Spark jobs, two
    # commits), so the default gives every task slot 16 chunks per wave: the fixed part
    # stays small next to the reading, and a crash re-reads about 16 chunk-times of work.
    chunks_per_commit: int = 0  # 0 = 16 x parallelism

    def __post_init__(self) -> None:
        if not 1 <= self.chunk_size <= 10_000_000:
            raise ConfigError(
                f"snapshot.chunk_size must be between 1 and 10000000 rows, got {self.chunk_size}: 50000 is a good start"
            )
        if not 1 <= self.parallelism <= 1024:
            raise ConfigError(
                f"snapshot.parallelism must be between 1 and 1024, got {self.parallelism}: use the number of executor cores"
            )
        if self.chunks_per_commit < 0:
            raise ConfigError(
                f"snapshot.chunks_per_commit must be >= 0 (0 = 16 x parallelism), got {self.chunks_per_commit}"
            )

    @property
    def wave_size(self) -> int:
        return self.chunks_per_commit or 16 * self.parallelism


@dataclass(frozen=True)
class CaptureConfig:
    startup: StartupMode = StartupMode.INITIAL
    # For startup=position: "mysql-bin.000003:4"; for startup=timestamp: ISO-8601 with zone.
    start_position: str | None = None
    start_timestamp: str | None = None
    on_purge: PurgePolicy = PurgePolicy.FAIL
    # Warn in status/capture when the resume file is this close (in files) to the oldest one.
    purge_warning_files: int = 2
    # A micro-batch ends at the first transaction boundary after this many row changes.
    max_batch_rows: int = 200_000

    def __post_init__(self) -> None:
        if self.startup is StartupMode.POSITION:
            if not self.start_position or not _BINLOG_POSITION.match(self.start_position):
                raise ConfigError(
                    'capture.startup is "position" but capture.start_position is missing or not FILE:POS: '
                    'set it like "mysql-bin.000003:4"'
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
                    f"capture.start_timestamp {self.start_timestamp!r} is not ISO-8601: write it like 2026-11-01T00:00:00Z"
                ) from None
            if ts.tzinfo is None:
                raise ConfigError(f"capture.start_timestamp {self.start_timestamp!r} has no time zone: add Z or +HH:MM")
        if self.max_batch_rows < 1:
            raise ConfigError(f"capture.max_batch_rows must be >= 1, got {self.max_batch_rows}")
        if self.purge_warning_files < 0:
            raise ConfigError(f"capture.purge_warning_files must be >= 0, got {self.purge_warning_files}")


@dataclass(frozen=True)
class LakehouseConfig:
    """Where the tables live: a local directory, or Unity Catalog on Databricks."""

    path: str | None = None
    catalog: str | None = None
    bronze_schema: str = "bronze"
    silver_schema: str = "silver"
    gold_schema: str = "gold"
    # binlake's own tables (publish log, check results, metrics, quarantine, silver progress,
    # writer leases): the system/ folder locally, this schema on Unity Catalog, so the silver
    # and gold schemas hold only mirrored tables.
    system_schema: str = "binlake_system"
    # Files that are not tables (the continuous mode's state): <path>/system/files locally; a UC volume on Databricks.
    system_path: str | None = None

    def __post_init__(self) -> None:
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


@dataclass(frozen=True)
class CheckRule:
    """One per-table gold check from the config's shorthand (``gold.checks``): a convenience
    that compiles to one GE expectation (:meth:`expectation`)."""

    severity: Severity
    column: str | None = None
    between: tuple[Any, Any] | None = None
    values: tuple[Any, ...] | None = None
    regex: str | None = None
    not_null: bool = False
    row_count: tuple[int | None, int | None] | None = None

    @property
    def kind(self) -> str:
        for name in ("between", "values", "regex", "row_count"):
            if getattr(self, name) is not None:
                return name
        return "not_null"

    def expectation(self, where: str) -> Expectation:
        """The GE expectation this rule means, named as the rule always was (``between(price, 0, 100)``)."""
        col = self.column
        if self.kind in ("between", "row_count"):
            lo, hi = self.between if self.kind == "between" else self.row_count  # type: ignore[misc]
            bounds = {k: v for k, v in (("min_value", lo), ("max_value", hi)) if v is not None}
            if self.kind == "between":
                return Expectation(
                    "expect_column_values_to_be_between",
                    {"column": col, **bounds},
                    self.severity,
                    f"between({col}, {_text(lo)}, {_text(hi)})",
                    where,
                )
            return Expectation(
                "expect_table_row_count_to_be_between",
                bounds,
                self.severity,
                f"row_count({_text(lo)}, {_text(hi)})",
                where,
            )
        if self.kind == "values":
            values = list(self.values or ())
            return Expectation(
                "expect_column_values_to_be_in_set",
                {"column": col, "value_set": values},
                self.severity,
                f"values({col}, {values})",
                where,
            )
        if self.kind == "regex":
            return Expectation(
                "expect_column_values_to_match_regex",
                {"column": col, "regex": self.regex},
                self.severity,
                f"regex({col}, {self.regex})",
                where,
            )
        return Expectation(
            "expect_column_values_to_not_be_null", {"column": col}, self.severity, f"not_null({col})", where
        )


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


@dataclass(frozen=True)
class GoldConfig:
    checks: Mapping[str, tuple[CheckRule, ...]] = field(default_factory=dict)
    # Expectation suites in GE's JSON format, per "db.table" pattern (the first match wins).
    expectations: tuple[SuiteFile, ...] = ()
    # Publish groups: name -> "db.table" patterns. A group's tables are published together
    # at one binlog position; a table no group names is in its database's group.
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def group_of(self, db: str, table: str) -> str:
        """The publish group of ``db.table``: the first configured group with a matching
        pattern, else the group named after its database."""
        name = f"{db}.{table}"
        for group, patterns in self.groups.items():
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                return group
        return db

    def suite_file(self, db: str, table: str) -> SuiteFile | None:
        return next((s for s in self.expectations if s.matches(db, table)), None)

    def suite(self, db: str, table: str) -> tuple[Expectation, ...]:
        """Every expectation gold checks ``db.table`` with: its suite file's, then its
        ``gold.checks`` rules compiled to GE expectations."""
        found = self.suite_file(db, table)
        rules = self.checks.get(f"{db}.{table}", ())
        compiled = tuple(r.expectation(f"gold.checks.{db}.{table}[{i}]") for i, r in enumerate(rules))
        return (found.expectations if found else ()) + compiled


@dataclass(frozen=True)
class MaintenanceConfig:
    """``binlake maintain``: compaction, retention and VACUUM (docs/maintenance.md)."""

    # A table is compacted (OPTIMIZE) once it has at least this many data files.
    optimize_min_files: int = 64
    # Silver tombstones older than this (by source commit time) and below the safe bound are removed.
    tombstone_retention_hours: int = 168
    # Bronze change-log records older than this that silver applied and no snapshot needs are removed.
    changelog_retention_days: int = 30
    # VACUUM keeps files the tables' last this-many hours of versions read (time travel, gold_as_of).
    vacuum_retention_hours: int = 168

    def __post_init__(self) -> None:
        for name, low in (("optimize_min_files", 2), ("tombstone_retention_hours", 0), ("changelog_retention_days", 0)):
            if getattr(self, name) < low:
                raise ConfigError(f"maintenance.{name} must be at least {low}, got {getattr(self, name)}")
        if self.vacuum_retention_hours < 168:
            raise ConfigError(
                f"maintenance.vacuum_retention_hours must be at least 168 (Delta's safety check: a "
                f"reader or writer older than that would lose its files), got {self.vacuum_retention_hours}"
            )


@dataclass(frozen=True)
class HealthConfig:
    """When is binlake unhealthy: ``binlake status --check`` and the bundle's lag alert."""

    # Capture, or any table's gold, behind the source by more than this many seconds.
    max_lag_seconds: int = 3600

    def __post_init__(self) -> None:
        if self.max_lag_seconds < 1:
            raise ConfigError(f"health.max_lag_seconds must be at least 1, got {self.max_lag_seconds}")


@dataclass(frozen=True)
class HistoryTable:
    """One entry of ``history.tables``: the tables a pattern names keep every version.

    ``track_columns`` (only these columns open a version) and ``except_columns`` (every
    column but these does) exclude each other; with neither, every column is tracked."""

    pattern: str
    track_columns: tuple[str, ...] | None = None
    except_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _TABLE_PATTERN.match(self.pattern):
            raise ConfigError(
                f"history.tables entry {self.pattern!r} is not a db.table pattern: write it as "
                '"db.table", "db.*" or "db.prefix_*"'
            )
        if self.track_columns is not None and self.except_columns:
            raise ConfigError(
                f"history.tables entry {self.pattern!r} sets both track_columns and except_columns: keep one of them"
            )
        if self.track_columns is not None and not self.track_columns:
            raise ConfigError(
                f"history.tables entry {self.pattern!r} has an empty track_columns: list the columns "
                "whose changes open a version, or drop the key to track every column"
            )

    def tracked(self, columns: Sequence[str]) -> tuple[str, ...]:
        """The columns among ``columns`` (a table's, in order) whose changes open a version."""
        if self.track_columns is not None:
            return tuple(c for c in columns if c in self.track_columns)
        return tuple(c for c in columns if c not in self.except_columns)


@dataclass(frozen=True)
class HistoryConfig:
    """``history``: the tables silver also keeps as SCD type 2 history tables (docs/history.md).

    Example::

        history:
          tables:
            - shop.orders                              # every column tracked
            - {table: "crm.*", except_columns: [updated_at]}
            - {table: shop.customers, track_columns: [email, tier]}

    The first entry whose pattern matches a table applies to it."""

    tables: tuple[HistoryTable, ...] = ()

    def table(self, db: str, table: str) -> HistoryTable | None:
        name = f"{db}.{table}"
        return next((t for t in self.tables if fnmatch.fnmatchcase(name, t.pattern)), None)


@dataclass(frozen=True)
class Config:
    source: SourceConfig
    lakehouse: LakehouseConfig
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    gold: GoldConfig = field(default_factory=GoldConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    # The directory the config file was read from; relative lakehouse paths resolve here.
    base_dir: str = "."

    def __post_init__(self) -> None:
        for table, checks in self.gold.checks.items():
            db, _, name = table.partition(".")
            rule = self.source.column_rule(db, name)
            for i, check in enumerate(checks):
                if rule is not None and check.column and not rule.keeps(check.column):
                    raise ConfigError(
                        f"gold.checks.{table}[{i}] checks column {check.column}, which "
                        f"source.columns[{rule.pattern!r}] drops: remove the check or keep the column"
                    )
        for suite in self.gold.expectations:
            # A pattern's tables are only known at preflight and publish, which check them; a
            # plain name is checked here.
            db, _, name = suite.pattern.partition(".")
            rule = None if any(ch in suite.pattern for ch in "*?[") else self.source.column_rule(db, name)
            for e in suite.expectations if rule is not None else ():
                dropped = [c for c in e.columns if not rule.keeps(c)]
                if dropped:
                    raise ConfigError(
                        f"{e.where} ({e.type}) names column {dropped[0]}, which source.columns[{rule.pattern!r}] "
                        "drops: remove the expectation or keep the column"
                    )

    @property
    def lakehouse_root(self) -> str | None:
        if self.lakehouse.path is None:
            return None
        p = Path(self.lakehouse.path)
        return str(p if p.is_absolute() else (Path(self.base_dir) / p).resolve())


# ---------------------------------------------------------------------------------------
# Loading


_SECTIONS = {
    "source": {
        "host",
        "port",
        "user",
        "password",
        "server_id",
        "tables",
        "exclude",
        "chunk_keys",
        "tls",
        "connect_timeout",
        "columns",
        "mask_salt",
    },
    "snapshot": {"chunk_size", "parallelism", "chunks_per_commit"},
    "capture": {"startup", "start_position", "start_timestamp", "on_purge", "purge_warning_files", "max_batch_rows"},
    "lakehouse": {"path", "catalog", "bronze_schema", "silver_schema", "gold_schema", "system_schema", "system_path"},
    "gold": {"checks", "expectations", "groups"},
    "maintenance": {
        "optimize_min_files",
        "tombstone_retention_hours",
        "changelog_retention_days",
        "vacuum_retention_hours",
    },
    "health": {"max_lag_seconds"},
    "history": {"tables"},
}
_TLS_KEYS = {"ca", "cert", "key", "verify_identity"}
_CHECK_KEYS = {"severity", "column", "between", "values", "regex", "not_null", "row_count"}


def _refuse_unknown_keys(mapping: Mapping[str, Any], allowed: set[str], where: str) -> None:
    bad = set(mapping) - allowed
    if bad:
        raise ConfigError(f"unknown key {where}.{sorted(bad)[0]}: allowed keys are {', '.join(sorted(allowed))}")


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Config:
    """Read and check ``binlake.yml``. Raises :class:`ConfigError` with the fix."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} not found: pass --config PATH to an existing binlake.yml") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(p)!r} cannot be read ({exc.strerror}): check its permissions") from None
    return load_config_text(text, environ=environ, base_dir=str(p.resolve().parent), origin=str(p))


def load_config_text(
    text: str,
    environ: Mapping[str, str] | None = None,
    base_dir: str = ".",
    origin: str = "<config>",
) -> Config:
    env = os.environ if environ is None else environ
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{origin} is not valid YAML{where}: fix the syntax") from None
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{origin} must be a YAML mapping with the sections source, lakehouse (and optionally snapshot, capture, gold)"
        )
    unknown = set(raw) - set(_SECTIONS)
    if unknown:
        raise ConfigError(
            f"unknown top-level key {sorted(unknown)[0]!r} in {origin}: allowed are {', '.join(sorted(_SECTIONS))}"
        )
    for required in ("source", "lakehouse"):
        if required not in raw:
            raise ConfigError(f"{origin} has no {required!r} section: add it (see README, Configuration)")
    sections: dict[str, dict[str, Any]] = {}
    for name, allowed in _SECTIONS.items():
        section = raw.get(name) or {}
        if not isinstance(section, dict):
            raise ConfigError(f"{name} must be a mapping of keys, got {type(section).__name__}")
        _refuse_unknown_keys(section, allowed, name)
        sections[name] = {k: _expand(v, f"{name}.{k}", env) for k, v in section.items()}

    return Config(
        source=_source(sections["source"]),
        lakehouse=_lakehouse(sections["lakehouse"]),
        snapshot=SnapshotConfig(
            chunk_size=_int(sections["snapshot"], "snapshot.chunk_size", 50000),
            parallelism=_int(sections["snapshot"], "snapshot.parallelism", 2),
            chunks_per_commit=_int(sections["snapshot"], "snapshot.chunks_per_commit", 0),
        ),
        capture=_capture(sections["capture"]),
        gold=_gold(sections["gold"], base_dir),
        maintenance=MaintenanceConfig(
            **{
                k: _int(sections["maintenance"], f"maintenance.{k}", getattr(MaintenanceConfig, k))
                for k in _SECTIONS["maintenance"]
            }
        ),
        health=HealthConfig(
            max_lag_seconds=_int(sections["health"], "health.max_lag_seconds", HealthConfig.max_lag_seconds)
        ),
        history=_history(sections["history"]),
        base_dir=base_dir,
    )


def _expand(value: Any, key: str, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in env:
                raise ConfigError(
                    f"{key} references ${{{name}}} but the environment variable {name} is not set: export it"
                )
            return env[name]

        return _ENV_REF.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, key, env) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, f"{key}.{k}", env) for k, v in value.items()}
    return value


def _int(section: Mapping[str, Any], key: str, default: int | None = None) -> int:
    name = key.split(".")[-1]
    if name not in section or section[name] is None:
        if default is None:
            raise ConfigError(f"{key} is missing: set it to a whole number")
        return default
    value = section[name]
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise ConfigError(f"{key} must be a whole number, got {value!r}")


def _str(section: Mapping[str, Any], key: str, default: str | None = None, required: bool = False) -> str | None:
    name = key.split(".")[-1]
    value = section.get(name, default)
    if value is None:
        if required:
            raise ConfigError(f"{key} is missing: add it to the config")
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {type(value).__name__}")
    return value


def _str_list(section: Mapping[str, Any], key: str) -> tuple[str, ...]:
    name = key.split(".")[-1]
    value = section.get(name) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f'{key} must be a list of strings, e.g. ["shop.*"]')
    return tuple(value)


def _enum(enum_type: type[enum.Enum], section: Mapping[str, Any], key: str, default: enum.Enum) -> Any:
    name = key.split(".")[-1]
    value = section.get(name)
    if value is None:
        return default
    try:
        return enum_type(str(value).lower())
    except ValueError:
        allowed = ", ".join(e.value for e in enum_type)
        raise ConfigError(f"{key} is {value!r}: use one of {allowed}") from None


def _source(s: Mapping[str, Any]) -> SourceConfig:
    for key in ("host", "user", "server_id", "tables"):
        if key not in s:
            raise ConfigError(f"source.{key} is missing: add it (see README, Configuration)")
    if "password" not in s or s["password"] in (None, ""):
        raise ConfigError(
            "source.password is missing: set password: ${MYSQL_PASSWORD} (and export it) "
            "or a Databricks secret reference {{secrets/scope/key}}"
        )
    password = _str(s, "source.password")
    tls_raw = s.get("tls") or {}
    if not isinstance(tls_raw, dict):
        raise ConfigError("source.tls must be a mapping with ca, cert, key, verify_identity")
    _refuse_unknown_keys(tls_raw, _TLS_KEYS, "source.tls")
    for k in ("ca", "cert", "key"):
        v = tls_raw.get(k)
        if v is not None and not Path(v).is_file():
            raise ConfigError(f"source.tls.{k} file {v!r} does not exist: point it at the PEM file")
    if (tls_raw.get("cert") is None) != (tls_raw.get("key") is None):
        raise ConfigError(
            "source.tls.cert and source.tls.key go together: set both for client certificates, or neither"
        )
    if tls_raw.get("cert") is not None and tls_raw.get("ca") is None:
        raise ConfigError("source.tls.cert is set but source.tls.ca is not: set ca to the server's CA certificate")
    verify = tls_raw.get("verify_identity", True)
    if not isinstance(verify, bool):
        raise ConfigError(f"source.tls.verify_identity must be true or false, got {verify!r}")
    chunk_keys_raw = s.get("chunk_keys") or {}
    if not isinstance(chunk_keys_raw, dict):
        raise ConfigError('source.chunk_keys must map "db.table" to a list of columns')
    chunk_keys = {}
    for table, cols in chunk_keys_raw.items():
        if isinstance(cols, str):
            cols = [cols]
        if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
            raise ConfigError(f"source.chunk_keys.{table} must be a list of column names")
        chunk_keys[str(table)] = tuple(cols)
    salt = _str(s, "source.mask_salt")
    return SourceConfig(
        host=_str(s, "source.host", required=True) or "",
        port=_int(s, "source.port", 3306),
        user=_str(s, "source.user", required=True) or "",
        password=Secret.parse(password),
        server_id=_int(s, "source.server_id"),
        tables=_str_list(s, "source.tables"),
        exclude=_str_list(s, "source.exclude"),
        chunk_keys=chunk_keys,
        tls=TlsConfig(ca=tls_raw.get("ca"), cert=tls_raw.get("cert"), key=tls_raw.get("key"), verify_identity=verify),
        connect_timeout=_int(s, "source.connect_timeout", 10),
        columns=_column_rules(s.get("columns")),
        mask_salt=Secret.parse(salt),
    )


_RULE_KEYS = {"include", "exclude", "mask", "mask_key"}


def _column_rules(raw: Any) -> tuple[ColumnRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigError(
            'source.columns must map "db.table" patterns to rules, e.g. '
            '{"shop.customers": {exclude: [ssn], mask: {email: hash}}}'
        )
    rules = []
    for pattern, rule in raw.items():
        where = f"source.columns[{str(pattern)!r}]"
        if not isinstance(rule, dict):
            raise ConfigError(f"{where} must be a mapping with include or exclude, mask and mask_key")
        _refuse_unknown_keys(rule, _RULE_KEYS, where)
        for key in ("include", "exclude"):
            if key in rule and (not isinstance(rule[key], list) or not all(isinstance(c, str) for c in rule[key])):
                raise ConfigError(f"{where}.{key} must be a list of column names")
        mask = rule.get("mask") or {}
        if not isinstance(mask, dict):
            raise ConfigError(f"{where}.mask must map column names to hash or null, e.g. {{email: hash}}")
        mask_key = rule.get("mask_key", False)
        if not isinstance(mask_key, bool):
            raise ConfigError(f"{where}.mask_key must be true or false, got {mask_key!r}")
        rules.append(
            ColumnRule(
                pattern=str(pattern),
                include=tuple(rule["include"]) if "include" in rule else None,
                exclude=tuple(rule.get("exclude") or ()),
                # YAML reads an unquoted null as None: that is the null mask too.
                mask={str(c): "null" if how is None else str(how) for c, how in mask.items()},
                mask_key=mask_key,
            )
        )
    return tuple(rules)


def _lakehouse(s: Mapping[str, Any]) -> LakehouseConfig:
    return LakehouseConfig(
        path=_str(s, "lakehouse.path"),
        catalog=_str(s, "lakehouse.catalog"),
        bronze_schema=_str(s, "lakehouse.bronze_schema", "bronze") or "bronze",
        silver_schema=_str(s, "lakehouse.silver_schema", "silver") or "silver",
        gold_schema=_str(s, "lakehouse.gold_schema", "gold") or "gold",
        system_schema=_str(s, "lakehouse.system_schema", LakehouseConfig.system_schema)
        or LakehouseConfig.system_schema,
        system_path=_str(s, "lakehouse.system_path"),
    )


def _capture(s: Mapping[str, Any]) -> CaptureConfig:
    return CaptureConfig(
        startup=_enum(StartupMode, s, "capture.startup", StartupMode.INITIAL),
        start_position=_str(s, "capture.start_position"),
        start_timestamp=_str(s, "capture.start_timestamp"),
        on_purge=_enum(PurgePolicy, s, "capture.on_purge", PurgePolicy.FAIL),
        purge_warning_files=_int(s, "capture.purge_warning_files", 2),
        max_batch_rows=_int(s, "capture.max_batch_rows", 200_000),
    )


def _gold(s: Mapping[str, Any], base_dir: str = ".") -> GoldConfig:
    checks_raw = s.get("checks") or {}
    if not isinstance(checks_raw, dict):
        raise ConfigError('gold.checks must map "db.table" to a list of rules')
    checks: dict[str, tuple[CheckRule, ...]] = {}
    for table, rules in checks_raw.items():
        if not _TABLE_PATTERN.match(str(table)):
            raise ConfigError(f"gold.checks key {table!r} is not db.table")
        if not isinstance(rules, list):
            raise ConfigError(f"gold.checks.{table} must be a list of rules")
        parsed = []
        for i, rule in enumerate(rules):
            where = f"gold.checks.{table}[{i}]"
            if not isinstance(rule, dict):
                raise ConfigError(
                    f"{where} must be a mapping such as {{column: price, between: [0, 1000], severity: drop}}"
                )
            _refuse_unknown_keys(rule, _CHECK_KEYS, where)
            kinds = [k for k in ("between", "values", "regex", "row_count") if k in rule] + (
                ["not_null"] if rule.get("not_null") else []
            )
            if len(kinds) != 1:
                raise ConfigError(f"{where} needs exactly one of between, values, regex, not_null, row_count")
            if kinds[0] != "row_count" and not rule.get("column"):
                raise ConfigError(f"{where} ({kinds[0]}) needs a column")
            for pair_key in ("between", "row_count"):
                if pair_key in rule and (not isinstance(rule[pair_key], list) or len(rule[pair_key]) != 2):
                    raise ConfigError(f"{where}.{pair_key} must be a list [min, max] (use null for an open end)")
            if "values" in rule and not isinstance(rule["values"], list):
                raise ConfigError(f"{where}.values must be a list of allowed values")
            if "regex" in rule:
                try:
                    re.compile(str(rule["regex"]))
                except re.error as exc:
                    raise ConfigError(
                        f"{where}.regex is not a valid regular expression ({exc}): fix the pattern"
                    ) from None
            parsed.append(
                CheckRule(
                    severity=_enum(Severity, rule, f"{where}.severity", Severity.FAIL),
                    column=rule.get("column"),
                    between=tuple(rule["between"]) if "between" in rule else None,
                    values=tuple(rule["values"]) if "values" in rule else None,
                    regex=str(rule["regex"]) if "regex" in rule else None,
                    not_null=bool(rule.get("not_null", False)),
                    row_count=tuple(rule["row_count"]) if "row_count" in rule else None,
                )
            )
        checks[str(table)] = tuple(parsed)
    return GoldConfig(
        checks=checks, expectations=_suite_files(s.get("expectations"), base_dir), groups=_groups(s.get("groups"))
    )


def _suite_files(raw: Any, base_dir: str) -> tuple[SuiteFile, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigError(
            'gold.expectations must map a "db.table" pattern to an expectation suite file in Great Expectations\' '
            'JSON format, e.g. {"shop.orders": expectations/shop_orders.json}'
        )
    suites = []
    for pattern, path in raw.items():
        where = f"gold.expectations[{pattern!r}]"
        if not isinstance(pattern, str) or not _TABLE_PATTERN.match(pattern):
            raise ConfigError(
                f'gold.expectations key {pattern!r} is not a "db.table" pattern such as "shop.orders" or "shop.*"'
            )
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"{where} must be the path of a suite file, e.g. expectations/shop_orders.json")
        suites.append(read_suite_file(pattern, path, base_dir, where))
    return tuple(suites)


_GROUP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _groups(raw: Any) -> dict[str, tuple[str, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            'gold.groups must map a group name to a list of "db.table" patterns, '
            'e.g. {orders: ["shop.orders", "shop.order_lines"]}'
        )
    groups: dict[str, tuple[str, ...]] = {}
    for name, patterns in raw.items():
        if not _GROUP_NAME.match(str(name)):
            raise ConfigError(f"gold.groups name {name!r} must be letters, digits, _ . or - (e.g. orders)")
        if not isinstance(patterns, list) or not patterns:
            raise ConfigError(f'gold.groups.{name} must be a non-empty list of "db.table" patterns')
        for p in patterns:
            if not isinstance(p, str) or not _TABLE_PATTERN.match(p):
                raise ConfigError(f'gold.groups.{name} entry {p!r} is not a "db.table" pattern such as "shop.orders"')
        groups[str(name)] = tuple(patterns)
    return groups


_HISTORY_KEYS = {"table", "track_columns", "except_columns"}


def _history(s: Mapping[str, Any]) -> HistoryConfig:
    raw = s.get("tables") or []
    if not isinstance(raw, list):
        raise ConfigError(
            'history.tables must be a list of "db.table" patterns or {table: ..., track_columns: [...]} '
            'entries, e.g. ["shop.orders"]'
        )
    out = []
    for i, entry in enumerate(raw):
        where = f"history.tables[{i}]"
        if isinstance(entry, str):
            out.append(HistoryTable(entry))
            continue
        if not isinstance(entry, dict):
            raise ConfigError(
                f'{where} must be a "db.table" pattern or a mapping such as '
                "{table: shop.orders, except_columns: [updated_at]}"
            )
        _refuse_unknown_keys(entry, _HISTORY_KEYS, where)
        if not isinstance(entry.get("table"), str):
            raise ConfigError(f"{where} needs table: a db.table pattern such as shop.orders")
        lists = {}
        for key in ("track_columns", "except_columns"):
            value = entry.get(key)
            if value is None:
                continue
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ConfigError(f"{where}.{key} must be a list of column names, e.g. [status, amount]")
            lists[key] = tuple(value)
        out.append(HistoryTable(entry["table"], lists.get("track_columns"), lists.get("except_columns", ())))
    return HistoryConfig(tuple(out))
