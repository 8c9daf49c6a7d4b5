"""Gold: publish every captured table's current state at one binlog position P.

``run_gold`` publishes the whole publish group (every captured table that silver has
progress for) or nothing. It publishes only when Invariant S holds at one position P for
all of them (DESIGN.md sections 3 and 4):

1. every table's silver progress is at the same P (a transaction boundary);
2. every planned chunk of each table's latest snapshot has a manifest row, silver has
   applied it, and its high watermark is <= P;
3. no silver row carries a sequence beyond P (silver is not half-way through a newer batch).

Then the checks run (:mod:`binlake.quality.checks`); a failed ``fail`` check publishes
nothing and the last good gold versions stay. Otherwise each gold table is overwritten
(idempotent), quarantined rows are written, and the publish-log rows are appended LAST:
the publish log is the commit point. A reader who wants a consistent cut across tables
takes one ``publish_id`` from the log and reads each table ``VERSION AS OF gold_version``
(:func:`gold_as_of`, docs/gold.md).

Example::

    >>> result = run_gold(spark, config)              # doctest: +SKIP
    >>> print(result.summary())                       # doctest: +SKIP
    gold published 3 tables at mysql-bin.000004:1532 (publish 000004-1532-5be1c0e2d1)
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator

from binlake import faults
from binlake.config import Config
from binlake.errors import BinlakeError, LakehouseError, NotReadyError, QualityCheckFailed
from binlake.lakehouse import PUBLISH_LOG_SCHEMA, Lakehouse, TableRef, storage_refusal

log = logging.getLogger("binlake.gold")

STATUS_PUBLISHED = "published"
STATUS_FAILED = "failed"

# Metadata columns gold keeps from silver; _cdc_deleted is always false in gold, _cdc_op adds nothing.
GOLD_METADATA_COLUMNS = ("_cdc_seq", "_cdc_commit_ts")
# Silver tables pinned at the same time by one publish (see run_gold).
PIN_THREADS = 4
_BINLOG_SUFFIX = re.compile(r"\.(\d+)$")


@dataclass(frozen=True, order=True)
class Position:
    """A binlog position; ordered by (file_index, pos)."""

    file_index: int
    pos: int
    file: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}" if self.file else f"#{self.file_index}:{self.pos}"

    @staticmethod
    def parse(value: Any) -> "Position":
        """``"mysql-bin.000003:1234"``, ``(3, 1234)`` or a :class:`Position`."""
        if isinstance(value, Position):
            return value
        if isinstance(value, str):
            file, sep, pos = value.rpartition(":")
            m = _BINLOG_SUFFIX.search(file)
            if sep and m and pos.isdigit():
                return Position(int(m.group(1)), int(pos), file)
        elif isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return Position(int(value[0]), int(value[1]))
        raise ValueError(f'position must be "FILE:POS" such as "mysql-bin.000003:1234" or a (file_index, pos) tuple, got {value!r}')


@dataclass
class TablePublish:
    db: str
    table: str
    silver_version: int
    gold_version: int | None = None
    row_count: int | None = None
    dropped: int = 0
    reused: bool = False
    checks: Any = None  # quality.checks.TableChecks, or the recorded JSON when reused

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


@dataclass
class GoldResult:
    publish_id: str
    status: str
    position: Position
    gtid: str | None = None
    source_time: str | None = None
    tables: list[TablePublish] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.status == "unchanged":
            head = f"gold unchanged: already published at {self.position} (publish {self.publish_id})"
        else:
            head = f"gold published {len(self.tables)} table{'s' if len(self.tables) != 1 else ''} at {self.position} (publish {self.publish_id})"
        lines = [head]
        for t in self.tables:
            extra = f", {t.dropped} rows quarantined" if t.dropped else ""
            extra += ", unchanged since last publish" if t.reused else ""
            lines.append(f"  {t.name}: {t.row_count} rows, gold version {t.gold_version}{extra}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Reading Delta tables at versions


def _read_at(spark, ref: TableRef, version: int):
    reader = spark.read.format("delta").option("versionAsOf", int(version))
    return reader.table(ref.name) if ref.name else reader.load(ref.path)


def _latest_version(spark, ref: TableRef) -> int:
    return int(ref.delta(spark).history(1).select("version").first()[0])


def _last_commit(spark, ref: TableRef) -> tuple[int, dict]:
    row = ref.delta(spark).history(1).select("version", "operationMetrics").first()
    return int(row[0]), dict(row[1] or {})


def _ensure_publish_log(spark, lh: Lakehouse) -> None:
    lh.publish_log.create_if_missing(spark, PUBLISH_LOG_SCHEMA, comment="binlake gold: one row per table per publish (the commit point)")


# ---------------------------------------------------------------------------------------
# Invariant S


@dataclass
class _TableState:
    db: str
    table: str
    position: Position
    chunks_version: int | None


def _silver_progress(spark, config: Config, lh: Lakehouse) -> list[_TableState]:
    """The latest progress row of each captured table (progress may be appended or merged)."""
    if not lh.silver_progress.exists(spark):
        return []
    # One row per table per silver batch at most: small enough to pick the latest on the driver,
    # which is far cheaper than a shuffle on a busy cluster.
    latest: dict[tuple[str, str], tuple] = {}
    for r in lh.silver_progress.read(spark).select(
            "db", "table", "applied_file_index", "applied_pos", "updated_at", "applied_file", "chunks_version").collect():
        if r["applied_file_index"] is None or not config.source.captures(r["db"], r["table"]):
            continue
        rank = (r["applied_file_index"], r["applied_pos"] or 0, r["updated_at"] or datetime.min)
        key = (r["db"], r["table"])
        if key not in latest or rank > latest[key][0]:
            latest[key] = (rank, r)
    out = [_TableState(db, t, Position(r["applied_file_index"], r["applied_pos"], r["applied_file"]), r["chunks_version"])
           for (db, t), (_, r) in latest.items()]
    return sorted(out, key=lambda s: (s.db, s.table))


def _in_tables(names) -> Any:
    from pyspark.sql import functions as F

    cond = F.lit(False)
    for db, t in sorted(names):
        cond = cond | ((F.col("db") == db) & (F.col("table") == t))
    return cond


def _snapshot_blockers(spark, lh: Lakehouse, states: list[_TableState], target: Position) -> dict[str, list[str]]:
    """Why each table's latest snapshot does not satisfy Invariant S at ``target``."""
    from pyspark.sql import functions as F

    blockers: dict[str, list[str]] = {}
    if not states or not lh.snapshot_plan.exists(spark):
        return blockers
    names = {(s.db, s.table): s for s in states}
    # The plan and the manifest hold one row per chunk: collected narrow, grouped on the driver.
    plan_rows = lh.snapshot_plan.read(spark).where(_in_tables(names)).select(
        "db", "table", "snapshot_id", "chunk_id", "planned_at").collect()
    latest_snapshot: dict[tuple[str, str], tuple] = {}
    for r in plan_rows:
        key, rank = (r["db"], r["table"]), (r["planned_at"] or datetime.min, r["snapshot_id"])
        if key not in latest_snapshot or rank > latest_snapshot[key]:
            latest_snapshot[key] = rank
    planned: dict[tuple[str, str], tuple[str, set[int]]] = {k: (v[1], set()) for k, v in latest_snapshot.items()}
    for r in plan_rows:
        sid, chunks = planned[(r["db"], r["table"])]
        if r["snapshot_id"] == sid:
            chunks.add(r["chunk_id"])
    if not planned:
        return blockers
    chunks_exist = lh.snapshot_chunks.exists(spark)
    latest_chunks_version = _latest_version(spark, lh.snapshot_chunks) if chunks_exist else None
    snapshot_ids = sorted({sid for sid, _ in planned.values()})

    def manifest(version: int | None) -> dict[tuple[str, str, str], dict[int, tuple[int, int, str]]]:
        if not chunks_exist:
            return {}
        df = lh.snapshot_chunks.read(spark) if version is None else _read_at(spark, lh.snapshot_chunks, version)
        out: dict = {}
        for r in (df.where(_in_tables(names) & F.col("snapshot_id").isin(snapshot_ids))
                  .select("db", "table", "snapshot_id", "chunk_id", "hw_file_index", "hw_pos", "hw_file").collect()):
            done = out.setdefault((r["db"], r["table"], r["snapshot_id"]), {})
            hw = (r["hw_file_index"], r["hw_pos"], r["hw_file"])
            # A chunk read twice (a retried attempt) counts with its latest high watermark.
            if r["chunk_id"] not in done or hw[:2] > done[r["chunk_id"]][:2]:
                done[r["chunk_id"]] = hw
        return out

    committed = manifest(None)
    applied_cache: dict[int | None, dict] = {latest_chunks_version: committed}
    for (db, t), (sid, chunk_ids) in sorted(planned.items()):
        name = f"{db}.{t}"
        state = names[(db, t)]
        done = committed.get((db, t, sid), {})
        missing = chunk_ids - set(done)
        if missing:
            blockers.setdefault(name, []).append(
                f"snapshot {sid} has {len(chunk_ids) - len(missing)} of {len(chunk_ids)} chunks complete "
                f"(first missing chunk {min(missing)}): run binlake snapshot to finish it"
            )
            continue
        late = sorted((cid, hw) for cid, hw in done.items() if cid in chunk_ids and (hw[0], hw[1]) > (target.file_index, target.pos))
        if late:
            cid, hw = late[0]
            blockers.setdefault(name, []).append(
                f"snapshot {sid} chunk {cid} has high watermark {Position(hw[0], hw[1], hw[2])} beyond silver's position "
                f"{target} ({len(late)} chunk{'s' if len(late) != 1 else ''} in all): run binlake capture, then binlake silver"
            )
            continue
        # Silver records the manifest version it has applied; chunks committed after it
        # are complete in bronze but not yet in silver.
        if state.chunks_version is not None and latest_chunks_version is not None:
            v = min(int(state.chunks_version), latest_chunks_version)
            if v not in applied_cache:
                applied_cache[v] = manifest(v)
            unapplied = chunk_ids - set(applied_cache[v].get((db, t, sid), {}))
            if unapplied:
                blockers.setdefault(name, []).append(
                    f"snapshot {sid}: {len(unapplied)} completed chunk{'s are' if len(unapplied) != 1 else ' is'} "
                    "not yet applied to silver: run binlake silver"
                )
    return blockers


def _silver_stats(spark, ref: TableRef, version: int) -> tuple[int, tuple[int, int] | None]:
    """(live rows, greatest (file_index, pos) of any row) of silver at ``version``."""
    from pyspark.sql import functions as F

    r = _read_at(spark, ref, version).agg(
        F.count(F.when(~F.col("_cdc_deleted"), 1)).alias("live"),
        F.max(F.struct(F.col("_cdc_seq.file_index"), F.col("_cdc_seq.pos"))).alias("top"),
    ).first()
    top = r["top"]
    return int(r["live"]), (tuple(top) if top is not None and top[0] is not None else None)


def _position_extras(spark, lh: Lakehouse, p: Position) -> tuple[str | None, str | None]:
    """(GTID, source commit time as 'YYYY-MM-DD HH:MM:SS.ffffff' UTC) of the last change at or before P."""
    from pyspark.sql import functions as F

    if not lh.changelog.exists(spark):
        return None, None
    at_or_before = (F.col("file_index") < p.file_index) | ((F.col("file_index") == p.file_index) & (F.col("pos") <= p.pos))
    gtid = source_time = None
    # Capture writes a heartbeat per batch, so P's own binlog file almost always answers;
    # Delta's file statistics then skip the rest of the change log.
    for scope in (F.col("file_index") == p.file_index, F.lit(True)):
        r = lh.changelog.read(spark).where(scope & at_or_before).agg(
            F.max(F.when(F.col("gtid").isNotNull(), F.struct("file_index", "pos", "gtid"))).alias("g"),
            F.max(F.when(F.col("commit_ts").isNotNull(), F.struct(
                "file_index", "pos", F.date_format("commit_ts", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("ts")))).alias("t"),
        ).first()
        gtid = gtid or (r["g"]["gtid"] if r["g"] else None)
        source_time = source_time or (r["t"]["ts"] if r["t"] else None)
        if gtid and source_time:
            break
    return gtid, source_time


def check_ready(spark, config: Config) -> tuple[Position, list[_TableState]]:
    """Check Invariant S for the publish group; return (P, the group) or raise NotReadyError."""
    lh = Lakehouse(config)
    states = _silver_progress(spark, config, lh)
    if not states:
        raise NotReadyError("gold has nothing to publish: no captured table has silver progress yet; run binlake silver first")
    target = max(s.position for s in states)
    blockers: dict[str, list[str]] = {}
    for s in states:
        if s.position < target:
            blockers.setdefault(f"{s.db}.{s.table}", []).append(
                f"silver applied the change log up to {s.position}, the rest of the group is at {target}: run binlake silver"
            )
    for name, reasons in _snapshot_blockers(spark, lh, states, target).items():
        blockers.setdefault(name, []).extend(reasons)
    if blockers:
        raise _not_ready(blockers, target)
    return target, states


def _not_ready(blockers: dict[str, list[str]], target: Position) -> NotReadyError:
    parts = [f"{name} blocks: {'; '.join(reasons)}" for name, reasons in sorted(blockers.items())]
    err = NotReadyError(f"gold not published at {target} (Invariant S does not hold; last good gold kept): " + " | ".join(parts))
    err.blockers = blockers  # type: ignore[attr-defined]
    return err


# ---------------------------------------------------------------------------------------
# Publishing


def _rules_digest(config: Config, name: str) -> str:
    rules = config.gold.checks.get(name, ())
    text = json.dumps([[r.severity.value, r.kind, r.column, r.between, r.values, r.regex, r.row_count] for r in rules], default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _publish_id(p: Position, tables: list[TablePublish], config: Config) -> str:
    # Deterministic: re-running a killed publish of the same silver state reuses its id, so
    # the quarantine slice it wrote is replaced instead of doubled.
    basis = json.dumps([[t.name, t.silver_version, _rules_digest(config, t.name)] for t in tables])
    return f"{p.file_index:06d}-{p.pos}-{hashlib.sha1(basis.encode()).hexdigest()[:10]}"


def _last_published(spark, lh: Lakehouse) -> dict[str, dict]:
    """The latest published publish-log row per table."""
    from pyspark.sql import functions as F

    if not lh.publish_log.exists(spark):
        return {}
    rows = (lh.publish_log.read(spark).where(F.col("status") == STATUS_PUBLISHED)
            .groupBy("db", "table").agg(F.max(F.struct("file_index", "pos", "published_at", "publish_id", "gold_version",
                                                        "silver_version", "row_count", "checks", "binlog_file",
                                                        "source_time", "gtid")).alias("r"))
            .collect())
    return {f"{r['db']}.{r['table']}": r["r"].asDict() for r in rows}


def _gold_frame(silver_df, schema):
    """Silver's live rows as gold: source columns with their comments, then the kept metadata."""
    from pyspark.sql import functions as F

    comments = {c.name: c.comment for c in schema.columns} if schema else {}
    cols = [c for c in silver_df.columns if not c.startswith("_cdc_")]
    from binlake.lakehouse import SILVER_METADATA_COLUMNS

    meta_comments = {name: text for name, _, text in SILVER_METADATA_COLUMNS}
    select = [F.col(f"`{c}`").alias(c, metadata={"comment": comments[c]}) if comments.get(c) else F.col(f"`{c}`") for c in cols]
    select += [F.col(m).alias(m, metadata={"comment": meta_comments[m]}) for m in GOLD_METADATA_COLUMNS]
    return silver_df.where(~F.col("_cdc_deleted")).select(*select)


def _write_gold(spark, ref: TableRef, df, table_comment: str) -> tuple[int, int]:
    """Overwrite one gold table; returns (new version, rows written)."""
    writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    ref.save(writer)
    current = spark.sql(f"DESCRIBE DETAIL {ref.sql}").select("description").first()[0] or ""
    if table_comment and current != table_comment:
        escaped = table_comment.replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ('comment' = '{escaped}')")
    version, metrics = _last_commit(spark, ref)
    if metrics.get("numOutputRows") is None:  # the last commit was the comment: count the overwrite's rows
        rows = _read_at(spark, ref, version).count()
    else:
        rows = int(metrics["numOutputRows"])
    return version, rows


def _write_quarantine(spark, lh: Lakehouse, db: str, table: str, frame, publish_id: str) -> int:
    from pyspark.sql import functions as F

    ref = lh.quarantine(db, table)
    out = (frame.withColumnRenamed("_check", "_quarantine_check")
           .withColumn("_publish_id", F.lit(publish_id))
           .withColumn("_quarantined_at", F.current_timestamp()))
    writer = out.write.format("delta").mode("overwrite").option("mergeSchema", "true")
    if ref.exists(spark):
        writer = writer.option("replaceWhere", f"_publish_id = '{publish_id}'")
    ref.save(writer)
    return int(_last_commit(spark, ref)[1].get("numOutputRows", 0))


def _append_log(spark, lh: Lakehouse, publish_id: str, p: Position, gtid: str | None, source_time: str | None,
                tables: list[TablePublish], status: str, checks_json: dict[str, str]) -> None:
    from pyspark.sql import functions as F

    rows = [
        (publish_id, t.db, t.table, t.gold_version, t.silver_version, p.file, p.file_index, p.pos, gtid, source_time,
         t.row_count, checks_json[t.name], status)
        for t in tables
    ]
    staged = spark.createDataFrame(rows, PUBLISH_LOG_SCHEMA.replace("source_time TIMESTAMP", "source_time STRING")
                                   .replace("published_at TIMESTAMP, ", ""))
    df = staged.select(
        "publish_id", "db", "table", "gold_version", "silver_version", "binlog_file", "file_index", "pos", "gtid",
        F.to_timestamp("source_time").alias("source_time"), F.current_timestamp().alias("published_at"),
        "row_count", "checks", "status",
    )
    lh.publish_log.save(df.write.format("delta").mode("append"))


@contextmanager
def _writing(ref: TableRef) -> Iterator[None]:
    """Turn a failed Delta write into one line naming the table; nothing is published."""
    try:
        yield
    except BinlakeError:
        raise
    except Exception as exc:  # noqa: BLE001 - Py4J/Delta errors carry a Java stack trace
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:200]
        raise LakehouseError(
            f"cannot write {ref}: {storage_refusal(exc) or first}; nothing was published (the last publish stays current): "
            "fix the location's permissions or space and run binlake gold again"
        ) from exc


def _checks_json(rules_digest: str, results: Any) -> str:
    if isinstance(results, str):
        return results
    return json.dumps({"rules": rules_digest, "results": [r.to_dict() for r in results.results]}, default=str, separators=(",", ":"))


def run_gold(spark, config: Config, progress=None) -> GoldResult:
    """Check and publish the whole publish group at one binlog position, or nothing.

    Raises :class:`NotReadyError` naming each blocking table and why when Invariant S does
    not hold, and :class:`QualityCheckFailed` when a check with severity ``fail`` fails (the
    attempt is recorded in the publish log with status ``failed``; gold is not touched).
    """
    from binlake.bronze.tables import latest_schema
    from binlake.quality.checks import keep_frame, quarantine_frame, run_checks, table_checks

    if config is None or not hasattr(config, "lakehouse"):
        raise TypeError(f"config must be a binlake.config.Config, got {type(config).__name__}")
    lh = Lakehouse(config)
    target, states = check_ready(spark, config)

    # Pin each silver table's version now; everything below reads exactly these versions.
    # Each pin is a few small reads (Delta log, one aggregate, schema_history): latency, not
    # work, so the tables are pinned at once.
    def pin(s):
        ref = lh.silver(s.db, s.table)
        if not ref.exists(spark):
            return None, None, None, ["silver progress exists but the silver table does not: run binlake silver"]
        tp = TablePublish(s.db, s.table, silver_version=_latest_version(spark, ref))
        live, top = _silver_stats(spark, ref, tp.silver_version)
        problems = []
        if top is not None and top > (target.file_index, target.pos):
            problems.append(
                f"silver holds changes up to {Position(*top)} beyond its recorded progress {target} "
                "(a silver run is in flight or was interrupted): run binlake silver"
            )
        schema = latest_schema(spark, lh, s.db, s.table)
        if schema is None:
            problems.append("no schema recorded in bronze schema_history: run binlake snapshot or capture")
        return tp, live, schema, problems

    tables: list[TablePublish] = []
    schemas = {}
    live_rows: dict[str, int] = {}
    blockers: dict[str, list[str]] = {}
    with ThreadPoolExecutor(max(1, min(PIN_THREADS, len(states))), thread_name_prefix="gold-pin") as pool:
        pinned = list(pool.map(pin, states))
    for s, (tp, live, schema, problems) in zip(states, pinned):
        name = f"{s.db}.{s.table}"
        if problems:
            blockers.setdefault(name, []).extend(problems)
        if tp is None:
            continue
        schemas[name] = schema
        live_rows[name] = live
        tables.append(tp)
    if blockers:
        raise _not_ready(blockers, target)

    _ensure_publish_log(spark, lh)
    publish_id = _publish_id(target, tables, config)
    previous = _last_published(spark, lh)
    if tables and all(previous.get(t.name, {}).get("publish_id") == publish_id for t in tables):
        for t in tables:
            t.gold_version, t.row_count, t.reused = previous[t.name]["gold_version"], previous[t.name]["row_count"], True
        gtid, source_time = _position_extras(spark, lh, target)
        return GoldResult(publish_id, "unchanged", target, gtid, source_time, tables)

    checks_json: dict[str, str] = {}
    results: dict[str, Any] = {}
    frames = {}
    task_ctx = progress.task("gold checks", total=len(tables), unit="tables") if progress else None
    task = task_ctx.__enter__() if task_ctx else None
    try:
        for t in tables:
            digest = _rules_digest(config, t.name)
            prev = previous.get(t.name)
            gold_ref = lh.gold(t.db, t.table)
            # Same silver version and rules as the last publish, and gold still at the version it
            # recorded: the content would be identical, so keep it and only move P forward.
            if (prev and prev["silver_version"] == t.silver_version and _digest_of(prev["checks"]) == digest
                    and gold_ref.exists(spark) and _latest_version(spark, gold_ref) == prev["gold_version"]):
                t.reused, t.gold_version, t.row_count = True, prev["gold_version"], prev["row_count"]
                checks_json[t.name] = prev["checks"]
                if task:
                    task.advance()
                continue
            silver_df = _read_at(spark, lh.silver(t.db, t.table), t.silver_version)
            frame = _gold_frame(silver_df, schemas[t.name])
            checks = table_checks(schemas[t.name], config.gold.checks.get(t.name, ()), live_rows[t.name])
            outcome = run_checks(frame, checks, table=f"{t.db}__{t.table}")
            results[t.name], frames[t.name] = outcome, frame
            t.checks = outcome
            checks_json[t.name] = _checks_json(digest, outcome)
            if task:
                task.advance()
    finally:
        if task_ctx:
            task_ctx.__exit__(None, None, None)

    gtid, source_time = _position_extras(spark, lh, target)
    blocking = [(name, r) for name, o in results.items() for r in o.blocking]
    if blocking:
        with _writing(lh.publish_log):
            _append_log(spark, lh, publish_id, target, gtid, source_time, tables, STATUS_FAILED, checks_json)
        described = "; ".join(
            f"{name} {r.name} ({r.severity.value})"
            + (f": {r.unexpected_count} unexpected rows" if r.unexpected_count else f": observed {r.observed_value}" if r.observed_value is not None else "")
            + (f": error {r.error}" if r.error else "")
            for name, r in blocking
        )
        raise QualityCheckFailed(f"gold not published at {target}, the last good gold versions are kept: failed checks: {described}")

    warnings: list[str] = []
    written: list[tuple[TableRef, int | None]] = []  # (gold table, the version the last publish names)
    try:
        for t in tables:
            if t.reused:
                continue
            outcome, frame = results[t.name], frames[t.name]
            warnings += [f"{t.name} {r.name}: {r.unexpected_count if r.unexpected_count is not None else r.observed_value} unexpected"
                         for r in outcome.warnings]
            dropping = outcome.dropping
            with _writing(lh.quarantine(t.db, t.table) if dropping else lh.gold(t.db, t.table)):
                if dropping:
                    t.dropped = _write_quarantine(spark, lh, t.db, t.table, quarantine_frame(frame, dropping), publish_id)
            schema = schemas[t.name]
            gold_ref = lh.gold(t.db, t.table)
            written.append((gold_ref, (previous.get(t.name) or {}).get("gold_version")))
            with _writing(gold_ref):
                t.gold_version, t.row_count = _write_gold(spark, gold_ref, keep_frame(frame, dropping),
                                                          schema.comment if schema else "")
            log.info("gold %s: version %s, %s rows", t.name, t.gold_version, t.row_count)

        faults.point("gold.before_publish_log")
        with _writing(lh.publish_log):
            _append_log(spark, lh, publish_id, target, gtid, source_time, tables, STATUS_PUBLISHED, checks_json)
    except LakehouseError:
        _roll_back(spark, written)
        raise
    return GoldResult(publish_id, STATUS_PUBLISHED, target, gtid, source_time, tables, warnings)


def _roll_back(spark, written: list[tuple[TableRef, int | None]]) -> None:
    """After a failed write, put the group's already-written gold tables back at the versions
    the last publish recorded, so readers of the latest versions never see half a publish
    (readers through the publish log never do). Best effort: the location may still refuse."""
    for ref, before in written:
        if before is None:
            continue  # no publish names this table yet: nothing to go back to
        try:
            if _latest_version(spark, ref) != before:
                spark.sql(f"RESTORE TABLE {ref.sql} TO VERSION AS OF {int(before)}")
                log.warning("gold %s: restored version %s after the failed publish", ref, before)
        except Exception as exc:  # noqa: BLE001 - the original write error is the one to report
            log.warning("gold %s: could not restore version %s (%s); the publish log still names it",
                        ref, before, (str(exc).strip().splitlines() or [""])[0][:200])


def _digest_of(checks_json: str | None) -> str | None:
    try:
        return json.loads(checks_json or "{}").get("rules")
    except (ValueError, AttributeError):
        return None


# ---------------------------------------------------------------------------------------
# Reading gold as of a position or time


def _utc_text(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f'time must be a datetime or an ISO-8601 string such as "2026-11-01T08:00:00Z", got {value!r}') from None
    if not isinstance(value, datetime):
        raise ValueError(f'time must be a datetime or an ISO-8601 string such as "2026-11-01T08:00:00Z", got {value!r}')
    # Naive times are UTC, like every timestamp binlake writes.
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def publish_as_of(spark, config: Config, db: str, table: str, position: Any = None, time: Any = None) -> dict:
    """The publish-log row ``gold_as_of`` uses (the latest publish at or before position/time)."""
    from pyspark.sql import functions as F

    for arg, value in (("db", db), ("table", table)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{arg} must be a non-empty string, got {value!r}")
    if position is not None and time is not None:
        raise ValueError("give position or time, not both")
    lh = Lakehouse(config)
    if not lh.publish_log.exists(spark):
        raise NotReadyError("gold has never been published: run binlake gold first")
    rows = lh.publish_log.read(spark).where(
        (F.col("db") == db) & (F.col("table") == table) & (F.col("status") == STATUS_PUBLISHED))
    what = "latest"
    if position is not None:
        p = Position.parse(position)
        rows = rows.where((F.col("file_index") < p.file_index) | ((F.col("file_index") == p.file_index) & (F.col("pos") <= p.pos)))
        what = f"at or before {p}"
    elif time is not None:
        ts = _utc_text(time)
        rows = rows.where(F.col("source_time") <= F.expr(f"CAST('{ts}' AS TIMESTAMP)"))
        what = f"with source time at or before {ts} UTC"
    best = rows.orderBy(F.col("file_index").desc(), F.col("pos").desc(), F.col("published_at").desc()).limit(1).collect()
    if not best:
        raise NotReadyError(f"no gold publish of {db}.{table} {what}: see binlake status for the published positions")
    return best[0].asDict()


def gold_as_of(spark, config: Config, db: str, table: str, position: Any = None, time: Any = None):
    """Gold ``db.table`` as it was published at a binlog position or source time.

    ``position``: ``"mysql-bin.000003:1234"`` or ``(file_index, pos)``; the latest publish at
    or before it. ``time``: a datetime (naive = UTC) or ISO-8601 string; the latest publish
    whose source commit time is at or before it. Neither: the latest publish. Reads the gold
    table ``VERSION AS OF`` the version the publish log recorded.

    >>> gold_as_of(spark, config, "shop", "orders", position="mysql-bin.000003:1234")  # doctest: +SKIP
    """
    row = publish_as_of(spark, config, db, table, position=position, time=time)
    return _read_at(spark, Lakehouse(config).gold(db, table), row["gold_version"])


__all__ = ["GoldResult", "Position", "TablePublish", "check_ready", "gold_as_of", "publish_as_of", "run_gold",
           "GOLD_METADATA_COLUMNS"]
