"""Silver MERGE scaling: the same batch of changes into a small and a 10x larger silver table.

``silver_merge_scaling`` = time(MERGE into 10M rows) / time(MERGE into 1M rows) (ctx.quick:
100k and 1M rows, 10k changes). The goal is 1.5x or less: a MERGE should cost what the
batch touches, not what the table holds. How binlake gets there is in docs/silver.md.

The batch is 100k changes (90% updates, 10% inserts of new keys) on the "recent" end of the
smaller table's key space, as CDC on an OLTP table mostly is; in the larger table the same
keys sit in its first tenth, so a layout that prunes by key skips 90% of it.
"""

from __future__ import annotations

import time

from benchmarks.run import result


def _schema():
    from binlake.contract.types import Column, Kind, TableSchema

    return TableSchema(
        database="bench",
        table="t",
        columns=(Column("id", Kind.INT, bits=64), Column("v", Kind.STRING), Column("n", Kind.INT, bits=32)),
        key=("id",),
    )


def _build_silver(spark, ref, schema, rows: int, rows_per_file: int) -> None:
    from pyspark.sql import functions as F

    from binlake.silver.schema_evolution import create_silver_table

    create_silver_table(spark, ref, schema)
    df = (
        spark.range(rows)
        .select(
            F.col("id"),
            F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"),
            (F.col("id") % 1000).cast("int").alias("n"),
            F.struct(
                F.lit(1).cast("bigint").alias("file_index"), F.col("id").alias("pos"), F.lit(-1).alias("row")
            ).alias("_cdc_seq"),
            F.lit("snapshot").alias("_cdc_op"),
            F.lit(False).alias("_cdc_deleted"),
            F.lit(None).cast("timestamp").alias("_cdc_commit_ts"),
        )
        .repartitionByRange(max(1, rows // rows_per_file), "id")
    )
    ref.save(df.write.format("delta").mode("append"))


def _changes(spark, schema, changes: int, small_rows: int):
    """The MERGE source the silver run builds from bronze: typed, one row per key."""
    from pyspark.sql import functions as F

    lo = small_rows - int(changes * 0.9) * 2
    df = spark.range(changes).select(
        F.when(F.col("id") < int(changes * 0.9), F.lit(lo) + F.col("id") * 2)
        .otherwise(F.lit(small_rows * 100) + F.col("id"))
        .alias("id"),
        F.lit("changed").alias("v"),
        F.lit(7).alias("n"),
        F.struct(F.lit(9).cast("bigint").alias("file_index"), F.col("id").alias("pos"), F.lit(0).alias("row")).alias(
            "_cdc_seq"
        ),
        F.lit("update").alias("_cdc_op"),
        F.lit(False).alias("_cdc_deleted"),
        F.current_timestamp().alias("_cdc_commit_ts"),
        F.lit(0).alias("_zero_dates"),
    )
    return df.localCheckpoint()


def run(ctx) -> list[dict]:
    from binlake.contract.tables import TableRef
    from binlake.silver.merge import merge_into_silver

    spark = ctx.spark
    schema = _schema()
    small, large, changes = (100_000, 1_000_000, 10_000) if ctx.quick else (1_000_000, 10_000_000, 100_000)
    rows_per_file = max(small // 20, 10_000)
    timings = {}
    # Warm-up on a tiny table: the first MERGE of a JVM pays for code generation and class
    # loading, which would otherwise be charged to the smaller table.
    warm = TableRef(path=str(ctx.workdir / "silver_warmup"))
    _build_silver(spark, warm, schema, 1_000, 1_000)
    merge_into_silver(spark, warm, schema, _changes(spark, schema, 100, 1_000))
    for rows in (small, large):
        ref = TableRef(path=str(ctx.workdir / f"silver_{rows}"))
        _build_silver(spark, ref, schema, rows, rows_per_file)
        source = _changes(spark, schema, changes, small)
        source.count()
        started = time.monotonic()
        merge_into_silver(spark, ref, schema, source)
        timings[rows] = time.monotonic() - started
        print(f"   MERGE {changes:,} changes into {rows:,} rows: {timings[rows]:.1f}s", flush=True)
    scaling = timings[large] / timings[small]
    return [result("silver_merge_scaling", scaling, "x (lower is better)", "1.5 goal", 1.5, higher_is_better=False)]


if __name__ == "__main__":  # a stand-alone smoke run without MariaDB: python -m benchmarks.bench_silver
    import sys
    import tempfile
    from pathlib import Path

    from benchmarks.run import BenchContext
    from binlake.spark import get_spark

    ctx = BenchContext(
        mariadb=None, spark=get_spark("bench-silver"), workdir=Path(tempfile.mkdtemp()), quick="--quick" in sys.argv
    )
    print(run(ctx))
