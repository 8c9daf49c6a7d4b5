"""Prepare local Spark once (``make spark-jars``): the Delta jars in the Ivy cache, then the
class archive that makes every later local Spark JVM start faster
(:mod:`binlake.local.class_archive`). A local Spark Connect server
(:mod:`binlake.devtools.connect_server`) starts from the same jars and archive: it needs nothing
more.

    python -m binlake.devtools.warm              # jars, then the archive if it is missing
    python -m binlake.devtools.warm --archive    # (internal) the JVM that writes the archive
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Local Spark is what this prepares (a local Spark Connect server starts from the same jars
    # and class archive): a Connect server named in the environment is not it.
    os.environ.pop("SPARK_REMOTE", None)
    if argv[:1] == ["--archive"]:
        return _archive_workload(argv[1])
    from binlake.spark import get_spark

    spark = get_spark("binlake-warm")
    with tempfile.TemporaryDirectory() as d:
        spark.range(1).write.format("delta").save(d + "/t")
        ok = spark.read.format("delta").load(d + "/t").count() == 1
    spark.stop()
    print(f"Spark {spark.version} + Delta ready" if ok else "Spark started but Delta round trip failed")
    if ok:
        write_class_archive()
    return 0 if ok else 1


def write_class_archive() -> bool:
    """Write the class archive unless it exists; True when there is one afterwards.

    A failure is reported and tolerated: the archive only makes starts faster."""
    from binlake.local.class_archive import archive_path, remove_stale_archives

    target = archive_path()
    if target is None:
        print("no java found: class archive skipped")
        return False
    if target.is_file():
        print(f"class archive ready: {target}")
        return True
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    began = time.monotonic()
    # A separate process: the JVM writes the archive when it exits, and this one's JVM
    # started without the dump option. (That JVM maps no archive, none exists yet: a
    # dynamic archive cannot be written on top of another.)
    done = subprocess.run(
        [sys.executable, "-m", "binlake.devtools.warm", "--archive", str(partial)], capture_output=True, text=True
    )
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"class archive not written (Spark still works, it just starts slower): {last}")
        return False
    os.replace(partial, target)  # atomic: a racing start sees no archive or a whole one
    print(f"class archive written in {time.monotonic() - began:.0f}s: {target}")
    # A JVM that mapped an old one keeps its mapping; unlinking does not disturb it.
    for stale in remove_stale_archives(target):
        print(f"removed the class archive of an earlier build of this install: {stale}")
    return True


def _archive_workload(target: str) -> int:
    """Load the classes a binlake run loads (Delta writes, reads, MERGE, the change data
    feed, window functions, Python data sources and Arrow), then let the JVM exit and
    write them to ``target``."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceReader

    from binlake.local.class_archive import dump_options
    from binlake.spark import REMOTE_ENV, get_spark, is_connect

    class _Rows(DataSource):
        @classmethod
        def name(cls):
            return "binlake-warm-rows"

        def schema(self):
            return "id INT, text STRING"

        def reader(self, schema):
            return _RowsReader()

    class _RowsReader(DataSourceReader):
        def read(self, partition):
            import pyarrow as pa

            yield pa.RecordBatch.from_pydict({"id": pa.array([1, 2], pa.int32()), "text": ["a", "b"]})

    spark = get_spark("binlake-warm-archive", extra_conf={"spark.driver.extraJavaOptions": dump_options(Path(target))})
    # The archive holds a local JVM's classes: a Spark Connect session has no JVM here.
    assert not is_connect(spark), f"unset {REMOTE_ENV} to write the class archive"
    gateway = spark.sparkContext._gateway
    assert gateway is not None, "a local session has a py4j gateway"
    jvm = gateway.proc
    with tempfile.TemporaryDirectory() as d:
        spark.dataSource.register(_Rows)
        rows = spark.read.format("binlake-warm-rows").load()
        rows.write.format("delta").option("delta.enableChangeDataFeed", "true").save(d + "/t")
        spark.sql(f"ALTER TABLE delta.`{d}/t` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
        spark.createDataFrame([(2, "c"), (3, "d")], "id INT, text STRING").write.format("delta").mode("append").save(
            d + "/t"
        )
        latest = (
            spark.read.format("delta")
            .load(d + "/t")
            .withColumn("n", F.row_number().over(Window.partitionBy("id").orderBy(F.col("text").desc())))
            .where("n = 1")
            .drop("n")
        )
        (
            DeltaTable.forPath(spark, d + "/t")
            .alias("t")
            .merge(latest.alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )
        spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(
            d + "/t"
        ).collect()
        spark.read.format("delta").load(d + "/t").groupBy("id").agg(F.count("*")).toPandas()
        DeltaTable.forPath(spark, d + "/t").history().collect()
    spark.stop()
    # The JVM exits when its stdin closes; wait for it, so the archive is whole on return.
    jvm.stdin.close()
    jvm.wait(timeout=300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
