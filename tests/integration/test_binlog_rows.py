"""binlake's row decoder (binlake.source.binlog.rows) gives exactly the reference's texts.

Capture decodes row images straight from bytes to canonical texts; python-mysql-replication,
a decoder written separately, is the reference it must equal (its values encoded by
tests/library_oracle.py), value for value, on every type. Random rows (seeded) plus edge
values, inserted, updated and deleted; the last image of each surviving row must also equal
what a SELECT reads.
"""

from __future__ import annotations

import random

import pyarrow as pa
from library_oracle import encode_image, library_stream

from binlake.bronze.binlog_reader import ReadRange, read_range
from binlake.contract.position import BinlogPosition
from binlake.contract.sql import qualified
from binlake.contract.types import encode_value
from binlake.source.catalog import table_schema
from binlake.source.mysql import connect, master_status, query

ENUM_LABELS = [f"l{i}" for i in range(300)]  # more than 255 labels: a two-byte ENUM
SET_LABELS = [f"s{i}" for i in range(20)]  # a three-byte SET

COLUMNS = [
    ("ti", "TINYINT"),
    ("tiu", "TINYINT UNSIGNED"),
    ("si", "SMALLINT"),
    ("siu", "SMALLINT UNSIGNED"),
    ("mi", "MEDIUMINT"),
    ("miu", "MEDIUMINT UNSIGNED"),
    ("i", "INT"),
    ("iu", "INT UNSIGNED"),
    ("bi", "BIGINT"),
    ("biu", "BIGINT UNSIGNED"),
    ("d0", "DECIMAL(5,0)"),
    ("d1", "DECIMAL(10,2)"),
    ("d2", "DECIMAL(18,9)"),
    ("d3", "DECIMAL(38,10)"),
    ("d4", "DECIMAL(65,30)"),
    ("d5", "DECIMAL(4,4)"),
    ("d6", "DECIMAL(20,19)"),
    ("f", "FLOAT"),
    ("db", "DOUBLE"),
    ("dt", "DATE"),
    ("dtm0", "DATETIME"),
    ("dtm1", "DATETIME(1)"),
    ("dtm3", "DATETIME(3)"),
    ("dtm6", "DATETIME(6)"),
    ("ts0", "TIMESTAMP NULL"),
    ("ts2", "TIMESTAMP(2) NULL"),
    ("ts5", "TIMESTAMP(5) NULL"),
    *[(f"tm{p}", f"TIME({p})") for p in range(7)],
    ("y", "YEAR"),
    ("c", "CHAR(5)"),
    ("vc", "VARCHAR(100)"),
    ("vl", "VARCHAR(300)"),
    ("cl", "CHAR(10) CHARACTER SET latin1"),
    ("tx", "TEXT"),
    ("mt", "MEDIUMTEXT"),
    ("e", "ENUM('a','b c','it''s')"),
    ("e2", "ENUM(" + ",".join(f"'{x}'" for x in ENUM_LABELS) + ")"),
    ("st", "SET('x','y','z')"),
    ("st2", "SET(" + ",".join(f"'{x}'" for x in SET_LABELS) + ")"),
    ("bn", "BINARY(4)"),
    ("vb", "VARBINARY(10)"),
    ("bl", "BLOB"),
    ("b1", "BIT(1)"),
    ("b10", "BIT(10)"),
    ("b64", "BIT(64)"),
]

TEXT = "abc xyz 0123 é ü ß 中文 \U0001f600"
LATIN1 = "abc xyz é ü ß"


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n)) if n else ""


def _value(rng: random.Random, name: str, sql_type: str) -> str:  # noqa: C901 (one branch per MySQL column type)
    """A random SQL literal for the column (NULL about one time in eight)."""
    if rng.random() < 0.125:
        return "NULL"
    t = sql_type.split("(")[0].split(" ")[0]
    unsigned = "UNSIGNED" in sql_type
    bits = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INT": 32, "BIGINT": 64}
    if t in bits:
        b = bits[t]
        lo, hi = (0, 2**b - 1) if unsigned else (-(2 ** (b - 1)), 2 ** (b - 1) - 1)
        return str(
            rng.choice(
                [
                    lo,
                    hi,
                    0,
                    -1 if lo < 0 else 1,
                    rng.randint(lo, hi),
                    rng.randint(-100, 100) if lo < 0 else rng.randint(0, 100),
                ]
            )
        )
    if t == "DECIMAL":
        p, s = (int(x) for x in sql_type[sql_type.index("(") + 1 : -1].split(","))
        whole = _digits(rng, rng.randint(0, p - s)).lstrip("0") or "0"
        frac = _digits(rng, rng.randint(0, s))
        return ("-" if rng.random() < 0.4 else "") + whole + ("." + frac if frac else "")
    if t == "FLOAT":
        return repr(rng.choice([0.0, -1.5, 3.4e38, 1.17e-38, rng.uniform(-1e6, 1e6)]))
    if t == "DOUBLE":
        return repr(rng.choice([0.0, -0.1, 1.7976931348623157e308, 2.2250738585072014e-308, rng.uniform(-1e12, 1e12)]))
    if t == "DATE":
        return rng.choice(
            [
                "'0000-00-00'",
                "'1000-01-01'",
                "'9999-12-31'",
                "'2024-02-29'",
                f"'{rng.randint(1000, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}'",
            ]
        )
    fsp = int(sql_type[sql_type.index("(") + 1]) if t in ("DATETIME", "TIMESTAMP", "TIME") and "(" in sql_type else 0
    frac = ("." + _digits(rng, fsp)) if fsp else ""
    if t == "DATETIME":
        return rng.choice(
            [
                "'0000-00-00 00:00:00'",
                f"'1000-01-01 00:00:00{frac}'",
                f"'9999-12-31 23:59:59{frac}'",
                f"'{rng.randint(1000, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}'",
            ]
        )
    if t == "TIMESTAMP":
        return rng.choice(
            [
                "'0000-00-00 00:00:00'",
                f"'1970-01-01 00:00:01{frac}'",
                f"'2038-01-19 03:14:07{frac}'",
                f"'{rng.randint(1971, 2037)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}'",
            ]
        )
    if t == "TIME":
        sign = "-" if rng.random() < 0.5 else ""
        hours = rng.choice([0, 838, rng.randint(0, 838)])
        text = f"{hours:02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        if hours == 838:
            text = "838:59:59"
        if fsp:
            # Fractions near 0 and 1 are where negative values store a complement.
            text += "." + rng.choice(["0" * (fsp - 1) + "1", "9" * fsp, "5" + "0" * (fsp - 1), _digits(rng, fsp)])
        return f"'{sign}{text}'"
    if t == "YEAR":
        return str(rng.choice([0, 1901, 2155, rng.randint(1901, 2155)]))
    if t in ("CHAR", "VARCHAR", "TEXT", "MEDIUMTEXT"):
        size = {"c": 5, "vc": 100, "vl": 300, "cl": 10}.get(name, 500)
        alphabet = LATIN1 if name == "cl" else TEXT
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, size))).rstrip(" ")
        return "'" + text.replace("'", "''") + "'"
    if t == "ENUM":
        labels = ENUM_LABELS if name == "e2" else ["a", "b c", "it''s"]
        return "'" + rng.choice(labels) + "'"
    if t == "SET":
        labels = SET_LABELS if name == "st2" else ["x", "y", "z"]
        return "'" + ",".join(rng.sample(labels, rng.randint(0, len(labels)))) + "'"
    if t in ("BINARY", "VARBINARY", "BLOB"):
        size = {"bn": 4, "vb": 10}.get(name, 40)
        data = bytes(rng.choice([0, 0, 255, rng.randint(0, 255)]) for _ in range(rng.randint(0, size)))
        return f"x'{data.hex()}'"
    if t == "BIT":
        b = int(sql_type[sql_type.index("(") + 1 : -1])
        return str(rng.choice([0, 2**b - 1, rng.randint(0, 2**b - 1)]))
    raise AssertionError(sql_type)


def _read(config, start: BinlogPosition, end: BinlogPosition) -> list[tuple]:
    """binlake's change-log rows of the range: (op, pos, row, before, after)."""
    rng = ReadRange(index=0, file=start.file, start_pos=start.pos, end_pos=end.pos, last=True)
    table = pa.Table.from_batches(list(read_range(config.source, rng)))
    out = []
    for r in table.to_pylist():
        if r["op"] in ("insert", "update", "delete"):
            image = lambda m: None if m is None else dict(m)  # noqa: E731
            out.append((r["op"], r["pos"], r["row"], image(r["before"]), image(r["after"])))
    return out


def _reference(config, schema, start: BinlogPosition, end: BinlogPosition) -> list[tuple]:
    """The same rows as python-mysql-replication decodes them."""
    from pymysqlreplication.constants import FIELD_TYPE
    from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

    cols = {c.name: c for c in schema.columns}
    stream = library_stream(
        config.source,
        config.source.server_id,
        start,
        only_events=[TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    out = []
    try:
        for event in stream:
            if event.packet.log_pos > end.pos or stream.log_file != start.file:
                break
            if isinstance(event, TableMapEvent):
                pads = {
                    c.name: c.max_length
                    for c in event.columns
                    if c.type == FIELD_TYPE.STRING and getattr(c, "collation_name", None) == "binary"
                }
                continue
            for i, row in enumerate(event.rows):
                if isinstance(event, WriteRowsEvent):
                    item = ("insert", None, encode_image(cols, row["values"], row["none_sources"], pads))
                elif isinstance(event, DeleteRowsEvent):
                    item = ("delete", encode_image(cols, row["values"], row["none_sources"], pads), None)
                else:
                    before = encode_image(cols, row["before_values"], row["before_none_sources"], pads)
                    item = ("update", before, encode_image(cols, row["after_values"], row["after_none_sources"], pads))
                out.append((item[0], event.packet.log_pos, i, item[1], item[2]))
    finally:
        stream.close()
    return out


def test_row_decoder_equals_the_reference_on_every_type(mariadb, database, make_config):
    config = make_config([f"{database}.*"])
    cols = ", ".join(f"`{n}` {t}" for n, t in COLUMNS)
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, {cols})", "FLUSH BINARY LOGS")
    with connect(config.source) as conn:
        start = master_status(conn)
    rng = random.Random(20261122)
    names = ", ".join(f"`{n}`" for n, _ in COLUMNS)
    with mariadb.root_connection(database) as conn, conn.cursor() as cur:
        # Zero dates need a permissive sql_mode; literals are UTC so TIMESTAMPs stay in range.
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET SESSION time_zone = '+00:00'")
        for first in range(0, 400, 50):
            rows = ", ".join(
                "(" + ", ".join([str(k)] + [_value(rng, n, t) for n, t in COLUMNS]) + ")"
                for k in range(first, first + 50)
            )
            cur.execute(f"INSERT INTO t (id, {names}) VALUES {rows}")
        cur.execute("INSERT INTO t (id) VALUES (1000)")  # every column NULL
        for _ in range(40):
            sets = ", ".join(f"`{n}` = {_value(rng, n, t)}" for n, t in rng.sample(COLUMNS, 8))
            cur.execute(f"UPDATE t SET {sets} WHERE id % 40 = {rng.randint(0, 39)}")
        cur.execute("DELETE FROM t WHERE id % 7 = 3")
    with connect(config.source) as conn:
        end = master_status(conn)
        schema = table_schema(conn, config.source, database, "t")
    assert start.file == end.file

    reference = _reference(config, schema, start, end)
    ours = _read(config, start, end)
    assert len(reference) == len(ours) > 400 + 40
    for theirs, mine in zip(reference, ours):
        if theirs != mine:
            diff = {
                k: (v, (mine[3 if i == 3 else 4] or {}).get(k))
                for i, image in ((3, theirs[3]), (4, theirs[4]))
                for k, v in (image or {}).items()
                if (mine[i] or {}).get(k) != v
            }
            raise AssertionError(f"{theirs[:3]} differs from the reference: {diff or (theirs, mine)}")

    # And the texts are the snapshot's: the last image of every surviving row equals a SELECT.
    latest = {}
    for op, _, _, _, after in ours:
        if op in ("insert", "update"):
            latest[after["id"]] = after
    with connect(config.source) as conn:
        selected = query(conn, f"SELECT * FROM {qualified(database, 't')} ORDER BY id")
    assert len(selected) == 400 - 57 + 1
    for row in selected:
        image = latest[str(row["id"])]
        for col in schema.columns:
            if col.name != "f":  # the text protocol prints FLOAT with 6 digits (see test_capture_types)
                assert image[col.name] == encode_value(col, row[col.name]), f"id {row['id']} column {col.name}"
