"""Writer sessions that override the server's binlog settings, through the real path (binlog ->
bronze -> silver -> gold): a session with binlog_row_image MINIMAL or NOBLOB is mirrored
exactly, and one with binlog_format STATEMENT stops its table until a re-snapshot."""

from __future__ import annotations

import pytest
from source_diff import diff_with_source  # tests/source_diff.py

from binlake.errors import IncompleteChangeError
from binlake.ops.commands import run_snapshot
from binlake.ops.pipeline import run_pipeline

# The session's own binlog settings; root has SUPER, a writer granted ALL ON db.* could not.
MINIMAL = "SET SESSION binlog_row_image = 'MINIMAL'"
NOBLOB = "SET SESSION binlog_row_image = 'NOBLOB'"
STATEMENT = "SET SESSION binlog_format = 'STATEMENT'"


def _same_as_source(spark, config):
    diffs = diff_with_source(spark, config)
    assert diffs, "\n".join(d.describe() for d in diffs)
    assert all(d.ok for d in diffs), "\n".join(d.describe() for d in diffs)


def test_minimal_and_noblob_sessions_reach_gold_as_the_source_holds_them(spark, mariadb, database, make_config):
    mariadb.execute(
        "CREATE TABLE docs (id INT PRIMARY KEY, title VARCHAR(20), n INT, body TEXT, data BLOB)",
        "INSERT INTO docs VALUES (1, 'a', 10, 'one', 'b1'), (2, 'b', 20, 'two', 'b2'), (3, 'c', 30, 'three', 'b3'), "
        "(4, 'd', 40, 'four', 'b4'), (5, 'e', 50, 'five', 'b5')",
        database=database,
    )
    config = make_config([f"{database}.*"])
    assert run_pipeline(spark, config).ok
    mariadb.execute(
        MINIMAL,
        "UPDATE docs SET title = 'A' WHERE id = 1",  # before {id}, after {title}
        "UPDATE docs SET n = n + 1 WHERE id = 1",  # chains on the one before, in one batch
        "UPDATE docs SET id = id WHERE id = 5",  # changes nothing: no row event
        "DELETE FROM docs WHERE id = 2",  # before {id}
        NOBLOB,
        "UPDATE docs SET title = 'C' WHERE id = 3",  # body and data in neither image
        "UPDATE docs SET body = 'FOUR' WHERE id = 4",  # body in the after image, data in neither
        "DELETE FROM docs WHERE id = 5",  # before without body and data
        database=database,
    )
    assert run_pipeline(spark, config).ok
    _same_as_source(spark, config)


def test_a_statement_session_stops_its_table_until_a_resnapshot(spark, mariadb, database, make_config):
    mariadb.execute(
        "CREATE TABLE docs (id INT PRIMARY KEY, n INT)",
        "CREATE TABLE other (id INT PRIMARY KEY, x INT)",
        "INSERT INTO docs VALUES (1, 10), (2, 20)",
        "INSERT INTO other VALUES (1, 1)",
        database=database,
    )
    config = make_config([f"{database}.*"])
    assert run_pipeline(spark, config).ok
    mariadb.execute(STATEMENT, "UPDATE docs SET n = n + 1", database=database)
    with pytest.raises(IncompleteChangeError, match=rf"binlake snapshot --table {database}\.docs"):
        run_pipeline(spark, config)
    run_snapshot(spark, config, tables=[f"{database}.docs"])
    assert run_pipeline(spark, config).ok
    _same_as_source(spark, config)
