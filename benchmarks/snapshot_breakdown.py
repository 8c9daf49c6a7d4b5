"""Where a snapshot's time goes: the same chunk reads into different sinks, side by side.

Not part of ``make bench`` (no peer, no ratio): a tool for whoever works on snapshot speed.
Each variant reads the same planned chunks of a sysbench-style table (or TPC-H lineitem)
through binlake's reader (:func:`binlake.bronze.snapshot_source.read_chunk`) and reshapes its
Arrow batches, or through a sketch of a JVM-side reader:

- ``reader->noop``: binlake's rows into Spark's no-op sink (the reader alone);
- ``empty->noop``: partitions that read nothing (Spark's fixed cost per Python task);
- ``slim->noop``: chunk id, low watermark and the row map only, into the no-op sink;
- ``layout->delta``: binlake's ``snapshot_rows`` layout into a new unpartitioned Delta table
  with its table properties (a lakehouse created before the table was partitioned);
- ``slim->delta``: chunk id, low watermark and the row map only (what the per-chunk
  constants repeated on every row cost);
- ``partitioned->delta``: the same into a table partitioned by the per-chunk constants, so
  that Parquet never stores them (Delta keeps them per file): ``snapshot_rows`` as created now;
- ``observed->delta``: ``partitioned->delta`` with the Spark observation that hands the
  snapshot its marker rows (what observing the write costs);
- ``partitioned-string->delta``: ``partitioned->delta`` with the row as one STRING instead of
  the map (what the map costs today);
- ``joined->delta``: the slim rows joined on the JVM side to the per-chunk constants (a
  broadcast of the wave's chunks), then written in binlake's layout: the same table as
  ``layout->delta`` without shipping the constants through Arrow;
- ``string->delta``: one STRING per row instead of the map (what the map costs);
- ``jdbc->noop`` / ``jdbc->delta``: Spark's partitioned JDBC read, the benchmark's peer;
- ``jvm-layout->delta``: a JVM-side reader sketch: Spark's JDBC read with one partition per
  planned chunk, each inside ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` so the SELECT
  itself returns its exact binlog position (MariaDB's ``Binlog_snapshot_position``: the
  low and high watermark at once), every column fetched as the server's text, the row map
  built in the JVM, written in binlake's layout;
- ``jvm-slim->delta``: the same reader, writing the chunk id, the watermark and the row map
  only (the per-chunk constants left to the manifest);
- ``jvm-partitioned->delta``: the same reader into ``snapshot_rows`` as created now
  (partitioned by the per-chunk columns): what a JVM reader would write today;
- ``jvm-pstring->delta``: the same, with the row map turned into one JSON string in the JVM
  (``to_json``): the cheapest row write any of these designs reaches.
  The sketches take the server's text as it comes (canonical for the types of sbtest and
  lineitem, not for every type) and compute no chunk checksum: they price a design, they
  are not a reader;
- ``run_snapshot``: the real thing, with plan, marker read-back and manifest.

Each variant's best run also shows the CPU seconds each process spent on it (driver, Spark
JVM, Python workers, MariaDB): on a machine with few cores the totals decide the race, and
the split says which side of the Arrow hand-over a change has to shrink.

Usage (best of R rounds; the tables are kept between runs under .local/bench/breakdown;
quote the variant names, ``>`` is the shell's)::

    .venv/bin/python -m benchmarks.snapshot_breakdown --rows 1000000 --rounds 3 [--only 'layout->delta' ...]
    .venv/bin/python -m benchmarks.snapshot_breakdown --table lineitem --scale 0.1 ...
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.bench_snapshot import (
    CHUNK_SIZE,
    _warm_pages,
    binlake_config,
    jdbc_connection,
    jdbc_read,
    jdbc_to_delta,
    load_sbtest,
)
from benchmarks.run import JDBC_PACKAGES, ROOT, BenchContext
from benchmarks.tpch import load_lineitem
from binlake.bronze import snapshot_source
from binlake.contract.lakehouse import SNAPSHOT_ROWS_PARTITIONS, SNAPSHOT_ROWS_SCHEMA

# Per table: its database here and the column Spark's JDBC read splits on (as make bench does).
TABLES = {"sbtest": ("bench_breakdown", "id"), "lineitem": ("bench_breakdown_tpch", "l_orderkey")}
VARIANTS = (
    "empty->noop",
    "reader->noop",
    "slim->noop",
    "jdbc->noop",
    "layout->delta",
    "slim->delta",
    "partitioned->delta",
    "observed->delta",
    "joined->delta",
    "partitioned-string->delta",
    "string->delta",
    "jdbc->delta",
    "jvm-layout->delta",
    "jvm-slim->delta",
    "jvm-partitioned->delta",
    "jvm-pstring->delta",
    "run_snapshot",
)
CPU_GROUPS = ("driver", "jvm", "python workers", "mariadbd")
# Ids as long as real ones (run_snapshot's sortable snapshot id, a uuid4 hex attempt id).
SNAPSHOT_ID, ATTEMPT_ID = "20261123T000000000000Z-00000000", "0" * 32
SCHEMAS = {
    "layout": SNAPSHOT_ROWS_SCHEMA,
    "slim": "chunk_id INT, lw_pos BIGINT, `row` MAP<STRING, STRING>",
    "string": "chunk_id INT, lw_pos BIGINT, `row` STRING",
    "pstring": SNAPSHOT_ROWS_SCHEMA.replace("`row` MAP<STRING, STRING>", "`row` STRING"),
}


class BreakdownSource(snapshot_source.SnapshotDataSource):
    @classmethod
    def name(cls) -> str:
        return "binlake-breakdown"

    def schema(self) -> str:
        return SCHEMAS.get(self.options.get("shape", "layout"), SNAPSHOT_ROWS_SCHEMA)

    def reader(self, schema):
        return BreakdownReader(dict(self.options))


class BreakdownReader(snapshot_source.SnapshotReader):
    def read(self, partition):
        shape = self.options.get("shape", "layout")
        if shape == "empty":
            return
        for batch in snapshot_source.read_chunk(self.options, partition):
            if shape == "layout":
                yield batch
                continue
            rows = batch.column("row")
            marker = rows.null_count == len(rows)
            if shape == "pstring":
                joined = pa.nulls(len(rows), pa.string()) if marker else _one_string(rows)
                yield pa.RecordBatch.from_arrays(
                    [*batch.columns[:-2], joined, batch.column("chunk_stats")], names=batch.schema.names
                )
                continue
            if marker:
                continue  # the slim shapes leave the marker row out
            head = [batch.column("chunk_id"), batch.column("lw_pos")]
            if shape == "slim":
                yield pa.RecordBatch.from_arrays([*head, rows], names=["chunk_id", "lw_pos", "row"])
            else:
                yield pa.RecordBatch.from_arrays([*head, _one_string(rows)], names=["chunk_id", "lw_pos", "row"])


def _one_string(rows: pa.MapArray) -> pa.Array:
    """Each row's values joined into one string (a stand-in for a string row format's size)."""
    return pc.binary_join(pa.ListArray.from_arrays(rows.offsets, rows.items), "\x1f")


def main(argv: list[str] | None = None) -> int:  # noqa: C901 (one step per stage of the breakdown, in order)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.snapshot_breakdown")
    ap.add_argument("--table", choices=sorted(TABLES), default="sbtest")
    ap.add_argument("--rows", type=int, default=1_000_000, help="sbtest's size")
    ap.add_argument("--scale", type=float, default=0.1, help="lineitem's TPC-H scale factor")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", action="append", default=[], help="run only the variants named (repeatable)")
    ns = ap.parse_args(argv)
    unknown = sorted(set(ns.only) - set(VARIANTS))
    if unknown:
        ap.error(f"--only {', '.join(unknown)}: no such variant; pick from {', '.join(VARIANTS)}")

    from binlake.bronze.snapshot import observe_markers, plan_table, run_snapshot
    from binlake.bronze.tables import ensure_bronze_tables
    from binlake.contract.lakehouse import (
        SNAPSHOT_ROWS_PROPERTIES,
        UNPARTITIONED_SNAPSHOT_ROWS_PROPERTIES,
        Lakehouse,
    )
    from binlake.local.mariadb import LocalMariaDB
    from binlake.source.catalog import table_schema
    from binlake.source.mysql import connect
    from binlake.spark import get_spark

    work = ROOT / ".local" / "bench" / "breakdown"
    shutil.rmtree(work / "out", ignore_errors=True)
    (work / "out").mkdir(parents=True)
    table = ns.table
    database, split_column = TABLES[table]
    db = LocalMariaDB(work / "mariadb").start()
    os.environ["MYSQL_PASSWORD"] = db.cdc_password
    spark = get_spark("binlake-snapshot-breakdown", extra_packages=JDBC_PACKAGES)
    ctx = BenchContext(mariadb=db, spark=spark, workdir=work, quick=False)
    try:
        # What was loaded is recorded in the table's comment, so a run with other sizes reloads.
        wanted = f"rows={ns.rows}" if table == "sbtest" else f"scale={ns.scale}"
        with db.root_connection() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (database, table),
            )
            have = cur.fetchone() == (wanted,)
        if not have:
            if table == "sbtest":
                load_sbtest(db, database, ns.rows)
            else:
                load_lineitem(db, database, ns.scale, work)
            db.execute(f"ALTER TABLE `{table}` COMMENT '{wanted}'", database=database)
        row_count = db_rows(db, database, table)
        _warm_pages(db, database, table)
        config = binlake_config(ctx, database, table)
        ensure_bronze_tables(spark, Lakehouse(config))
        spark.dataSource.register(BreakdownSource)
        with connect(config.source) as conn:
            schema = table_schema(conn, config.source, database, table)
            chunks = plan_table(conn, schema, CHUNK_SIZE)
        options = snapshot_source.reader_options(
            config.source,
            [
                {
                    "snapshot_id": SNAPSHOT_ID,
                    "db": database,
                    "table": table,
                    "chunk_id": c.chunk_id,
                    "start_key": c.start_json,
                    "end_key": c.end_json,
                    "schema_version": schema.version(),
                }
                for c in chunks
            ],
            {schema.name: schema.to_json()},
            ATTEMPT_ID,
        )

        def frame(shape):
            return spark.read.format("binlake-breakdown").options(**options, shape=shape).load()

        def append_to_new_table(df, name: str, props: dict[str, str], partition_by: tuple[str, ...] = ()) -> None:
            """``df`` appended to a new Delta table that already has ``props`` (as bronze's would)."""
            path = str(work / "out" / f"{name}-{time.time_ns()}")
            spark.createDataFrame([], df.schema).write.format("delta").partitionBy(*partition_by).save(path)
            spark.sql(
                f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ("
                + ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
                + ")"
            )
            df.write.format("delta").mode("append").save(path)

        def to_delta(shape):
            props = (
                UNPARTITIONED_SNAPSHOT_ROWS_PROPERTIES
                if shape == "layout"
                else {"delta.dataSkippingStatsColumns": "chunk_id"}
            )
            append_to_new_table(frame(shape), shape, props)

        def joined_to_delta():
            from pyspark.sql import functions as F

            consts = spark.createDataFrame(
                [(c.chunk_id, SNAPSHOT_ID, database, table, schema.version()) for c in chunks],
                "chunk_id INT, snapshot_id STRING, db STRING, `table` STRING, schema_version STRING",
            )
            rows = (
                frame("slim")
                .join(F.broadcast(consts), "chunk_id")
                .select(
                    "snapshot_id",
                    "db",
                    "table",
                    "chunk_id",
                    F.lit(ATTEMPT_ID).alias("attempt_id"),
                    F.lit(1).cast("bigint").alias("lw_file_index"),
                    "lw_pos",
                    "schema_version",
                    "row",
                    F.lit(None).cast("map<string,string>").alias("chunk_stats"),
                )
            )
            append_to_new_table(rows, "joined", UNPARTITIONED_SNAPSHOT_ROWS_PROPERTIES)

        def jdbc_noop():
            jdbc_read(ctx, database, table, split_column, len(chunks)).write.format("noop").mode("overwrite").save()

        def jvm_read():
            """One JDBC partition per planned chunk (Spark numbers them in predicate order), each
            SELECT inside its own consistent snapshot, returning that snapshot's binlog position."""
            from pyspark.sql import functions as F

            from binlake.bronze.chunking import key_from_json, range_condition

            with db.root_connection(database) as conn, conn.cursor() as cur:
                predicates = [
                    cur.mogrify(
                        *range_condition(schema.key_columns, key_from_json(c.start_json), key_from_json(c.end_json))
                    )
                    for c in chunks
                ]
            status = "(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = '{}')"
            query = (
                f"(SELECT t.*, {status.format('BINLOG_SNAPSHOT_FILE')} AS _lw_file, "
                f"{status.format('BINLOG_SNAPSHOT_POSITION')} AS _lw_pos FROM `{table}` t) AS x"
            )
            names = [c.name for c in schema.columns]
            as_text = ", ".join(f"`{n}` STRING" for n in names)
            url, props = jdbc_connection(db, database)
            df = spark.read.jdbc(
                url,
                query,
                predicates=predicates,
                properties={
                    **props,
                    "customSchema": as_text,
                    "sessionInitStatement": "START TRANSACTION WITH CONSISTENT SNAPSHOT",
                },
            )
            chunk_ids = F.element_at(F.array(*(F.lit(c.chunk_id) for c in chunks)), F.spark_partition_id() + 1)
            row = F.create_map(*(x for n in names for x in (F.lit(n), F.col(n))))
            lw_index = F.regexp_extract("_lw_file", r"(\d+)$", 1).cast("bigint")
            return df.select(
                chunk_ids.alias("chunk_id"),
                lw_index.alias("lw_file_index"),
                F.col("_lw_pos").cast("bigint").alias("lw_pos"),
                row.alias("row"),
            )

        def jvm_to_delta(shape):
            from pyspark.sql import functions as F

            rows = jvm_read()
            if shape == "pstring":
                rows = rows.withColumn("row", F.to_json("row"))
            if shape in ("layout", "partitioned", "pstring"):
                rows = rows.select(
                    F.lit(SNAPSHOT_ID).alias("snapshot_id"),
                    F.lit(database).alias("db"),
                    F.lit(table).alias("table"),
                    "chunk_id",
                    F.lit(ATTEMPT_ID).alias("attempt_id"),
                    "lw_file_index",
                    "lw_pos",
                    F.lit(schema.version()).alias("schema_version"),
                    "row",
                    F.lit(None).cast("map<string,string>").alias("chunk_stats"),
                )
                if shape == "layout":
                    append_to_new_table(rows, "jvm-layout", UNPARTITIONED_SNAPSHOT_ROWS_PROPERTIES)
                else:
                    append_to_new_table(rows, f"jvm-{shape}", SNAPSHOT_ROWS_PROPERTIES, SNAPSHOT_ROWS_PARTITIONS)
            else:
                append_to_new_table(
                    rows.drop("lw_file_index"), "jvm-slim", {"delta.dataSkippingStatsColumns": "chunk_id"}
                )

        variants = {
            "empty->noop": lambda: frame("empty").write.format("noop").mode("overwrite").save(),
            "reader->noop": lambda: frame("layout").write.format("noop").mode("overwrite").save(),
            "slim->noop": lambda: frame("slim").write.format("noop").mode("overwrite").save(),
            "jdbc->noop": jdbc_noop,
            "layout->delta": lambda: to_delta("layout"),
            "slim->delta": lambda: to_delta("slim"),
            "partitioned->delta": lambda: append_to_new_table(
                frame("layout"), "partitioned", SNAPSHOT_ROWS_PROPERTIES, SNAPSHOT_ROWS_PARTITIONS
            ),
            "observed->delta": lambda: append_to_new_table(
                observe_markers(frame("layout"), ATTEMPT_ID)[0],
                "observed",
                SNAPSHOT_ROWS_PROPERTIES,
                SNAPSHOT_ROWS_PARTITIONS,
            ),
            "joined->delta": joined_to_delta,
            "partitioned-string->delta": lambda: append_to_new_table(
                frame("pstring"), "pstring", SNAPSHOT_ROWS_PROPERTIES, SNAPSHOT_ROWS_PARTITIONS
            ),
            "string->delta": lambda: to_delta("string"),
            "jdbc->delta": lambda: jdbc_to_delta(
                ctx, database, table, split_column, len(chunks), str(work / "out" / f"jdbc-{time.time_ns()}")
            ),
            "jvm-layout->delta": lambda: jvm_to_delta("layout"),
            "jvm-slim->delta": lambda: jvm_to_delta("slim"),
            "jvm-partitioned->delta": lambda: jvm_to_delta("partitioned"),
            "jvm-pstring->delta": lambda: jvm_to_delta("pstring"),
            "run_snapshot": lambda: run_snapshot(spark, config, tables=[f"{database}.{table}"]),
        }
        assert tuple(variants) == VARIANTS
        server_pid = int(db.pid_file.read_text().split()[0])
        if ns.only:
            variants = {name: fn for name, fn in variants.items() if name in ns.only}
        best: dict[str, tuple[float, dict[str, float]]] = {}
        for r in range(ns.rounds):
            for name, fn in variants.items():
                cpu_before = cpu_seconds(server_pid)
                began = time.monotonic()
                fn()
                seconds = time.monotonic() - began
                cpu = {k: v - cpu_before[k] for k, v in cpu_seconds(server_pid).items()}
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, cpu)
                print(f"round {r + 1} {name:17} {seconds:6.1f}s", flush=True)
        print(f"\n{table}: {row_count:,} rows, {len(chunks)} chunks, best of {ns.rounds} (CPU seconds of that run):")
        for name, (seconds, cpu) in best.items():
            print(
                f"  {name:17} {seconds:6.1f}s  {row_count / seconds:>12,.0f} rows/s   "
                + "  ".join(f"{k} {cpu[k]:4.1f}" for k in CPU_GROUPS)
                + f"  total {sum(cpu.values()):4.1f}"
            )
    finally:
        db.stop()
    return 0


def cpu_seconds(mariadb_pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of the processes a run uses, by :data:`CPU_GROUPS`:
    this driver, its Spark JVM, the JVM's Python workers, and the MariaDB server. Where the
    time goes on a 2-core machine is where the CPU goes: the side that uses less wins.
    Reads /proc (Linux). A worker that exits between two readings takes its CPU with it;
    Spark reuses its Python workers, so that is rare."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu, exe = {}, {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                name, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        pid = int(entry)
        parent[pid], cpu[pid], exe[pid] = (
            int(fields[1]),
            (int(fields[11]) + int(fields[12])) / tick,
            name.split("(", 1)[1],
        )

    def descends_from(pid: int, root: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parent.get(pid, 0)
        return False

    me = os.getpid()
    out = dict.fromkeys(CPU_GROUPS, 0.0)
    for pid, seconds in cpu.items():
        if pid == me:
            out["driver"] += seconds
        elif pid == mariadb_pid:
            out["mariadbd"] += seconds
        elif descends_from(pid, me):
            # The JVM's other descendants are its Python daemon and workers, whose name is
            # that of the launcher local Spark runs them with (binlake-spark-python), not "python".
            out["jvm" if exe[pid] == "java" else "python workers"] += seconds
    return out


def db_rows(db, database: str, table: str) -> int:
    with db.root_connection(database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{table}`")
        return int(cur.fetchone()[0])


if __name__ == "__main__":
    raise SystemExit(main())
