"""Preflight's checks of the server settings that change how rows are written, MySQL's and
MariaDB's, from the variables a server reports (the MariaDB server of the integration tests
cannot set MySQL's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.source.preflight import (
    PreflightReport,
    Status,
    check_column_types,
    check_login_plugin,
    check_server_options,
    foreign_keys_logged,
)

DATA = Path(__file__).parent.parent / "data" / "mysql-binlogs"


def checks(variables: dict[str, str], mariadb: bool = False) -> dict[str, tuple[Status, str]]:
    report = PreflightReport()
    check_server_options(report, variables, mariadb)
    return {c.name: (c.status, c.detail) for c in report.checks}


def test_sessions_that_can_override_the_binlog_settings_are_named_with_the_privilege_that_allows_it():
    mysql = checks({})["session overrides"]
    assert mysql[0] is Status.INFO
    assert "SESSION_VARIABLES_ADMIN" in mysql[1]
    assert "SYSTEM_VARIABLES_ADMIN" in mysql[1]
    assert "BINLOG_ADMIN" in checks({}, mariadb=True)["session overrides"][1]


def test_partial_json_updates_and_compressed_transactions_are_read_not_refused():
    found = checks({"binlog_row_value_options": "PARTIAL_JSON", "binlog_transaction_compression": "ON"})
    assert found["binlog_row_value_options"][0] is Status.INFO
    assert "diffs" in found["binlog_row_value_options"][1]
    assert found["binlog_transaction_compression"] == (
        Status.OK,
        "ON: each transaction is one zstd TRANSACTION_PAYLOAD_EVENT, which capture decompresses",
    )
    assert checks({"binlog_row_value_options": ""})["binlog_row_value_options"][0] is Status.OK


def test_mariadb_compressed_binlog_events_are_refused_with_the_fix():
    status, detail = checks({"log_bin_compress": "ON"}, mariadb=True)["log_bin_compress"]
    assert status is Status.FAIL
    assert "SET GLOBAL log_bin_compress = OFF" in detail
    assert "log_bin_compress" not in checks({"log_bin_compress": "OFF"}, mariadb=True)


def test_mysql_9_6_logs_foreign_key_actions_unless_innodb_applies_them():
    assert foreign_keys_logged({"innodb_native_foreign_keys": "OFF"}, mariadb=False)
    assert not foreign_keys_logged({"innodb_native_foreign_keys": "ON"}, mariadb=False)
    assert not foreign_keys_logged({}, mariadb=False), "before 9.6 InnoDB applies them, unlogged"
    assert not foreign_keys_logged({}, mariadb=True)


@pytest.mark.parametrize(
    ("variables", "mariadb", "says"),
    [
        ({"innodb_native_foreign_keys": "OFF"}, False, "innodb_native_foreign_keys=OFF: the server (MySQL 9.6+)"),
        ({"innodb_native_foreign_keys": "ON"}, False, "innodb_native_foreign_keys=ON: InnoDB applies"),
        ({}, False, "InnoDB applies CASCADE and SET NULL itself and the binlog does not hold"),
        ({}, True, "InnoDB applies CASCADE and SET NULL itself and the binlog does not hold"),
    ],
)
def test_preflight_says_which_foreign_key_mode_the_server_logs(variables, mariadb, says):
    # One line whatever the tables: the mode is the server's, not a table's.
    status, detail = checks(variables, mariadb)["foreign-key actions"]
    assert status is Status.INFO
    assert detail.startswith(says)
    assert ("logs the rows they change" in detail) is foreign_keys_logged(variables, mariadb)


def login(create_user: str, tls: bool = False) -> tuple[Status, str]:
    report = PreflightReport()
    check_login_plugin(report, create_user, tls)
    ((check,),) = [[c for c in report.checks if c.name == "authentication"]]
    return check.status, check.detail


def test_mysql_8s_default_login_is_named_with_how_binlake_logs_in():
    # MySQL 8.0.26's own text for it, from a QUERY event of tests/data/mysql-binlogs.
    data = (DATA / "binlog-invisible-columns.000001").read_bytes()
    at = data.index(b"ALTER USER")
    text = data[at : at + 80].decode("latin-1")
    assert login(text) == (
        Status.OK,
        "caching_sha2_password: binlake logs in with the server's RSA public key (the cryptography package)",
    )
    assert login(text, tls=True) == (Status.OK, "caching_sha2_password: binlake logs in over TLS")


@pytest.mark.parametrize(
    ("create_user", "status", "plugin"),
    [
        ("CREATE USER `cdc`@`%` IDENTIFIED WITH 'mysql_native_password' AS '*2470C0C06DEE42FD1618BB9'", Status.OK, ""),
        ("CREATE USER `cdc`@`%` IDENTIFIED WITH 'authentication_ldap_sasl'", Status.WARN, "authentication_ldap_sasl"),
        ("CREATE USER `cdc`@`%` IDENTIFIED VIA ed25519 USING PASSWORD('x')", Status.OK, ""),
        ("CREATE USER `cdc`@`%` IDENTIFIED BY PASSWORD '*2470C0C06DEE42FD'", Status.OK, ""),
    ],
)
def test_every_login_plugin_is_reported_and_one_pymysql_may_not_speak_is_a_warning(create_user, status, plugin):
    found, detail = login(create_user)
    assert found is status
    if status is Status.WARN:
        assert f"authenticates with {plugin}" in detail
        assert "use caching_sha2_password" in detail


def column(name: str, data_type: str, column_type: str) -> dict:
    return {
        "COLUMN_NAME": name,
        "DATA_TYPE": data_type,
        "COLUMN_TYPE": column_type,
        "NUMERIC_PRECISION": 20 if data_type == "bigint" else None,
        "NUMERIC_SCALE": 0 if data_type == "bigint" else None,
        "DATETIME_PRECISION": None,
    }


def test_vector_columns_of_a_captured_table_are_named_with_what_they_become():
    # vector.binlog's dtb.bar (MySQL 9.0.1), as information_schema.COLUMNS lists it.
    report = PreflightReport()
    rows = [
        column("id", "bigint", "bigint unsigned"),
        column("vector_column", "vector", "vector(2)"),
        column("foo", "text", "text"),
        column("vector_column2", "vector", "vector(4)"),
    ]
    assert check_column_types(report, "dtb", "bar", rows)
    assert [(c.status, c.detail) for c in report.checks] == [
        (
            Status.INFO,
            "dtb.bar: VECTOR column(s) vector_column (vector(2)), vector_column2 (vector(4)) are mirrored as BINARY, "
            "their float32 values little-endian as MySQL stores them (VECTOR_TO_STRING reads them back)",
        )
    ]
    plain = PreflightReport()
    assert check_column_types(plain, "dtb", "t", [column("id", "bigint", "bigint")])
    assert plain.checks == []
