"""Snapshot throughput: rows/s into bronze vs Spark's own partitioned JDBC read into Delta.

Side by side in one run, on the same table and the same Spark session (so the same
``local[N]`` task slots): binlake's ``run_snapshot`` (the ``binlake-snapshot`` Python data
source, watermarks, bronze rows, chunk manifests) against ``spark.read.jdbc`` with
MariaDB Connector/J, ``partitionColumn``/``lowerBound``/``upperBound`` and as many
partitions as binlake planned chunks, written to a new Delta table on the same disk. Both
are timed end to end: key bounds query, the reads, every Delta commit. Both must end with
every row of the table, which is checked.

Tables: a sysbench ``sbtest`` table (single INT key, filled by MariaDB's ``seq_1_to_N``
engine) and TPC-H lineitem (composite key; JDBC splits on ``l_orderkey``).

Not timed on either side: creating the bronze tables (they exist in steady state, as
``bench_capture`` assumes too) and one small warm-up of each reader (JVM classes,
Python workers) so neither pays the other's start-up cost.
"""

from __future__ import annotations

import time

from benchmarks.run import result
from benchmarks.tpch import load_lineitem

PEER = "Spark JDBC (Connector/J)"
CHUNK_SIZE = 50_000
PARALLELISM = 2  # the bench session's local[2]: both readers get the same two task slots


def load_sbtest(mariadb, db: str, rows: int) -> None:
    """sysbench's sbtest layout and value shapes (c: 10 groups of 11 digits, pad: 5)."""
    def digits(groups: int) -> str:
        return "CONCAT_WS('-', " + ", ".join(["LPAD(FLOOR(RAND() * 99999999999), 11, '0')"] * groups) + ")"

    mariadb.execute(f"DROP DATABASE IF EXISTS `{db}`", f"CREATE DATABASE `{db}`")
    mariadb.execute(
        "CREATE TABLE sbtest (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL DEFAULT 0, "
        "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k))",
        f"INSERT INTO sbtest (k, c, pad) SELECT FLOOR(1 + RAND() * {rows}), {digits(10)}, {digits(5)} "
        f"FROM seq_1_to_{rows}",
        database=db,
    )


def _warm_pages(mariadb, db: str, table: str) -> None:
    # A full clustered-index scan so both readers find the same pages in the buffer pool,
    # whichever runs first.
    with mariadb.root_connection(db) as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{table}`")
        cur.fetchall()


def jdbc_to_delta(ctx, db: str, table: str, split_column: str, partitions: int, path: str) -> tuple[int, float]:
    """Spark's partitioned JDBC read of ``db.table`` appended to a new Delta table; (rows, seconds)."""
    from binlake.local.mariadb import CDC_USER

    m = ctx.mariadb
    # The jdbc:mysql scheme (Connector/J accepts it with permitMysqlScheme) selects Spark's
    # MySQLDialect, which quotes identifiers with backticks; jdbc:mariadb gets the generic
    # dialect, whose "id" is a string literal to MariaDB.
    url = f"jdbc:mysql://127.0.0.1:{m.port}/{db}?permitMysqlScheme"
    props = {"user": CDC_USER, "password": m.cdc_password, "driver": "org.mariadb.jdbc.Driver"}
    began = time.monotonic()
    # Spark needs the split column's bounds; binlake's planner queries them too, so it is timed.
    with m.root_connection(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT MIN(`{split_column}`), MAX(`{split_column}`) FROM `{table}`")
        lo, hi = cur.fetchone()
    df = ctx.spark.read.jdbc(url, table, column=split_column, lowerBound=int(lo), upperBound=int(hi) + 1,
                             numPartitions=partitions, properties=props)
    df.write.format("delta").mode("append").save(path)
    seconds = time.monotonic() - began
    return ctx.spark.read.format("delta").load(path).count(), seconds


def binlake_snapshot(ctx, db: str, table: str, name: str, server_id: int):
    """``run_snapshot`` of ``db.table`` into a fresh bronze; returns its SnapshotResult."""
    from binlake.bronze.snapshot import run_snapshot
    from binlake.bronze.tables import ensure_bronze_tables
    from binlake.config import load_config
    from binlake.lakehouse import Lakehouse

    path = ctx.workdir / f"{name}.yml"
    path.write_text(ctx.mariadb.config_yaml(str(ctx.workdir / f"{name}_lake"), [f"{db}.{table}"], server_id=server_id,
                                            snapshot={"chunk_size": CHUNK_SIZE, "parallelism": PARALLELISM}))
    config = load_config(path)
    ensure_bronze_tables(ctx.spark, Lakehouse(config))  # steady state: bronze exists
    began = time.monotonic()
    res = run_snapshot(ctx.spark, config)
    res.seconds = time.monotonic() - began
    return res


def side_by_side(ctx, db: str, table: str, split_column: str, rows: int, tag: str) -> tuple[float, float]:
    """Time both readers on one table; returns (binlake rows/s, JDBC rows/s)."""
    _warm_pages(ctx.mariadb, db, table)
    res = binlake_snapshot(ctx, db, table, f"snap_{tag}", server_id=9300)
    chunks = res.tables[0].chunks_total
    jdbc_rows, jdbc_seconds = jdbc_to_delta(ctx, db, table, split_column, chunks, str(ctx.workdir / f"jdbc_{tag}"))
    if res.rows != rows or jdbc_rows != rows:
        raise AssertionError(f"{db}.{table} has {rows} rows; binlake wrote {res.rows}, JDBC wrote {jdbc_rows}")
    print(f"   {tag}: {rows:,} rows, {chunks} chunks/partitions: binlake {res.seconds:.1f}s "
          f"({rows / res.seconds:,.0f} rows/s), JDBC {jdbc_seconds:.1f}s ({rows / jdbc_seconds:,.0f} rows/s)", flush=True)
    return rows / res.seconds, rows / jdbc_seconds


def run(ctx) -> list[dict]:
    sb_rows = 100_000 if ctx.quick else 1_000_000
    scale = 0.01 if ctx.quick else 0.1

    # Warm-up, untimed: both readers once on a small table.
    load_sbtest(ctx.mariadb, "bench_snap_warm", 20_000)
    binlake_snapshot(ctx, "bench_snap_warm", "sbtest", "snap_warm", server_id=9300)
    jdbc_to_delta(ctx, "bench_snap_warm", "sbtest", "id", 2, str(ctx.workdir / "jdbc_warm"))

    load_sbtest(ctx.mariadb, "bench_snap", sb_rows)
    sb = side_by_side(ctx, "bench_snap", "sbtest", "id", sb_rows, "sbtest")
    li_rows = load_lineitem(ctx.mariadb, "bench_snap_tpch", scale, ctx.workdir)
    li = side_by_side(ctx, "bench_snap_tpch", "lineitem", "l_orderkey", li_rows, f"lineitem SF{scale}")
    return [result("snapshot_rows_per_s", sb[0], "rows/s", PEER, sb[1]),
            result("snapshot_lineitem_rows_per_s", li[0], "rows/s", PEER, li[1])]
