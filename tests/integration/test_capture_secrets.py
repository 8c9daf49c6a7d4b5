"""The source password reaches the binlog readers on executors but never Spark plan text."""

from __future__ import annotations

from binlake.bronze.binlog_reader import ReadRange
from binlake.bronze.binlog_source import read_dataframe
from binlake.source.mysql import master_status


def test_binlog_reader_plan_text_has_no_password(spark, mariadb, make_config):
    config = make_config(["nothing.*"])
    password = config.source.password.reveal()
    with mariadb.root_connection() as conn:
        current = master_status(conn)
    df = read_dataframe(spark, config.source, [ReadRange(0, current.file, 4, current.pos, True)])
    plans = df._jdf.queryExecution().toString() + df._jdf.queryExecution().simpleString()
    assert password not in plans
    assert df.where("op = 'heartbeat'").count() == 1, "the reader did get the password it needs"
