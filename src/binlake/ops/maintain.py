"""``binlake maintain``: keep a long-running lakehouse tidy, safely beside a running pipeline.

Four steps, each one Delta commit per table, so a kill at any point leaves every table valid
and a re-run simply does what is left (docs/maintenance.md):

1. **Tombstones**: silver's deleted rows below the table's *safe bound* and older than
   ``maintenance.tombstone_retention_hours`` are removed. The bound is the smallest of the
   table's applied position, the low watermark of every snapshot chunk silver has not
   applied yet, and the position gold last published the table at (gold's incremental
   publish carries a delete over as the tombstone's change); a table with a snapshot still
   being read is skipped. A record that could still arrive for the table sorts above the
   bound, so it still meets the tombstones it must lose to.
2. **Bronze retention**: snapshot rows of snapshots older than the table's latest complete,
   applied, full snapshot, and rows of killed read attempts of complete snapshots; change-log
   records older than ``maintenance.changelog_retention_days`` that silver has applied and
   that sort below that snapshot (a re-built silver table replays from it, so nothing before
   it is needed; a table with no such snapshot keeps its whole log).
3. **OPTIMIZE** of the change log, silver and gold tables and the metrics table with at least
   ``maintenance.optimize_min_files`` files (gold stays incremental across it).
4. **VACUUM** of every table at ``maintenance.vacuum_retention_hours``.

Deletes and compactions that lose a race with a concurrent writer are retried
(:func:`binlake.contract.write_errors.with_retry`); they are correct against any newer version.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from binlake import faults
from binlake.bronze.tables import changelog_deletable, restore_append_only
from binlake.config import Config, require_config
from binlake.contract.changelog import HEARTBEAT_OP
from binlake.contract.position import DERIVED_ROW, describe_key, seq_literal
from binlake.contract.schemas import SNAPSHOT_ATTEMPT_ID
from binlake.contract.sql import spark_string
from binlake.contract.tables import Lakehouse, TableRef, delete_where
from binlake.contract.write_errors import with_retry
from binlake.gold.publish_log import last_published
from binlake.gold.readiness import TableState, silver_progress
from binlake.spark import TABLE_THREADS
from binlake.timing import utc_now

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.maintain")

OPEN_SNAPSHOT_DEAD_AFTER = timedelta(days=7)


@dataclass
class MaintainResult:
    tombstones_removed: dict[str, int] = field(default_factory=dict)
    tombstones_kept: dict[str, str] = field(default_factory=dict)  # table -> why it was skipped
    snapshot_files_removed: int = 0
    changelog_rows_removed: int = 0
    optimized: list[str] = field(default_factory=list)
    vacuumed: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        lines = [
            f"maintain: {sum(self.tombstones_removed.values())} silver tombstone(s) removed, "
            f"{self.snapshot_files_removed} snapshot file(s) and {self.changelog_rows_removed} "
            f"change-log row(s) removed, {len(self.optimized)} table(s) compacted, {self.vacuumed} vacuumed "
            f"in {self.seconds:.1f}s"
        ]
        lines += [f"  {name}: {n} tombstone(s) removed" for name, n in sorted(self.tombstones_removed.items()) if n]
        lines += [f"  {name}: tombstones kept: {why}" for name, why in sorted(self.tombstones_kept.items())]
        lines += [f"  compacted {name}" for name in self.optimized]
        return "\n".join(lines)


@dataclass
class _Snapshots:
    """What the snapshot tables say about one captured table."""

    open_since: datetime | None = None  # planned_at of its newest snapshot still being read
    unapplied_lw: tuple[int, int] | None = None  # smallest lw of a completed chunk silver has not applied
    base: str | None = None  # its latest complete, applied, full snapshot
    base_lw: tuple[int, int] | None = None  # that snapshot's smallest low watermark
    older: list[str] = field(default_factory=list)  # snapshots planned before the base
    complete: set = field(default_factory=set)  # its complete snapshots


def run_maintain(spark: SparkLike, config: Config) -> MaintainResult:
    """Run the four steps (see the module doc); returns what was done."""
    require_config(config)
    started = time.monotonic()
    lh = Lakehouse(config)
    result = MaintainResult()
    restore_append_only(spark, lh)
    states = silver_progress(spark, config, lh)
    facts = _snapshot_facts(spark, lh, states)
    now = utc_now()
    published = {
        name: (int(r["file_index"]), int(r["pos"]))
        for name, r in last_published(spark, lh, [s.name for s in states]).items()
    }
    _compact_tombstones(spark, config, lh, states, facts, published, now, result)
    faults.point("maintain.after_tombstones")
    _prune_bronze(spark, config, lh, states, facts, now, result)
    faults.point("maintain.after_retention")
    refs = [
        lh.changelog,
        *(lh.silver(s.db, s.table) for s in states),
        *(lh.gold(s.db, s.table) for s in states),
        lh.metrics,
    ]
    # History tables: compacted and vacuumed like the others, never pruned (they are the history).
    refs += [
        ref
        for s in states
        if config.history.table(s.db, s.table)
        for ref in (
            lh.silver_history(s.db, s.table),
            lh.silver_history_events(s.db, s.table),
            lh.silver_history_facts(s.db, s.table),
            lh.gold_history(s.db, s.table),
        )
    ]
    everything = [
        lh.snapshot_rows,
        *(ref for s in states for ref in lh.snapshot_tables(spark, s.db, s.table).values()),
        lh.snapshot_chunks,
        lh.snapshot_plan,
        lh.schema_history,
        lh.silver_progress,
        lh.publish_log,
        lh.check_results,
        lh.leases,
        *refs,
    ]
    with ThreadPoolExecutor(TABLE_THREADS, thread_name_prefix="maintain") as pool:
        compacted = list(pool.map(lambda ref: _optimize(spark, config, ref), refs))
        result.optimized += [str(ref) for ref, done in zip(refs, compacted) if done]
        faults.point("maintain.after_optimize")
        result.vacuumed += sum(pool.map(lambda ref: _vacuum(spark, config, ref), everything))
    result.seconds = time.monotonic() - started
    return result


def _optimize(spark: SparkLike, config: Config, ref: TableRef) -> bool:
    """OPTIMIZE ``ref`` if it has enough files; True if it did."""
    if not ref.exists(spark) or _file_count(spark, ref) < config.maintenance.optimize_min_files:
        return False
    with_retry(f"OPTIMIZE {ref}", lambda: ref.delta(spark).optimize().executeCompaction())
    return True


def _vacuum(spark: SparkLike, config: Config, ref: TableRef) -> bool:
    if not ref.exists(spark):
        return False
    ref.delta(spark).vacuum(float(config.maintenance.vacuum_retention_hours))
    return True


def _file_count(spark: SparkLike, ref: TableRef) -> int:
    return int(spark.sql(f"DESCRIBE DETAIL {ref.sql}").select("numFiles").collect()[0][0] or 0)


def _snapshot_facts(spark: SparkLike, lh: Lakehouse, states: list[TableState]) -> dict[tuple[str, str], _Snapshots]:
    """What the snapshot tables say about each table, by ``(db, table)`` (a name ``db.table``
    is ambiguous: a database name may hold a dot)."""
    from pyspark.sql import functions as F

    facts = {(s.db, s.table): _Snapshots() for s in states}
    if not (facts and lh.snapshot_plan.exists(spark) and lh.snapshot_chunks.exists(spark)):
        return facts
    plans: dict[tuple[tuple[str, str], str], dict] = {}
    for r in (
        lh.snapshot_plan.read(spark)
        .groupBy("db", "table", "snapshot_id")
        .agg(
            F.countDistinct("chunk_id").alias("n"),
            F.min("planned_at").alias("at"),
            F.collect_list(F.struct("chunk_id", "start_key", "end_key")).alias("chunks"),
        )
        .collect()
    ):
        if (r["db"], r["table"]) in facts:
            plans[((r["db"], r["table"]), r["snapshot_id"])] = r.asDict()
    done = {
        ((r["db"], r["table"]), r["snapshot_id"]): r
        for r in (
            lh.snapshot_chunks.read(spark)
            .groupBy("db", "table", "snapshot_id")
            .agg(F.countDistinct("chunk_id").alias("n"), F.min(F.struct("lw_file_index", "lw_pos")).alias("lw"))
            .collect()
        )
    }
    latest = lh.snapshot_chunks.latest_version(spark)
    unapplied: set = set()  # (table, snapshot id) with a chunk silver has not applied
    for s in states:
        # Chunks committed after the manifest version silver recorded are not applied yet.
        first = 0 if s.chunks_version is None else int(s.chunks_version) + 1
        if first <= latest:
            for r in (
                lh.snapshot_chunks.read_changes(spark, first, latest)
                .where((F.col("db") == s.db) & (F.col("table") == s.table))
                .groupBy("snapshot_id")
                .agg(F.min(F.struct("lw_file_index", "lw_pos")).alias("lw"))
                .collect()
            ):
                lw = (r["lw"]["lw_file_index"], r["lw"]["lw_pos"])
                f = facts[(s.db, s.table)]
                f.unapplied_lw = lw if f.unapplied_lw is None else min(f.unapplied_lw, lw)
                unapplied.add(((s.db, s.table), r["snapshot_id"]))
    for (name, sid), plan in sorted(plans.items(), key=lambda kv: kv[1]["at"]):
        f = facts[name]
        m = done.get((name, sid))
        if m is not None and m["n"] == plan["n"]:
            f.complete.add(sid)
            if (name, sid) not in unapplied and _covers_everything(plan["chunks"]):
                f.base, f.base_lw = sid, (m["lw"]["lw_file_index"], m["lw"]["lw_pos"])
        else:
            f.open_since = plan["at"]
    for (name, sid), plan in plans.items():
        f = facts[name]
        if f.base is not None and sid != f.base and plan["at"] < plans[(name, f.base)]["at"]:
            f.older.append(sid)
    return facts


def _covers_everything(chunks) -> bool:
    """A full snapshot's chunks tile the whole key space; a repair's cover only some ranges."""
    ordered = sorted(chunks, key=lambda c: c["chunk_id"])
    return (
        bool(ordered)
        and ordered[0]["start_key"] is None
        and ordered[-1]["end_key"] is None
        and all(a["end_key"] == b["start_key"] for a, b in itertools.pairwise(ordered))
    )


def _compact_tombstones(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    states: list[TableState],
    facts: dict[tuple[str, str], _Snapshots],
    published: dict[str, tuple[int, int]],
    now: datetime,
    result: MaintainResult,
) -> None:
    hours = config.maintenance.tombstone_retention_hours
    horizon = (now - timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")
    for s in states:
        f = facts[(s.db, s.table)]
        ref = lh.silver(s.db, s.table)
        if s.stopped:
            result.tombstones_kept[s.name] = "silver stopped the table"
            continue
        # A snapshot being read may have read rows before a delete it has not seen yet; one
        # left open for a week is taken for dead (a killed run nobody resumed).
        if f.open_since is not None and f.open_since > now - OPEN_SNAPSHOT_DEAD_AFTER:
            result.tombstones_kept[s.name] = "a snapshot of it is still being read"
            continue
        if not ref.exists(spark):
            continue
        # Never published: gold's first publish rebuilds from the live rows, tombstones unneeded.
        bound = min(k for k in (s.position.key(), f.unapplied_lw, published.get(s.name)) if k is not None)
        condition = (
            f"_cdc_deleted AND _cdc_seq < {seq_literal((bound[0], bound[1], DERIVED_ROW))} "
            f"AND (_cdc_commit_ts IS NULL OR _cdc_commit_ts < TIMESTAMP '{horizon}')"
        )

        removed = delete_where(spark, ref, condition, f"tombstone compaction of {ref}")
        result.tombstones_removed[s.name] = removed
        log.info("maintain %s: %d tombstone(s) below %s removed", s.name, removed, describe_key(bound))


def _prune_bronze(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    states: list[TableState],
    facts: dict[tuple[str, str], _Snapshots],
    now: datetime,
    result: MaintainResult,
) -> None:
    """Remove the bronze rows nothing needs: typed snapshot tables, snapshot rows, change-log rows."""
    for s in states:
        _prune_typed_snapshots(spark, lh, s, facts[(s.db, s.table)], result)
    if lh.snapshot_rows.exists(spark):
        for s in states:
            _prune_snapshot_rows(spark, lh, s, facts[(s.db, s.table)], result)
    if lh.changelog.exists(spark) and states:
        _prune_changelog(spark, config, lh, states, facts, now, result)


def _prune_snapshot_rows(spark: SparkLike, lh: Lakehouse, s: TableState, f: _Snapshots, result: MaintainResult) -> None:
    """Remove a table's snapshot rows of older snapshots and of killed attempts of complete ones."""
    # The deletes take SQL text: a Delta command on a Spark Connect session takes no Column.
    same_sql = f"db = {spark_string(s.db)} AND `table` = {spark_string(s.table)}"
    if f.older:
        doomed = f"{same_sql} AND snapshot_id IN ({', '.join(spark_string(i) for i in sorted(f.older))})"
        result.snapshot_files_removed += _delete_partitions(spark, lh.snapshot_rows, doomed)
    if f.complete:
        orphans = _orphan_attempts(spark, lh, s, f.complete)
        if orphans:
            result.snapshot_files_removed += _delete_partitions(spark, lh.snapshot_rows, f"{same_sql} AND ({orphans})")


def _orphan_attempts(spark: SparkLike, lh: Lakehouse, s: TableState, complete: set[str]) -> str | None:
    """Killed attempts of complete snapshots: rows without a manifest row, never read; as a
    Spark SQL condition, or None when there are none."""
    from pyspark.sql import functions as F

    same = (F.col("db") == s.db) & (F.col("table") == s.table)
    kept = (
        lh.snapshot_chunks.read(spark)
        .where(same & F.col("snapshot_id").isin(sorted(complete)))
        .select("snapshot_id", "chunk_id", "attempt_id")
        .distinct()
    )
    orphans = (
        lh.snapshot_rows.read(spark)
        .where(same & F.col("snapshot_id").isin(sorted(complete)))
        .select("snapshot_id", "chunk_id", "attempt_id")
        .distinct()
        .join(kept, ["snapshot_id", "chunk_id", "attempt_id"], "left_anti")
        .collect()
    )
    if not orphans:
        return None
    return " OR ".join(
        f"(snapshot_id = {spark_string(o['snapshot_id'])} AND chunk_id = {int(o['chunk_id'])} "
        f"AND attempt_id = {spark_string(o['attempt_id'])})"
        for o in orphans
    )


def _prune_changelog(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    states: list[TableState],
    facts: dict[tuple[str, str], _Snapshots],
    now: datetime,
    result: MaintainResult,
) -> None:
    """Remove the change-log rows past retention that every reader is past."""
    horizon = (now - timedelta(days=config.maintenance.changelog_retention_days)).strftime("%Y-%m-%d %H:%M:%S")
    bounds = {
        (s.db, s.table): min(s.position.key(), lw)
        for s in states
        if (lw := facts[(s.db, s.table)].base_lw) is not None and not s.stopped
    }
    if not bounds:
        return
    # Heartbeats below every table's bound; the newest (capture's resume position) is above them all.
    everyone = min(bounds.values()) if len(bounds) == len(states) else None
    condition = changelog_retention_condition(bounds, horizon, everyone)

    # The change log is append-only for every writer but this one: the guard is lifted for the
    # delete alone (readers take only its inserts).
    with changelog_deletable(spark, lh):
        result.changelog_rows_removed = delete_where(spark, lh.changelog, condition, "change-log retention")


def changelog_retention_condition(
    bounds: Mapping[tuple[str, str], tuple[int, int]], horizon: str, heartbeats_below: tuple[int, int] | None
) -> str:
    """The change-log rows retention removes, as Spark SQL: rows captured before ``horizon``
    of each table ``(db, table)`` of ``bounds`` below its bound ``(file_index, pos)``, and
    heartbeats below ``heartbeats_below`` (None: keep every heartbeat).

    Names stay a pair and every one goes through :func:`spark_string`: a database name may
    hold a dot and a table name a quote, and either must match that table alone."""
    seq = "named_struct('a', file_index, 'b', pos)"

    def below(key: tuple[int, int]) -> str:
        return f"{seq} < named_struct('a', CAST({int(key[0])} AS BIGINT), 'b', CAST({int(key[1])} AS BIGINT))"

    per_table = " OR ".join(
        f"(db = {spark_string(db)} AND `table` = {spark_string(table)} AND {below(b)})"
        for (db, table), b in sorted(bounds.items())
    )
    beats = "" if heartbeats_below is None else f" OR (op = {spark_string(HEARTBEAT_OP)} AND {below(heartbeats_below)})"
    return f"captured_at < TIMESTAMP {spark_string(horizon)} AND (({per_table}){beats})"


def _prune_typed_snapshots(
    spark: SparkLike, lh: Lakehouse, s: TableState, f: _Snapshots, result: MaintainResult
) -> None:
    """The typed snapshot tables' part of retention: a snapshot planned before the base is
    dropped whole (its own table), and killed attempts of complete snapshots (rows without a
    manifest row, never read) are deleted."""
    from pyspark.sql import functions as F

    tables = lh.snapshot_tables(spark, s.db, s.table)
    if not tables:
        return
    # Unity Catalog lists names in lower case: snapshot ids are compared that way.
    older = {i.lower() for i in f.older}
    complete = {i.lower(): i for i in f.complete}
    for sid, ref in tables.items():
        if sid.lower() in older:
            files = _file_count(spark, ref)
            ref.drop(spark)
            result.snapshot_files_removed += files
            log.info("maintain %s: snapshot %s dropped (%d files)", s.name, sid, files)
        elif sid.lower() in complete:
            kept = {
                r["attempt_id"]
                for r in lh.snapshot_chunks.read(spark)
                .where(F.col("snapshot_id") == complete[sid.lower()])
                .select("attempt_id")
                .distinct()
                .collect()
            }
            written = {r[0] for r in ref.read(spark).select(SNAPSHOT_ATTEMPT_ID).distinct().collect()}
            orphans = sorted(written - kept)
            if orphans:
                doomed = f"{SNAPSHOT_ATTEMPT_ID} IN ({', '.join(spark_string(a) for a in orphans)})"
                result.snapshot_files_removed += _delete_partitions(spark, ref, doomed)


def _delete_partitions(spark: SparkLike, ref: TableRef, predicate) -> int:
    """Delete the snapshot rows ``predicate`` matches (whole partitions of snapshot_rows, a
    metadata-only commit; whole attempts' files of a typed snapshot table); returns the files removed."""
    return delete_where(spark, ref, predicate, f"snapshot retention of {ref}", metric="numRemovedFiles")
