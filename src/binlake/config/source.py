"""``source``: the MySQL/MariaDB server, how to reach it, and which tables and columns binlake mirrors."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import ArgsKwargs, PydanticCustomError

from binlake.config.column_rules import HASH, ColumnRule
from binlake.config.secrets import Secret
from binlake.config.vocabulary import (
    TABLE_PATTERN,
    Flag,
    Hint,
    OneOrMoreColumns,
    Patterns,
    Text,
    Whole,
    check_table_patterns,
    declared,
)
from binlake.errors import ConfigError

# The shadow tables of the online schema change tools: gh-ost copies ``t`` into ``_t_gho``
# (go/base/context.go, GetGhostTableName); pt-online-schema-change into ``_t_new`` (its
# --new-table-name default ``%T_new``), prefixed with up to ten ``_`` until the name is free.
_GHOST_SUFFIX = "_gho"
_PT_OSC_SUFFIX = "_new"
_PT_OSC_PREFIXES = 10


def shadow_targets(table: str) -> list[str]:
    """The tables ``table`` would be the online-schema-change shadow of, by its name alone."""
    out = []
    if table.startswith("_") and table.endswith(_GHOST_SUFFIX) and len(table) > 1 + len(_GHOST_SUFFIX):
        out.append(table[1 : -len(_GHOST_SUFFIX)])
    if table.endswith(_PT_OSC_SUFFIX):
        stem = table[: -len(_PT_OSC_SUFFIX)]
        for n in range(1, _PT_OSC_PREFIXES + 1):
            if len(stem) > n and stem[:n] == "_" * n:
                out.append(stem[n:])
    return out


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


# What an archive source (source.archive) has instead of a server: the server keys do not
# apply to it, and these stand in for them so that the rest of SourceConfig keeps its types.
# Nothing connects with them: binlake.source.mysql.connect refuses an archive source.
SERVER_KEYS = ("host", "port", "user", "password", "server_id", "tls", "connect_timeout")
_NO_SERVER = {"host": "(binlog archive)", "user": "(none)", "password": Secret("(none)"), "server_id": 1}


def _archive_without_server(value: Any) -> Any:
    """An archive source's placeholders for the server keys; a server key set beside
    ``archive`` is refused (one of the two is a mistake)."""
    kwargs = value.kwargs if isinstance(value, ArgsKwargs) else value
    if not isinstance(kwargs, dict) or kwargs.get("archive") is None:
        return value
    given = [k for k in SERVER_KEYS if kwargs.get(k) is not None]
    if given:
        raise ConfigError(
            f"source.archive reads binlog files without a server, so source.{given[0]} does not apply: remove "
            f"source.{given[0]} (and the other server keys), or remove source.archive to read from the server"
        )
    kwargs = {**kwargs, **_NO_SERVER}
    return ArgsKwargs(value.args, kwargs) if isinstance(value, ArgsKwargs) else kwargs


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
    archive: Text | None = Field(
        None,
        description="A directory of binlog files to read instead of a server (no host, user, password or "
        "server_id then): the tables' schemas come from the files (binlog_row_metadata=FULL), nothing is "
        "snapshotted; relative to the config file; a volume on Databricks",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_server(cls, value: Any) -> Any:
        return _archive_without_server(value)

    @field_validator("password")
    @classmethod
    def _set(cls, value: Secret) -> Secret:
        if not value:
            raise PydanticCustomError("missing", "empty")
        return value

    @model_validator(mode="after")
    def _patterns(self) -> SourceConfig:
        check_table_patterns(self.tables, "source.tables")
        check_table_patterns(self.exclude, "source.exclude")
        for table, cols in self.chunk_keys.items():
            if not TABLE_PATTERN.match(table) or not cols:
                raise ConfigError(
                    f"source.chunk_keys entry {table!r} must map db.table to a non-empty list of unique "
                    "NOT NULL columns"
                )
        check_table_patterns([r.pattern for r in self.columns], "source.columns")
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

    def shadow_of(self, db: str, table: str) -> str | None:
        """The captured table of ``db`` whose online-schema-change shadow ``table`` is named
        as (gh-ost's ``_t_gho``, pt-online-schema-change's ``_t_new``), or None."""
        return next((t for t in shadow_targets(table) if self.captures(db, t)), None)

    def mirrors(self, db: str, table: str) -> bool:
        """True if capture keeps ``db.table``'s changes: a captured table, or the shadow of one,
        whose rows become the table at an online schema change's cut-over."""
        return self.captures(db, table) or self.shadow_of(db, table) is not None

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
                    "archive": self.archive,
                }
            ),
            "password": self.password.reveal(),
            **({"mask_salt_secret": salt} if salt else {}),
        }

    @staticmethod
    def from_executor_options(options: Mapping[str, str]) -> SourceConfig:
        """The inverse of :meth:`executor_options`, on an executor."""
        d = json.loads(options["source"])
        server: dict[str, Any] = dict(
            host=d["host"],
            port=int(d["port"]),
            user=d["user"],
            password=Secret(options["password"]),
            server_id=int(d["server_id"]),
            tls=TlsConfig(**d["tls"]),
            connect_timeout=int(d["connect_timeout"]),
        )
        return SourceConfig(
            **({} if d.get("archive") else server),
            archive=d.get("archive"),
            tables=tuple(d["tables"]),
            exclude=tuple(d["exclude"]),
            chunk_keys={k: tuple(v) for k, v in d["chunk_keys"].items()},
            columns=tuple(ColumnRule.from_dict(r) for r in d.get("columns", ())),
            mask_salt=Secret(options.get("mask_salt_secret")),
        )
