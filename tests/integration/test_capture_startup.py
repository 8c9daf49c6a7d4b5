"""Where the first capture run starts (capture.startup), and the automatic purge recovery."""

from __future__ import annotations

import datetime as dt
import time

from binlake.bronze.capture import capture_position, run_capture
from binlake.contract.tables import Lakehouse
from binlake.source.mysql import master_status


def _server_pos(mariadb):
    with mariadb.root_connection() as conn:
        return master_status(conn)


def _ids(spark, config, db):
    rows = Lakehouse(config).changelog.read(spark).where(f"db = '{db}' AND op = 'insert'").collect()
    return sorted(int(r.after["id"]) for r in rows)


def test_startup_timestamp_finds_the_first_transaction_at_or_after_the_time(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    mariadb.execute(
        f"INSERT INTO `{database}`.t VALUES (1)", "FLUSH BINARY LOGS", f"INSERT INTO `{database}`.t VALUES (2)"
    )
    time.sleep(1.2)  # binlog timestamps have whole seconds
    when = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=1)
    time.sleep(2.2)
    mariadb.execute(
        f"INSERT INTO `{database}`.t VALUES (3)", "FLUSH BINARY LOGS", f"INSERT INTO `{database}`.t VALUES (4)"
    )
    config = make_config(
        [f"{database}.*"], capture={"startup": "timestamp", "start_timestamp": when.isoformat().replace("+00:00", "Z")}
    )
    run_capture(spark, config)
    assert _ids(spark, config, database) == [3, 4]


def test_startup_position_starts_at_the_given_file_and_pos(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{database}`.t VALUES (1)")
    start = _server_pos(mariadb)
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (2)")
    config = make_config([f"{database}.*"], capture={"startup": "position", "start_position": str(start)})
    result = run_capture(spark, config)
    assert result.start == start
    assert _ids(spark, config, database) == [2]


def test_startup_initial_starts_at_the_smallest_snapshot_low_watermark(spark, mariadb, database, make_config):
    from binlake.bronze.snapshot import run_snapshot

    mariadb.execute(
        f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)",
        f"INSERT INTO `{database}`.t VALUES " + ",".join(f"({i})" for i in range(30)),
    )
    config = make_config([f"{database}.*"], snapshot={"chunk_size": 10})
    run_snapshot(spark, config)
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (100)")
    result = run_capture(spark, config)
    lw = Lakehouse(config).snapshot_chunks.read(spark).orderBy("lw_file_index", "lw_pos").first()
    assert (result.start.file, result.start.pos) == (lw.lw_file, lw.lw_pos)
    assert 100 in _ids(spark, config, database)


def test_on_purge_resnapshot_resets_capture_and_resnapshots_the_tables(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{database}`.t VALUES (1)")
    config = make_config([f"{database}.*"], capture={"startup": "latest", "on_purge": "resnapshot"})
    run_capture(spark, config)
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (2)", "FLUSH BINARY LOGS")
    mariadb.purge_binlogs()
    result = run_capture(spark, config)
    assert result.resnapshot_tables == [f"{database}.t"]
    assert capture_position(spark, Lakehouse(config)) == _server_pos(mariadb)
    chunks = Lakehouse(config).snapshot_chunks.read(spark).where(f"db = '{database}'").collect()
    assert sum(c.row_count for c in chunks) == 2, "the re-snapshot holds the change the purge took away"
