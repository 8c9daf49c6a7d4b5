"""``binlake.yml``: every key declared once, as a field of a frozen pydantic dataclass.

A field's type, default and description are the key's whole declaration: loading validates the
YAML against them (``extra="forbid"`` in every section), :func:`reference` renders the
configuration reference (docs/configuration.md) from them, and one error formatter
(:func:`binlake.config.vocabulary.one_line`) turns what pydantic refuses into binlake's one-line
:class:`~binlake.errors.ConfigError` naming the key and the fix. A :class:`Hint` beside a field
says that fix where the generic one would not do; checks that span keys raise ConfigError
themselves. What a column rule does is :mod:`binlake.config.column_rules`; the GE suite files
``gold.expectations`` names are read by :mod:`binlake.config.expectations`.

Values may reference environment variables as ``${NAME}``; the password may also be a
Databricks secret reference ``{{secrets/<scope>/<key>}}``, read through databricks-sdk when a
connection first needs it (see :mod:`binlake.config.secrets`).

Example::

    >>> cfg = load_config_text('''
    ... source: {host: 127.0.0.1, port: 3307, user: cdc, password: pw, server_id: 5401,
    ...          tables: ["shop.*"]}
    ... lakehouse: {path: .local/lakehouse}
    ... ''')
    >>> cfg.snapshot.chunk_size
    50000

The package: :mod:`.vocabulary` (how a key is declared, the error formatter, the reference
renderer), :mod:`.source`, :mod:`.column_rules`, :mod:`.sections`, :mod:`.gold` and
:mod:`.expectations` (the sections), :mod:`.model` (the whole file), :mod:`.loading` (reading
it), :mod:`.secrets` (secret values and references).
"""

from __future__ import annotations

from binlake.config.column_rules import HASH, MASKS, NULL, ColumnRule
from binlake.config.expectations import Expectation, Severity, SuiteFile
from binlake.config.gold import CheckRule, GoldConfig
from binlake.config.loading import load_config, load_config_text, reference
from binlake.config.model import Config, require_config
from binlake.config.secrets import Secret
from binlake.config.sections import (
    CaptureConfig,
    HealthConfig,
    HistoryConfig,
    HistoryTable,
    LakehouseConfig,
    MaintenanceConfig,
    PurgePolicy,
    SnapshotConfig,
    StartupMode,
)
from binlake.config.source import BINLOG_READERS, SourceConfig, TlsConfig
from binlake.config.vocabulary import Hint

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
    "Hint",
    "HistoryConfig",
    "HistoryTable",
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
    "require_config",
]
