"""ADD COLUMN with a DEFAULT through the real path (binlog -> bronze -> silver -> gold): MariaDB
gives every existing row the default, the binlog carries only the statement, and gold still
equals the source value for value, rows changed after the DDL keeping their logged values.
What binlake cannot know exactly stops the table, and a re-snapshot recovers it."""

from __future__ import annotations

import pytest
from source_diff import assert_layers_equal_source  # tests/source_diff.py

from binlake.bronze.snapshot import run_snapshot
from binlake.contract.tables import Lakehouse
from binlake.errors import DefaultBackfillError, SchemaChangeError
from binlake.ops.metrics import recorded
from binlake.ops.pipeline import run_pipeline
from binlake.ops.status import collect_status
from binlake.silver.run import run_silver

# (name, definition): a literal of each type family, then NOT NULL without a DEFAULT (the
# type's implicit default), then CURRENT_TIMESTAMP of a TIMESTAMP, to the second.
DEFAULTS = [
    ("i", "INT NOT NULL DEFAULT -7"),
    ("u", "BIGINT UNSIGNED DEFAULT 18446744073709551615"),
    ("dec", "DECIMAL(6,2) DEFAULT 1.005"),
    ("f", "FLOAT DEFAULT 0.1"),
    ("g", "DOUBLE DEFAULT -2.5e-3"),
    ("quoted_int", "SMALLINT DEFAULT '12'"),
    ("latin", "VARCHAR(20) CHARACTER SET latin1 DEFAULT 'café ''q'''"),
    ("emoji", "VARCHAR(10) CHARACTER SET utf8mb4 DEFAULT '😀x'"),
    ("ch", "CHAR(5) DEFAULT 'ab  '"),
    ("dt", "DATE DEFAULT '2024-02-29'"),
    ("dtm", "DATETIME(3) DEFAULT '2024-01-02 03:04:05.120'"),
    ("tm", "TIME(2) DEFAULT '-12:30:00.25'"),
    ("e", "ENUM('x','y','z') DEFAULT 'y'"),
    ("st", "SET('a','b','c') DEFAULT 'c,a'"),
    ("bt", "BIT(5) DEFAULT b'10101'"),
    ("hx", "BIT(8) DEFAULT 0x41"),
    ("bn", "BINARY(4) DEFAULT 'ab'"),
    ("vb", "VARBINARY(4) DEFAULT x'00ff'"),
    ("js", """JSON DEFAULT '{"k": [1, 2]}'"""),
    ("yr", "YEAR DEFAULT 2024"),
    ("bo", "BOOLEAN DEFAULT TRUE"),
    ("paren", "INT DEFAULT (5)"),
    ("nul", "INT DEFAULT NULL"),
    ("n_int", "INT NOT NULL"),
    ("n_dec", "DECIMAL(4,1) NOT NULL"),
    ("n_str", "VARCHAR(5) NOT NULL"),
    ("n_enum", "ENUM('p','q') NOT NULL"),
    ("n_set", "SET('a','b') NOT NULL"),
    ("n_date", "DATE NOT NULL"),
    ("n_dtm", "DATETIME(2) NOT NULL"),
    ("n_time", "TIME NOT NULL"),
    ("n_bin", "BINARY(2) NOT NULL"),
    ("n_blob", "BLOB NOT NULL"),
    ("n_bit", "BIT(2) NOT NULL"),
    ("ts", "TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP"),
]


def _run(spark, config):
    result = run_pipeline(spark, config)
    assert result.ok, result.summary()
    return result


def _source(mariadb, sql: str):
    with mariadb.root_connection() as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def _gold(spark, config, database: str, columns: str):
    return [
        tuple(r) for r in Lakehouse(config).gold(database, "t").read(spark).selectExpr(*columns.split(", ")).collect()
    ]


@pytest.fixture
def table(spark, mariadb, database, make_config):
    """``t`` with six rows, mirrored to gold, and its config."""
    db = f"`{database}`"
    mariadb.execute(
        f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {db}.t VALUES (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6)",
    )
    config = make_config([f"{database}.*"])
    _run(spark, config)
    return db, config


def test_every_kind_of_default_reaches_the_rows_older_than_the_ddl(spark, mariadb, database, table):
    db, config = table
    mariadb.execute(
        f"UPDATE {db}.t SET v = 10 WHERE id = 1",  # changed before the DDL, in the same batch
        f"ALTER TABLE {db}.t " + ", ".join(f"ADD COLUMN `{name}` {definition}" for name, definition in DEFAULTS),
        # Changed after the DDL, before binlake's run: these keep their logged values.
        f"UPDATE {db}.t SET i = 99, latin = 'new', dt = NULL WHERE id = 2",
        f"UPDATE {db}.t SET v = 40 WHERE id = 4",
        f"DELETE FROM {db}.t WHERE id = 3",
        # Strict mode wants a value for a NOT NULL column without DEFAULT; the insert's own
        # values are logged, whatever they are.
        "SET SESSION sql_mode = ''",
        f"INSERT INTO {db}.t (id, v, i) VALUES (7, 7, 70)",
        "SET SESSION sql_mode = DEFAULT",
        # A second ADD later in the binlog: its default reaches the rows older than it only.
        f"ALTER TABLE {db}.t ADD COLUMN later VARCHAR(5) NOT NULL DEFAULT 'old'",
        f"UPDATE {db}.t SET later = 'mine' WHERE id = 6",
    )
    result = recorded(spark, config, "run", lambda: _run(spark, config))

    assert_layers_equal_source(spark, config)
    silver = next(s.result for s in result.steps if s.name == "silver").table(f"{database}.t")
    # All six rows silver held were mirrored before the DDL: each gets the default, then the
    # batch applies the changes logged after it (ids 2 and 4 updated, 3 deleted).
    assert silver.backfilled["i"] == 6, silver.backfilled
    # ... and status and the metrics table say so.
    shown = {b["column"]: b for b in collect_status(spark, config)["tables"][0]["backfilled"]}
    assert (shown["i"]["value"], shown["i"]["rows"], shown["later"]["value"], shown["later"]["rows"]) == (
        "-7",
        6,
        "old",
        6,
    ), shown
    assert "nul" not in shown  # a NULL default gives nothing
    detail = (
        Lakehouse(config)
        .metrics.read(spark)
        .where(f"step = 'silver' AND `table` = '{database}.t'")
        .select("detail")
        .first()["detail"]
    )
    assert "i: 6 rows" in detail, detail
    assert "later: 6 rows" in detail, detail
    expected = _source(mariadb, f"SELECT id, i, `dec`, latin, later FROM {db}.t ORDER BY id")
    assert sorted(_gold(spark, config, database, "id, i, CAST(`dec` AS STRING), latin, later")) == [
        (r[0], r[1], str(r[2]), r[3], r[4]) for r in expected
    ]


def test_a_default_binlake_cannot_know_stops_the_table_until_a_re_snapshot(spark, mariadb, database, table):
    db, config = table
    # Capture records the new schema at the table's next row event.
    mariadb.execute(f"ALTER TABLE {db}.t ADD COLUMN w INT DEFAULT (v * 2)", f"INSERT INTO {db}.t (id, v) VALUES (7, 7)")

    with pytest.raises(SchemaChangeError, match=r"cannot backfill column w .*binlake snapshot --table"):
        run_pipeline(spark, config)
    # run_silver names every stopped table in one SchemaChangeError; the table's own error is
    # the DefaultBackfillError.
    with pytest.raises(SchemaChangeError, match=r"cannot backfill column w .*is an expression") as got:
        run_silver(spark, config)
    assert got.value.result.table(f"{database}.t").error_class is DefaultBackfillError

    run_snapshot(spark, config, tables=[f"{database}.t"], fresh=True)
    _run(spark, config)
    assert_layers_equal_source(spark, config)


def test_current_timestamp_with_fractions_is_not_in_the_binlog_so_the_table_stops(spark, mariadb, database, table):
    db, config = table
    mariadb.execute(
        f"ALTER TABLE {db}.t ADD COLUMN ts TIMESTAMP(6) NULL DEFAULT CURRENT_TIMESTAMP(6)",
        f"UPDATE {db}.t SET v = 20 WHERE id = 2",
    )
    with pytest.raises(SchemaChangeError, match=r"cannot backfill column ts .*to the second only") as got:
        _capture_then_silver(spark, config)
    assert got.value.result.table(f"{database}.t").error_class is DefaultBackfillError


def _capture_then_silver(spark, config):
    from binlake.bronze.capture import run_capture

    run_capture(spark, config, continuous=False)
    run_silver(spark, config)


def test_a_run_killed_during_the_backfill_converges(spark, mariadb, database, table, monkeypatch):
    from binlake import faults

    class Killed(BaseException):
        """kill -9 at the fault point: nothing after it runs."""

    def kill(name):
        if name == "silver.after_backfill":
            raise Killed(name)

    db, config = table
    mariadb.execute(
        f"ALTER TABLE {db}.t ADD COLUMN a INT NOT NULL DEFAULT 3, ADD COLUMN b VARCHAR(3) DEFAULT 'bee'",
        f"UPDATE {db}.t SET a = 30 WHERE id = 1",
    )
    with monkeypatch.context() as m:
        m.setattr(faults, "point", kill)
        with pytest.raises(Killed):
            run_pipeline(spark, config)
    # The source goes on between the kill and the next run.
    mariadb.execute(f"UPDATE {db}.t SET b = 'new' WHERE id = 2", f"DELETE FROM {db}.t WHERE id = 5")

    _run(spark, config)
    assert_layers_equal_source(spark, config)


def test_modify_and_change_keep_existing_values_and_a_new_default_touches_no_row(spark, mariadb, database, table):
    """What MariaDB does to existing values: a widened type keeps them (silver widens the
    column), a changed DEFAULT leaves every existing row as it is (only later inserts get it),
    and an added column keeps the default of its ADD, not of a later MODIFY."""
    db, config = table
    mariadb.execute(
        f"ALTER TABLE {db}.t ADD COLUMN d DECIMAL(5,2) DEFAULT 1.25, ADD COLUMN s VARCHAR(5) DEFAULT 'ab'",
        f"UPDATE {db}.t SET d = 999.99, s = 'xyz' WHERE id = 1",
        f"ALTER TABLE {db}.t MODIFY v BIGINT",  # widened: values kept
        f"UPDATE {db}.t SET v = 9000000000 WHERE id = 2",
        f"ALTER TABLE {db}.t MODIFY d DECIMAL(9,3) DEFAULT 7.5",  # widened, new default: values kept
        f"INSERT INTO {db}.t (id, v) VALUES (7, 7)",
        f"ALTER TABLE {db}.t ALTER COLUMN s SET DEFAULT 'new'",  # existing rows keep 'ab'
        f"INSERT INTO {db}.t (id, v) VALUES (8, 8)",
        f"ALTER TABLE {db}.t CHANGE s s2 VARCHAR(20) DEFAULT 'again'",  # renamed, same Spark type
        f"UPDATE {db}.t SET v = 30 WHERE id = 3",
        # An ADD and a MODIFY of its default with no row event between: one schema step, and
        # the rows older than the ADD hold the ADD's default.
        f"ALTER TABLE {db}.t ADD COLUMN a INT DEFAULT 1",
        f"ALTER TABLE {db}.t MODIFY a INT DEFAULT 2",
        f"INSERT INTO {db}.t (id, v) VALUES (9, 9)",
    )
    _run(spark, config)

    assert_layers_equal_source(spark, config)
    expected = _source(mariadb, f"SELECT id, v, d, s2, a FROM {db}.t ORDER BY id")
    assert sorted(_gold(spark, config, database, "id, v, CAST(d AS STRING), s2, a")) == [
        (r[0], r[1], str(r[2]), r[3], r[4]) for r in expected
    ]
    fields = {f.name: f.dataType.simpleString() for f in Lakehouse(config).silver(database, "t").read(spark).schema}
    assert (fields["v"], fields["d"]) == ("bigint", "decimal(9,3)")
