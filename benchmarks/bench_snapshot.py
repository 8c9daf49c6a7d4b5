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
Python workers) so neither pays the other's start-up cost. Each side runs three times,
alternating, and its best run counts.
"""

from __future__ import annotations

import time

from benchmarks.run import result
from benchmarks.tpch import load_lineitem

PEER = "Spark JDBC (Connector/J)"
CHUNK_SIZE = 50_000
PARALLELISM = 2  # the bench session's local[2]: both readers get the same two task slots
# Best of this many runs per reader, alternating: the machine may be shared, and noise
# should not decide the ratio.
REPEATS = 3


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


def warm_pages(mariadb, db: str, table: str) -> None:
    # A full clustered-index scan so both readers find the same pages in the buffer pool,
    # whichever runs first.
    with mariadb.root_connection(db) as conn, conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{table}`")
        cur.fetchall()


def jdbc_connection(mariadb, db: str) -> tuple[str, dict[str, str]]:
    """Spark's JDBC url and properties for ``db`` on the bench's MariaDB, as binlake's user."""
    from binlake.devtools.mariadb import CDC_USER

    # The jdbc:mysql scheme (Connector/J accepts it with permitMysqlScheme) selects Spark's
    # MySQLDialect, which quotes identifiers with backticks; jdbc:mariadb gets the generic
    # dialect, whose "id" is a string literal to MariaDB.
    return (
        f"jdbc:mysql://127.0.0.1:{mariadb.port}/{db}?permitMysqlScheme",
        {"user": CDC_USER, "password": mariadb.cdc_password, "driver": "org.mariadb.jdbc.Driver"},
    )


def jdbc_read(ctx, db: str, table: str, split_column: str, partitions: int):
    """Spark's partitioned JDBC read of ``db.table``, split on ``split_column``'s bounds."""
    m = ctx.mariadb
    # Spark needs the split column's bounds; binlake's planner queries them too, so callers time it.
    with m.root_connection(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT MIN(`{split_column}`), MAX(`{split_column}`) FROM `{table}`")
        lo, hi = cur.fetchone()
    url, props = jdbc_connection(m, db)
    return ctx.spark.read.jdbc(
        url,
        table,
        column=split_column,
        lowerBound=int(lo),
        upperBound=int(hi) + 1,
        numPartitions=partitions,
        properties=props,
    )


def jdbc_to_delta(ctx, db: str, table: str, split_column: str, partitions: int, path: str) -> tuple[int, float]:
    """Spark's partitioned JDBC read of ``db.table`` appended to a new Delta table; (rows, seconds)."""
    began = time.monotonic()
    jdbc_read(ctx, db, table, split_column, partitions).write.format("delta").mode("append").save(path)
    seconds = time.monotonic() - began
    return ctx.spark.read.format("delta").load(path).count(), seconds


def binlake_config(ctx, db: str, table: str):
    """A config for ``db.table`` on the bench's one lakehouse (shared by every binlake run)."""
    from binlake.config import load_config

    path = ctx.workdir / f"snap_{db}_{table}.yml"
    path.write_text(
        ctx.mariadb.config_yaml(
            str(ctx.workdir / "snapshot_lake"),
            [f"{db}.{table}"],
            server_id=9300,
            snapshot={"chunk_size": CHUNK_SIZE, "parallelism": PARALLELISM},
        )
    )
    return load_config(path)


def binlake_snapshot(ctx, config, name: str) -> tuple[int, int, float]:
    """A new snapshot of ``name`` (db.table) into bronze: (rows, chunks, seconds)."""
    from binlake.bronze.snapshot import run_snapshot

    began = time.monotonic()
    res = run_snapshot(ctx.spark, config, tables=[name])
    return res.rows, res.tables[0].chunks_total, time.monotonic() - began


def side_by_side(ctx, db: str, table: str, split_column: str, rows: int, tag: str) -> tuple[float, float]:
    """Time both readers on one table, best of REPEATS each, alternating; (binlake, JDBC) rows/s."""
    warm_pages(ctx.mariadb, db, table)
    config = binlake_config(ctx, db, table)
    ours, theirs = [], []
    for i in range(REPEATS):
        got, chunks, seconds = binlake_snapshot(ctx, config, f"{db}.{table}")
        ours.append(seconds)
        jdbc_rows, jdbc_seconds = jdbc_to_delta(
            ctx, db, table, split_column, chunks, str(ctx.workdir / f"jdbc_{tag}_{i}")
        )
        theirs.append(jdbc_seconds)
        if got != rows or jdbc_rows != rows:
            raise AssertionError(f"{db}.{table} has {rows} rows; binlake wrote {got}, JDBC wrote {jdbc_rows}")
    print(
        f"   {tag}: {rows:,} rows, {chunks} chunks/partitions, best of {REPEATS}: binlake {min(ours):.1f}s "
        f"({rows / min(ours):,.0f} rows/s; runs {', '.join(f'{t:.1f}' for t in ours)}), JDBC {min(theirs):.1f}s "
        f"({rows / min(theirs):,.0f} rows/s; runs {', '.join(f'{t:.1f}' for t in theirs)})",
        flush=True,
    )
    return rows / min(ours), rows / min(theirs)


def warm_up(ctx):
    """Both readers once on a small table, untimed; returns its binlake config. It also leaves
    the bronze tables in place, as they are in steady state."""
    from binlake.bronze.tables import ensure_bronze_tables
    from binlake.contract.tables import Lakehouse

    load_sbtest(ctx.mariadb, "bench_snap_warm", 20_000)
    warm = binlake_config(ctx, "bench_snap_warm", "sbtest")
    ensure_bronze_tables(ctx.spark, Lakehouse(warm))
    binlake_snapshot(ctx, warm, "bench_snap_warm.sbtest")
    jdbc_to_delta(ctx, "bench_snap_warm", "sbtest", "id", 2, str(ctx.workdir / "jdbc_warm"))
    return warm


def run(ctx) -> list[dict]:
    sb_rows = 100_000 if ctx.quick else 1_000_000
    scale = 0.01 if ctx.quick else 0.1

    warm_up(ctx)

    load_sbtest(ctx.mariadb, "bench_snap", sb_rows)
    sb = side_by_side(ctx, "bench_snap", "sbtest", "id", sb_rows, "sbtest")
    li_rows = load_lineitem(ctx.mariadb, "bench_snap_tpch", scale, ctx.workdir)
    li = side_by_side(ctx, "bench_snap_tpch", "lineitem", "l_orderkey", li_rows, f"lineitem SF{scale}")
    return [
        result("snapshot_rows_per_s", sb[0], "rows/s", PEER, sb[1]),
        result("snapshot_lineitem_rows_per_s", li[0], "rows/s", PEER, li[1]),
    ]
