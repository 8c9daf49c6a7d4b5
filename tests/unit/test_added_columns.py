"""Reading an added column's definition from ALTER TABLE text, and which defaults binlake can
know from it. Expected values are MySQL's manual's rules (DECIMAL rounds half away from zero,
CHAR drops trailing spaces, BINARY(n) pads with 0x00, an implicit default is the type's zero);
tests/integration/test_add_column_default.py checks the same against MariaDB."""

from __future__ import annotations

from binlake.contract.added_columns import added_definitions, backfill
from binlake.contract.types import column_from_information_schema as col


def test_each_added_column_is_found_and_other_clauses_are_not():
    ddl = (
        "ALTER TABLE `d`.`t` ADD COLUMN `a` INT DEFAULT 1, ADD INDEX ix (v), ADD b VARCHAR(3) NOT NULL, "
        "ADD COLUMN IF NOT EXISTS c INT, ADD (d INT DEFAULT (4), e CHAR(2)), MODIFY v BIGINT, "
        "ADD CONSTRAINT k CHECK (v > 0)"
    )
    got = added_definitions(ddl)
    assert sorted(got) == ["a", "b", "c", "d", "e"]
    assert got["a"] == ["INT", "DEFAULT", "1"]
    assert got["d"] == ["INT", "DEFAULT", "(4)"]
    assert added_definitions("CREATE TABLE t (a INT)") == {}


def _fill(column, definition: str, epoch: int | None = None):
    """What rows older than ``ALTER TABLE t ADD COLUMN x <definition>`` hold in ``x``."""
    return backfill(column, added_definitions(f"ALTER TABLE t ADD COLUMN x {definition}")["x"], epoch)


DEC = col("x", "decimal", "decimal(6,2)", 6, 2)
INT = col("x", "int", "int(11)", 10)


def test_literals_are_converted_as_the_server_converts_them():
    assert _fill(DEC, "DECIMAL(6,2) DEFAULT 1.005").text == "1.01"
    assert _fill(DEC, "DECIMAL(6,2) DEFAULT -1.005").text == "-1.01"
    assert _fill(col("x", "char", "char(5)"), "CHAR(5) DEFAULT 'ab  '").text == "ab"
    assert _fill(INT, "INT DEFAULT '12'").text == "12"
    assert _fill(INT, "INT DEFAULT (5)").text == "5"
    assert _fill(col("x", "enum", "enum('x','y')"), "ENUM('x','y') DEFAULT 'Y'").text == "y"
    assert _fill(INT, "INT DEFAULT NULL") == _fill(INT, "INT") == _fill(INT, "INT NULL")
    assert _fill(INT, "INT DEFAULT NULL").text is None


def test_not_null_without_default_is_the_types_implicit_default():
    def implicit(data_type, column_type, *rest):
        return _fill(col("x", data_type, column_type, *rest, nullable=False), f"{column_type} NOT NULL")

    assert implicit("int", "int(11)", 10).text == "0"
    assert implicit("varchar", "varchar(5)").text == ""
    assert implicit("enum", "enum('p','q')").text == "p"
    assert implicit("time", "time", None, None, 0).text == "00:00:00"
    assert implicit("timestamp", "timestamp", None, None, 0).unknown  # explicit_defaults_for_timestamp decides


def test_current_timestamp_is_the_alter_s_second_and_what_the_binlog_cannot_tell_is_unknown():
    ts = col("x", "timestamp", "timestamp", None, None, 0)
    assert _fill(ts, "TIMESTAMP DEFAULT CURRENT_TIMESTAMP", 86400).text == "1970-01-02T00:00:00.000000Z"
    ts6 = col("x", "timestamp", "timestamp(6)", None, None, 6)
    assert "to the second only" in _fill(ts6, "TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6)", 1).unknown
    dtm = col("x", "datetime", "datetime", None, None, 0)
    assert "time zone" in _fill(dtm, "DATETIME DEFAULT NOW()", 1).unknown
    assert "expression" in _fill(INT, "INT DEFAULT (v * 2)").unknown
    assert _fill(INT, "INT DEFAULT (UUID_SHORT())").unknown
    assert _fill(INT, "INT NOT NULL AUTO_INCREMENT").unknown
    assert backfill(INT, None, None).unknown
