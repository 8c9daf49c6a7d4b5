"""binlake.contract.delta_sql, the Delta operations a Spark Connect session runs as SQL, does
what Delta's DeltaTable API does: the same builder chain on two copies of a table leaves the
same rows and the same metrics. And binlake.contract.sql.spark_literal writes each value
collect() returns as the SQL literal of the same value (what F.lit(value).cast(type) means).

Both run on the classic session here; tests/integration/test_spark_connect.py runs them on
a Spark Connect server."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from binlake.contract.delta_sql import DeltaSql
from binlake.contract.sql import spark_literal
from binlake.contract.tables import TableRef

ROWS = [(1, "a", 10), (2, "b", 20), (3, "c", 30), (4, "d", 40)]
CHANGES = [(2, "B", 21), (3, "c", 29), (5, "e", 50), (4, None, 0)]


def _pair(spark, tmp_path):
    refs = []
    for name in ("api", "sql"):
        ref = TableRef(path=str(tmp_path / name))
        spark.createDataFrame(ROWS, "id INT, name STRING, v INT").write.format("delta").save(ref.path)
        refs.append(ref)
    api, sql = refs
    return api, api.delta(spark), sql, DeltaSql(spark, sql.sql)


def _rows(spark, ref):
    return sorted(tuple(r) for r in ref.read(spark).collect())


@pytest.mark.slow
def test_merge_update_and_delete_leave_what_the_deltatable_api_leaves(spark, tmp_path):
    api_ref, api, sql_ref, sql = _pair(spark, tmp_path)
    source = spark.createDataFrame(CHANGES, "id INT, name STRING, v INT")
    results = []
    for table in (api, sql):
        results.append(
            table.alias("t")
            .merge(source.alias("s"), "t.id = s.id")
            .whenMatchedDelete(condition="s.name IS NULL")
            .whenMatchedUpdate(condition="s.v > t.v", set={"name": "s.name", "v": "s.v"})
            .whenNotMatchedInsert(values={"id": "s.id", "name": "s.name", "v": "s.v"})
            .execute()
            .first()
            .asDict()
        )
    assert (
        results[0]
        == results[1]
        == {
            "num_affected_rows": 3,
            "num_updated_rows": 1,
            "num_deleted_rows": 1,
            "num_inserted_rows": 1,
        }
    )
    assert _rows(spark, api_ref) == _rows(spark, sql_ref) == [(1, "a", 10), (2, "B", 21), (3, "c", 30), (5, "e", 50)]

    for table in (api, sql):
        table.update("v >= 30 AND name <> 'x'", {"name": "upper(name)", "v": "v + 1"})
        table.delete("id = 1")
    assert _rows(spark, api_ref) == _rows(spark, sql_ref) == [(2, "B", 21), (3, "C", 31), (5, "E", 51)]
    api_history = api.history(1).select("version", "operation").first()
    sql_history = sql.history(1).select("version", "operation").first()
    assert tuple(api_history) == tuple(sql_history) == (3, "DELETE")

    for table in (api, sql):
        table.alias("t").merge(
            source.alias("s"), "t.id = s.id"
        ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
        table.optimize().executeCompaction()
    assert _rows(spark, api_ref) == _rows(spark, sql_ref)


def test_a_column_condition_is_refused_with_the_fix(spark, tmp_path):
    from pyspark.sql import functions as F

    _, _, _, sql = _pair(spark, tmp_path)
    with pytest.raises(TypeError, match="must be SQL text on a Spark Connect session"):
        sql.update(F.col("id") == 1, {"v": "0"})
    with pytest.raises(TypeError, match="a MERGE value"):
        sql.merge(spark.range(1), "true").whenNotMatchedInsert(values={"id": F.lit(1)})


VALUES = [
    (42, "INT"),
    (-9223372036854775808, "BIGINT"),
    (18446744073709551615, "DECIMAL(20,0)"),
    (Decimal("-12.50"), "DECIMAL(10,2)"),
    (Decimal("1E+2"), "DECIMAL(10,0)"),
    (1.5e-7, "DOUBLE"),
    (float("inf"), "DOUBLE"),
    (3.25, "FLOAT"),
    (True, "BOOLEAN"),
    ("it's a \\ test \U0001f600", "STRING"),
    (b"\x00\xffab", "BINARY"),
    (dt.date(2024, 2, 29), "DATE"),
    (dt.datetime(2024, 2, 29, 23, 59, 59, 999999), "TIMESTAMP_NTZ"),
    (None, "INT"),
]


@pytest.mark.parametrize(("value", "spark_type"), VALUES, ids=[t for _, t in VALUES])
def test_spark_literal_is_the_value_it_was_collected_as(spark, value, spark_type):
    from pyspark.sql import functions as F

    got = spark.sql(f"SELECT {spark_literal(value, spark_type)} AS x")
    assert (
        got.schema["x"].dataType.simpleString()
        == spark.sql(f"SELECT CAST(NULL AS {spark_type}) AS x").schema["x"].dataType.simpleString()
    )
    assert got.first()["x"] == value
    if value is not None and spark_type != "TIMESTAMP_NTZ" and not (isinstance(value, int) and value >= 2**63):
        assert got.first()["x"] == spark.range(1).select(F.lit(value).cast(spark_type)).first()[0]


def test_a_timestamp_round_trips_through_its_literal(spark):
    """A TIMESTAMP comes back from collect() as local wall-clock time; its literal names the same instant."""
    row = spark.sql("SELECT TIMESTAMP '2024-03-31 01:30:00.123456 UTC' AS ts").first()
    again = spark.sql(f"SELECT {spark_literal(row['ts'], 'TIMESTAMP')} = TIMESTAMP '2024-03-31 01:30:00.123456 UTC'")
    assert again.first()[0] is True
