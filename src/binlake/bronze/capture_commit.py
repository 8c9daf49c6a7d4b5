"""One capture batch, one Delta commit: the batch's changes and its end heartbeat.

The resume position IS the largest heartbeat in ``bronze/changelog``, so "these events + this
resume offset" are committed atomically. Delta idempotent writes (``txnAppId`` /
``txnVersion`` derived from the batch's start) make a second writer that read the same range
a no-op. Also what one capture run did (:class:`CaptureResult`) and the table filter each
commit records. See docs/capture.md.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from binlake import faults
from binlake.bronze.capture_state import CaptureState, capture_state
from binlake.bronze.osc_replay import Replay
from binlake.bronze.tables import record_schemas
from binlake.config import Config
from binlake.contract.changelog import CHANGELOG_SCHEMA, DATA_OPS, DDL_OPS, STATEMENT_OP, heartbeat_row
from binlake.contract.position import BinlogPosition
from binlake.contract.tables import Lakehouse

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.capture")

TXN_APP_ID = "binlake-capture"


@dataclass
class CaptureResult:
    """What one ``binlake capture`` run did."""

    start: BinlogPosition | None = None
    end: BinlogPosition | None = None
    batches: int = 0
    changes: int = 0
    ddl: int = 0
    # Changes of captured tables the binlog holds as statements or without column names:
    # silver stops those tables until they are re-snapshotted.
    statements: int = 0
    schemas_recorded: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    resnapshot_tables: list[str] = field(default_factory=list)
    renamed_into: list[str] = field(default_factory=list)
    new_tables: list[str] = field(default_factory=list)
    replays: list[Replay] = field(default_factory=list)  # online schema change cut-overs met
    source_switches: list[str] = field(default_factory=list)
    table_changes: dict[str, int] = field(default_factory=dict)  # db.table -> row changes captured
    last_commit_ts: int | None = None  # source commit time of the newest captured row change, in µs
    # (db, table, schema_version) known to be in schema_history: later batches of the run
    # skip the lookup (schema_history only grows, so the set can only be incomplete).
    schemas_known: set = field(default_factory=set, repr=False)

    def summary(self) -> str:
        rate = self.changes / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"capture: {self.batches} batch(es), {self.changes} row change(s), {self.ddl} DDL/TRUNCATE/DROP/RENAME, "
            f"{self.start} -> {self.end} in {self.seconds:.1f}s ({rate:,.0f} rows/s)"
        )
        if self.statements:
            text += (
                f"; {self.statements} change(s) logged as SQL statements or without column names, which silver "
                "cannot apply: binlake silver names the tables to re-snapshot"
            )
        if self.resnapshot_tables:
            text += f"; binlog was purged: capture reset and re-snapshotted {', '.join(self.resnapshot_tables)}"
        for switch in self.source_switches:
            text += f"; {switch}"
        if self.new_tables:
            text += f"; snapshotted {', '.join(self.new_tables)} first (newly matched by source.tables)"
        if self.renamed_into:
            text += f"; snapshotted {', '.join(self.renamed_into)} (another table was renamed into it)"
        for replay in self.replays:
            text += f"; {replay.describe()}"
        for w in self.warnings:
            text += f"\nwarning: {w}"
        return text


def table_filter(config: Config) -> dict:
    """The table filter capture records with each commit (its tag)."""
    return {"tables": list(config.source.tables), "exclude": list(config.source.exclude)}


def commit_batch(
    spark: SparkLike,
    lh: Lakehouse,
    schemas,
    start: BinlogPosition,
    end: CaptureState,
    changes,
    result: CaptureResult,
    counts: dict[str, int] | None = None,
    note: str | None = None,
) -> CaptureState:
    """One Delta commit: the batch's changes and its end heartbeat (``changes`` None: the
    heartbeat alone). Returns the state capture resumes from."""
    schemas = [s for s in schemas if (s[0].database, s[0].table, s[0].version()) not in result.schemas_known]
    if schemas:
        # Before the change log commit: a crash in between re-reads the batch and records
        # nothing twice (record_schemas skips known versions), while the reverse order could
        # lose a schema version for good.
        result.schemas_recorded += record_schemas(spark, lh, schemas)
        result.schemas_known.update((s[0].database, s[0].table, s[0].version()) for s in schemas)
    if changes is None:
        changes = spark.createDataFrame(
            [heartbeat_row(end.position, note=note, server_id=end.server_id, gtid=end.gtid)], CHANGELOG_SCHEMA
        )
    counts = counts or {}
    tag = json.dumps(
        {"capture_start": str(start), **end.tag(), "filter": table_filter(lh.config), "id": uuid.uuid4().hex}
    )
    # Two writers that read the same start get the same version: Delta keeps the first.
    # A batch that moves past ``start`` gets an odd version, a bare heartbeat at ``start`` an even one.
    version = 2 * _key(start) + (1 if end.position > start else 0)
    writer = (
        changes.write.format("delta")
        .mode("append")
        .option("txnAppId", _txn_app_id(start.epoch))
        .option("txnVersion", str(version))
        .option("userMetadata", tag)
    )
    faults.point("capture.before_commit")
    lh.changelog.save(writer)
    faults.point("capture.after_commit")
    if lh.changelog.newest_commit_info(spark)["userMetadata"] != tag:
        # Another capture process committed this range first; continue from what it stored.
        stored = capture_state(spark, lh)
        log.warning(
            "another capture run committed the batch starting at %s; continuing from %s",
            start,
            stored.position if stored else end.position,
        )
        return stored or end
    result.batches += 1
    result.changes += sum(n for op, n in counts.items() if op in DATA_OPS)
    result.ddl += sum(n for op, n in counts.items() if op in DDL_OPS)
    result.statements += counts.get(STATEMENT_OP, 0)
    return end


def _txn_app_id(epoch: int) -> str:
    """Idempotent-write versions must grow per app id; positions restart in a new epoch."""
    return TXN_APP_ID if epoch == 0 else f"{TXN_APP_ID}-epoch{epoch}"


def _key(pos: BinlogPosition) -> int:
    return (pos.file_index << 32) | pos.pos
