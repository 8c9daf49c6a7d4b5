"""Preflight tells an operator everything to fix before binlake touches data, in one run.

Each negative case runs against a real server set up wrong in exactly that way: extra
MariaDB servers with other binlog settings, users with fewer privileges, tables without keys.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from binlake.config import load_config_text
from binlake.devtools.mariadb import LocalMariaDB
from binlake.errors import PreflightError, SourceConnectionError
from binlake.source.preflight import Status, check_source, run_preflight

ROOT = Path(__file__).resolve().parents[2]
BINLAKE = str(ROOT / ".venv/bin/binlake")


def config_for(
    server: LocalMariaDB, tables, user="cdc", password=None, server_id=5401, port=None, host="127.0.0.1", **source
):
    doc = {
        "source": {
            "host": host,
            "port": port or server.port,
            "user": user,
            "password": password or server.cdc_password,
            "server_id": server_id,
            "tables": tables,
            **source,
        },
        "lakehouse": {"path": "/nonexistent/lakehouse"},
    }
    return load_config_text(yaml.safe_dump(doc), environ={})


def problems_of(config) -> list[str]:
    with pytest.raises(PreflightError) as info:
        run_preflight(config)
    assert str(info.value).startswith(f"preflight found {len(info.value.problems)} problem")
    return info.value.problems


@pytest.fixture(scope="module")
def statement_server(tmp_path_factory):
    """Everything right except binlog_format=STATEMENT."""
    db = LocalMariaDB(tmp_path_factory.mktemp("statement"), extra_args=["--binlog-format=STATEMENT"])
    db.start()
    db.execute("CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY, total DECIMAL(10,2))")
    yield db
    db.destroy()


@pytest.fixture(scope="module")
def broken_server(tmp_path_factory):
    """No binlog, MIXED format, MINIMAL row image and row metadata, server id 5401."""
    db = LocalMariaDB(
        tmp_path_factory.mktemp("broken"),
        server_id=5401,
        extra_args=[
            "--skip-log-bin",
            "--binlog-format=MIXED",
            "--binlog-row-image=MINIMAL",
            "--binlog-row-metadata=MINIMAL",
        ],
    )
    db.start()
    db.execute(
        "CREATE DATABASE shop",
        "CREATE TABLE shop.events (at DATETIME, what VARCHAR(20))",
        "CREATE TABLE shop.devices (id INT PRIMARY KEY, device_uuid UUID, addr INET6)",
    )
    yield db
    db.destroy()


@pytest.fixture
def user(mariadb):
    """make a TCP user with the given grants; dropped afterwards."""
    made = []

    def make(*grants: str) -> tuple[str, str]:
        name, pw = f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex[:8]}"
        mariadb.execute(
            f"CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY '{pw}'",
            *(f"GRANT {g} TO '{name}'@'127.0.0.1'" for g in grants),
        )
        made.append(name)
        return name, pw

    yield make
    for name in made:
        mariadb.execute(f"DROP USER IF EXISTS '{name}'@'127.0.0.1'")


# ---------------------------------------------------------------------------------------
# a source set up right


def test_a_source_set_up_right_passes_with_an_ok_line_per_check(mariadb, database):
    mariadb.execute(
        f"CREATE TABLE `{database}`.customers (id INT PRIMARY KEY, name VARCHAR(40))",
        f"CREATE TABLE `{database}`.orders (id BIGINT UNSIGNED PRIMARY KEY, customer_id INT, "
        f"FOREIGN KEY (customer_id) REFERENCES `{database}`.customers (id) ON DELETE CASCADE)",
    )
    report = run_preflight(config_for(mariadb, [f"{database}.*"]))

    assert report.ok
    assert report.problems == []
    assert report.tables == [f"{database}.customers", f"{database}.orders"]
    text = report.text()
    for line in (
        "OK    log_bin: ON",
        "OK    binlog_format: ROW",
        "OK    binlog_row_image: FULL",
        "OK    binlog_row_metadata: FULL",
        "OK    privileges: 'cdc'@'127.0.0.1' has SELECT, REPLICATION CLIENT, REPLICATION SLAVE",
        "OK    server_id: 5401..5433 differ from the server's 1",
        "OK    keys: all 2 table(s) have a primary key",
        "OK    types: every column type",
        # the CDC user of tests/conftest.py's server logs in with MariaDB's default plugin
        "OK    authentication: mysql_native_password",
        "INFO  session overrides: a session may set its own binlog_format and binlog_row_image",
        "INFO  foreign-key actions: InnoDB applies CASCADE and SET NULL itself and the binlog does not hold",
    ):
        assert line in text, f"missing {line!r} in:\n{text}"
    assert text.splitlines()[-1].startswith("all ")
    assert "checks passed" in text.splitlines()[-1]


def test_foreign_keys_between_captured_tables_are_notes_on_what_silver_does(mariadb, database):
    mariadb.execute(
        f"CREATE TABLE `{database}`.parent (id INT PRIMARY KEY)",
        f"CREATE TABLE `{database}`.child (id INT PRIMARY KEY, p INT, "
        f"CONSTRAINT fk_p FOREIGN KEY (p) REFERENCES `{database}`.parent (id) ON DELETE SET NULL ON UPDATE CASCADE)",
    )
    report = run_preflight(config_for(mariadb, [f"{database}.*"]))
    fk = [c for c in report.checks if c.name == "foreign keys"]
    assert [c.status for c in fk] == [Status.INFO]
    assert f"{database}.child (p) -> {database}.parent (id), ON DELETE SET NULL, ON UPDATE CASCADE" in fk[0].detail
    assert "silver applies them itself" in fk[0].detail


def test_a_cascade_from_a_parent_that_is_not_captured_is_a_warning(mariadb, database):
    mariadb.execute(
        f"CREATE TABLE `{database}`.parent (id INT PRIMARY KEY)",
        f"CREATE TABLE `{database}`.child (id INT PRIMARY KEY, p INT, "
        f"FOREIGN KEY (p) REFERENCES `{database}`.parent (id) ON DELETE CASCADE)",
    )
    report = run_preflight(config_for(mariadb, [f"{database}.child"]))
    assert report.ok
    assert len(report.warnings) == 1
    assert f"{database}.parent is not captured" in report.warnings[0]
    assert f"capture {database}.parent too" in report.warnings[0]


def test_select_granted_per_database_is_enough(mariadb, database, user):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    name, pw = user(f"SELECT ON `{database}`.*", "REPLICATION CLIENT, REPLICATION SLAVE ON *.*")
    assert run_preflight(config_for(mariadb, [f"{database}.*"], user=name, password=pw)).ok


# ---------------------------------------------------------------------------------------
# one problem at a time: each is named exactly, with its fix


def test_statement_binlog_format_is_one_problem_with_its_fix(statement_server):
    assert problems_of(config_for(statement_server, ["shop.*"])) == [
        "binlog_format is STATEMENT, binlake needs ROW (STATEMENT logs SQL statements, not the changed rows): "
        "run SET GLOBAL binlog_format = 'ROW' and put binlog_format=ROW in my.cnf; "
        "sessions already connected keep the old format until they reconnect"
    ]


def test_a_user_without_replication_privileges_gets_the_exact_grant(mariadb, database, user):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    name, pw = user("SELECT ON *.*")
    config = config_for(mariadb, [f"{database}.*"], user=name, password=pw)

    grant = f"GRANT REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO '{name}'@'127.0.0.1'"
    assert problems_of(config) == [
        f"user '{name}'@'127.0.0.1' lacks REPLICATION CLIENT, REPLICATION SLAVE (REPLICATION CLIENT "
        f"(BINLOG MONITOR on MariaDB) to read binlog positions; REPLICATION SLAVE to read the binlog): run {grant}"
    ]
    # The printed fix is the whole fix.
    mariadb.execute(grant)
    assert run_preflight(config).ok


def test_a_user_without_select_gets_the_grant_for_the_database(mariadb, database, user):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    name, pw = user("REPLICATION CLIENT, REPLICATION SLAVE ON *.*")
    config = config_for(mariadb, [f"{database}.*"], user=name, password=pw)
    problems = problems_of(config)
    grant = f"GRANT SELECT ON `{database}`.* TO '{name}'@'127.0.0.1'"
    assert problems[0] == (
        f"user '{name}'@'127.0.0.1' cannot SELECT from database(s) {database} (the snapshot reads them): run {grant}"
    )
    # Without SELECT the tables are invisible, so "no table matches" follows from the same cause.
    assert problems[1:] == [
        f'no table matches source.tables ["{database}.*"]: check the database and table names (patterns are '
        "case-sensitive, db.* or db.prefix_*); tables the user cannot SELECT are not visible to it"
    ]
    mariadb.execute(grant)
    assert run_preflight(config).ok


def test_a_table_without_primary_key_is_named_with_its_fix(mariadb, database):
    mariadb.execute(
        f"CREATE TABLE `{database}`.ok (id INT PRIMARY KEY)", f"CREATE TABLE `{database}`.log (at DATETIME, msg TEXT)"
    )
    assert problems_of(config_for(mariadb, [f"{database}.*"])) == [
        f"table {database}.log has no primary key, so its rows cannot be chunked or merged by key: add one "
        f"(ALTER TABLE `{database}`.`log` ADD PRIMARY KEY (...)), or add a unique NOT NULL key and name it in "
        "source.chunk_keys, or exclude the table (source.exclude)"
    ]


def test_tables_that_would_share_a_lakehouse_table_are_a_problem_and_no_command_captures_them(mariadb, database):
    from binlake.errors import TableNameClash
    from binlake.source.catalog import captured_tables
    from binlake.source.mysql import connect

    mariadb.execute(
        f"CREATE TABLE `{database}`.orders (id INT PRIMARY KEY)",
        f"CREATE TABLE `{database}`.orders__history (id INT PRIMARY KEY)",
    )
    config = config_for(mariadb, [f"{database}.*"])
    clash = (
        f"source tables {database}.orders and {database}.orders__history would share the lakehouse table "
        f"{database}__orders__history (the history table of {database}.orders and the table of "
        f"{database}.orders__history; Unity Catalog names are <db>__<table>, compared without case): exclude one "
        "of them with source.exclude"
    )
    assert problems_of(config) == [clash]
    # What snapshot, capture and verify list their tables with refuses them before writing anything.
    with connect(config.source) as conn, pytest.raises(TableNameClash) as refused:
        captured_tables(conn, config.source)
    assert str(refused.value) == clash
    assert refused.value.exit_code == 2
    fixed = config_for(mariadb, [f"{database}.*"], exclude=[f"{database}.orders__history"])
    assert run_preflight(fixed).ok


def test_a_table_with_a_unique_not_null_key_is_pointed_at_chunk_keys_and_accepted_with_it(mariadb, database):
    mariadb.execute(
        f"CREATE TABLE `{database}`.audit (event_uuid CHAR(36) NOT NULL, msg TEXT, UNIQUE KEY u (event_uuid))"
    )
    table = f"{database}.audit"
    assert problems_of(config_for(mariadb, [table])) == [
        f"table {table} has no primary key, so its rows cannot be chunked or merged by key: "
        f'set source.chunk_keys: {{"{table}": ["event_uuid"]}} (its unique NOT NULL key), or add a primary key'
    ]
    report = run_preflight(config_for(mariadb, [table], chunk_keys={table: ["event_uuid"]}))
    assert f"{table} has no primary key; chunked and merged by source.chunk_keys (event_uuid)" in report.text()


def test_a_chunk_key_must_be_unique_and_not_null(mariadb, database):
    mariadb.execute(
        f"CREATE TABLE `{database}`.a (k INT NOT NULL, v INT)",
        f"CREATE TABLE `{database}`.b (k INT NULL, UNIQUE KEY u (k))",
    )
    a, b = f"{database}.a", f"{database}.b"
    problems = problems_of(config_for(mariadb, [a, b], chunk_keys={a: ["k"], b: ["k"], f"{database}.c": ["x"]}))
    assert problems == [
        f"source.chunk_keys for {a} is (k), but no unique index covers it, so two rows could share a key: run "
        f"CREATE UNIQUE INDEX binlake_chunk_key ON `{database}`.`a` (`k`), or name the columns of an existing unique "
        "index",
        f"source.chunk_keys for {b} includes nullable column(s) k: make them NOT NULL "
        f"(ALTER TABLE `{database}`.`b` MODIFY `k` ... NOT NULL) or choose NOT NULL columns",
    ]


def test_unsupported_column_types_are_listed_per_table(broken_server):
    report = check_source(config_for(broken_server, ["shop.devices"], server_id=100).source)
    types = [c.detail for c in report.checks if c.name == "types"]
    assert types == [
        "table shop.devices has column type(s) binlake does not map: device_uuid (uuid), addr (inet6): "
        'exclude the table (source.exclude: ["shop.devices"]) or change the column type'
    ]


def test_the_server_id_must_differ_from_the_servers_own(mariadb, database):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    # The session server runs with server_id 1; binlake's readers would use 1..8 (and -6 .. 1 overlap too).
    assert problems_of(config_for(mariadb, [f"{database}.*"], server_id=1)) == [
        "source.server_id 1 collides (1 is the source server's own @@server_id; binlake's binlog readers use 1..33): "
        "set source.server_id to an unused number, e.g. 5401 (the server drops one of two binlog readers that "
        "share a server id)"
    ]


def test_the_server_id_range_must_not_hit_a_connected_binlog_reader(mariadb, database, user):
    from pymysqlreplication import BinLogStreamReader

    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    # Listing replicas needs REPLICATION MASTER ADMIN on MariaDB; without it preflight says so.
    name, pw = user("SELECT, REPLICATION CLIENT, REPLICATION SLAVE, REPLICATION MASTER ADMIN ON *.*")
    reader = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": name, "passwd": pw},
        server_id=6003,
        blocking=True,
        report_slave=("other-reader", name, pw, 0),
        is_mariadb=True,
    )
    try:
        reader.fetchone()  # registers and starts the dump; returns the first event of the stream
        problems = problems_of(config_for(mariadb, [f"{database}.*"], user=name, password=pw, server_id=6000))
    finally:
        reader.close()
    assert len(problems) == 1
    assert problems[0].startswith("source.server_id 6000 collides (6003 is the replica registered from other-reader:")
    assert "binlake's binlog readers use 6000..6032" in problems[0]
    assert "e.g. 5401" in problems[0]


def test_without_replica_listing_rights_preflight_says_what_it_could_not_check(mariadb, database):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    report = run_preflight(config_for(mariadb, [f"{database}.*"]))
    assert (
        "INFO  server_id: could not list registered replicas (SHOW SLAVE HOSTS needs REPLICATION MASTER ADMIN): "
        "make sure no replica or other binlog reader of this server uses a server id in 5401..5433"
    ) in report.text()


def test_no_matching_table_names_the_patterns(mariadb, database):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    assert problems_of(config_for(mariadb, [f"{database}.nope_*", "nodb.*"], exclude=["nodb.x"])) == [
        f'no table matches source.tables ["{database}.nope_*", "nodb.*"] minus exclude ["nodb.x"]: check the '
        "database and table names (patterns are case-sensitive, db.* or db.prefix_*); tables the user cannot "
        "SELECT are not visible to it"
    ]


def test_a_short_binlog_expiry_is_a_warning_not_a_problem(statement_server):
    statement_server.execute("SET GLOBAL binlog_expire_logs_seconds = 7200")
    try:
        with pytest.raises(PreflightError) as info:
            run_preflight(config_for(statement_server, ["shop.*"]))
    finally:
        statement_server.execute("SET GLOBAL binlog_expire_logs_seconds = 0")
    report = info.value.report
    assert len(report.problems) == 1  # only binlog_format
    assert report.warnings == [
        "binlogs expire after 2 hour(s) (oldest binlog on the server: mysql-bin.000001): a capture stopped for "
        "longer must re-snapshot; raise binlog_expire_logs_seconds to at least 604800 (7 days) unless capture "
        "runs continuously"
    ]


# ---------------------------------------------------------------------------------------
# everything at once


def test_every_problem_is_reported_together(broken_server):
    problems = problems_of(config_for(broken_server, ["shop.*"], server_id=5401))
    starts = [p.split(",")[0].split(":")[0] for p in problems]
    assert starts == [
        "log_bin is OFF",
        "binlog_format is MIXED",
        "binlog_row_image is MINIMAL",
        "binlog_row_metadata is MINIMAL",
        "source.server_id 5401 collides (5401 is the source server's own @@server_id; binlake's binlog readers use "
        "5401..5433)",
        "table shop.devices has column type(s) binlake does not map",
        "table shop.events has no primary key",
    ], problems
    assert "put binlog_row_image=FULL in my.cnf" in problems[2]
    assert "decoded as UNKNOWN_COL0" in problems[3]
    assert "e.g. 5434" in problems[4]  # the next free block of READER_IDS ids


# ---------------------------------------------------------------------------------------
# connection failures: one line each, no traceback


def test_a_wrong_port_is_one_line_naming_host_and_port(mariadb):
    from binlake.devtools.mariadb import free_port

    port = free_port()
    with pytest.raises(SourceConnectionError) as info:
        run_preflight(config_for(mariadb, ["x.*"], port=port))
    assert str(info.value) == (
        f"cannot reach MySQL at 127.0.0.1:{port}: check source.host and source.port, and that the server is running"
    )


def test_a_wrong_password_is_one_line_naming_the_user(mariadb):
    with pytest.raises(SourceConnectionError) as info:
        run_preflight(config_for(mariadb, ["x.*"], password="not-the-password"))
    assert str(info.value) == (
        f"MySQL at 127.0.0.1:{mariadb.port} refused user 'cdc': check source.user and source.password"
    )
    assert "not-the-password" not in str(info.value)


def test_an_unreachable_host_is_one_line(mariadb):
    # TEST-NET-1 (RFC 5737) is never routed: the connect times out.
    with pytest.raises(SourceConnectionError) as info:
        run_preflight(config_for(mariadb, ["x.*"], host="192.0.2.1", port=3306, connect_timeout=1))
    assert str(info.value).startswith("cannot reach MySQL at 192.0.2.1:3306")


# ---------------------------------------------------------------------------------------
# the command


def _cli(tmp_path, server: LocalMariaDB, tables, **source):
    doc = {
        "source": {
            "host": "127.0.0.1",
            "port": server.port,
            "user": "cdc",
            "password": "${PF_PASSWORD}",
            "server_id": 5401,
            "tables": tables,
            **source,
        },
        "lakehouse": {"path": str(tmp_path / "lakehouse")},
    }
    path = tmp_path / f"binlake-{uuid.uuid4().hex[:6]}.yml"
    path.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "PF_PASSWORD": server.cdc_password, "CI": "1"}
    return subprocess.run(
        [BINLAKE, "--config", str(path), "preflight"], capture_output=True, text=True, env=env, timeout=120
    )


def test_cli_exits_0_and_prints_the_checks(mariadb, database, tmp_path):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    res = _cli(tmp_path, mariadb, [f"{database}.*"])
    assert res.returncode == 0, res.stderr
    assert "OK    binlog_format: ROW" in res.stdout
    assert "checks passed" in res.stdout.splitlines()[-1]


def test_cli_exits_4_with_every_problem_on_one_stderr_line(broken_server, tmp_path):
    res = _cli(tmp_path, broken_server, ["shop.*"])
    assert res.returncode == 4
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: preflight found 7 problems: log_bin is OFF")
    assert "binlog_format is MIXED" in lines[0]
    assert "table shop.events has no primary key" in lines[0]
    assert res.stdout == ""


def test_cli_exits_3_on_a_connection_failure(mariadb, tmp_path):
    from binlake.devtools.mariadb import free_port

    server = LocalMariaDB(mariadb.datadir, port=free_port())  # same password, nothing listening on the port
    res = _cli(tmp_path, server, ["x.*"])
    assert res.returncode == 3
    assert res.stderr.strip().splitlines() == [
        f"error: cannot reach MySQL at 127.0.0.1:{server.port}: check source.host and source.port, "
        "and that the server is running"
    ]


def test_privileges_held_through_the_default_role_count(mariadb, database, user):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    role = f"r_{database}"
    mariadb.execute(f"CREATE ROLE `{role}`", f"GRANT REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO `{role}`")
    try:
        name, pw = user(f"SELECT ON `{database}`.*", f"`{role}`")
        config = config_for(mariadb, [f"{database}.*"], user=name, password=pw)
        # Granted but not enabled at login: not usable, so not counted, and the message says why.
        [problem] = problems_of(config)
        assert problem.endswith("(privileges held through roles are not counted: grant them to the user itself)")
        mariadb.execute(f"SET DEFAULT ROLE `{role}` FOR '{name}'@'127.0.0.1'")
        assert run_preflight(config).ok
    finally:
        mariadb.execute(f"DROP ROLE `{role}`")


def test_column_rules_are_checked_against_the_tables_they_match(mariadb, database):
    mariadb.execute(f"CREATE TABLE `{database}`.people (id INT PRIMARY KEY, email VARCHAR(60), ssn CHAR(11))")
    people = f"{database}.people"
    problems = problems_of(
        config_for(
            mariadb,
            [f"{database}.*"],
            columns={
                people: {"exclude": ["ssn", "phone"], "mask": {"id": "hash"}},
                f"{database}.gone": {"exclude": ["x"]},
            },
            mask_salt="s",
        )
    )
    assert problems == [
        f"source.columns[{people!r}] names phone, which {people} does not have: its columns are id, email, ssn"
    ]
    problems = problems_of(config_for(mariadb, [people], columns={people: {"mask": {"id": "hash"}}}, mask_salt="s"))
    assert problems == [
        f"source.columns[{people!r}] masks key column id of {people}: that changes what rows join on; "
        "add mask_key: true to the rule if that is intended"
    ]
    report = run_preflight(
        config_for(mariadb, [people], columns={people: {"exclude": ["ssn"]}, f"{database}.gone": {"exclude": ["x"]}})
    )
    assert f"{people}: column rule {people!r} fits" in report.text()
    assert (
        f"source.columns entry '{database}.gone' matches no captured table: remove it or fix the pattern"
        in report.text()
    )
