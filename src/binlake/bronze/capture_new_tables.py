"""Snapshots capture starts itself: tables newly matched by the filter, tables renamed into.

A table that ``source.tables`` / ``exclude`` match now but did not match at capture's last
commit holds older rows in no change record capture kept; a table another table was renamed
into (gh-ost and pt-osc cut-overs) received rows the binlog does not carry. Both are
snapshotted before capture goes on.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from binlake.bronze.capture_commit import CaptureResult, table_filter
from binlake.bronze.capture_state import CaptureState
from binlake.bronze.osc_replay import cut_overs, replay_cut_over
from binlake.bronze.snapshot import run_snapshot
from binlake.config import Config
from binlake.contract.tables import Lakehouse
from binlake.errors import ArchiveSourceError
from binlake.source.catalog import captured_tables
from binlake.source.mysql import connect

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.capture")


def snapshot_newly_matched(
    spark: SparkLike, config: Config, lh: Lakehouse, conn, state: CaptureState, result: CaptureResult
) -> None:
    """Snapshot the tables the filter matches now and did not at capture's last commit,
    unless a snapshot taken since capture's position already covers them."""
    if state.table_filter is None or state.table_filter == table_filter(config):
        return
    try:
        before = replace(
            config.source, tables=tuple(state.table_filter["tables"]), exclude=tuple(state.table_filter["exclude"])
        )
    except (KeyError, TypeError):
        return
    newly = [(db, t) for db, t in captured_tables(conn, config.source) if not before.captures(db, t)]
    if not newly:
        return
    covered: set = set()
    if lh.snapshot_chunks.exists(spark) and lh.snapshot_plan.exists(spark):
        from pyspark.sql import functions as F

        names = F.lit(False)
        for db, t in newly:
            names = names | ((F.col("db") == db) & (F.col("table") == t))
        # A complete snapshot every chunk of which was read after capture's position holds
        # every row the missed changes could have touched.
        planned = {
            r["snapshot_id"]: r["n"]
            for r in lh.snapshot_plan.read(spark)
            .where(names)
            .groupBy("snapshot_id")
            .agg(F.countDistinct("chunk_id").alias("n"))
            .collect()
        }
        rows = (
            lh.snapshot_chunks.read(spark)
            .where(names)
            .groupBy("db", "table", "snapshot_id")
            .agg(F.countDistinct("chunk_id").alias("n"), F.min(F.struct("lw_file_index", "lw_pos")).alias("lw"))
            .collect()
        )
        covered = {
            (r["db"], r["table"])
            for r in rows
            if r["n"] == planned.get(r["snapshot_id"])
            and (r["lw"]["lw_file_index"], r["lw"]["lw_pos"]) >= state.position.key()
        }
    todo = sorted(f"{db}.{t}" for db, t in newly if (db, t) not in covered)
    if todo:
        log.info("capture: %s newly matched by source.tables: snapshotting first", ", ".join(todo))
        run_snapshot(spark, config, tables=todo)
        result.new_tables = todo


def renamed_into(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    changes,
    batch_schemas: list,
    renamed: list[dict],
    result: CaptureResult,
) -> None:
    """The rows of the tables another table was renamed into: a cut-over of an online schema
    change replays the mirrored shadow (:mod:`binlake.bronze.osc_replay`); any other rename,
    and a cut-over whose replay cannot be trusted, snapshots the table.

    The binlog carries no rows for a rename, so the rows now under that name come from a
    snapshot at or after the rename; silver drops everything older (the ``renamed_into`` op
    truncates). It runs before the batch's commit: a crash in between re-reads the batch and
    plans again, so the need for it can never be lost.
    """
    names = sorted({f"{r['db']}.{r['table']}" for r in renamed})
    if config.source.archive is not None:
        raise ArchiveSourceError(
            f"{', '.join(names)} received another table's rows by RENAME, which the binlog does not hold as rows, "
            "and an archive source (source.archive) cannot snapshot them: exclude them (source.exclude), or "
            "capture from the server"
        )
    with connect(config.source) as conn:
        present = {f"{db}.{t}" for db, t in captured_tables(conn, config.source)}
    cuts = {c.name: c for c in cut_overs(config.source, renamed)}
    # A name renamed away again later has a DROP after this point, which empties it.
    targets = []
    for name in sorted(set(names) & present):
        cut = cuts.get(name)
        if cut is not None:
            replay = replay_cut_over(spark, lh, changes, batch_schemas, cut)
            result.replays.append(replay)
            if replay.replayed:
                log.info("capture: %s", replay.describe())
                continue
            log.warning("capture: %s", replay.describe())
        targets.append(name)
    if targets:
        log.info("capture: %s received another table's rows by RENAME: snapshotting", ", ".join(targets))
        run_snapshot(spark, config, tables=targets)
        result.renamed_into = sorted(set(result.renamed_into) | set(targets))
