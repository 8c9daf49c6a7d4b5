"""Preflight's checks of the server settings that change how rows are written, MySQL's and
MariaDB's, from the variables a server reports (the MariaDB server of the integration tests
cannot set MySQL's)."""

from __future__ import annotations

from binlake.source.preflight import PreflightReport, Status, check_server_options, foreign_keys_logged


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
