"""Delta's own log object, reached through py4j: the newest commit, the commits between two
versions and a table's metadata without a Spark job. Everything here returns None where the
log object is not reachable (a Spark Connect session has no JVM; another Delta build may lack
the methods): callers then ask Spark SQL (``DESCRIBE HISTORY``, ``DESCRIBE DETAIL``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from binlake.spark import is_connect

if TYPE_CHECKING:
    from binlake.spark import SparkLike


def commit_time(spark: SparkLike, path: str | None, version: int) -> int | None:
    """The commit time (ms) of ``version`` from Delta's log object, or None where it does not answer."""
    found = log_commits(spark, path, version, version)
    return found[0]["timestamp"] if found and len(found) == 1 else None


def delta_log(spark: SparkLike, path: str):
    """Delta's log object for the table at ``path`` (the JVM keeps one per table)."""
    # The class by its full name, in one call: walking `_jvm.org.apache...` asks the JVM about
    # each package name in turn, and each one that is not a class sends its class loader
    # through every jar on the class path.
    return getattr(spark.sparkContext._jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, str(path)
    )


def log_snapshot(spark: SparkLike, path: str):
    """The newest snapshot of the Delta table at ``path`` from Delta's own log object, which the
    JVM keeps between calls (a listing of the log, no Spark job); None where that object is
    not reachable (a Spark Connect session has no JVM to ask, another Delta build may lack it)."""
    if is_connect(spark):
        return None
    try:
        log = delta_log(spark, path)
        return log.update(False, getattr(log, "update$default$2")(), getattr(log, "update$default$3")())
    except Exception:  # noqa: BLE001 - py4j errors of any kind mean: ask Spark SQL instead
        return None


def log_head(spark: SparkLike, path: str) -> tuple[int, int] | None:
    """(version, commit time in ms) of the newest commit of the Delta table at ``path``, from
    :func:`log_snapshot`: a few milliseconds where ``history(1)`` runs a Spark job. None
    where the log object is not reachable: the caller asks history."""
    snapshot = log_snapshot(spark, path)
    return None if snapshot is None else (int(snapshot.version()), int(snapshot.timestamp()))


def log_commits(spark: SparkLike, path: str | None, first: int, last: int | None) -> list[dict] | None:
    """:meth:`binlake.contract.tables.TableRef.commits` through Delta's log object (``DeltaLog.getChanges``), or None
    where it is not reachable (Spark Connect, a table known only by name, another Delta build)."""
    if is_connect(spark) or not path:
        return None
    try:
        changes = delta_log(spark, path).getChanges(int(first), False)
        out = []
        while changes.hasNext():
            pair = changes.next()
            version, actions = int(pair._1()), pair._2()
            if last is not None and version > last:
                break
            for i in range(actions.size()):
                action = actions.apply(i)
                if action.getClass().getSimpleName() != "CommitInfo":
                    continue
                metadata, metrics = action.userMetadata(), action.operationMetrics()
                out.append(
                    {
                        "version": version,
                        "timestamp": int(action.timestamp().getTime()),
                        "operation": action.operation(),
                        "operationParameters": scala_map(action.operationParameters()),
                        "userMetadata": metadata.get() if metadata.isDefined() else None,
                        "operationMetrics": scala_map(metrics.get()) if metrics.isDefined() else None,
                    }
                )
        return out
    except Exception:  # noqa: BLE001 - py4j errors of any kind mean: ask history() instead
        return None


def scala_map(m) -> dict[str, str]:
    out = {}
    keys = m.keys().iterator()
    while keys.hasNext():
        k = keys.next()
        out[k] = m.apply(k)
    return out


def is_delta_path(spark: SparkLike, table_sql: str) -> bool:
    """Whether a path that is not a local directory holds a Delta table, asked in SQL (a
    Spark Connect session has no ``DeltaTable.isDeltaTable``): Delta refuses ``DESCRIBE
    DETAIL`` of a path without a Delta log."""
    from pyspark.errors import AnalysisException

    try:
        return spark.sql(f"DESCRIBE DETAIL {table_sql}").select("format").head(1)[0][0] == "delta"
    except AnalysisException:
        return False
