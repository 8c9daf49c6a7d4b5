"""The block reader of text-protocol rows gives exactly what pymysql's own row parser gives.

Every length encoding the protocol has (1-byte, 0xFC, 0xFD lengths, NULL, empty), text and
binary columns, blocks that end inside a packet, a row over 16 MiB (split packets), an
error in the middle of a result, and the connection staying usable afterwards.
"""

from __future__ import annotations

import pymysql
import pymysql.converters
import pymysql.cursors
import pytest

from binlake.source import textrows
from binlake.source.mysql import connect


def raw_rows(conn, sql: str) -> list[tuple]:
    """The rows as pymysql hands them to its converters: text as str, binary as bytes."""
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(sql)
        return list(cur)


def block_rows(conn, sql: str, max_rows: int) -> list[tuple]:
    out = []
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(sql)
        for block in textrows.blocks(cur, max_rows):
            width = len(block.binary)
            values = [block.column(j).to_pylist() for j in range(width)]
            out += list(zip(*values))
            everything = block.items().to_pylist() if not any(block.binary) else None
            if everything is not None:  # the all-columns path agrees with the per-column one
                assert everything == [v for row in zip(*values) for v in row]
    return out


@pytest.fixture
def raw_conn(make_config, database):
    config = make_config([f"{database}.*"])
    conn = connect(config.source, database, conv=dict(pymysql.converters.encoders))
    yield conn
    conn.close()


def test_blocks_equal_pymysql_rows_for_every_length_encoding(mariadb, database, raw_conn):
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(100), l MEDIUMTEXT, b BLOB, d DATE, n DECIMAL(12,3))",
        "INSERT INTO t VALUES (1, 'a', REPEAT('x', 250), x'00ff', '2024-01-02', 1.5), "
        "(2, NULL, REPEAT('y', 251), NULL, NULL, NULL), (3, '', REPEAT('\u00e9', 40000), x'', '0000-00-00', -0.001), "
        "(4, '\U0001f600 \u4e2d', REPEAT('z', 70000), REPEAT(x'fe', 300), '1000-01-01', 0)",
        "INSERT INTO t SELECT seq + 10, CONCAT('v', seq), IF(seq % 7 = 0, NULL, REPEAT('q', seq % 300)), "
        "UNHEX(HEX(seq)), '2020-02-29', seq / 8 FROM seq_1_to_3000",
        database=database,
    )
    sql = "SELECT * FROM t ORDER BY id"
    expected = raw_rows(raw_conn, sql)
    for max_rows in (1, 7, 1000, 100_000):
        assert block_rows(raw_conn, sql, max_rows) == expected
    # The connection is left ready for the next statement, as after pymysql's own reading,
    # also when the reader stops after the first block.
    assert raw_rows(raw_conn, "SELECT 42") == [("42",)]
    with raw_conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(sql)
        reading = textrows.blocks(cur, 100)
        assert next(reading).rows == 100
        reading.close()
    assert raw_rows(raw_conn, "SELECT 43") == [("43",)]


def test_empty_result_and_row_over_16_mib(mariadb, database, raw_conn):
    mariadb.execute("CREATE TABLE big (id INT PRIMARY KEY, v LONGTEXT)", database=database)
    assert block_rows(raw_conn, "SELECT * FROM big", 10) == []
    mariadb.execute("INSERT INTO big VALUES (1, 'a'), (2, REPEAT('b', 17000000)), (3, NULL)", database=database)
    got = block_rows(raw_conn, "SELECT * FROM big ORDER BY id", 10)
    assert got == raw_rows(raw_conn, "SELECT * FROM big ORDER BY id")
    assert [len(v or "") for _, v in got] == [1, 17_000_000, 0]
    assert raw_rows(raw_conn, "SELECT 1") == [("1",)]


def test_an_error_inside_the_result_is_raised_like_pymysql_does(raw_conn):
    # The server gives up after a few rows have been sent: an error packet mid-result.
    sql = "SET STATEMENT max_statement_time = 0.3 FOR SELECT seq, SLEEP(0.01) FROM seq_1_to_1000"
    errors = []
    for read in (lambda cur: list(cur), lambda cur: list(textrows.blocks(cur, 5))):
        with raw_conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(sql)
            with pytest.raises(pymysql.err.OperationalError) as info:
                read(cur)
            errors.append(info.value.args[0])
        assert raw_rows(raw_conn, "SELECT 1") == [("1",)]
    assert errors[0] == errors[1]
