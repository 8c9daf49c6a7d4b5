"""``system/publish_log``: one row per table per publish attempt, and gold as of a position or time.

A publish appends its rows LAST, after every gold table is written: the log is the commit
point. A reader who wants a consistent cut across tables takes one ``publish_id`` from it and
reads each table ``VERSION AS OF gold_version`` (:func:`gold_as_of`, docs/gold.md).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from binlake.config import Config
from binlake.contract.layout import require_current_layout
from binlake.contract.memo import Memo
from binlake.contract.position import BinlogPosition, describe_key, position_key
from binlake.contract.schemas import (
    CHECK_RESULTS_SCHEMA,
    PUBLISH_LOG_COMMENT,
    PUBLISH_LOG_PROPERTIES,
    PUBLISH_LOG_SCHEMA,
)
from binlake.contract.tables import Lakehouse
from binlake.errors import NotReadyError

if TYPE_CHECKING:
    from binlake.spark import SparkLike

STATUS_PUBLISHED = "published"
STATUS_FAILED = "failed"


# How many of the publish log's latest commits are read for the last publish: each publish
# attempt is one commit, so the last good one is almost always among them; only a long
# run of failed attempts makes the whole log be read.
RECENT_COMMITS = 20


# Publish logs this process has already created.
_ready: set[str] = set()


def ensure_publish_log(spark: SparkLike, lh: Lakehouse) -> None:
    log_ref = lh.publish_log
    if str(log_ref) in _ready:
        return
    log_ref.create_if_missing(spark, PUBLISH_LOG_SCHEMA, properties=PUBLISH_LOG_PROPERTIES, comment=PUBLISH_LOG_COMMENT)
    _ready.add(str(log_ref))


# What this process last found (or wrote) as each table's latest publish, by the publish log's
# version and the tables asked for: a log at the same version gives the same answer, and a
# publish of this process moves the answer on by its own rows (append_log), so a continuous
# process reads the log only when someone else wrote it.
_latest: Memo[dict[str, dict]] = Memo()


def last_published(spark: SparkLike, lh: Lakehouse, tables=None) -> dict[str, dict]:
    """Each table's row of its latest successful publish, by ``db.table`` (``tables``: only
    these names; None: every table the log holds).

    Each publish appends one commit with a row for every table of its group, so the latest
    rows of busy tables are among the log's latest commits; tables of a group that has not
    published for a while are looked up in the whole log."""
    if not lh.publish_log.exists(spark):
        return {}
    key = (str(lh.publish_log), None if tables is None else frozenset(tables))
    head = lh.publish_log.newest_commit(spark)
    found = _latest.get(key, head)
    if found is None:
        found = _latest.put(key, _last_published(spark, lh, None if tables is None else set(tables), head[0]), head)
    return {name: dict(row) for name, row in found.items()}


def _last_published(spark: SparkLike, lh: Lakehouse, wanted: set | None, latest: int) -> dict[str, dict]:
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    found: dict[str, dict] = {}
    # The newest commits first (a few, then more), then the whole log for what is still missing.
    for first in [*sorted({latest, max(0, latest - RECENT_COMMITS + 1)}, reverse=True), None]:
        recent = first is not None
        if first is not None:
            if wanted is None:
                continue  # every table: only the whole log can say
            try:
                feed = lh.publish_log.read_changes(spark, first, latest, inserts_only=False).persist()
                # Rows deleted or changed since (a repair by hand) make the feed no account of the log.
                if feed.where(F.col("_change_type") != "insert").limit(1).count():
                    feed.unpersist()
                    continue
                rows = feed
            except AnalysisException:  # a range the feed no longer covers (log retention): scan instead
                continue
        else:
            rows = lh.publish_log.read(spark)
        good = rows.where(F.col("status") == STATUS_PUBLISHED)
        if wanted is not None:
            missing = sorted(wanted - set(found))
            good = good.where(F.concat_ws(".", "db", "table").isin(missing))
        order = F.struct("published_at", "file_index", "pos", "publish_id")
        best = (
            good.drop("_change_type", "_commit_version", "_commit_timestamp")
            .groupBy("db", "table")
            .agg(F.max_by(F.struct("*"), order).alias("r"))
            .collect()
        )
        if recent:
            rows.unpersist()
        for r in best:
            found.setdefault(f"{r['db']}.{r['table']}", r["r"].asDict())
        if wanted is not None and wanted <= set(found):
            break
        if first == 0:
            break
    return found


def append_log(
    spark: SparkLike,
    lh: Lakehouse,
    publish_id: str,
    p: BinlogPosition,
    gtid: str | None,
    source_time: str | None,
    tables: list,
    status: str,
    checks_json: dict[str, str],
    group: str | None = None,
) -> None:
    """Append one row per table of ``tables`` (TablePublish) for this attempt to publish ``group``.

    Every value is made here (``published_at`` too), so the rows written are known exactly and
    move :func:`last_published`'s answer on without reading the log back."""
    # Written as instants (aware UTC); held as PySpark reads a timestamp back (naive local time).
    now = datetime.now(timezone.utc)
    when = datetime.fromisoformat(source_time).replace(tzinfo=timezone.utc) if source_time else None
    rows = [
        {
            "publish_id": publish_id,
            "db": t.db,
            "table": t.table,
            "gold_version": t.gold_version,
            "silver_version": t.silver_version,
            "binlog_file": p.file,
            "file_index": p.log_index,
            "pos": p.pos,
            "gtid": gtid,
            "source_time": when,
            "published_at": now,
            "row_count": t.row_count,
            "checks": checks_json[t.name],
            "status": status,
            "silver_rows": t.silver_rows,
            "publish_group": group,
        }
        for t in tables
    ]
    ref = lh.publish_log
    before = ref.newest_commit(spark)
    written = [dict(r, published_at=_as_read(now), source_time=_as_read(when)) for r in rows]
    ref.save(
        spark.createDataFrame([tuple(r.values()) for r in rows], PUBLISH_LOG_SCHEMA)
        .write.format("delta")
        .mode("append")
    )
    after = ref.newest_commit(spark)
    if after[0] != before[0] + 1:
        return  # another commit came in between: the next read finds out
    for key in _latest.keys():  # noqa: SIM118 - a Memo, not a dict: keys() is a snapshot list
        found = _latest.get(key, before)
        if key[0] != str(ref) or found is None:
            continue
        moved = dict(found)
        if status == STATUS_PUBLISHED:
            moved.update(
                {f"{r['db']}.{r['table']}": r for r in written if key[1] is None or f"{r['db']}.{r['table']}" in key[1]}
            )
        _latest.put(key, moved, after)


def append_check_results(
    spark: SparkLike,
    lh: Lakehouse,
    publish_id: str,
    group: str | None,
    status: str,
    results: list[tuple[str, str, dict]],
) -> None:
    """Append GE's validation result (its JSON) of each (db, table) a publish attempt checked."""
    import json

    from pyspark.sql import functions as F

    from binlake.quality.engine import GE_VERSION

    rows = [
        (publish_id, group, db, table, status, bool(result.get("success")), GE_VERSION, json.dumps(result, default=str))
        for db, table, result in results
    ]
    staged = spark.createDataFrame(rows, CHECK_RESULTS_SCHEMA.replace("checked_at TIMESTAMP, ", ""))
    df = staged.select(
        "publish_id",
        "publish_group",
        "db",
        "table",
        "status",
        "success",
        F.current_timestamp().alias("checked_at"),
        "ge_version",
        "result",
    )
    lh.check_results.save(df.write.format("delta").mode("append"))


def _as_read(value: datetime | None) -> datetime | None:
    """An aware instant as PySpark returns a TIMESTAMP: naive, in the process's local time."""
    return None if value is None else value.astimezone().replace(tzinfo=None)


def _utc_text(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f'time must be a datetime or an ISO-8601 string such as "2026-11-01T08:00:00Z", got {value!r}'
            ) from None
    if not isinstance(value, datetime):
        raise ValueError(f'time must be a datetime or an ISO-8601 string such as "2026-11-01T08:00:00Z", got {value!r}')
    # Naive times are UTC, like every timestamp binlake writes.
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def publish_as_of(
    spark: SparkLike, config: Config, db: str, table: str, position: Any = None, time: Any = None
) -> dict:
    """The publish-log row ``gold_as_of`` uses (the latest publish at or before position/time)."""
    from pyspark.sql import functions as F

    for arg, value in (("db", db), ("table", table)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{arg} must be a non-empty string, got {value!r}")
    if position is not None and time is not None:
        raise ValueError("give position or time, not both")
    lh = Lakehouse(config)
    require_current_layout(spark, lh)
    if not lh.publish_log.exists(spark):
        raise NotReadyError("gold has never been published: run binlake gold first")
    rows = lh.publish_log.read(spark).where(
        (F.col("db") == db) & (F.col("table") == table) & (F.col("status") == STATUS_PUBLISHED)
    )
    what = "latest"
    if position is not None:
        index, pos = position_key(position)
        rows = rows.where((F.col("file_index") < index) | ((F.col("file_index") == index) & (F.col("pos") <= pos)))
        label = str(position) if isinstance(position, (str, BinlogPosition)) else describe_key((index, pos))
        what = f"at or before {label}"
    elif time is not None:
        ts = _utc_text(time)
        rows = rows.where(F.col("source_time") <= F.expr(f"CAST('{ts}' AS TIMESTAMP)"))
        what = f"with source time at or before {ts} UTC"
    best = (
        rows.orderBy(F.col("file_index").desc(), F.col("pos").desc(), F.col("published_at").desc()).limit(1).collect()
    )
    if not best:
        raise NotReadyError(f"no gold publish of {db}.{table} {what}: see binlake status for the published positions")
    return best[0].asDict()


def gold_as_of(spark: SparkLike, config: Config, db: str, table: str, position: Any = None, time: Any = None):
    """Gold ``db.table`` as it was published at a binlog position or source time.

    ``position``: ``"mysql-bin.000003:1234"`` or ``(file_index, pos)``; the latest publish at
    or before it. ``time``: a datetime (naive = UTC) or ISO-8601 string; the latest publish
    whose source commit time is at or before it. Neither: the latest publish. Reads the gold
    table ``VERSION AS OF`` the version the publish log recorded.

    >>> gold_as_of(spark, config, "shop", "orders", position="mysql-bin.000003:1234")  # doctest: +SKIP
    """
    row = publish_as_of(spark, config, db, table, position=position, time=time)
    return Lakehouse(config).gold(db, table).read_version(spark, row["gold_version"])
