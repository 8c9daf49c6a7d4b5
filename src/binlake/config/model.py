"""The whole of ``binlake.yml``: its sections, the checks that span them, and the paths it names."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from binlake.config.gold import GoldConfig
from binlake.config.sections import (
    CaptureConfig,
    HealthConfig,
    HistoryConfig,
    LakehouseConfig,
    MaintenanceConfig,
    SnapshotConfig,
)
from binlake.config.source import SourceConfig
from binlake.config.vocabulary import Hint, declared
from binlake.errors import ConfigError


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
    def _archive_source(self) -> Config:
        if self.source.archive is None:
            return self
        if self.capture.startup.value not in ("initial", "position"):
            raise ConfigError(
                f"capture.startup is {self.capture.startup.value!r}, but an archive source (source.archive) starts "
                "at its first file (initial) or at capture.start_position (position): set one of those"
            )
        if self.capture.on_purge.value != "fail" or self.capture.archive is not None:
            raise ConfigError(
                "capture.on_purge and capture.archive are for a server's purged binlogs; source.archive reads "
                "only the archive already: remove them"
            )
        return self

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
    def source_archive(self) -> str | None:
        """source.archive as an absolute path (None: the source is a server)."""
        if self.source.archive is None:
            return None
        p = Path(self.source.archive)
        return str(p if p.is_absolute() else (Path(self.base_dir) / p).resolve())

    @property
    def lakehouse_root(self) -> str | None:
        if self.lakehouse.path is None:
            return None
        p = Path(self.lakehouse.path)
        return str(p if p.is_absolute() else (Path(self.base_dir) / p).resolve())


def require_config(config: object) -> Config:
    """``config`` itself, checked at the entry points that take one from a caller."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be a binlake.config.Config, got {type(config).__name__}: use binlake.load_config")
    return config
