"""The end-to-end tests' own comparison (tests/source_diff.py) finds every kind of difference:
a row the lakehouse lacks, a row the source lacks, a key held twice, and a changed value of
each kind of column (binary, decimal, float, time, text), and nothing on a faithful mirror.
The lakehouse is changed by writing to silver's Delta table directly."""

from __future__ import annotations

from pyspark.sql import functions as F
from source_diff import diff_with_source  # tests/source_diff.py

from binlake.bronze.capture import run_capture
from binlake.bronze.snapshot import run_snapshot
from binlake.contract.tables import Lakehouse
from binlake.silver.run import run_silver


def test_a_faithful_mirror_has_no_difference_and_each_change_to_it_is_counted(spark, mariadb, database, make_config):
    mariadb.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, code VARBINARY(8), price DECIMAL(10,2), ratio DOUBLE, "
        "seen DATETIME(3), note TEXT)",
        "INSERT INTO items SELECT seq, UNHEX(HEX(seq)), seq * 1.25, seq / 3, "
        "'2026-01-01 00:00:00.125' + INTERVAL seq HOUR, IF(seq % 2 = 0, NULL, 'n') FROM seq_1_to_8",
        database=database,
    )
    config = make_config([f"{database}.*"])
    run_snapshot(spark, config)
    run_capture(spark, config)
    run_silver(spark, config)

    (clean,) = diff_with_source(spark, config, layer="silver")
    assert (clean.name, clean.source_rows, clean.ok) == (f"{database}.items", 8, True), clean.describe()

    ref = Lakehouse(config).silver(database, "items")
    silver = ref.sql
    rows = ref.read(spark)
    added = rows.where("id = 2").withColumn("id", F.lit(99)).unionByName(rows.where("id = 3")).collect()
    spark.sql(f"DELETE FROM {silver} WHERE id = 1")  # missing
    spark.createDataFrame(added, rows.schema).write.format("delta").mode("append").save(ref.path)  # extra, twice
    for key, change in (
        (4, "code = X'FF'"),
        (5, "price = price + 0.01"),
        (6, "ratio = ratio * 2"),
        (7, "seen = seen + INTERVAL 1 MILLISECOND"),
        (8, "note = 'changed'"),
    ):
        spark.sql(f"UPDATE {silver} SET {change} WHERE id = {key}")

    (diff,) = diff_with_source(spark, config, layer="silver", examples=5)
    assert (diff.missing, diff.extra, diff.different) == (1, 2, 5), diff.describe()
    text = diff.describe()
    assert "missing: id=1" in text
    assert "extra: id=99" in text
    assert "key [3] in silver 2 times" in text
    for column in ("code", "price", "ratio", "seen", "note"):
        assert f"{column}: source " in text, (column, text)
