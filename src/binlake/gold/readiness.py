"""Invariant S: whether gold may publish the group at one binlog position P
(docs/architecture.md, "Silver" and "Gold").

Gold publishes each publish group (``gold.groups``; by default the captured tables of one
database that silver has progress for) at its own P, only when:

1. every table's silver progress is at the same P (a transaction boundary);
2. every planned chunk of each table's latest snapshot has a manifest row, silver has
   applied it, and its high watermark is <= P;
3. no silver row carries a sequence beyond P (checked when the silver versions are pinned).

:func:`check_group` returns a group's P, or raises :class:`NotReadyError` naming each
blocking table, why, and the command that unblocks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from binlake.config import Config
from binlake.contract.memo import Memo
from binlake.contract.position import BinlogPosition
from binlake.contract.tables import Lakehouse
from binlake.errors import NotReadyError
from binlake.silver.progress import progress_rows

if TYPE_CHECKING:
    from binlake.spark import SparkLike


@dataclass(frozen=True)
class TableState:
    """A table of the publish group: how far silver has applied it."""

    db: str
    table: str
    position: BinlogPosition  # the change log is applied up to here
    chunks_version: int | None  # the manifest version silver has applied
    silver_version: int | None  # the silver table's version after that run
    stopped: str | None = None  # why silver stopped the table, with the recovery
    history_version: int | None = None  # its history table's version after that run, if it keeps one

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


def silver_progress(spark: SparkLike, config: Config, lh: Lakehouse) -> list[TableState]:
    """The progress of each captured table silver has applied, by name."""
    rows = progress_rows(spark, lh) or {}
    out = [
        TableState(
            r.db,
            r.table,
            BinlogPosition.from_log(r.applied_file, r.applied_file_index, r.applied_pos),
            r.chunks_version,
            r.silver_version,
            r.stopped,
            r.history_version,
        )
        for r in rows.values()
        # the applied position's three fields are written together
        if r.applied_file is not None and r.applied_file_index is not None and r.applied_pos is not None
        if config.source.captures(r.db, r.table)
    ]
    return sorted(out, key=lambda s: (s.db, s.table))


def _in_tables(names) -> Any:
    from pyspark.sql import functions as F

    cond = F.lit(False)
    for db, t in sorted(names):
        cond = cond | ((F.col("db") == db) & (F.col("table") == t))
    return cond


def _latest_snapshots(spark: SparkLike, lh: Lakehouse, names) -> dict[tuple[str, str], tuple[str, set[int]]]:
    """Each table's latest planned snapshot: (snapshot id, its chunk ids)."""
    # The plan holds one row per chunk: collected narrow, grouped on the driver.
    rows = (
        lh.snapshot_plan.read(spark)
        .where(_in_tables(names))
        .select("db", "table", "snapshot_id", "chunk_id", "planned_at")
        .collect()
    )
    latest: dict[tuple[str, str], tuple] = {}
    for r in rows:
        key, rank = (r["db"], r["table"]), (r["planned_at"] or datetime.min, r["snapshot_id"])
        if key not in latest or rank > latest[key]:
            latest[key] = rank
    planned: dict[tuple[str, str], tuple[str, set[int]]] = {k: (v[1], set()) for k, v in latest.items()}
    for r in rows:
        sid, chunks = planned[(r["db"], r["table"])]
        if r["snapshot_id"] == sid:
            chunks.add(r["chunk_id"])
    return planned


def _completed_chunks(spark: SparkLike, lh: Lakehouse, names, snapshot_ids, version: int | None) -> dict:
    """{(db, table, snapshot id): {chunk id: high watermark}} in the manifest (at ``version``)."""
    from pyspark.sql import functions as F

    df = lh.snapshot_chunks.read(spark) if version is None else lh.snapshot_chunks.read_version(spark, version)
    out: dict = {}
    for r in (
        df.where(_in_tables(names) & F.col("snapshot_id").isin(sorted(snapshot_ids)))
        .select("db", "table", "snapshot_id", "chunk_id", "hw_file", "hw_file_index", "hw_pos")
        .collect()
    ):
        done = out.setdefault((r["db"], r["table"], r["snapshot_id"]), {})
        hw = BinlogPosition.from_log(r["hw_file"], r["hw_file_index"], r["hw_pos"])
        # A chunk read twice (a retried attempt) counts with its latest high watermark.
        if r["chunk_id"] not in done or hw > done[r["chunk_id"]]:
            done[r["chunk_id"]] = hw
    return out


# Per snapshot plan (by location): the plan and manifest versions and the group's applied
# manifest versions of the last check that found no blocker, with its target. The same
# versions and a later target cannot find one either (a continuous process asks every loop).
_clear: Memo[tuple] = Memo()


def snapshot_blockers(
    spark: SparkLike, lh: Lakehouse, states: list[TableState], target: BinlogPosition
) -> dict[str, list[str]]:
    """Why each table's latest snapshot does not satisfy Invariant S at ``target``."""
    blockers: dict[str, list[str]] = {}
    if not states or not lh.snapshot_plan.exists(spark):
        return blockers
    chunks_exist = lh.snapshot_chunks.exists(spark)
    chunks_commit = lh.snapshot_chunks.newest_commit(spark) if chunks_exist else (None, None)
    latest_version = chunks_commit[0]
    versions = (
        lh.snapshot_plan.newest_commit(spark),
        chunks_commit,
        tuple(sorted((s.name, s.chunks_version) for s in states)),
    )
    memo = (str(lh.snapshot_plan), tuple(sorted(s.name for s in states)))  # one entry per publish group
    clear_up_to = _clear.get(memo, versions)
    if clear_up_to is not None and target.key() >= clear_up_to:
        return blockers
    names = {(s.db, s.table): s for s in states}
    planned = _latest_snapshots(spark, lh, names)
    if not planned:
        _clear.put(memo, target.key(), versions)
        return blockers
    snapshot_ids = {sid for sid, _ in planned.values()}
    manifests: dict[int | None, dict] = {}

    def manifest(version: int | None) -> dict:
        if not chunks_exist:
            return {}
        if version not in manifests:
            manifests[version] = _completed_chunks(
                spark, lh, names, snapshot_ids, None if version == latest_version else version
            )
        return manifests[version]

    for (db, t), (sid, chunk_ids) in sorted(planned.items()):
        name, state = f"{db}.{t}", names[(db, t)]
        done = manifest(latest_version).get((db, t, sid), {})
        missing = chunk_ids - set(done)
        if missing:
            blockers.setdefault(name, []).append(
                f"snapshot {sid} has {len(chunk_ids) - len(missing)} of {len(chunk_ids)} chunks complete "
                f"(first missing chunk {min(missing)}): run binlake snapshot to finish it"
            )
            continue
        late = sorted((cid, hw) for cid, hw in done.items() if cid in chunk_ids and hw > target)
        if late:
            cid, hw = late[0]
            blockers.setdefault(name, []).append(
                f"snapshot {sid} chunk {cid} has high watermark {hw} beyond silver's position {target} "
                f"({len(late)} chunk{'s' if len(late) != 1 else ''} in all): run binlake capture, then binlake silver"
            )
            continue
        # Silver records the manifest version it has applied; chunks committed after it
        # are complete in bronze but not yet in silver.
        if state.chunks_version is not None and latest_version is not None:
            applied = manifest(min(int(state.chunks_version), latest_version)).get((db, t, sid), {})
            unapplied = chunk_ids - set(applied)
            if unapplied:
                blockers.setdefault(name, []).append(
                    f"snapshot {sid}: {len(unapplied)} completed chunk{'s are' if len(unapplied) != 1 else ' is'} "
                    "not yet applied to silver: run binlake silver"
                )
    if not blockers:
        _clear.put(memo, target.key(), versions)
    return blockers


def not_ready(blockers: dict[str, list[str]], target: BinlogPosition) -> NotReadyError:
    """The error naming every blocking table and why; ``.blockers`` holds them."""
    parts = [f"{name} blocks: {'; '.join(reasons)}" for name, reasons in sorted(blockers.items())]
    err = NotReadyError(
        f"gold not published at {target} (Invariant S does not hold; last good gold kept): " + " | ".join(parts)
    )
    err.blockers = blockers
    return err


def publish_groups(config: Config, states: list[TableState]) -> dict[str, list[TableState]]:
    """The captured tables by publish group (``gold.groups``; by default one per database),
    groups in name order."""
    groups: dict[str, list[TableState]] = {}
    for s in sorted(states, key=lambda s: s.name):
        groups.setdefault(config.gold.group_of(s.db, s.table), []).append(s)
    return dict(sorted(groups.items()))


def check_group(spark: SparkLike, lh: Lakehouse, states: list[TableState]) -> BinlogPosition:
    """Check Invariant S for one publish group; return its P or raise NotReadyError."""
    target = max(s.position for s in states)
    blockers: dict[str, list[str]] = {}
    for s in states:
        if s.stopped:
            blockers.setdefault(s.name, []).append(f"silver stopped it: {s.stopped}")
        elif s.position < target:
            blockers.setdefault(s.name, []).append(
                f"silver applied the change log up to {s.position}, the rest of the group is at {target}: run "
                "binlake silver"
            )
    for name, reasons in snapshot_blockers(spark, lh, states, target).items():
        blockers.setdefault(name, []).extend(reasons)
    if blockers:
        raise not_ready(blockers, target)
    return target
