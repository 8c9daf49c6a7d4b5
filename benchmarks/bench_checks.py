"""What gold's checks cost per changed table: Great Expectations against one hand-written job.

``gold_checks_per_changed_table_s``: a 5,000-row gold-shaped table with six column-map
expectations (two not-null, two between, an in-set, a regex); 100 of its rows changed, read as
an incremental publish reads them (a semi-join of the changed keys). Warm, the median of seven
runs of binlake's check step (:func:`binlake.quality.checks.check_rows`: the built-ins and the
six expectations through GE's Spark engine, ``BOOLEAN_ONLY``, one query) against the same
checks as one hand-written Spark aggregate (``benchmarks/native_checks.py``: how binlake
checked before GE), the two alternating. Goal: a ratio of 1.5 or less.

``ge_import_s``: importing Great Expectations in a new Python process (paid once per process
that has a suite to run; a table without expectations never imports it). Reported, no peer.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from benchmarks.native_checks import run_native_checks
from benchmarks.run import result

ROWS, CHANGED, RUNS = 5_000, 100, 7
GOAL = 1.5
SUITE = [
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "status"}},
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "amount"}},
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "amount", "min_value": 0, "max_value": 100000}},
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "qty", "min_value": 0, "max_value": 1000}},
    {
        "type": "expect_column_values_to_be_in_set",
        "kwargs": {"column": "status", "value_set": ["new", "paid", "shipped", "closed"]},
    },
    {"type": "expect_column_values_to_match_regex", "kwargs": {"column": "note", "regex": "^note [0-9]+$"}},
]


def _table(spark, path: str):
    from pyspark.sql import functions as F

    df = spark.range(ROWS).select(
        F.col("id"),
        F.element_at(
            F.array(*[F.lit(s) for s in ("new", "paid", "shipped", "closed")]), (F.col("id") % 4 + 1).cast("int")
        ).alias("status"),
        (F.col("id") * 1.25).cast("decimal(12,2)").alias("amount"),
        (F.col("id") % 50).cast("int").alias("qty"),
        F.concat(F.lit("note "), F.col("id").cast("string")).alias("note"),
    )
    df.write.format("delta").mode("overwrite").save(path)
    return spark.read.format("delta").load(path)


def _plan(tmp):
    import json

    from binlake.config import load_config_text
    from binlake.contract.types import Column, Kind, TableSchema
    from binlake.quality.checks import table_plan

    suite = tmp / "bench_suite.json"
    suite.write_text(json.dumps({"name": "bench", "expectations": SUITE}))
    config = load_config_text(
        'source: {host: h, port: 1, user: u, password: p, server_id: 5, tables: ["bench.*"]}\n'
        f"lakehouse: {{path: {tmp / 'lh'}}}\n"
        f'gold: {{expectations: {{"bench.orders": "{suite}"}}}}\n'
    )
    schema = TableSchema(
        "bench",
        "orders",
        (
            Column("id", Kind.INT, bits=64, nullable=False),
            Column("status", Kind.STRING),
            Column("amount", Kind.DECIMAL, precision=12, scale=2),
            Column("qty", Kind.INT, bits=32),
            Column("note", Kind.STRING),
        ),
        ("id",),
    )
    return table_plan(config, schema)


def _import_seconds() -> float:
    code = "import time; t = time.perf_counter(); import binlake.quality.engine; print(time.perf_counter() - t)"
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        for _ in range(3)
    ]
    return min(runs)


def run(ctx) -> list[dict]:
    from pyspark.sql import functions as F

    from binlake.quality.checks import check_rows

    spark = ctx.spark
    table = _table(spark, str(ctx.workdir / "checks_table"))
    changed = spark.range(0, ROWS, ROWS // CHANGED).select(F.col("id")).localCheckpoint()
    frame = table.join(F.broadcast(changed), ["id"], "left_semi")
    plan = _plan(ctx.workdir)
    key = ["id"]

    def ge():
        outcome = check_rows(frame, plan, table_level=False)
        assert all(r.success for r in outcome.results), [r for r in outcome.results if not r.success]

    def native():
        totals = run_native_checks(frame, SUITE, key)
        assert totals["rows"] == CHANGED, totals
        assert not any(totals["failing"]), totals

    for step in (ge, native, ge, native):  # warm: code paths, Python workers, GE's registry
        step()
    times = {"ge": [], "native": []}
    for _ in range(RUNS):
        for name, step in (("ge", ge), ("native", native)):
            started = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - started)
    ge_s, native_s = statistics.median(times["ge"]), statistics.median(times["native"])
    print(f"   checks per changed table: GE {ge_s:.3f} s, native {native_s:.3f} s (medians of {RUNS})")
    import_s = _import_seconds()
    print(f"   GE import in a new process: {import_s:.2f} s")
    return [
        result(
            "gold_checks_per_changed_table_s",
            ge_s,
            "s (lower is better)",
            "one hand-written job",
            native_s,
            higher_is_better=False,
        ),
        result("ge_import_s", import_s, "s (reported)", "-", 0.0, higher_is_better=False),
    ]
