"""``system/publish_log``: one row per table per publish attempt, and gold as of a position or time.

A publish appends its rows LAST, after every gold table is written: the log is the commit
point. A reader who wants a consistent cut across tables takes one ``publish_id`` from it and
reads each table ``VERSION AS OF gold_version`` (:func:`gold_as_of`, docs/gold.md).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from binlake.config import Config
from binlake.contract.lakehouse import (
    CHECK_RESULTS_SCHEMA,
    PUBLISH_LOG_COMMENT,
    PUBLISH_LOG_PROPERTIES,
    PUBLISH_LOG_SCHEMA,
    Lakehouse,
)
from binlake.contract.layout import require_current_layout
from binlake.contract.position import BinlogPosition, describe_key, position_key
from binlake.errors import NotReadyError

STATUS_PUBLISHED = "published"
STATUS_FAILED = "failed"


# How many of the publish log's latest commits are read for the last publish: each publish
# attempt is one commit, so the last good one is almost always among them; only a long
# run of failed attempts makes the whole log be read.
RECENT_COMMITS = 20


# Publish logs this process has already created.
_ready: set[str] = set()


def ensure_publish_log(spark, lh: Lakehouse) -> None:
    log_ref = lh.publish_log
    if str(log_ref) in _ready:
        return
    log_ref.create_if_missing(spark, PUBLISH_LOG_SCHEMA, properties=PUBLISH_LOG_PROPERTIES, comment=PUBLISH_LOG_COMMENT)
    _ready.add(str(log_ref))


def last_published(spark, lh: Lakehouse, tables=None) -> dict[str, dict]:
    """Each table's row of its latest successful publish, by ``db.table`` (``tables``: only
    these names; None: every table the log holds).

    Each publish appends one commit with a row for every table of its group, so the latest
    rows of busy tables are among the log's latest commits; tables of a group that has not
    published for a while are looked up in the whole log."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    if not lh.publish_log.exists(spark):
        return {}
    wanted = None if tables is None else set(tables)
    found: dict[str, dict] = {}
    latest = lh.publish_log.latest_version(spark)
    # The newest commits first (a few, then more), then the whole log for what is still missing.
    for first in sorted({latest, max(0, latest - RECENT_COMMITS + 1)}, reverse=True) + [None]:
        recent = first is not None
        if recent:
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
    spark,
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
    """Append one row per table of ``tables`` (TablePublish) for this attempt to publish ``group``."""
    from pyspark.sql import functions as F

    rows = [
        (
            publish_id,
            t.db,
            t.table,
            t.gold_version,
            t.silver_version,
            p.file,
            p.log_index,
            p.pos,
            gtid,
            source_time,
            t.row_count,
            checks_json[t.name],
            status,
            t.silver_rows,
            group,
        )
        for t in tables
    ]
    staged = spark.createDataFrame(
        rows,
        PUBLISH_LOG_SCHEMA.replace("source_time TIMESTAMP", "source_time STRING").replace(
            "published_at TIMESTAMP, ", ""
        ),
    )
    df = staged.select(
        "publish_id",
        "db",
        "table",
        "gold_version",
        "silver_version",
        "binlog_file",
        "file_index",
        "pos",
        "gtid",
        F.to_timestamp("source_time").alias("source_time"),
        F.current_timestamp().alias("published_at"),
        "row_count",
        "checks",
        "status",
        "silver_rows",
        "publish_group",
    )
    lh.publish_log.save(df.write.format("delta").mode("append"))


def append_check_results(
    spark, lh: Lakehouse, publish_id: str, group: str | None, status: str, results: list[tuple[str, str, dict]]
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


def publish_as_of(spark, config: Config, db: str, table: str, position: Any = None, time: Any = None) -> dict:
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


def gold_as_of(spark, config: Config, db: str, table: str, position: Any = None, time: Any = None):
    """Gold ``db.table`` as it was published at a binlog position or source time.

    ``position``: ``"mysql-bin.000003:1234"`` or ``(file_index, pos)``; the latest publish at
    or before it. ``time``: a datetime (naive = UTC) or ISO-8601 string; the latest publish
    whose source commit time is at or before it. Neither: the latest publish. Reads the gold
    table ``VERSION AS OF`` the version the publish log recorded.

    >>> gold_as_of(spark, config, "shop", "orders", position="mysql-bin.000003:1234")  # doctest: +SKIP
    """
    row = publish_as_of(spark, config, db, table, position=position, time=time)
    return Lakehouse(config).gold(db, table).read_version(spark, row["gold_version"])
