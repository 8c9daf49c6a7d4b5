"""ADD COLUMN through the real path (binlog -> bronze -> silver -> gold): a column of any type
added to a table that never had one of its kind reaches silver, gold and the history tables,
value for value."""

from __future__ import annotations

from mysql_types import EDGE_ROW, NULL_ROW, ODD_ROW, TYPES  # tests/mysql_types.py
from source_diff import assert_layers_equal_source  # tests/source_diff.py

from binlake.contract.tables import Lakehouse
from binlake.ops.pipeline import run_pipeline


def _run(spark, config):
    result = run_pipeline(spark, config)
    assert result.ok, result.summary()
    return result


def test_a_column_of_every_type_added_to_a_table_without_one_reaches_gold(spark, mariadb, database, make_config):
    db = f"`{database}`"
    # The table has only an INT key, so its silver, gold and history tables start without any
    # type but INT: each ADD COLUMN below brings a type family they never had (DATETIME needs a
    # Delta table feature a table created without it lacks).
    mariadb.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1), (2), (3)")
    config = make_config([f"{database}.*"], history={"tables": [f"{database}.t"]})
    _run(spark, config)

    mariadb.execute(
        *[f"ALTER TABLE {db}.t ADD COLUMN {name} {definition}" for name, definition, _ in TYPES],
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '+05:30'",
        f"REPLACE INTO {db}.t VALUES {EDGE_ROW}, {ODD_ROW}",
        f"INSERT INTO {db}.t VALUES {NULL_ROW.replace('(2,', '(4,', 1)}",
    )
    _run(spark, config)

    assert_layers_equal_source(spark, config)
    history = Lakehouse(config).gold_history(database, "t").read(spark)
    assert {name for name, _, _ in TYPES} <= set(history.columns)
    assert history.where("id = 1 AND _cdc_valid_to IS NULL").select("dtm6").first()[0] is not None
