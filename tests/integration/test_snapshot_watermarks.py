"""A snapshot chunk's low watermark is exact: every transaction that ends at or before it is
in the chunk's rows, and on MariaDB none that ends after it.

A transaction reaches the binlog before the storage engine makes it visible, so reading
``SHOW MASTER STATUS`` and then SELECTing can miss a transaction that ended before the
position read; its change then sorts below the snapshot row and loses for good. This
stresses the snapshot reader itself with many short concurrent transactions on the chunk's
keys and checks every read against the values the binlog says were committed at its
watermark.
"""

from __future__ import annotations

import bisect
import random
import threading
import time

import pymysql
import pytest

from binlake.bronze.snapshot_source import ChunkPartition, read_chunk, reader_options, text_column
from binlake.contract.position import BinlogPosition
from binlake.contract.schemas import SNAPSHOT_CHUNK_STATS
from binlake.source.catalog import table_schema
from binlake.source.mysql import connect, master_status

KEYS = 8
WRITERS = 8
SECONDS = 8.0
# At least this many reads, however long a busy box takes for them (up to a minute more).
MIN_READS = 201


def _writer(mariadb, db: str, stop: threading.Event, seed: int) -> None:
    rnd = random.Random(seed)
    conn = mariadb.root_connection(database=db)
    conn.autocommit(True)
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (rnd.randint(1, KEYS),))
    finally:
        conn.close()


def _reads(config, db: str, schema, stop_at: float) -> list[tuple[BinlogPosition, BinlogPosition, dict[int, int]]]:
    """Read the whole table as one chunk again and again: (low, high watermark, id -> v)."""
    options = reader_options(config.source, [], {schema.name: schema.to_json()}, "stress", stored=schema)
    part = ChunkPartition("s", db, "t", 0, None, None, schema.version())
    names = [c.name for c in schema.columns]
    ids, vs = (text_column(names.index(c)) for c in ("id", "v"))
    out: list = []
    while time.monotonic() < stop_at or (len(out) < MIN_READS and time.monotonic() < stop_at + 60):
        values: dict[int, int] = {}
        stats: dict = {}
        for batch in read_chunk(options, part):
            marker = batch.column(SNAPSHOT_CHUNK_STATS).to_pylist()
            for key, v, st in zip(batch.column(ids).to_pylist(), batch.column(vs).to_pylist(), marker):
                if st is None:
                    values[int(key)] = int(v)
                else:
                    stats = dict(st)
        low = BinlogPosition(stats["lw_file"], int(stats["lw_pos"]))
        high = BinlogPosition(stats["hw_file"], int(stats["hw_pos"]))
        out.append((low, high, values))
    return out


def _committed_values(config, start: BinlogPosition, db: str) -> list[tuple[tuple[int, int], int, int]]:
    """From the binlog: ((file index, end position of the transaction), id, v after it)."""
    from library_oracle import library_stream
    from pymysqlreplication.event import XidEvent
    from pymysqlreplication.row_event import UpdateRowsEvent

    stream = library_stream(
        config.source, config.source.server_id + 77, start, only_events=[UpdateRowsEvent, XidEvent], only_schemas=[db]
    )
    out, pending = [], []
    try:
        for event in stream:
            if isinstance(event, UpdateRowsEvent):
                pending += [(r["after_values"]["id"], r["after_values"]["v"]) for r in event.rows]
            elif isinstance(event, XidEvent):
                end = BinlogPosition(stream.log_file, event.packet.log_pos).key()
                out += [(end, k, v) for k, v in pending]
                pending = []
    finally:
        stream.close()
    return out


def test_every_read_holds_exactly_what_was_committed_at_its_watermark(mariadb, database, make_config):
    db = database
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)",
        "INSERT INTO t VALUES " + ",".join(f"({i}, 0)" for i in range(1, KEYS + 1)),
        database=db,
    )
    config = make_config([f"{db}.t"])
    with connect(config.source) as conn:
        schema = table_schema(conn, config.source, db, "t")
        start = master_status(conn)

    stop = threading.Event()
    writers = [threading.Thread(target=_writer, args=(mariadb, db, stop, i), daemon=True) for i in range(WRITERS)]
    for w in writers:
        w.start()
    try:
        time.sleep(0.5)
        reads = _reads(config, db, schema, time.monotonic() + SECONDS)
    finally:
        stop.set()
        for w in writers:
            w.join(timeout=30)

    history = sorted(_committed_values(config, start, db))
    assert len(reads) > 200, (len(reads), len(history))
    assert len(history) > 5_000, (len(reads), len(history))

    by_key: dict[int, tuple[list, list]] = {}
    for end, k, v in history:
        ends, vs = by_key.setdefault(k, ([], []))
        ends.append(end)
        vs.append(v)

    def value_at(key: int, at: tuple[int, int]) -> int:
        """v after the last transaction on ``key`` that ended at or before ``at``."""
        ends, vs = by_key.get(key, ([], []))
        i = bisect.bisect_right(ends, at)
        return vs[i - 1] if i else 0

    stale, early = [], []
    for low, high, values in reads:
        for key, v in values.items():
            if v < value_at(key, low.key()):
                stale.append((str(low), key, v, value_at(key, low.key())))
            if v > value_at(key, high.key()):
                early.append((str(high), key, v))
    assert stale == [], f"{len(stale)} row(s) missed a transaction that ended before their low watermark: {stale[:5]}"
    assert early == [], f"{len(early)} row(s) saw a transaction that ended after their high watermark: {early[:5]}"
    # On MariaDB the read names the exact position its snapshot sees.
    assert all(low == high for low, high, _ in reads)


def test_a_consistent_read_ends_its_transaction(mariadb, database, make_config):
    from binlake.source.mysql import consistent_read

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=database)
    config = make_config([f"{database}.t"])
    with connect(config.source) as conn:
        with consistent_read(conn) as read, conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{database}`.t")
        assert read.exact
        assert read.low == read.high
        with conn.cursor() as cur:
            cur.execute("SELECT @@in_transaction")
            assert cur.fetchone()[0] == 0

    def query_in_a_consistent_read():
        with connect(config.source) as conn, consistent_read(conn), conn.cursor() as cur:
            cur.execute("SELECT * FROM no_such_table")

    with pytest.raises(pymysql.err.MySQLError):
        query_in_a_consistent_read()
