"""``binlake gold``: check and publish the captured tables' current state, each publish group
at one binlog position P.

``run_gold`` publishes each publish group (``gold.groups``; by default the tables of one
source database) as a whole or not at all, and only when Invariant S holds at one position
P for all of its tables (:mod:`binlake.gold.readiness`); a blocked group does not hold back
the others. Each silver table is read at the version silver's progress
recorded with P. Per table, a publish does the least that makes gold equal silver's live
rows there:

- **reuse**: silver has not moved since the last publish: nothing is read or written;
- **incremental**: the rows silver's change data feed holds for each key it changed since
  the last published version (the key's last change) are checked and MERGEd into gold
  (``_cdc_seq`` decides which rows change; tombstones and rows a drop check rejects are
  deleted);
- **rebuild**: the first publish, a changed rule set, a rebuilt or re-shaped silver table, a
  gap in the feed, or a gold table someone else wrote: every live row is checked and gold
  is overwritten.

The checks (:mod:`binlake.quality.checks`) run in one Spark job per table over the rows
read; counts come from Delta's commit metrics. A failed ``fail`` check publishes nothing
and the last good gold versions stay; quarantined rows are written; the publish-log rows
are appended LAST: the publish log is the commit point (:mod:`binlake.gold.publish_log`).
A table's first publish has no good version to keep, so its NOT NULL checks are observed
on its write instead (the query before it reads only the key), and a failure empties it.

Example::

    >>> result = run_gold(spark, config)              # doctest: +SKIP
    >>> print(result.summary())                       # doctest: +SKIP
    gold published 3 tables at mysql-bin.000004:1532 (publish 000004-1532-5be1c0e2d1)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from binlake import faults
from binlake.bronze.tables import latest_schemas
from binlake.config import Config, require_config
from binlake.console import QUIET, Console
from binlake.contract.commit_tag import tagged_commands
from binlake.contract.position import BinlogPosition, describe_key
from binlake.contract.position_facts import position_fact_columns, position_facts, remember_position_facts
from binlake.contract.schemas import SILVER_METADATA_COLUMNS
from binlake.contract.sql import quote_ident, spark_string, sql
from binlake.contract.tables import Lakehouse, TableRef
from binlake.contract.types import TableSchema
from binlake.contract.write_errors import storage_refusal
from binlake.errors import (
    BinlakeError,
    LakehouseError,
    NotReadyError,
    QualityCheckFailed,
)
from binlake.gold.publish_log import (
    STATUS_FAILED,
    STATUS_PUBLISHED,
    append_check_results,
    append_log,
    ensure_publish_log,
    last_published,
)
from binlake.gold.readiness import (
    TableState,
    check_group,
    not_ready,
    publish_groups,
    silver_progress,
)
from binlake.quality.checks import (
    ChecksPlan,
    TableChecks,
    check_rows,
    check_table,
    keep_frame,
    observing,
    quarantine_frame,
    recheck_table,
    rejected,
    settle_observed,
    settle_row_count_equals_silver,
    table_plan,
    unexpected_conditions,
    validation_json,
)
from binlake.silver import schema_evolution as se
from binlake.spark import TABLE_THREADS
from binlake.timing import timed

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.gold")

# Metadata columns gold keeps from silver; _cdc_deleted is always false in gold, _cdc_op adds nothing.
GOLD_METADATA_COLUMNS = ("_cdc_seq", "_cdc_commit_ts")
REUSE, INCREMENTAL, REBUILD = "reuse", "incremental", "rebuild"
# Every gold write says it is a publish's, so a later publish can tell its own writes from others'.
WRITER_TAG = "binlake gold"
# Delta operations that re-shape a silver table: its change data feed cannot be read across them.
# Delta operations on a gold table that leave its rows as the last publish wrote them.
_KEEPS_ROWS = ("OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES")
_RESHAPING = ("CREATE", "REPLACE", "ADD COLUMNS", "RENAME COLUMN", "DROP COLUMNS", "CHANGE COLUMN", "RESTORE")


@dataclass
class TablePublish:
    db: str
    table: str
    silver_version: int
    mode: str = REBUILD
    gold_version: int | None = None
    row_count: int | None = None
    silver_rows: int | None = None
    history_version: int | None = None  # the silver history version to publish (history tables only)
    dropped: int = 0
    checks: Any = None  # quality.checks.TableChecks, or the recorded JSON when reused
    # Wall time of this table's checks and writes (None when reused). Tables run TABLE_THREADS
    # at a time, so the tables' seconds add up to more than the publish's.
    seconds: float | None = None

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def reused(self) -> bool:
        return self.mode == REUSE


@dataclass
class GoldResult:
    """One publish group's publish; for a run over several groups, their combination
    (:meth:`combine`): ``groups`` holds each group's own result."""

    publish_id: str
    status: str
    position: BinlogPosition
    gtid: str | None = None
    source_time: str | None = None
    tables: list[TablePublish] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    group: str | None = None
    groups: list[GoldResult] = field(default_factory=list)

    @staticmethod
    def combine(results: list[GoldResult]) -> GoldResult | None:
        """The run's result: the one group's, or over several groups the newest position,
        "published" if any group published, and every table."""
        if not results:
            return None
        if len(results) == 1:
            only = results[0]
            only.groups = [only]
            return only
        newest = max(results, key=lambda r: r.position)
        status = STATUS_PUBLISHED if any(r.status == STATUS_PUBLISHED for r in results) else "unchanged"
        return GoldResult(
            ",".join(r.publish_id for r in results),
            status,
            newest.position,
            newest.gtid,
            newest.source_time,
            [t for r in results for t in r.tables],
            [w for r in results for w in r.warnings],
            None,
            list(results),
        )

    def summary(self, named: bool = False) -> str:
        """``named``: say which group (when the run had several)."""
        if len(self.groups) > 1:
            return "\n".join(g.summary(named=True) for g in self.groups)
        where = f" group {self.group}" if named and self.group else ""
        if self.status == "unchanged":
            head = f"gold{where} unchanged: already published at {self.position} (publish {self.publish_id})"
        else:
            head = (
                f"gold{where} published {len(self.tables)} table{'s' if len(self.tables) != 1 else ''} "
                f"at {self.position} (publish {self.publish_id})"
            )
        reused = [t for t in self.tables if t.reused]
        if reused and self.status != "unchanged":
            head += f"; {len(reused)} unchanged since the last publish"
        lines = [head]
        for t in self.tables:
            if t.reused and self.status != "unchanged":
                continue
            extra = f", {t.dropped} rows quarantined" if t.dropped else ""
            how = {REBUILD: "rebuilt", INCREMENTAL: "changes merged", REUSE: "unchanged"}[t.mode]
            took = f", {t.seconds:.1f} s" if t.seconds is not None else ""
            lines.append(f"  {t.name}: {t.row_count} rows, gold version {t.gold_version} ({how}{took}){extra}")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@dataclass
class _Work:
    """One table's part of a publish, from plan to write."""

    publish: TablePublish
    schema: TableSchema
    digest: str
    previous: dict | None
    plan: ChecksPlan
    frame: Any = None  # the live rows checked (all of silver's, or those of the changed keys)
    source: Any = None  # incremental: the changed keys' rows at the new silver version
    cached: Any = None  # incremental: the change feed per key, which the source is read from
    outcome: TableChecks | None = None
    expected_gold_rows: int = 0
    # Gold's rows before an incremental MERGE, when gold is at the version the last publish
    # recorded (no killed publish moved it since): the MERGE's metrics then give the count.
    base_rows: int | None = None

    @property
    def checked(self) -> TableChecks:
        """The outcome of its checks, once :func:`_check` ran."""
        assert self.outcome is not None, f"gold {self.publish.name} is written only once checked"
        return self.outcome


def _position_extras(spark: SparkLike, lh: Lakehouse, p: BinlogPosition) -> tuple[str | None, str | None]:
    """(GTID, source commit time as 'YYYY-MM-DD HH:MM:SS.ffffff' UTC) of the last change at or before P."""
    from pyspark.sql import functions as F

    known = position_facts(lh.changelog, p)
    if known is not None:
        return known
    if not lh.changelog.exists(spark):
        return None, None
    at_or_before = (F.col("file_index") < p.log_index) | (
        (F.col("file_index") == p.log_index) & (F.col("pos") <= p.pos)
    )
    gtid = source_time = None
    # Capture writes a heartbeat per batch, so P's own binlog file almost always answers;
    # Delta's file statistics then skip the rest of the change log.
    for scope in (F.col("file_index") == p.log_index, F.lit(True)):
        r = lh.changelog.read(spark).where(scope & at_or_before).agg(*position_fact_columns()).first()
        gtid = gtid or (r["g"]["gtid"] if r["g"] else None)
        source_time = source_time or (r["t"]["ts"] if r["t"] else None)
        if gtid and source_time:
            break
    remember_position_facts(lh.changelog, p, gtid, source_time)
    return gtid, source_time


def _rules_digest(plan: ChecksPlan) -> str:
    """What the table is checked with: a change rebuilds its gold table (rows an older rule
    set kept or dropped are checked again)."""
    text = json.dumps(plan.digest_source, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _gold_frame(silver_df, schema, keep_deleted: bool = False):
    """Silver rows as gold: source columns with their comments, then the kept metadata."""
    from pyspark.sql import functions as F

    comments = {c.name: c.comment for c in schema.columns} if schema else {}
    cols = [c for c in silver_df.columns if not c.startswith("_cdc_")]
    meta_comments = {name: text for name, _, text in SILVER_METADATA_COLUMNS}
    select = [
        F.col(quote_ident(c)).alias(c, metadata={"comment": comments[c]}) if comments.get(c) else F.col(quote_ident(c))
        for c in cols
    ]
    select += [F.col(m).alias(m, metadata={"comment": meta_comments[m]}) for m in GOLD_METADATA_COLUMNS]
    return silver_df.select(*select, *([F.col("_cdc_deleted")] if keep_deleted else []))


@contextmanager
def _writing(ref: TableRef) -> Iterator[None]:
    """Turn a failed Delta write into one line naming the table; nothing is published."""
    try:
        yield
    except BinlakeError:
        raise
    except Exception as exc:  # Py4J/Delta errors carry a Java stack trace
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:200]
        raise LakehouseError(
            f"cannot write {ref}: {storage_refusal(exc) or first}; nothing was published (the last publish stays "
            "current): "
            "fix the location's permissions or space and run binlake gold again"
        ) from exc


def _checks_json(rules_digest: str, results: Any) -> str:
    if isinstance(results, str):
        return results
    return json.dumps(
        {"rules": rules_digest, "results": [r.to_dict() for r in results.results]}, default=str, separators=(",", ":")
    )


def _writer_tag(publish_id: str) -> str:
    """The user metadata of every commit a publish makes to its gold tables."""
    return f"{WRITER_TAG} {publish_id}"


def _roll_back(spark: SparkLike, written: list[tuple[TableRef, int | None]], tag: str) -> None:
    """After a failed write, put the group's already-written gold tables back at the versions
    the last publish recorded, and empty the ones no publish names yet, so readers of the
    latest versions do not keep half a publish (readers through the publish log never see
    one). Best effort: the location may still refuse."""
    for ref, before in written:
        try:
            with tagged_commands(spark, tag):  # RESTORE and DELETE take no userMetadata option
                _restore(spark, ref, before)
        except Exception as exc:  # noqa: BLE001 - the original write error is the one to report
            log.warning(
                "gold %s: could not %s (%s); the publish log does not name what it holds now",
                ref,
                "empty it" if before is None else f"restore version {before}",
                (str(exc).strip().splitlines() or [""])[0][:200],
            )


def _restore(spark: SparkLike, ref: TableRef, before: int | None) -> None:
    if before is None:
        if ref.exists(spark):
            spark.sql(sql("DELETE FROM {t}", t=ref.sql))
            log.warning("gold %s: emptied after the failed first publish", ref)
    elif ref.latest_version(spark) != before:
        spark.sql(f"RESTORE TABLE {ref.sql} TO VERSION AS OF {int(before)}")
        log.warning("gold %s: restored version %s after the failed publish", ref, before)


def _digest_of(checks_json: str | None) -> str | None:
    try:
        return json.loads(checks_json or "{}").get("rules")
    except (ValueError, AttributeError):
        return None


def _describe_blocking(blocking) -> str:
    return "; ".join(
        f"{name} {r.name} ({r.severity.value})"
        + (
            f": {r.unexpected_count} unexpected rows"
            if r.unexpected_count
            else f": observed {r.observed_value}"
            if r.observed_value is not None
            else ""
        )
        + (f": error {r.error}" if r.error else "")
        for name, r in blocking
    )


def _publish_id(p: BinlogPosition, tables: list[TablePublish], digests: dict[str, str]) -> str:
    # Deterministic: re-running a killed publish of the same silver state reuses its id, so
    # the quarantine slice it wrote is replaced instead of doubled.
    basis = json.dumps([[t.name, t.silver_version, digests[t.name]] for t in tables])
    return f"{p.log_index:06d}-{p.pos}-{hashlib.sha1(basis.encode()).hexdigest()[:10]}"


# ---------------------------------------------------------------------------------------
# Planning: what each table needs, from metadata alone


def _silver_version(
    spark: SparkLike, lh: Lakehouse, state: TableState, target: BinlogPosition
) -> tuple[int, list[str]]:
    """The silver version to publish and what blocks it.

    Progress names the version silver had when it reached P: a silver run in flight since
    then is not read. A progress row from before silver_version gives none: the latest is
    taken, and must hold nothing beyond P (else a silver run is half-way through)."""
    from pyspark.sql import functions as F

    if state.silver_version is not None:
        return int(state.silver_version), []
    ref = lh.silver(state.db, state.table)
    if not ref.exists(spark):
        return 0, ["silver progress exists but the silver table does not: run binlake silver"]
    version = ref.latest_version(spark)
    top = (
        ref.read_version(spark, version)
        .agg(F.max(F.struct(F.col("_cdc_seq.file_index"), F.col("_cdc_seq.pos"))).alias("top"))
        .first()["top"]
    )
    if top is not None and top[0] is not None and tuple(top) > target.key():
        return version, [
            f"silver holds changes up to {describe_key(tuple(top))} beyond its recorded progress {target} "
            "(a silver run is in flight or was interrupted): run binlake silver"
        ]
    return version, []


def _overwrite(commit) -> bool:
    """A commit that replaced the table's rows (silver rebuilt from a snapshot at its path)."""
    return commit["operation"] == "WRITE" and (commit["operationParameters"] or {}).get("mode") == "Overwrite"


def _mode(spark: SparkLike, lh: Lakehouse, t: TablePublish, previous: dict | None, digest: str) -> str:
    if previous is None or previous.get("silver_rows") is None or _digest_of(previous["checks"]) != digest:
        return REBUILD
    since = int(previous["silver_version"])
    if since == t.silver_version:
        return REUSE
    if since > t.silver_version:
        return REBUILD  # silver was rebuilt: its versions started again
    silver, gold = lh.silver(t.db, t.table), lh.gold(t.db, t.table)
    ops = silver.commits(spark, since + 1, t.silver_version)
    if len(ops) != t.silver_version - since or any(
        any(word in r["operation"] for word in _RESHAPING) or _overwrite(r) for r in ops
    ):
        return REBUILD
    if not gold.exists(spark):
        return REBUILD
    latest = gold.latest_version(spark)
    if latest != previous["gold_version"]:
        # A publish killed before its log commit may have moved gold since (its MERGE is safe
        # to apply again), and so may maintenance that keeps the rows (OPTIMIZE, VACUUM, a
        # property). Anything else (a RESTORE, someone's write) is rebuilt over.
        since_publish = gold.commits(spark, int(previous["gold_version"]) + 1)
        if not all(
            (r["userMetadata"] or "").startswith(WRITER_TAG) or r["operation"] in _KEEPS_ROWS for r in since_publish
        ):
            return REBUILD
    return INCREMENTAL


def _plan(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    states: list[TableState],
    schemas: dict,
    previous: dict,
    target: BinlogPosition,
) -> tuple[list[_Work], dict[str, list[str]]]:
    work: list[_Work] = []
    blockers: dict[str, list[str]] = {}
    for s in states:
        schema = schemas.get((s.db, s.table))
        if schema is None:
            blockers.setdefault(s.name, []).append(
                "no schema recorded in bronze schema_history: run binlake snapshot or capture"
            )
            continue
        version, problems = _silver_version(spark, lh, s, target)
        if problems:
            blockers.setdefault(s.name, []).extend(problems)
            continue
        plan = table_plan(config, schema)  # a bad expectation stops the run here, before anything is read
        digest = _rules_digest(plan)
        t = TablePublish(
            s.db,
            s.table,
            silver_version=version,
            history_version=s.history_version if config.history.table(s.db, s.table) else None,
        )
        prev = previous.get(s.name)
        t.mode = _mode(spark, lh, t, prev, digest)
        # _mode reuses or merges only over a previous publish
        if prev is not None and t.reused:
            t.gold_version, t.row_count, t.silver_rows = prev["gold_version"], prev["row_count"], prev["silver_rows"]
            t.checks = prev["checks"]
        base_rows = None
        gold = lh.gold(s.db, s.table)
        if prev is not None and t.mode == INCREMENTAL and gold.latest_version(spark) == int(prev["gold_version"]):
            base_rows = int(prev["row_count"])
        work.append(_Work(t, schema, digest, prev, plan, base_rows=base_rows))
    return work, blockers


# ---------------------------------------------------------------------------------------
# Checking: one Spark job per table over the rows this publish reads


def _check(spark: SparkLike, config: Config, lh: Lakehouse, w: _Work) -> None:
    """Read what the publish needs of one table and run its checks: the built-ins and the
    row-level expectations on the rows read, the table-level ones on the table as it will be
    published."""
    from pyspark.sql import functions as F

    t, schema, plan = w.publish, w.schema, w.plan
    silver = lh.silver(t.db, t.table).read_at(spark, t.silver_version)
    if t.mode == INCREMENTAL and not _check_changes(spark, lh, w, silver):
        t.mode = REBUILD
    if t.mode == REBUILD:
        w.frame = _gold_frame(silver.where(~F.col("_cdc_deleted")), schema)
        # A first publish has no good version to keep: its NOT NULL checks ride on its write,
        # which a failure empties again. A rebuild over a published table checks first.
        w.outcome = check_rows(w.frame, plan, table_level=True, observe_columns=w.previous is None)
        if w.outcome.dropping and plan.expectations.table_level:
            # Table-level expectations judge the table as published: without the dropped rows.
            recheck_table(keep_frame(w.frame, w.outcome), plan, w.outcome)
        t.silver_rows = w.outcome.rows
        w.expected_gold_rows = w.outcome.rows - w.outcome.held_back
    t.checks = w.outcome


def _check_changes(spark: SparkLike, lh: Lakehouse, w: _Work, silver) -> bool:
    """The keys silver's change feed names since the last publish, their rows at the pinned
    version (checked, and the MERGE's source), and what gold held for them; False when the
    feed does not cover that range (kept only from a later version on, or cleaned up).

    All of it comes from one read of the feed: a key's row at the pinned version is its last
    change there, so silver itself is not read again (nor its file list rebuilt at the new
    version). The commits in the range are MERGEs, appends, UPDATEs and DELETEs (anything
    that rewrites the table rebuilds instead, :func:`_mode`), each of which changes a key at
    most once, so a commit version and the post-image before the pre-image order them."""
    from pyspark import StorageLevel
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    t, schema, plan = w.publish, w.schema, w.plan
    assert w.previous is not None, f"gold {t.name}: an incremental publish follows a published one"
    since = int(w.previous["silver_version"])
    keys = [quote_ident(k) for k in schema.key]
    # A key's row as the last publish read it is its first pre-image in the feed (a key whose
    # first change is an insert had none); a drop expectation that rejects it kept it out of gold.
    drops = unexpected_conditions(silver, [p for p in plan.expectations.drops])
    order = F.struct(F.col("_commit_version"), F.when(F.col("_change_type") == "update_postimage", 1).otherwise(0))
    first = F.struct((F.col("_change_type") == "update_preimage") & ~F.col("_cdc_deleted"), ~rejected(drops.values()))
    # Its row now is its last change, unless that removed it from silver (an erase, or
    # tombstones compacted away after gold applied them): then gold has nothing to take.
    columns = silver.columns
    last = F.struct(F.col("_change_type") != "delete", F.struct(*[F.col(quote_ident(c)) for c in columns]))
    try:
        feed = lh.silver(t.db, t.table).read_changes(spark, since + 1, t.silver_version, inserts_only=False)
        per_key = (
            feed.groupBy(*keys)
            .agg(F.min_by(first, order).alias("_before"), F.max_by(last, order).alias("_after"))
            .select(
                *keys,
                F.col("_before.col1").alias("_live"),
                (F.col("_before.col1") & F.col("_before.col2")).alias("_kept"),
                F.col("_after.col1").alias("_present"),
                F.col("_after.col2").alias("_row"),
            )
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        w.cached = per_key
        before = per_key.agg(F.count_if("_live").alias("live"), F.count_if("_kept").alias("kept")).first()
    except AnalysisException as exc:
        log.warning(
            "gold %s: silver's change feed does not cover versions %d..%d (%s): rebuilding",
            t.name,
            since + 1,
            t.silver_version,
            (str(exc).strip().splitlines() or [""])[0][:120],
        )
        return False
    live, kept = before["live"], before["kept"]
    changed = per_key.select(*keys)
    # Tombstones stay in: they delete from gold.
    w.source = per_key.where("_present").select(*[F.col("_row").getField(c).alias(c) for c in columns])
    w.frame = _gold_frame(w.source.where(~F.col("_cdc_deleted")), schema)
    w.outcome = check_rows(w.frame, plan, table_level=False)
    t.silver_rows = int(w.previous["silver_rows"]) + w.outcome.rows - live
    w.expected_gold_rows = int(w.previous["row_count"]) + (w.outcome.rows - w.outcome.held_back) - kept
    if plan.expectations.table_level:
        # The table as this publish will leave it: gold as last published, its changed keys
        # replaced by the kept rows of this publish (a scan of gold, for table-level checks only).
        published = lh.gold(t.db, t.table).read_version(spark, int(w.previous["gold_version"]))
        published = published.join(F.broadcast(changed), list(schema.key), "left_anti")
        check_table(published.unionByName(keep_frame(w.frame, w.outcome)), plan, w.outcome)
    return True


# ---------------------------------------------------------------------------------------
# Writing


def _write_gold(spark: SparkLike, ref: TableRef, df, table_comment: str, tag: str) -> tuple[int, int]:
    """Overwrite one gold table; returns (new version, rows written: the overwrite's own metrics)."""
    if ref.exists(spark):  # a column silver gained may need a table feature gold lacks
        se.enable_features(spark, ref, _spark_types(df))
    ref.save(df.write.format("delta").mode("overwrite").option("overwriteSchema", "true").option("userMetadata", tag))
    version, metrics = ref.last_commit(spark)
    rows = metrics.get("numOutputRows")
    if rows is None:  # metrics turned off in this session
        rows = ref.read_version(spark, version).count()
    if table_comment and ref.description(spark) != table_comment:
        spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ('comment' = {spark_string(table_comment)})")
        version = ref.latest_version(spark)
    return version, int(rows)


def _spark_types(df) -> list[str]:
    return [f.dataType.simpleString() for f in df.schema.fields]


def _merge_gold(
    spark: SparkLike, ref: TableRef, source, outcome: TableChecks, schema: TableSchema, base_rows: int | None, tag: str
) -> tuple[int, int]:
    """MERGE the changed keys' rows into gold: a row whose ``_cdc_seq`` differs replaces
    gold's, a tombstone or a row a drop check rejects deletes it. Returns (new version, rows
    gold holds): ``base_rows`` (what gold held before, when no killed publish moved it since)
    plus the MERGE's own inserts less its deletes, else a count of the new version (Delta
    answers it from its log's file statistics)."""
    from pyspark.sql import functions as F

    dropped = rejected([outcome.conditions[c.name] for c in outcome.dropping])
    staged = (
        _gold_frame(source, schema, keep_deleted=True)
        .withColumn("_keep", ~F.col("_cdc_deleted") & ~dropped)
        .drop("_cdc_deleted")
    )
    cols = [c for c in staged.columns if c != "_keep"]
    assign = {quote_ident(c): f"s.{quote_ident(c)}" for c in cols}
    on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in schema.key)
    merge = (
        ref.delta(spark)
        .alias("t")
        .merge(staged.alias("s"), on)
        .whenMatchedDelete(condition="NOT s._keep")
        .whenMatchedUpdate(condition="NOT (s._cdc_seq <=> t._cdc_seq)", set=assign)
        .whenNotMatchedInsert(condition="s._keep", values=assign)
    )
    with tagged_commands(spark, tag):  # a MERGE takes no userMetadata option
        metrics = merge.execute().first()
    version = ref.latest_version(spark)
    if base_rows is not None and metrics is not None:
        return version, base_rows + int(metrics["num_inserted_rows"] or 0) - int(metrics["num_deleted_rows"] or 0)
    return version, ref.read_version(spark, version).count()


def _write_quarantine(spark: SparkLike, lh: Lakehouse, db: str, table: str, frame, publish_id: str) -> int:
    from pyspark.sql import functions as F

    ref = lh.quarantine(db, table)
    out = (
        frame.withColumnRenamed("_check", "_quarantine_check")
        .withColumn("_publish_id", F.lit(publish_id))
        .withColumn("_quarantined_at", F.current_timestamp())
    )
    writer = out.write.format("delta").mode("overwrite").option("mergeSchema", "true")
    if ref.exists(spark):
        se.enable_features(spark, ref, _spark_types(out))
        writer = writer.option("replaceWhere", f"_publish_id = {spark_string(publish_id)}")
    writer = writer.option("userMetadata", _writer_tag(publish_id))
    ref.save(writer)
    return int(ref.last_commit(spark)[1].get("numOutputRows", 0))


def _write(spark: SparkLike, lh: Lakehouse, w: _Work, publish_id: str) -> list[str]:
    """Write one table's quarantine and gold; returns its warnings."""
    t, outcome = w.publish, w.checked
    assert t.silver_rows is not None, f"gold {t.name}: checking counted silver's rows"
    if outcome.dropping:
        with _writing(lh.quarantine(t.db, t.table)):
            t.dropped = _write_quarantine(spark, lh, t.db, t.table, quarantine_frame(w.frame, outcome), publish_id)
    gold = lh.gold(t.db, t.table)
    with _writing(gold):
        if t.mode == REBUILD:
            frame, observation = observing(keep_frame(w.frame, outcome), outcome, f"binlake gold {t.name} {publish_id}")
            t.gold_version, t.row_count = _write_gold(spark, gold, frame, w.schema.comment, _writer_tag(publish_id))
            if observation is not None:
                settle_observed(outcome, observation.get)
        else:
            t.gold_version, t.row_count = _merge_gold(
                spark, gold, w.source, outcome, w.schema, w.base_rows, _writer_tag(publish_id)
            )
            faults.point("gold.after_incremental_merge")
    if t.history_version is not None:
        history = lh.gold_history(t.db, t.table)
        with _writing(history):
            _publish_history(spark, lh, t, w.schema, _writer_tag(publish_id))
    settle_row_count_equals_silver(outcome, t.silver_rows, w.expected_gold_rows, t.row_count)
    log.info("gold %s: version %s, %s rows (%s)", t.name, t.gold_version, t.row_count, t.mode)
    return [
        f"{t.name} {r.name}: {r.unexpected_count if r.unexpected_count is not None else r.observed_value} unexpected"
        for r in outcome.warnings
    ]


HISTORY_SOURCE_PROPERTY = "binlake.history_source_version"
"""On a gold history table: the silver history version it holds the rows of. Set after each
write, so a publish killed between the two finds an older version and replaces more keys than
it must, never fewer (replacing a key's versions with silver's is idempotent)."""


def _publish_history(spark: SparkLike, lh: Lakehouse, t: TablePublish, schema: TableSchema, tag: str) -> None:
    """Make gold's history of ``t`` hold silver's history as of ``t.history_version`` (quality
    checks apply to the current-state table, not to past versions): the versions of the keys
    silver's history changed since the version gold holds, in one MERGE, or a whole copy when
    gold holds none or silver's history was rewritten in between (a schema change, a rebuild,
    an erase: any commit other than a MERGE)."""
    from pyspark.sql import functions as F

    from binlake.silver.history import replace_versions

    silver, gold, version = lh.silver_history(t.db, t.table), lh.gold_history(t.db, t.table), t.history_version
    assert version is not None, f"gold {t.name} has no history table"
    held = gold.properties(spark).get(HISTORY_SOURCE_PROPERTY) if gold.exists(spark) else None
    if held is not None and int(held) == version:
        return
    since = None if held is None or int(held) > version else int(held)
    if since is not None and all(c["operation"] == "MERGE" for c in silver.commits(spark, since + 1, version)):
        key = list(schema.key)
        keys = silver.read_changes(spark, since + 1, version, inserts_only=False).select(*key).distinct()
        keys = keys.localCheckpoint()  # read by the bounds, the rows and the MERGE: once
        first = quote_ident(key[0])
        bounds = tuple(keys.agg(F.min(F.col(first)), F.max(F.col(first))).first())
        if bounds[0] is not None:
            rows = silver.read_version(spark, version).join(keys, key, "left_semi")
            with tagged_commands(spark, tag):
                replace_versions(spark, gold, schema, keys, bounds, rows)
    else:
        _write_gold(spark, gold, silver.read_version(spark, version), f"SCD type 2 history of {t.name}", tag)
    spark.sql(f"ALTER TABLE {gold.sql} SET TBLPROPERTIES ('{HISTORY_SOURCE_PROPERTY}' = '{int(version)}')")


# ---------------------------------------------------------------------------------------
# The publish


def run_gold(spark: SparkLike, config: Config, console: Console = QUIET) -> GoldResult:
    """Check and publish each publish group at its own binlog position, or nothing of it.

    A group that cannot publish (Invariant S does not hold, or a check with severity ``fail``
    failed: the attempt is recorded in the publish log with status ``failed`` and the group's
    gold is not touched) does not hold back the others. After every group had its turn, a
    blocked one raises :class:`NotReadyError` or :class:`QualityCheckFailed` (a failed check
    wins) naming each blocked group and why; ``exc.result`` is the :class:`GoldResult` of the
    groups that did publish, ``exc.blocked`` maps each blocked group to its own error (whose
    ``tables`` lists the group's tables).
    """
    require_config(config)
    lh = Lakehouse(config)
    states = silver_progress(spark, config, lh)
    if not states:
        raise NotReadyError(
            "gold has nothing to publish: no captured table has silver progress yet; run binlake silver first"
        )
    ensure_publish_log(spark, lh)
    previous = last_published(spark, lh, [s.name for s in states])
    schemas = latest_schemas(spark, lh)
    groups = publish_groups(config, states)
    results: list[GoldResult] = []
    blocked: dict[str, NotReadyError | QualityCheckFailed] = {}
    for name, members in groups.items():
        try:
            results.append(_publish_group(spark, config, lh, name, members, schemas, previous, console))
        except (NotReadyError, QualityCheckFailed) as exc:
            exc.tables = [s.name for s in members]
            blocked[name] = exc
            if len(groups) > 1:
                log.warning("gold group %s blocked, the other groups go on: %s", name, exc)
    result = GoldResult.combine(results)
    if not blocked:
        assert result is not None, "every publish group published"
        return result
    if len(groups) == 1:
        only = next(iter(blocked.values()))
        only.blocked = blocked
        raise only
    kind = QualityCheckFailed if any(isinstance(e, QualityCheckFailed) for e in blocked.values()) else NotReadyError
    done = "; ".join(f"{g.group} {g.status} at {g.position}" for g in results) or "none"
    err = kind(
        f"{len(blocked)} of {len(groups)} publish groups blocked (the others published: {done}): "
        + " | ".join(f"group {name}: {exc}" for name, exc in blocked.items()),
        result=result,
    )
    err.blocked = blocked
    raise err


def _publish_group(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    group: str,
    states: list[TableState],
    schemas: dict,
    previous: dict,
    console: Console,
) -> GoldResult:
    target = check_group(spark, lh, states)
    work, blockers = _plan(spark, config, lh, states, schemas, previous, target)
    if blockers:
        raise not_ready(blockers, target)
    tables = [w.publish for w in work]
    publish_id = _publish_id(target, tables, {w.publish.name: w.digest for w in work})
    if tables and all(previous.get(t.name, {}).get("publish_id") == publish_id for t in tables):
        return _unchanged(spark, lh, group, target, publish_id, tables, previous)

    todo = [w for w in work if not w.publish.reused]
    with ThreadPoolExecutor(max(1, min(TABLE_THREADS, len(todo))), thread_name_prefix="gold") as pool:
        _check_all(spark, config, lh, group, todo, pool, console)
        gtid, source_time = _position_extras(spark, lh, target)
        attempt = _Attempt(spark, lh, group, publish_id, target, gtid, source_time, tables, work, todo)
        checks_json, blocking = attempt.checks()
        if blocking:
            _release(todo)
            attempt.refuse(checks_json, blocking)
        warnings = _write_all(attempt, pool)
    return GoldResult(publish_id, STATUS_PUBLISHED, target, gtid, source_time, tables, warnings, group=group)


def _unchanged(
    spark: SparkLike,
    lh: Lakehouse,
    group: str,
    target: BinlogPosition,
    publish_id: str,
    tables: list[TablePublish],
    previous: dict,
) -> GoldResult:
    """The group's last publish was this one (same position, tables and rules): gold stays as it is."""
    for t in tables:
        t.mode, t.gold_version, t.row_count = REUSE, previous[t.name]["gold_version"], previous[t.name]["row_count"]
    gtid, source_time = _position_extras(spark, lh, target)
    return GoldResult(publish_id, "unchanged", target, gtid, source_time, tables, group=group)


def _check_all(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    group: str,
    todo: list[_Work],
    pool: ThreadPoolExecutor,
    console: Console,
) -> None:
    """Run the checks of every table to publish, TABLE_THREADS at a time."""
    with console.bar(f"gold checks ({group})", total=len(todo), unit="tables") as bar:
        for future in [pool.submit(timed, w.publish, _check, spark, config, lh, w) for w in todo]:
            future.result()
            bar.advance()


@dataclass
class _Attempt:
    """One publish attempt of a group: what its publish-log rows and check results say."""

    spark: SparkLike
    lh: Lakehouse
    group: str
    publish_id: str
    target: BinlogPosition
    gtid: str | None
    source_time: str | None
    tables: list[TablePublish]
    work: list[_Work]
    todo: list[_Work]

    def checks(self) -> tuple[dict[str, str], list[tuple[str, Any]]]:
        """The checks' JSON per table and the failed checks that block the publish, as they stand now."""
        checks_json = {w.publish.name: _checks_json(w.digest, w.publish.checks) for w in self.work}
        return checks_json, [(w.publish.name, r) for w in self.todo for r in w.checked.blocking]

    def log(self, status: str, checks_json: dict[str, str]) -> None:
        """Append the attempt's publish-log rows (the commit point of a publish)."""
        with _writing(self.lh.publish_log):
            append_log(
                self.spark,
                self.lh,
                self.publish_id,
                self.target,
                self.gtid,
                self.source_time,
                self.tables,
                status,
                checks_json,
                self.group,
            )

    def refuse(self, checks_json: dict[str, str], blocking: list[tuple[str, Any]]) -> NoReturn:
        """Record the attempt as failed and raise: the last good gold versions are kept."""
        _record_results(self.spark, self.lh, self.publish_id, self.group, STATUS_FAILED, self.todo)
        self.log(STATUS_FAILED, checks_json)
        raise QualityCheckFailed(
            f"gold not published at {self.target}, the last good gold versions are kept: "
            f"failed checks: {_describe_blocking(blocking)}"
        )


def _write_all(attempt: _Attempt, pool: ThreadPoolExecutor) -> list[str]:
    """Write every table to publish, then commit the publish by its publish-log rows; a check
    that fails on the writes, or a write that fails, puts gold back. Returns the warnings."""
    spark, lh, todo, publish_id = attempt.spark, attempt.lh, attempt.todo, attempt.publish_id
    written = [(lh.gold(w.publish.db, w.publish.table), (w.previous or {}).get("gold_version")) for w in todo]
    written += [
        (ref, ref.latest_version(spark) if ref.exists(spark) else None)
        for ref in (
            lh.gold_history(w.publish.db, w.publish.table) for w in todo if w.publish.history_version is not None
        )
    ]
    # Every commit of the writes says whose it is (_writer_tag): a later publish may then
    # MERGE over a gold table a killed publish moved, and rebuilds over anyone else's write.
    try:
        warnings = [
            line
            for lines in pool.map(lambda w: timed(w.publish, _write, spark, lh, w, publish_id), todo)
            for line in lines
        ]
        # The row count and NOT NULL checks settle only once gold is written: a failure undoes the writes.
        checks_json, blocking = attempt.checks()
        if blocking:
            _roll_back(spark, written, _writer_tag(publish_id))
            attempt.refuse(checks_json, blocking)
        _record_results(spark, lh, publish_id, attempt.group, STATUS_PUBLISHED, todo)
        faults.point("gold.before_publish_log")
        attempt.log(STATUS_PUBLISHED, checks_json)
    except LakehouseError:
        _roll_back(spark, written, _writer_tag(publish_id))
        raise
    finally:
        _release(todo)
    return warnings


def _record_results(
    spark: SparkLike, lh: Lakehouse, publish_id: str, group: str, status: str, work: list[_Work]
) -> None:
    """Keep GE's validation result of every table this attempt checked with expectations."""
    validations = [(w.publish.db, w.publish.table, validation_json(w.outcome)) for w in work if w.outcome is not None]
    results = [(db, table, v) for db, table, v in validations if v is not None]
    for _, _, result in results:
        # GE's run is the publish attempt: its Data Docs pages are named by the publish id.
        result.setdefault("meta", {})["run_id"] = {"run_name": publish_id, "run_time": _utc_now()}
    if results:
        with _writing(lh.check_results):
            append_check_results(spark, lh, publish_id, group, status, results)


def _utc_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat()


def _release(work: list[_Work]) -> None:
    for w in work:
        if w.cached is not None:
            w.cached.unpersist()


__all__ = ["GOLD_METADATA_COLUMNS", "GoldResult", "TablePublish", "run_gold"]
