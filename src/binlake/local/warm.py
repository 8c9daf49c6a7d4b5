"""Start local Spark + Delta once so the Delta jars are in the Ivy cache (``make spark-jars``)."""

from __future__ import annotations

import sys
import tempfile


def main() -> int:
    from binlake.spark import get_spark

    spark = get_spark("binlake-warm")
    with tempfile.TemporaryDirectory() as d:
        spark.range(1).write.format("delta").save(d + "/t")
        ok = spark.read.format("delta").load(d + "/t").count() == 1
    spark.stop()
    print(f"Spark {spark.version} + Delta ready" if ok else "Spark started but Delta round trip failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
