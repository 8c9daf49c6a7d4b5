"""``binlake.yml``: every key declared once, as a field of a frozen pydantic dataclass.

A field's type, default and description are the key's whole declaration: loading validates the
YAML against them (``extra="forbid"`` in every section), :func:`reference` renders the
configuration reference (docs/configuration.md) from them, and one error formatter
(:func:`binlake.config_model.one_line`) turns what pydantic refuses into binlake's one-line
:class:`~binlake.errors.ConfigError` naming the key and the fix. A :class:`Hint` beside a field
says that fix where the generic one would not do; checks that span keys raise ConfigError
themselves. What a column rule does is :mod:`binlake.column_rules`; the GE suite files
``gold.expectations`` names are read by :mod:`binlake.expectations`.

Values may reference environment variables as ``${NAME}``; the password may also be a
Databricks secret reference ``{{secrets/<scope>/<key>}}``, read through databricks-sdk when a
connection first needs it (see :mod:`binlake.secrets`).

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
import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BeforeValidator,
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from binlake.column_rules import HASH, MASKS, NULL, ColumnRuleLogic
from binlake.config_model import (
    ColumnNames,
    Flag,
    Hint,
    OneOrMoreColumns,
    Patterns,
    Text,
    Whole,
    declared,
    lower,
    one_line,
    refuse,
    render_reference,
    text_or_number,
    unknown_key,
)
from binlake.errors import ConfigError
from binlake.expectations import Expectation, Severity, SuiteFile, read_suite_file
from binlake.secrets import Secret

__all__ = [
    "BINLOG_READERS",
    "HASH",
    "MASKS",
    "NULL",
    "CaptureConfig",
    "CheckRule",
    "ColumnRule",
    "Config",
    "Expectation",
    "GoldConfig",
    "HealthConfig",
    "HistoryConfig",
    "HistoryTable",
    "Hint",
    "LakehouseConfig",
    "MaintenanceConfig",
    "PurgePolicy",
    "Secret",
    "Severity",
    "SnapshotConfig",
    "SourceConfig",
    "StartupMode",
    "SuiteFile",
    "TlsConfig",
    "load_config",
    "load_config_text",
    "reference",
]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# db.table: MySQL names may hold inner spaces ("my db"), never a dot; leading or trailing
# whitespace is almost always a typo, so it is refused.
_NAME_PART = r"[^.\s](?:[^.]*[^.\s])?"
_TABLE_PATTERN = re.compile(rf"^{_NAME_PART}\.{_NAME_PART}$")
_BINLOG_POSITION = re.compile(r"^(?P<file>[^:\s]+\.\d+):(?P<pos>\d+)$")
_GROUP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_PATTERN_FIX = 'write it as "db.table", "db.*" or "db.prefix_*"'


def _table_patterns(patterns: Sequence[str], key: str) -> None:
    for pattern in patterns:
        if not _TABLE_PATTERN.match(pattern):
            raise ConfigError(f"{key} entry {pattern!r} is not a db.table pattern: {_PATTERN_FIX}")


# ---------------------------------------------------------------------------------------
# source


BINLOG_READERS = 32
"""The most binlog dumps one capture batch opens: reader ``i`` registers as server id
``server_id + 1 + i`` (the driver's own probes use ``server_id``), so a deployment takes
the ids ``server_id .. server_id + BINLOG_READERS``."""
# Server ids are 32-bit; the readers' ids above server_id must stay valid, with room to spare.
_MAX_SERVER_ID = 2**32 - 1 - 2 * BINLOG_READERS


@declared("source.tls")
class TlsConfig:
    ca: Text | None = Field(None, description="CA certificate (PEM file) to verify the server with; sets TLS on")
    cert: Text | None = Field(None, description="Client certificate (PEM file), with key")
    key: Text | None = Field(None, description="Client certificate's private key (PEM file), with cert")
    verify_identity: Flag = Field(True, description="Check that the server's certificate names the host")

    @field_validator("ca", "cert", "key")
    @classmethod
    def _exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Only when loading a config: an executor rebuilding it need not see the files.
        if value is not None and info.context is not None and not Path(value).is_file():
            raise ConfigError(f"source.tls.{info.field_name} file {value!r} does not exist: point it at the PEM file")
        return value

    @model_validator(mode="after")
    def _pairs(self) -> TlsConfig:
        if (self.cert is None) != (self.key is None):
            raise ConfigError(
                "source.tls.cert and source.tls.key go together: set both for client certificates, or neither"
            )
        if self.cert is not None and self.ca is None:
            raise ConfigError("source.tls.cert is set but source.tls.ca is not: set ca to the server's CA certificate")
        return self

    @property
    def enabled(self) -> bool:
        return self.ca is not None


def _mask(value: Any) -> Any:
    # YAML reads an unquoted null as None: that is the null mask too.
    if not isinstance(value, dict):
        return value
    return {c: NULL if how is None else text_or_number(how) for c, how in value.items()}


@declared("source.columns")
class ColumnRule(ColumnRuleLogic):
    """Which columns of the tables ``pattern`` matches binlake keeps and masks (the first
    matching rule applies); what it does is :class:`binlake.column_rules.ColumnRuleLogic`."""

    pattern: Annotated[str, Hint(not_a_key=True)] = Field(description="The db.table pattern the rule applies to")
    include: ColumnNames | None = Field(None, description="Keep only these columns (not with exclude)")
    exclude: ColumnNames = Field((), description="Drop these columns (not with include)")
    mask: Annotated[
        Mapping[str, str],
        BeforeValidator(_mask),
        Hint(invalid="must map column names to hash or null, e.g. {email: hash}"),
    ] = Field(default_factory=dict, description="column: hash (salted SHA-256) or null, stored instead of the value")
    mask_key: Flag = Field(False, description="Allow masking a key column (with hash)")

    @model_validator(mode="after")
    def _consistent(self) -> ColumnRule:
        self.check_consistent()
        return self

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ColumnRule:
        return ColumnRule(
            pattern=d["pattern"],
            include=tuple(d["include"]) if d["include"] is not None else None,
            exclude=tuple(d["exclude"]),
            mask=dict(d["mask"]),
            mask_key=bool(d["mask_key"]),
        )


def _keyed(value: Any) -> Any:
    """A YAML mapping of pattern -> entry as the ordered entries, each with its pattern."""
    if isinstance(value, dict):
        return [{"pattern": str(k), **v} if isinstance(v, dict) else v for k, v in value.items()]
    if isinstance(value, list):  # entries are written as a mapping, never as a list
        raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
    return value


@declared("source", kw_only=True)
class SourceConfig:
    host: Annotated[Text, Hint(bad="is empty: set it to the MySQL host name or IP, e.g. 127.0.0.1")] = Field(
        min_length=1, description="MySQL/MariaDB host name or IP"
    )
    port: Annotated[
        Whole, Hint(bad="must be between 1 and 65535, got {input}: set the server's TCP port, e.g. 3306")
    ] = Field(3306, ge=1, le=65535, description="TCP port")
    user: Annotated[Text, Hint(bad="is empty: set the MySQL user binlake logs in as, e.g. cdc")] = Field(
        min_length=1, description="The user binlake logs in as (needs REPLICATION SLAVE, REPLICATION CLIENT, SELECT)"
    )
    password: Annotated[
        Secret,
        Hint(
            missing="{where} is missing: set password: ${MYSQL_PASSWORD} (and export it) or a Databricks "
            "secret reference {{secrets/scope/key}}"
        ),
    ] = Field(description="Password: ${ENV_VAR} or a Databricks secret reference {{secrets/<scope>/<key>}}")
    server_id: Annotated[
        Whole,
        Hint(
            bad=f"must be between 1 and {_MAX_SERVER_ID}, got {{input}}: pick a number no other replica or binlog "
            "reader of this server uses"
        ),
    ] = Field(
        ge=1,
        le=_MAX_SERVER_ID,
        description=f"Replica server id; binlake's binlog readers also use the next {BINLOG_READERS}",
    )
    tables: Annotated[Patterns, Hint(bad='is empty: list include patterns such as ["shop.*", "crm.customers"]')] = (
        Field(min_length=1, description='Include patterns: "db.table", "db.*", "db.prefix_*"')
    )
    exclude: Patterns = Field((), description="Exclude patterns, applied after tables")
    chunk_keys: Annotated[Mapping[str, OneOrMoreColumns], Hint(invalid='must map "db.table" to a list of columns')] = (
        Field(
            default_factory=dict,
            description="For tables without a primary key: db.table -> unique NOT NULL columns to chunk and merge by",
        )
    )
    tls: Annotated[TlsConfig, Hint(invalid="must be a mapping with ca, cert, key, verify_identity")] = Field(
        default_factory=TlsConfig, description="TLS to the source: ca, cert, key, verify_identity"
    )
    connect_timeout: Whole = Field(10, ge=1, description="Seconds to wait for a connection")
    # Which columns binlake keeps and masks, per table pattern (binlake.contract.columns);
    # the salt of the ``hash`` masks is a secret like the password.
    columns: Annotated[
        tuple[Annotated[ColumnRule, Hint(invalid="must be a mapping with include or exclude, mask and mask_key")], ...],
        BeforeValidator(_keyed),
        Hint(
            shown="mapping of entries",
            invalid='must map "db.table" patterns to rules, e.g. '
            '{"shop.customers": {exclude: [ssn], mask: {email: hash}}}',
        ),
    ] = Field((), description="Column rules per table pattern (first match wins): include/exclude, mask, mask_key")
    mask_salt: Secret = Field(
        default_factory=Secret, description="Salt of the hash masks: a secret reference or ${ENV_VAR}"
    )

    @field_validator("password")
    @classmethod
    def _set(cls, value: Secret) -> Secret:
        if not value:
            raise PydanticCustomError("missing", "empty")
        return value

    @model_validator(mode="after")
    def _patterns(self) -> SourceConfig:
        _table_patterns(self.tables, "source.tables")
        _table_patterns(self.exclude, "source.exclude")
        for table, cols in self.chunk_keys.items():
            if not _TABLE_PATTERN.match(table) or not cols:
                raise ConfigError(
                    f"source.chunk_keys entry {table!r} must map db.table to a non-empty list of unique "
                    "NOT NULL columns"
                )
        _table_patterns([r.pattern for r in self.columns], "source.columns")
        hashed = [f"{r.pattern}.{c}" for r in self.columns for c, how in r.mask.items() if how == HASH]
        if hashed and not self.mask_salt:
            raise ConfigError(
                f"source.columns masks {hashed[0]} with hash but source.mask_salt is not set: set it to a "
                "secret reference {{secrets/scope/key}} or ${MASK_SALT}, the same in every deployment "
                "whose hashes must join"
            )
        return self

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
    def from_executor_options(options: Mapping[str, str]) -> SourceConfig:
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
        if self.startup is StartupMode.POSITION:
            if not self.start_position or not _BINLOG_POSITION.match(self.start_position):
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
# gold

_PAIR = Hint(invalid="must be a list [min, max] (use null for an open end)")
_KINDS = ("between", "values", "regex", "row_count")


@declared("gold.checks")
class CheckRule:
    """One per-table gold check from the config's shorthand (``gold.checks``): a convenience
    that compiles to one GE expectation (:meth:`expectation`)."""

    severity: Annotated[Severity, BeforeValidator(lower)] = Field(
        Severity.FAIL, description="warn, drop (quarantine the rows) or fail"
    )
    column: Text | None = Field(None, description="The column checked (all kinds but row_count)")
    between: Annotated[tuple[Any, Any], _PAIR] | None = Field(None, description="[min, max], null for an open end")
    values: Annotated[tuple[Any, ...], Hint(invalid="must be a list of allowed values")] | None = Field(
        None, description="The allowed values"
    )
    regex: Text | None = Field(None, description="A regular expression every value matches")
    not_null: bool = Field(False, description="true: no value is null")
    row_count: Annotated[tuple[int | None, int | None], _PAIR] | None = Field(
        None, description="[min, max] rows, null for an open end"
    )

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, value: Any) -> Any:
        if isinstance(value, dict):
            kinds = [k for k in _KINDS if k in value] + (["not_null"] if value.get("not_null") else [])
            if len(kinds) != 1:
                raise refuse("{where} needs exactly one of between, values, regex, not_null, row_count")
            if kinds[0] != "row_count" and not value.get("column"):
                raise refuse(f"{{where}} ({kinds[0]}) needs a column")
        return value

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise refuse(f"{{where}} is not a valid regular expression ({exc}): fix the pattern") from None
        return value

    @property
    def kind(self) -> str:
        for name in _KINDS:
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


def _suite_files(value: Any, info: ValidationInfo) -> tuple[SuiteFile, ...]:
    """gold.expectations: pattern -> suite file path, read (relative to the config file) now."""
    if isinstance(value, tuple) and all(isinstance(s, SuiteFile) for s in value):
        return value
    if not isinstance(value, dict):
        raise ConfigError(
            'gold.expectations must map a "db.table" pattern to an expectation suite file in Great Expectations\' '
            'JSON format, e.g. {"shop.orders": expectations/shop_orders.json}'
        )
    base_dir = (info.context or {}).get("base_dir", ".")
    suites = []
    for pattern, path in value.items():
        where = f"gold.expectations[{pattern!r}]"
        if not isinstance(pattern, str) or not _TABLE_PATTERN.match(pattern):
            raise ConfigError(
                f'gold.expectations key {pattern!r} is not a "db.table" pattern such as "shop.orders" or "shop.*"'
            )
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"{where} must be the path of a suite file, e.g. expectations/shop_orders.json")
        suites.append(read_suite_file(pattern, path, base_dir, where))
    return tuple(suites)


@declared("gold")
class GoldConfig:
    checks: Annotated[
        Mapping[
            str,
            Annotated[
                tuple[
                    Annotated[
                        CheckRule,
                        Hint(invalid="must be a mapping such as {column: price, between: [0, 1000], severity: drop}"),
                    ],
                    ...,
                ],
                Hint(invalid="must be a list of rules"),
            ],
        ],
        Hint(invalid='must map "db.table" to a list of rules'),
    ] = Field(
        default_factory=dict,
        description="db.table -> shorthand checks ({column, between|values|regex|not_null|row_count, severity}), "
        "compiled to GE expectations",
    )
    expectations: Annotated[tuple[SuiteFile, ...], PlainValidator(_suite_files), Hint(shown="mapping")] = Field(
        (), description="db.table pattern -> expectation suite file (GE's JSON format); the first match wins"
    )
    groups: Annotated[
        Mapping[str, Annotated[tuple[str, ...], Hint(invalid='must be a non-empty list of "db.table" patterns')]],
        Hint(
            invalid='must map a group name to a list of "db.table" patterns, '
            'e.g. {orders: ["shop.orders", "shop.order_lines"]}'
        ),
    ] = Field(
        default_factory=dict,
        description="Publish groups: name -> db.table patterns published together; default: one per database",
    )

    @field_validator("checks")
    @classmethod
    def _check_tables(cls, value: Mapping[str, Any]) -> Mapping[str, Any]:
        for table in value:
            if not _TABLE_PATTERN.match(table):
                raise ConfigError(f"gold.checks key {table!r} is not db.table")
        return value

    @field_validator("groups")
    @classmethod
    def _group_patterns(cls, value: Mapping[str, tuple[str, ...]]) -> Mapping[str, tuple[str, ...]]:
        for name, patterns in value.items():
            if not _GROUP_NAME.match(name):
                raise ConfigError(f"gold.groups name {name!r} must be letters, digits, _ . or - (e.g. orders)")
            if not patterns:
                raise ConfigError(f'gold.groups.{name} must be a non-empty list of "db.table" patterns')
            for p in patterns:
                if not _TABLE_PATTERN.match(p):
                    raise ConfigError(
                        f'gold.groups.{name} entry {p!r} is not a "db.table" pattern such as "shop.orders"'
                    )
        return value

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
        if not _TABLE_PATTERN.match(self.pattern):
            raise ConfigError(f"history.tables entry {self.pattern!r} is not a db.table pattern: {_PATTERN_FIX}")
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


# ---------------------------------------------------------------------------------------
# the whole file


@declared("")
class Config:
    source: SourceConfig = Field(description="The MySQL/MariaDB server and the tables binlake mirrors")
    lakehouse: LakehouseConfig = Field(description="Where the tables live")
    snapshot: SnapshotConfig = Field(default_factory=SnapshotConfig, description="The initial snapshot")
    capture: CaptureConfig = Field(default_factory=CaptureConfig, description="Binlog capture")
    gold: GoldConfig = Field(default_factory=GoldConfig, description="Quality checks and publishing")
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig, description="binlake maintain")
    health: HealthConfig = Field(default_factory=HealthConfig, description="binlake status --check")
    history: HistoryConfig = Field(default_factory=HistoryConfig, description="SCD type 2 history tables")
    # The directory the config file was read from; relative lakehouse paths resolve here.
    base_dir: Annotated[str, Hint(not_a_key=True)] = "."

    @model_validator(mode="after")
    def _kept_columns(self) -> Config:
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
            if rule is None:
                continue
            for e in suite.expectations:
                dropped = [c for c in e.columns if not rule.keeps(c)]
                if dropped:
                    raise ConfigError(
                        f"{e.where} ({e.type}) names column {dropped[0]}, which source.columns[{rule.pattern!r}] "
                        "drops: remove the expectation or keep the column"
                    )
        return self

    @property
    def archive_dir(self) -> str | None:
        """capture.archive as an absolute path (relative ones resolve next to the config file)."""
        if self.capture.archive is None:
            return None
        p = Path(self.capture.archive)
        return str(p if p.is_absolute() else (Path(self.base_dir) / p).resolve())

    @property
    def lakehouse_root(self) -> str | None:
        if self.lakehouse.path is None:
            return None
        p = Path(self.lakehouse.path)
        return str(p if p.is_absolute() else (Path(self.base_dir) / p).resolve())


# ---------------------------------------------------------------------------------------
# Loading


@functools.cache
def _adapter() -> TypeAdapter[Config]:
    return TypeAdapter(Config)


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


def _sections() -> str:
    """Config's top-level sections in declaration order, the required ones first: read from
    the declaration, so a section added there is named here too."""
    fields = Config.__pydantic_fields__  # type: ignore[attr-defined]
    keys = [n for n, f in fields.items() if not any(isinstance(m, Hint) and m.not_a_key for m in f.metadata)]
    required = [n for n in keys if fields[n].is_required()]
    optional = [n for n in keys if n not in required]
    return f"{', '.join(required)} (and optionally {', '.join(optional)})"


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
        raise ConfigError(f"{origin} must be a YAML mapping with the sections {_sections()}")
    raw = {k: _expand(v, str(k), env) for k, v in raw.items()}
    if "base_dir" in raw:
        raise ConfigError(unknown_key("", "base_dir", Config, origin))
    try:
        return _adapter().validate_python({**raw, "base_dir": base_dir}, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(one_line(exc, Config, "", raw, origin)) from None


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


# ---------------------------------------------------------------------------------------
# The configuration reference (docs/configuration.md)


def reference() -> str:
    """The configuration reference as Markdown: one row per key of binlake.yml."""
    return render_reference(Config)


if __name__ == "__main__":  # python -m binlake.config > docs/configuration.md
    print(reference(), end="")
