"""``binlake gold``: check and publish every captured table's current state at one binlog position P.

``run_gold`` publishes the whole publish group (every captured table that silver has
progress for) or nothing, and only when Invariant S holds at one position P for all of them
(:mod:`binlake.gold.readiness`). Then the checks run (:mod:`binlake.quality.checks`); a failed
``fail`` check publishes nothing and the last good gold versions stay. Otherwise each gold
table is overwritten (idempotent), quarantined rows are written, and the publish-log rows
are appended LAST: the publish log is the commit point (:mod:`binlake.gold.publish_log`).

Example::

    >>> result = run_gold(spark, config)              # doctest: +SKIP
    >>> print(result.summary())                       # doctest: +SKIP
    gold published 3 tables at mysql-bin.000004:1532 (publish 000004-1532-5be1c0e2d1)
"""

from __future__ import annotations

import hashlib
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from binlake import faults
from binlake.config import Config
from binlake.contract.lakehouse import (
    SILVER_METADATA_COLUMNS,
    Lakehouse,
    TableRef,
    storage_refusal,
)
from binlake.contract.position import BinlogPosition, describe_key
from binlake.contract.sql import quote_ident, spark_string
from binlake.errors import BinlakeError, LakehouseError, QualityCheckFailed
from binlake.gold.publish_log import (
    STATUS_FAILED,
    STATUS_PUBLISHED,
    append_log,
    ensure_publish_log,
    last_published,
)
from binlake.gold.readiness import TableState, check_ready, not_ready

log = logging.getLogger("binlake.gold")

# Metadata columns gold keeps from silver; _cdc_deleted is always false in gold, _cdc_op adds nothing.
GOLD_METADATA_COLUMNS = ("_cdc_seq", "_cdc_commit_ts")
# Silver tables pinned at the same time by one publish: each pin is a few small reads
# (Delta log, one aggregate, schema_history), latency rather than work.
PIN_THREADS = 4


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
    position: BinlogPosition
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


def _silver_stats(spark, ref: TableRef, version: int) -> tuple[int, tuple[int, int] | None]:
    """(live rows, greatest (file_index, pos) of any row) of silver at ``version``."""
    from pyspark.sql import functions as F

    r = ref.read_version(spark, version).agg(
        F.count(F.when(~F.col("_cdc_deleted"), 1)).alias("live"),
        F.max(F.struct(F.col("_cdc_seq.file_index"), F.col("_cdc_seq.pos"))).alias("top"),
    ).first()
    top = r["top"]
    return int(r["live"]), (tuple(top) if top is not None and top[0] is not None else None)


def _position_extras(spark, lh: Lakehouse, p: BinlogPosition) -> tuple[str | None, str | None]:
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


def _rules_digest(config: Config, name: str) -> str:
    rules = config.gold.checks.get(name, ())
    text = json.dumps([[r.severity.value, r.kind, r.column, r.between, r.values, r.regex, r.row_count] for r in rules], default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _publish_id(p: BinlogPosition, tables: list[TablePublish], config: Config) -> str:
    # Deterministic: re-running a killed publish of the same silver state reuses its id, so
    # the quarantine slice it wrote is replaced instead of doubled.
    basis = json.dumps([[t.name, t.silver_version, _rules_digest(config, t.name)] for t in tables])
    return f"{p.file_index:06d}-{p.pos}-{hashlib.sha1(basis.encode()).hexdigest()[:10]}"


def _gold_frame(silver_df, schema):
    """Silver's live rows as gold: source columns with their comments, then the kept metadata."""
    from pyspark.sql import functions as F

    comments = {c.name: c.comment for c in schema.columns} if schema else {}
    cols = [c for c in silver_df.columns if not c.startswith("_cdc_")]
    meta_comments = {name: text for name, _, text in SILVER_METADATA_COLUMNS}
    select = [F.col(quote_ident(c)).alias(c, metadata={"comment": comments[c]}) if comments.get(c) else F.col(quote_ident(c))
              for c in cols]
    select += [F.col(m).alias(m, metadata={"comment": meta_comments[m]}) for m in GOLD_METADATA_COLUMNS]
    return silver_df.where(~F.col("_cdc_deleted")).select(*select)


def _write_gold(spark, ref: TableRef, df, table_comment: str) -> tuple[int, int]:
    """Overwrite one gold table; returns (new version, rows written)."""
    writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    ref.save(writer)
    current = spark.sql(f"DESCRIBE DETAIL {ref.sql}").select("description").first()[0] or ""
    if table_comment and current != table_comment:
        spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ('comment' = {spark_string(table_comment)})")
    version, metrics = ref.last_commit(spark)
    if metrics.get("numOutputRows") is None:  # the last commit was the comment: count the overwrite's rows
        rows = ref.read_version(spark, version).count()
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
    return int(ref.last_commit(spark)[1].get("numOutputRows", 0))


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


def _roll_back(spark, written: list[tuple[TableRef, int | None]]) -> None:
    """After a failed write, put the group's already-written gold tables back at the versions
    the last publish recorded, so readers of the latest versions never see half a publish
    (readers through the publish log never do). Best effort: the location may still refuse."""
    for ref, before in written:
        if before is None:
            continue  # no publish names this table yet: nothing to go back to
        try:
            if ref.latest_version(spark) != before:
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


def _pin(spark, lh: Lakehouse, states: list[TableState], target: BinlogPosition):
    """Pin each silver table's version now; everything after reads exactly these versions.

    Returns ({name: (TablePublish, live rows, schema)}, blockers)."""
    from binlake.bronze.tables import latest_schema

    def pin(s: TableState):
        ref = lh.silver(s.db, s.table)
        if not ref.exists(spark):
            return None, ["silver progress exists but the silver table does not: run binlake silver"]
        tp = TablePublish(s.db, s.table, silver_version=ref.latest_version(spark))
        live, top = _silver_stats(spark, ref, tp.silver_version)
        problems = []
        if top is not None and top > target.key():
            problems.append(
                f"silver holds changes up to {describe_key(top)} beyond its recorded progress {target} "
                "(a silver run is in flight or was interrupted): run binlake silver")
        schema = latest_schema(spark, lh, s.db, s.table)
        if schema is None:
            problems.append("no schema recorded in bronze schema_history: run binlake snapshot or capture")
        return (tp, live, schema), problems

    with ThreadPoolExecutor(max(1, min(PIN_THREADS, len(states))), thread_name_prefix="gold-pin") as pool:
        pinned = list(pool.map(pin, states))
    out, blockers = {}, {}
    for s, (got, problems) in zip(states, pinned):
        if problems:
            blockers.setdefault(s.name, []).extend(problems)
        if got is not None:
            out[s.name] = got
    return out, blockers


def _run_checks(spark, config: Config, lh: Lakehouse, pinned: dict, previous: dict, progress):
    """Check every table whose content would change; returns ({name: outcome}, {name: frame},
    {name: checks JSON}). A table whose silver version, rules and gold version are those of
    the last publish is reused as it is."""
    from binlake.quality.checks import run_checks, table_checks

    results, frames, checks_json = {}, {}, {}
    with (progress.task("gold checks", total=len(pinned), unit="tables") if progress else _no_task()) as task:
        for name, (t, live, schema) in pinned.items():
            digest = _rules_digest(config, name)
            prev = previous.get(name)
            gold_ref = lh.gold(t.db, t.table)
            # Same silver version and rules as the last publish, and gold still at the version it
            # recorded: the content would be identical, so keep it and only move P forward.
            if (prev and prev["silver_version"] == t.silver_version and _digest_of(prev["checks"]) == digest
                    and gold_ref.exists(spark) and gold_ref.latest_version(spark) == prev["gold_version"]):
                t.reused, t.gold_version, t.row_count = True, prev["gold_version"], prev["row_count"]
                checks_json[name] = prev["checks"]
            else:
                frame = _gold_frame(lh.silver(t.db, t.table).read_version(spark, t.silver_version), schema)
                checks = table_checks(schema, config.gold.checks.get(name, ()), live)
                outcome = run_checks(frame, checks, table=f"{t.db}__{t.table}")
                results[name], frames[name], t.checks = outcome, frame, outcome
                checks_json[name] = _checks_json(digest, outcome)
            if task:
                task.advance()
    return results, frames, checks_json


@contextmanager
def _no_task() -> Iterator[None]:
    yield None


def _describe_blocking(blocking) -> str:
    return "; ".join(
        f"{name} {r.name} ({r.severity.value})"
        + (f": {r.unexpected_count} unexpected rows" if r.unexpected_count else
           f": observed {r.observed_value}" if r.observed_value is not None else "")
        + (f": error {r.error}" if r.error else "")
        for name, r in blocking
    )


def _write_tables(spark, lh: Lakehouse, tables: list[TablePublish], pinned: dict, results: dict, frames: dict,
                  previous: dict, publish_id: str, written: list[tuple[TableRef, int | None]]) -> list[str]:
    """Write quarantine and gold for every table that is not reused; returns the warnings.
    ``written`` collects each gold table as it is written, with the version the last publish
    names, so a failure part-way can put them back."""
    from binlake.quality.checks import keep_frame, quarantine_frame

    warnings: list[str] = []
    for t in tables:
        if t.reused:
            continue
        outcome, frame, schema = results[t.name], frames[t.name], pinned[t.name][2]
        warnings += [f"{t.name} {r.name}: {r.unexpected_count if r.unexpected_count is not None else r.observed_value} unexpected"
                     for r in outcome.warnings]
        dropping = outcome.dropping
        if dropping:
            with _writing(lh.quarantine(t.db, t.table)):
                t.dropped = _write_quarantine(spark, lh, t.db, t.table, quarantine_frame(frame, dropping), publish_id)
        gold_ref = lh.gold(t.db, t.table)
        written.append((gold_ref, (previous.get(t.name) or {}).get("gold_version")))
        with _writing(gold_ref):
            t.gold_version, t.row_count = _write_gold(spark, gold_ref, keep_frame(frame, dropping),
                                                      schema.comment if schema else "")
        log.info("gold %s: version %s, %s rows", t.name, t.gold_version, t.row_count)
    return warnings


def run_gold(spark, config: Config, progress=None) -> GoldResult:
    """Check and publish the whole publish group at one binlog position, or nothing.

    Raises :class:`NotReadyError` naming each blocking table and why when Invariant S does
    not hold, and :class:`QualityCheckFailed` when a check with severity ``fail`` fails (the
    attempt is recorded in the publish log with status ``failed``; gold is not touched).
    """
    if config is None or not hasattr(config, "lakehouse"):
        raise TypeError(f"config must be a binlake.config.Config, got {type(config).__name__}")
    lh = Lakehouse(config)
    target, states = check_ready(spark, config)
    pinned, blockers = _pin(spark, lh, states, target)
    if blockers:
        raise not_ready(blockers, target)
    tables = [pinned[s.name][0] for s in states if s.name in pinned]

    ensure_publish_log(spark, lh)
    publish_id = _publish_id(target, tables, config)
    previous = last_published(spark, lh)
    if tables and all(previous.get(t.name, {}).get("publish_id") == publish_id for t in tables):
        for t in tables:
            t.gold_version, t.row_count, t.reused = previous[t.name]["gold_version"], previous[t.name]["row_count"], True
        gtid, source_time = _position_extras(spark, lh, target)
        return GoldResult(publish_id, "unchanged", target, gtid, source_time, tables)

    results, frames, checks_json = _run_checks(spark, config, lh, pinned, previous, progress)
    gtid, source_time = _position_extras(spark, lh, target)
    blocking = [(name, r) for name, o in results.items() for r in o.blocking]
    if blocking:
        with _writing(lh.publish_log):
            append_log(spark, lh, publish_id, target, gtid, source_time, tables, STATUS_FAILED, checks_json)
        raise QualityCheckFailed(f"gold not published at {target}, the last good gold versions are kept: "
                                 f"failed checks: {_describe_blocking(blocking)}")

    written: list[tuple[TableRef, int | None]] = []
    try:
        warnings = _write_tables(spark, lh, tables, pinned, results, frames, previous, publish_id, written)
        faults.point("gold.before_publish_log")
        with _writing(lh.publish_log):
            append_log(spark, lh, publish_id, target, gtid, source_time, tables, STATUS_PUBLISHED, checks_json)
    except LakehouseError:
        _roll_back(spark, written)
        raise
    return GoldResult(publish_id, STATUS_PUBLISHED, target, gtid, source_time, tables, warnings)


__all__ = ["GOLD_METADATA_COLUMNS", "GoldResult", "TablePublish", "run_gold"]
