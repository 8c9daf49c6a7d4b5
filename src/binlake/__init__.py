"""binlake: mirror MySQL and MariaDB into a Delta Lake lakehouse, exactly once, without locking a table.

The public API is what a notebook or a job needs; everything else is internal and may move.

    >>> import binlake                                              # doctest: +SKIP
    >>> config = binlake.load_config("binlake.yml")                # doctest: +SKIP
    >>> spark = binlake.get_spark()                                 # doctest: +SKIP
    >>> print(binlake.run_pipeline(spark, config).summary())        # doctest: +SKIP
    >>> orders = binlake.gold_as_of(spark, config, "shop", "orders",
    ...                             position="mysql-bin.000042:1234")  # doctest: +SKIP

Every failure is a :class:`BinlakeError` subclass whose message is one line that says what
to fix, and whose ``exit_code`` is what the CLI returns for it.

Names load on first use, so ``import binlake`` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees: the same names, from the same modules (_EXPORTS)
    from binlake.config import Config, load_config, load_config_text
    from binlake.contract.position import BinlogPosition
    from binlake.deploy.jobs import jobs_status
    from binlake.errors import (
        ArchiveSourceError,
        ArchiveUnreadableError,
        BinlakeError,
        BinlogArchiveError,
        BinlogDecodeError,
        BinlogPurgedError,
        CascadeError,
        ComputeError,
        ConfigError,
        ConnectWithoutDeltaError,
        ConnectWorkersWithoutBinlakeError,
        DatabricksApiError,
        DefaultBackfillError,
        ErasureRefused,
        IncompleteChangeError,
        InternalInvariantError,
        LagExceededError,
        LakehouseError,
        LayoutOutdatedError,
        LayoutTooNewError,
        LeaseError,
        LeaseHeldError,
        LeaseLostError,
        MissingDependencyError,
        NotReadyError,
        PreflightError,
        QualityCheckFailed,
        SchemaChangeError,
        SecretError,
        SilverTableError,
        SourceChangedError,
        SourceConnectionError,
        TableNameClash,
        VerifyMismatch,
    )
    from binlake.gold.publish_log import gold_as_of, publish_as_of
    from binlake.ops.browse import recent_changes, snapshot_chunks
    from binlake.ops.commands import (
        migrate_lakehouse,
        run_capture,
        run_continuous,
        run_erase,
        run_gold,
        run_maintain,
        run_pipeline,
        run_silver,
        run_snapshot,
        run_verify,
    )
    from binlake.ops.preflight import run_preflight
    from binlake.ops.status import collect_status, format_status
    from binlake.spark import get_spark

_EXPORTS = {
    # configuration
    "load_config": "binlake.config",
    "load_config_text": "binlake.config",
    "Config": "binlake.config",
    # a Spark session with Delta (the cluster's on Databricks, local Spark elsewhere)
    "get_spark": "binlake.spark",
    # the commands, each idempotent and safe to re-run after a kill; the ones that write a layer
    # hold its lease while they run, and the first one on a lakehouse an earlier binlake laid
    # out migrates it (binlake.ops.commands)
    "run_preflight": "binlake.ops.preflight",
    "run_snapshot": "binlake.ops.commands",
    "run_capture": "binlake.ops.commands",
    "run_silver": "binlake.ops.commands",
    "run_gold": "binlake.ops.commands",
    "run_pipeline": "binlake.ops.commands",
    "run_continuous": "binlake.ops.commands",
    "run_verify": "binlake.ops.commands",
    "run_maintain": "binlake.ops.commands",
    "run_erase": "binlake.ops.commands",
    "migrate_lakehouse": "binlake.ops.commands",
    # what the operator notebooks show
    "collect_status": "binlake.ops.status",
    "format_status": "binlake.ops.status",
    "recent_changes": "binlake.ops.browse",
    "snapshot_chunks": "binlake.ops.browse",
    "jobs_status": "binlake.deploy.jobs",
    # reading gold as it was published
    "gold_as_of": "binlake.gold.publish_log",
    "publish_as_of": "binlake.gold.publish_log",
    "BinlogPosition": "binlake.contract.position",
    # failures, one per mode
    "BinlakeError": "binlake.errors",
    "ConfigError": "binlake.errors",
    "SecretError": "binlake.errors",
    "SourceConnectionError": "binlake.errors",
    "PreflightError": "binlake.errors",
    "BinlogPurgedError": "binlake.errors",
    "BinlogDecodeError": "binlake.errors",
    "BinlogArchiveError": "binlake.errors",
    "ArchiveSourceError": "binlake.errors",
    "ArchiveUnreadableError": "binlake.errors",
    "SchemaChangeError": "binlake.errors",
    "CascadeError": "binlake.errors",
    "DefaultBackfillError": "binlake.errors",
    "SilverTableError": "binlake.errors",
    "IncompleteChangeError": "binlake.errors",
    "SourceChangedError": "binlake.errors",
    "QualityCheckFailed": "binlake.errors",
    "VerifyMismatch": "binlake.errors",
    "LakehouseError": "binlake.errors",
    "NotReadyError": "binlake.errors",
    "DatabricksApiError": "binlake.errors",
    "MissingDependencyError": "binlake.errors",
    "LagExceededError": "binlake.errors",
    "ErasureRefused": "binlake.errors",
    "ComputeError": "binlake.errors",
    "ConnectWithoutDeltaError": "binlake.errors",
    "ConnectWorkersWithoutBinlakeError": "binlake.errors",
    "TableNameClash": "binlake.errors",
    "LayoutOutdatedError": "binlake.errors",
    "LayoutTooNewError": "binlake.errors",
    "LeaseError": "binlake.errors",
    "LeaseHeldError": "binlake.errors",
    "LeaseLostError": "binlake.errors",
    "InternalInvariantError": "binlake.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'binlake' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
