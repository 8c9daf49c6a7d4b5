"""Where binlake's Delta tables live: :class:`TableRef` (one table) and :class:`Lakehouse` (every
table of one config), the contract between the layers.

Locally tables are directories under ``lakehouse.path``::

    <path>/bronze/changelog            every binlog change, DDL and capture heartbeat
    <path>/bronze/snapshot_plan        the planned chunks of each snapshot
    <path>/bronze/snapshots/<db>/<table>/<snapshot_id>  rows read by one snapshot's chunks, typed
    <path>/bronze/snapshot_rows        rows read by snapshot chunks before typed rows (map form)
    <path>/bronze/snapshot_chunks      the chunk manifest: one row per completed chunk
    <path>/bronze/schema_history       each table's schema versions with their binlog position
    <path>/silver/<db>/<table>         current state with tombstones
    <path>/silver/<db>/<table>__history  one row per version (tables history.tables names),
                                       with __history_events and __history_facts beside it
    <path>/gold/<db>/<table>           validated current state
    <path>/gold/<db>/<table>__history  the history as of the same publish
    <path>/system/silver_progress      what silver has applied, per table
    <path>/system/publish_log          one row per table per publish
    <path>/system/check_results        Great Expectations' validation result per table per publish
    <path>/system/quarantine/<db>/<table>  rows dropped by checks with severity drop
    <path>/system/metrics              one row per command run, step and table (health)
    <path>/system/leases               which process writes which layer (binlake.contract.leases)
    <path>/system/files/continuous     the continuous mode's state (a JSON file)

So silver and gold hold only mirrored tables; binlake's own tables are in ``system``. On
Databricks the same tables are Unity Catalog tables ``<catalog>.<schema>.<name>``: the bronze,
silver, gold and system schemas, ``<db>__<table>`` names in silver and gold,
``quarantine__<db>__<table>`` in system, and the files are in the ``lakehouse.system_path``
volume. Earlier binlake versions kept the system tables in gold and silver (with leading
underscores); :mod:`binlake.contract.layout` moves them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from binlake.config import Config
from binlake.contract.commit_tag import committing
from binlake.contract.delta_log import is_delta_path, log_commits, log_head, log_snapshot
from binlake.contract.delta_sql import DeltaSql
from binlake.contract.schemas import HISTORY_SUFFIX, HISTORY_TABLE_SUFFIXES
from binlake.contract.sql import Sql, quote_ident, spark_string, sql, sql_list
from binlake.contract.write_errors import with_retry
from binlake.spark import is_connect

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.lakehouse")


@dataclass(frozen=True)
class TableRef:
    """A Delta table by path (local) or by Unity Catalog name (Databricks)."""

    path: str | None = None
    name: str | None = None

    @property
    def sql(self) -> Sql:
        """How to name the table in Spark SQL (a catalogue name is built quoted: Lakehouse)."""
        if self.name:
            return Sql(self.name)
        return Sql("delta." + quote_ident(str(self.path)))

    def __str__(self) -> str:
        return self.name or str(self.path)

    def _local_path(self) -> str:
        """The directory of a table named by path (every TableRef has a name or a path)."""
        assert self.path is not None, "a TableRef needs a name or a path"
        return self.path

    def read(self, spark: SparkLike):
        return spark.read.table(self.name) if self.name else spark.read.format("delta").load(self.path)

    def latest_version(self, spark: SparkLike) -> int:
        """The table's newest version (one Delta log read)."""
        return self.newest_commit(spark)[0]

    def newest_commit(self, spark: SparkLike) -> tuple[int, object]:
        """``(version, commit time)`` of the table's newest commit: names one state of the
        table, even across a table dropped and created again at the same place."""
        if self.path:
            found = log_head(spark, self.path)
            if found is not None:
                return found
        row = self.delta(spark).history(1).select("version", "timestamp").first()
        return int(row["version"]), row["timestamp"]

    def last_commit(self, spark: SparkLike, since: int | None = None) -> tuple[int, dict[str, int]]:
        """(version, integer metrics) of the newest commit; metrics are ``{}`` when no commit
        came after version ``since`` (Delta commits nothing for a MERGE that matched nothing)."""
        row = self.newest_commit_info(spark)
        version = int(row["version"])
        if since is not None and version <= since:
            return version, {}
        metrics = {}
        for k, v in (row["operationMetrics"] or {}).items():
            with contextlib.suppress(TypeError, ValueError):
                metrics[k] = int(v)
        return version, metrics

    def newest_commit_info(self, spark: SparkLike) -> dict:
        """The newest commit as :meth:`commits` describes one: from the log's newest commit
        file where the session has a JVM, a Spark job less than ``history(1)``."""
        version = self.latest_version(spark)
        return self.commits(spark, version, version)[-1]

    def description(self, spark: SparkLike) -> str:
        """The table's comment (Delta's ``description``): from the log's cached metadata where
        the session has a JVM, else ``DESCRIBE DETAIL`` (which computes the table's file
        statistics to answer, a few Spark jobs)."""
        snapshot = log_snapshot(spark, self.path) if self.path else None
        if snapshot is not None:
            return snapshot.metadata().description() or ""
        return spark.sql(f"DESCRIBE DETAIL {self.sql}").select("description").head(1)[0][0] or ""

    def commits(self, spark: SparkLike, first: int, last: int | None = None) -> list[dict]:
        """The commits of versions ``first`` to ``last`` (default: the newest), oldest first:
        ``version``, ``timestamp`` (ms), ``operation``, ``operationParameters``, ``userMetadata``
        and ``operationMetrics``. Read from the log's commit files by Delta's log object where the
        session has a JVM (no Spark job), else from ``DESCRIBE HISTORY``."""
        found = log_commits(spark, self.path, first, last)
        if found is not None:
            return found
        newest = self.latest_version(spark)
        last = newest if last is None else last
        if last < first:
            return []
        rows = (
            self.delta(spark)
            .history(newest - first + 1)
            .select("version", "timestamp", "operation", "operationParameters", "userMetadata", "operationMetrics")
            .collect()
        )
        commits = [r.asDict() | {"timestamp": int(r["timestamp"].timestamp() * 1000)} for r in rows]
        return sorted((c for c in commits if first <= c["version"] <= last), key=lambda c: c["version"])

    def properties(self, spark: SparkLike) -> dict[str, str]:
        """The table's properties (``SHOW TBLPROPERTIES``: the cached log's metadata, no job)."""
        return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {self.sql}").collect()}

    def is_empty(self, spark: SparkLike) -> bool:
        return not self.read(spark).limit(1).collect()

    def read_changes(self, spark: SparkLike, start: int, end: int, inserts_only: bool = True):
        """Its change data feed over versions ``[start, end]``: the rows inserted (bronze tables
        are append-only, so inserts are all there is), or every change with ``inserts_only=False``
        (``_change_type``: insert, delete, update_preimage, update_postimage)."""
        from pyspark.sql import functions as F

        reader = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", start)
            .option("endingVersion", end)
        )
        df = reader.table(self.name) if self.name else reader.load(self.path)
        return df.where(F.col("_change_type") == "insert") if inserts_only else df

    def read_at(self, spark: SparkLike, version: int):
        """The table as of ``version``: the latest state when that is it (Delta's cached
        snapshot, where time travel would compute the same snapshot again), else time travel."""
        if self.latest_version(spark) == version:
            df = self.read(spark)  # resolves (and pins) the latest snapshot now
            if self.latest_version(spark) == version:
                return df
        return self.read_version(spark, version)

    def read_version(self, spark: SparkLike, version: int):
        """The table as of an earlier version (Delta time travel)."""
        reader = spark.read.format("delta").option("versionAsOf", int(version))
        return reader.table(self.name) if self.name else reader.load(self.path)

    def delta(self, spark: SparkLike):
        """Delta's ``DeltaTable`` on a classic session; on a Spark Connect session the same
        calls as Delta SQL commands (:class:`binlake.contract.delta_sql.DeltaSql`), which need
        no Delta plugin on the server. Conditions and assignments are SQL text either way."""
        if is_connect(spark):
            return DeltaSql(spark, self.sql)
        from delta.tables import DeltaTable

        return DeltaTable.forName(spark, self.name) if self.name else DeltaTable.forPath(spark, self._local_path())

    def exists(self, spark: SparkLike) -> bool:
        if self.name:
            return spark.catalog.tableExists(self.name)
        path = self._local_path()
        log_dir = Path(path, "_delta_log")
        # A table exists from its first commit: a log directory without one is a table another
        # process is creating right now (reading it fails), or one whose creation was killed.
        if (log_dir / "00000000000000000000.json").is_file() or (log_dir / "_last_checkpoint").is_file():
            return True
        if log_dir.is_dir() and not any(p.suffix == ".json" or ".checkpoint." in p.name for p in log_dir.iterdir()):
            return False
        if is_connect(spark):
            return is_delta_path(spark, self.sql)
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(spark, path)

    def drop(self, spark: SparkLike) -> None:
        """Remove the table and its files (a path table's directory; ``DROP TABLE`` by name)."""
        if self.name:
            spark.sql(f"DROP TABLE IF EXISTS {self.name}")
        elif Path(self._local_path()).exists():
            import shutil

            shutil.rmtree(self._local_path())

    def save(self, writer) -> None:
        """Finish a ``df.write.format('delta')...`` chain against this table (never while
        another thread's tagged Delta command runs on a shared session: binlake.contract.commit_tag)."""
        # The writer's session: PySpark's classic and Connect DataFrameWriter both keep it there.
        with committing(writer._spark):
            if self.name:
                writer.saveAsTable(self.name)
            else:
                writer.save(self.path)

    def create_if_missing(
        self,
        spark: SparkLike,
        schema_ddl: str,
        properties: dict[str, str] | None = None,
        comment: str = "",
        partitioned_by: Sequence[str] = (),
    ) -> None:
        props = {"delta.appendOnly": "false", **(properties or {})}
        tbl = sql_list(Sql(f"{spark_string(k)} = {spark_string(v)}") for k, v in props.items())
        cmt = sql(" COMMENT {c}", c=spark_string(comment)) if comment else Sql("")
        columns = sql_list(quote_ident(c) for c in partitioned_by)
        parts = sql(" PARTITIONED BY ({c})", c=columns) if partitioned_by else Sql("")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {self.sql} ({schema_ddl}) USING DELTA{parts}{cmt} TBLPROPERTIES ({tbl})")


def delete_where(spark: SparkLike, ref: TableRef, condition, what: str, metric: str = "numDeletedRows") -> int:
    """One Delta DELETE of ``condition`` (SQL text or Column), retried against a concurrent
    writer; returns the commit's ``metric`` (0 when nothing matched: Delta then commits nothing)."""

    def delete() -> int:
        before = ref.latest_version(spark)
        ref.delta(spark).delete(condition)
        return int(ref.last_commit(spark, since=before)[1].get(metric, 0) or 0)

    return with_retry(what, delete)


class Lakehouse:
    """Table locations for one config."""

    def __init__(self, config: Config):
        self.config = config
        lh = config.lakehouse
        self.root = config.lakehouse_root  # None on Unity Catalog
        self.catalog = lh.catalog

    def _schema_sql(self, layer: str) -> str:
        """A layer's Unity Catalog schema in Spark SQL (the config requires a catalog wherever
        it has no path)."""
        schema = {
            "bronze": self.config.lakehouse.bronze_schema,
            "silver": self.config.lakehouse.silver_schema,
            "gold": self.config.lakehouse.gold_schema,
            "system": self.config.lakehouse.system_schema,
        }[layer]
        return f"{quote_ident(str(self.catalog))}.{quote_ident(str(schema))}"

    def _ref(self, layer: str, *parts: str) -> TableRef:
        if self.root is not None:
            return TableRef(path=str(Path(self.root, layer, *parts)))
        return TableRef(name=f"{self._schema_sql(layer)}.{quote_ident('__'.join(parts))}")

    # bronze
    @property
    def changelog(self) -> TableRef:
        return self._ref("bronze", "changelog")

    @property
    def snapshot_plan(self) -> TableRef:
        return self._ref("bronze", "snapshot_plan")

    @property
    def snapshot_rows(self) -> TableRef:
        return self._ref("bronze", "snapshot_rows")

    def snapshot_table(self, db: str, table: str, snapshot_id: str) -> TableRef:
        """The typed rows of one snapshot of ``db.table`` (every chunk attempt of it)."""
        return self._ref("bronze", "snapshots", db, table, snapshot_id)

    def snapshot_tables(self, spark: SparkLike, db: str, table: str) -> dict[str, TableRef]:
        """The typed snapshot tables of ``db.table`` that exist, by snapshot id (found by
        listing: a snapshot killed before its manifest has one too)."""
        if self.root is not None:
            base = Path(self.root, "bronze", "snapshots", db, table)
            # A table whose first commit is still being written (a snapshot beside) is not one yet.
            found = (
                sorted(d.parent.name for d in base.glob("*/_delta_log") if (d / "00000000000000000000.json").exists())
                if base.is_dir()
                else []
            )
            return {sid: self.snapshot_table(db, table, sid) for sid in found}
        prefix = f"snapshots__{db}__{table}__"
        rows = spark.sql(f"SHOW TABLES IN {self._schema_sql('bronze')}").collect()
        return {
            r["tableName"][len(prefix) :]: self.snapshot_table(db, table, r["tableName"][len(prefix) :])
            for r in rows
            if r["tableName"].lower().startswith(prefix.lower())
        }

    @property
    def snapshot_chunks(self) -> TableRef:
        return self._ref("bronze", "snapshot_chunks")

    @property
    def schema_history(self) -> TableRef:
        return self._ref("bronze", "schema_history")

    # silver
    def silver(self, db: str, table: str) -> TableRef:
        return self._ref("silver", db, table)

    # silver history (docs/history.md): only for the tables history.tables names
    def silver_history(self, db: str, table: str) -> TableRef:
        """One row per version of each key (SCD type 2)."""
        return self._ref("silver", db, f"{table}{HISTORY_TABLE_SUFFIXES[0]}")

    def silver_history_events(self, db: str, table: str) -> TableRef:
        """Every record silver applied to the table, a set by (key, ``_cdc_seq``)."""
        return self._ref("silver", db, f"{table}{HISTORY_TABLE_SUFFIXES[1]}")

    def silver_history_facts(self, db: str, table: str) -> TableRef:
        """The table's TRUNCATE-like sequences and completed snapshot chunks."""
        return self._ref("silver", db, f"{table}{HISTORY_TABLE_SUFFIXES[2]}")

    # gold
    def gold(self, db: str, table: str) -> TableRef:
        return self._ref("gold", db, table)

    def gold_history(self, db: str, table: str) -> TableRef:
        """The published SCD type 2 history: silver's, as of the publish's position."""
        return self._ref("gold", db, f"{table}{HISTORY_SUFFIX}")

    # system: binlake's own tables, apart from the mirrored ones
    @property
    def silver_progress(self) -> TableRef:
        return self._ref("system", "silver_progress")

    @property
    def publish_log(self) -> TableRef:
        return self._ref("system", "publish_log")

    @property
    def check_results(self) -> TableRef:
        return self._ref("system", "check_results")

    @property
    def metrics(self) -> TableRef:
        return self._ref("system", "metrics")

    def quarantine(self, db: str, table: str) -> TableRef:
        return self._ref("system", "quarantine", db, table)

    @property
    def leases(self) -> TableRef:
        """Who writes which layer; also carries the lakehouse's layout version."""
        return self._ref("system", "leases")

    # files
    @property
    def system_path(self) -> str:
        if self.config.lakehouse.system_path:
            return self.config.lakehouse.system_path
        return str(Path(self.root or ".", "system", "files"))

    def system_dir(self, name: str) -> str:
        """A directory of files (not tables) in the system location, such as the continuous
        mode's state."""
        return str(Path(self.system_path, name))

    # Where earlier binlake versions (layout 0) kept the system tables: in gold and silver,
    # with leading underscores. Only the layout migration (binlake.contract.layout) reads these.

    def layout_0_table(self, name: str) -> TableRef:
        """Where layout 0 kept system table ``name`` (``silver_progress``, ``publish_log``,
        ``check_results`` or ``metrics``)."""
        layer, old = _LAYOUT_0_PLACES[name]
        return self._ref(layer, old)

    def layout_0_quarantine(self, spark: SparkLike) -> list[tuple[TableRef, TableRef]]:
        """``(where layout 0 kept it, where it is now)`` of each quarantine table an earlier
        binlake wrote (found by listing)."""
        if self.root is not None:
            old = Path(self.root, "gold", "_quarantine")
            found = sorted(old.glob("*/*/_delta_log")) if old.is_dir() else []
            return [(TableRef(path=str(d.parent)), self.quarantine(d.parent.parent.name, d.parent.name)) for d in found]
        # On Unity Catalog `_quarantine__<db>__<table>` cannot be split back into db and
        # table when either holds "__"; the new name keeps the same tail.
        pairs = []
        for row in spark.sql(f"SHOW TABLES IN {self._schema_sql('gold')} LIKE '_quarantine__*'").collect():
            name = row["tableName"]
            tail = name[len("_quarantine__") :]
            pairs.append((self._ref("gold", name), self._ref("system", f"quarantine__{tail}")))
        return pairs

    def layout_0_markers(self) -> list[TableRef]:
        """Tables only an earlier binlake writes (the system tables at their layout 0 places),
        found without listing anything. Bronze's tables say nothing: this binlake's layer
        functions write them too, before any command has recorded a layout."""
        return [self.layout_0_table(name) for name in _LAYOUT_0_PLACES]

    @property
    def layout_0_files(self) -> str | None:
        """The local files directory of layout 0 (``<path>/_system``); None when the config
        names ``lakehouse.system_path``, which did not move."""
        if self.config.lakehouse.system_path or self.root is None:
            return None
        return str(Path(self.root, "_system"))


_LAYOUT_0_PLACES = {
    "silver_progress": ("silver", "_progress"),
    "publish_log": ("gold", "_publish_log"),
    "check_results": ("gold", "_check_results"),
    "metrics": ("gold", "_metrics"),
}


def name_clashes(tables: Iterable[tuple[str, str]]) -> list[str]:
    """One line per pair of source tables that would share a lakehouse table, with the fix.

    A table ``db.t`` becomes ``<db>__<t>`` on Unity Catalog (also ``<db>__<t>__history`` and
    the history's events and facts, whether or not history is enabled now, so enabling it later
    cannot clash), and Unity Catalog compares names without case. So ``a__b.c`` and ``a.b__c``
    clash, as do ``shop.x__history`` and ``shop.x``'s history, and ``Shop.Orders`` and
    ``shop.orders``. Checked for every lakehouse, local ones too: a config that works on a
    laptop must work on Databricks."""

    def role(suffix: str, db: str, table: str) -> str:
        kind = suffix[2:].replace("_", " ") + " table" if suffix else "table"
        return f"the {kind} of {db}.{table}"

    owner: dict[str, tuple[str, str, str]] = {}
    clashes = []
    for db, table in sorted(set(tables)):
        for suffix in ("", *HISTORY_TABLE_SUFFIXES):
            name = f"{db}__{table}{suffix}".lower()
            other = owner.setdefault(name, (db, table, suffix))
            if other[:2] == (db, table):
                continue
            clashes.append(
                f"source tables {other[0]}.{other[1]} and {db}.{table} would share the lakehouse table {name} "
                f"({role(other[2], *other[:2])} and {role(suffix, db, table)}; Unity Catalog names are "
                "<db>__<table>, compared without case): exclude one of them with source.exclude"
            )
            break
    return clashes


# What the JVM's file systems say when the lakehouse refuses a write (java.io, Hadoop, the
# cloud connectors); the path, when present, sits just before the reason.
