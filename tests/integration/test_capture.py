"""Binlog capture into bronze/changelog: what a run writes, and where the next run resumes."""

from __future__ import annotations

import pytest

from binlake.bronze.capture import (
    capture_position,
    capture_status,
    reset_capture,
    run_capture,
)
from binlake.contract.changelog import HEARTBEAT_OP
from binlake.contract.tables import Lakehouse
from binlake.errors import BinlogPurgedError, InternalInvariantError
from binlake.source.mysql import master_status


def _changes(spark, config, db):
    df = Lakehouse(config).changelog.read(spark)
    return df.where(f"db = '{db}' AND op IN ('insert','update','delete')").orderBy("file_index", "pos", "row").collect()


def _server_pos(mariadb):
    with mariadb.root_connection() as conn:
        return master_status(conn)


def _latest(make_config, database):
    return make_config([f"{database}.*"], capture={"startup": "latest"})


def test_insert_update_delete_are_one_record_each_with_distinct_row_indexes(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v VARCHAR(10))")
    config = _latest(make_config, database)
    run_capture(spark, config)
    mariadb.execute(
        f"INSERT INTO `{database}`.t VALUES (1,'a'),(2,'b'),(3,'c')",
        f"UPDATE `{database}`.t SET v = 'bb' WHERE id = 2",
        f"DELETE FROM `{database}`.t WHERE id = 3",
    )
    result = run_capture(spark, config)
    rows = _changes(spark, config, database)
    assert [(r.op, r.row) for r in rows] == [("insert", 0), ("insert", 1), ("insert", 2), ("update", 0), ("delete", 0)]
    assert len({r.pos for r in rows[:3]}) == 1, "rows of one multi-row event share its end position"
    upd = rows[3]
    assert upd.before == {"id": "2", "v": "b"}
    assert upd.after == {"id": "2", "v": "bb"}
    assert rows[4].before == {"id": "3", "v": "c"}
    assert rows[4].after is None
    assert all(r.gtid and r.gtid.count("-") == 2 for r in rows), "MariaDB GTIDs are domain-server-seq"
    assert all(r.server_id == 1 and r.commit_ts is not None and r.schema_version for r in rows)
    assert result.changes == 5


def _session(mariadb, database, *statements):
    """Run ``statements`` in one root session (so that its SET SESSION holds for the others)."""
    with mariadb.root_connection(database) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def test_row_images_hold_exactly_the_columns_a_session_logged(spark, mariadb, database, make_config):
    """A session may override binlog_row_image. MariaDB's manual: MINIMAL logs the key in the
    before image and the changed columns in the after image; NOBLOB leaves BLOB/TEXT columns
    out unless they changed. A column not logged is missing from the image, never NULL."""
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v INT, w INT, doc TEXT)")
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (1, 10, 100, 'big'), (2, 20, 200, 'text')")
    config = _latest(make_config, database)
    run_capture(spark, config)
    _session(
        mariadb,
        database,
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "UPDATE t SET v = 11 WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
        "SET SESSION binlog_row_image = 'NOBLOB'",
        "UPDATE t SET w = 101 WHERE id = 1",
    )
    run_capture(spark, config)
    rows = _changes(spark, config, database)
    assert [(r.op, r.before, r.after) for r in rows] == [
        ("update", {"id": "1"}, {"v": "11"}),
        ("delete", {"id": "2"}, None),
        ("update", {"id": "1", "v": "11", "w": "100"}, {"id": "1", "v": "11", "w": "101"}),
    ]


def test_statement_format_dml_of_a_session_is_recorded_per_table_not_dropped(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v INT)", f"CREATE TABLE `{database}`.u (id INT)")
    config = _latest(make_config, database)
    run_capture(spark, config)
    _session(
        mariadb,
        database,
        "SET SESSION binlog_format = 'STATEMENT'",
        "INSERT INTO t VALUES (1, 1)",
        "UPDATE t SET v = 2 WHERE id = 1",
        f"DELETE FROM `{database}`.t WHERE id = 1",
    )
    result = run_capture(spark, config)
    rows = Lakehouse(config).changelog.read(spark).where(f"db = '{database}'").orderBy("file_index", "pos").collect()
    assert [(r.op, r.table, r.ddl) for r in rows] == [
        ("statement", "t", "INSERT INTO t VALUES (1, 1)"),
        ("statement", "t", "UPDATE t SET v = 2 WHERE id = 1"),
        ("statement", "t", f"DELETE FROM `{database}`.t WHERE id = 1"),
    ]
    assert result.changes == 0
    assert result.statements == 3


def test_until_now_stops_at_the_position_reported_at_start_and_resumes_there(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    config = _latest(make_config, database)
    run_capture(spark, config)
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (1)")
    end = _server_pos(mariadb)
    result = run_capture(spark, config)
    assert result.end == end == capture_position(spark, Lakehouse(config))
    heartbeats = Lakehouse(config).changelog.read(spark).where("op = 'heartbeat'").collect()
    assert all(h.db is None and h.table is None for h in heartbeats)
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (2)")
    run_capture(spark, config)
    assert [r.after["id"] for r in _changes(spark, config, database)] == ["1", "2"]


def test_idle_captured_table_still_advances_the_resume_position(spark, mariadb, database, make_config):
    mariadb.execute(
        f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)", f"CREATE TABLE `{database}`.other (id INT PRIMARY KEY)"
    )
    config = make_config([f"{database}.t"], capture={"startup": "latest"})
    run_capture(spark, config)
    before = capture_position(spark, Lakehouse(config))
    mariadb.execute(f"INSERT INTO `{database}`.other VALUES (1)")
    run_capture(spark, config)
    after = capture_position(spark, Lakehouse(config))
    assert after > before
    assert after == _server_pos(mariadb)
    assert _changes(spark, config, database) == []


def test_rotation_ddl_and_truncate_are_captured_in_order(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v INT)")
    config = _latest(make_config, database)
    run_capture(spark, config)
    mariadb.execute(
        f"INSERT INTO `{database}`.t VALUES (1, 1)",
        "FLUSH BINARY LOGS",
        f"ALTER TABLE `{database}`.t ADD COLUMN w VARCHAR(5)",
        "FLUSH BINARY LOGS",
        f"INSERT INTO `{database}`.t VALUES (2, 2, 'x')",
        f"TRUNCATE TABLE `{database}`.t",
        "FLUSH BINARY LOGS",
        f"INSERT INTO `{database}`.t VALUES (3, 3, 'y')",
    )
    run_capture(spark, config)
    log = (
        Lakehouse(config)
        .changelog.read(spark)
        .where(f"db = '{database}'")
        .orderBy("file_index", "pos", "row")
        .collect()
    )
    assert [r.op for r in log] == ["insert", "ddl", "insert", "truncate", "insert"]
    assert len({r.file_index for r in log}) == 4
    assert "ADD COLUMN" in log[1].ddl
    assert log[1].table == "t"
    assert log[0].schema_version != log[2].schema_version == log[4].schema_version
    assert set(log[0].after) == {"id", "v"}
    assert log[2].after == {"id": "2", "v": "2", "w": "x"}
    history = Lakehouse(config).schema_history.read(spark).where(f"db = '{database}'").collect()
    assert {h.schema_version for h in history} >= {log[0].schema_version, log[2].schema_version}


def test_restart_of_the_server_during_capture_loses_and_doubles_nothing(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    config = _latest(make_config, database)
    run_capture(spark, config)
    mariadb.execute(*[f"INSERT INTO `{database}`.t VALUES ({i})" for i in range(20)])
    mariadb.restart()
    mariadb.execute(*[f"INSERT INTO `{database}`.t VALUES ({i})" for i in range(20, 40)])
    run_capture(spark, config)
    assert sorted(int(r.after["id"]) for r in _changes(spark, config, database)) == list(range(40))


def test_a_batch_read_without_its_heartbeat_stops_capture_at_once(spark, mariadb, database, make_config, monkeypatch):
    """The reader ends every batch with exactly one heartbeat. A batch without one is a bug in
    binlake, not a server away: capture stops at once with its own error, without retrying
    (and sleeping), and commits nothing of the batch."""
    from binlake.bronze import capture

    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    config = _latest(make_config, database)
    run_capture(spark, config)
    before = capture_position(spark, Lakehouse(config))
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (1)")
    reads = []

    def without_heartbeat(*args, **kwargs):
        reads.append(args)
        return real_read(*args, **kwargs).where(f"op <> '{HEARTBEAT_OP}'")

    real_read = capture.read_dataframe
    monkeypatch.setattr(capture, "read_dataframe", without_heartbeat)
    with pytest.raises(InternalInvariantError, match="exactly one heartbeat, got 0"):
        run_capture(spark, config)
    assert len(reads) == 1
    assert capture_position(spark, Lakehouse(config)) == before


def test_reset_capture_moves_to_the_current_position_and_status_reports_lag(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    config = _latest(make_config, database)
    run_capture(spark, config)
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (1)")
    status = capture_status(spark, config)
    assert status["lag_bytes"] > 0
    assert status["oldest_binlog"].startswith("mysql-bin.")
    assert status["server_file"] == _server_pos(mariadb).file
    new = reset_capture(spark, config)
    assert new == _server_pos(mariadb) == capture_position(spark, Lakehouse(config))
    assert capture_status(spark, config)["lag_bytes"] == 0
    run_capture(spark, config)
    assert _changes(spark, config, database) == [], "the change before the reset is for the re-snapshot to repair"


def test_purged_resume_file_raises_naming_the_file_and_the_recovery(spark, mariadb, database, make_config):
    config = make_config([f"{database}.*"], capture={"startup": "position", "start_position": "mysql-bin.000001:4"})
    mariadb.execute("FLUSH BINARY LOGS")
    mariadb.purge_binlogs()
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    with pytest.raises(BinlogPurgedError) as err:
        run_capture(spark, config)
    assert "binlog mysql-bin.000001 needed to resume capture has been purged" in str(err.value)
    assert f"binlake snapshot --reset-capture --table {database}.t" in str(err.value)
    assert "purged" in capture_status(spark, config)["purge_warning"]


def test_every_heartbeat_names_its_server_and_the_gtid_position_the_server_has_there(
    spark, mariadb, database, make_config
):
    from binlake.bronze.capture_state import capture_state
    from binlake.source import gtid

    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    config = _latest(make_config, database)
    run_capture(spark, config)
    for i in range(3):
        mariadb.execute(f"INSERT INTO `{database}`.t VALUES ({i})", "FLUSH BINARY LOGS")
        run_capture(spark, config)
    lh = Lakehouse(config)
    beats = lh.changelog.read(spark).where("op = 'heartbeat'").collect()
    assert beats
    assert all(b.server_id == 1 and b.gtid for b in beats)
    state = capture_state(spark, lh)
    with mariadb.root_connection() as conn:
        assert gtid.parse(state.gtid) == gtid.parse(gtid.gtid_at(conn, state.position))


def test_a_lakehouse_from_before_servers_were_recorded_learns_them_at_its_next_run(
    spark, mariadb, database, make_config
):
    import json

    from binlake.bronze.capture_state import capture_state
    from binlake.contract.changelog import CHANGELOG_SCHEMA, heartbeat_row

    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    config = _latest(make_config, database)
    run_capture(spark, config)
    lh = Lakehouse(config)
    # What an older binlake committed: a heartbeat without server or GTID, a tag without them.
    old = capture_position(spark, lh)
    lh.changelog.save(
        spark.createDataFrame([heartbeat_row(old)], CHANGELOG_SCHEMA)
        .write.format("delta")
        .mode("append")
        .option("userMetadata", json.dumps({"capture_end": str(old)}))
    )
    assert capture_state(spark, lh).server_id is None
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (1)")
    run_capture(spark, config)
    state = capture_state(spark, lh)
    assert state.server_id == 1
    assert state.gtid
    assert state.position.epoch == 0
    assert len(_changes(spark, config, database)) == 1
