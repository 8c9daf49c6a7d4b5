"""The suite's per-test cost report (tests/spark_costs.py, `BINLAKE_TEST_COSTS`)."""

import csv

from spark_costs import COLUMNS, measure  # tests/spark_costs.py


def test_each_row_holds_the_spark_jobs_and_the_session_cpu_between_start_and_end(spark, tmp_path):
    path = tmp_path / "costs.csv"
    counted = measure(path, 'tests/x.py::test_counts[a, "b"]')
    assert spark.range(100).count() == 100
    counted()
    measure(path, "tests/x.py::test_runs_nothing")()

    with open(path, newline="") as f:
        header, *rows = list(csv.reader(f))
    assert tuple(header) == COLUMNS
    assert [r[0] for r in rows] == ['tests/x.py::test_counts[a, "b"]', "tests/x.py::test_runs_nothing"]
    jobs = [int(r[2]) for r in rows]
    assert jobs[0] >= 1
    assert jobs[1] == 0
    assert float(rows[0][3]) > 0  # the JVM worked for the count
