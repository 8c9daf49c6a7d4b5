"""Binlog files MySQL 5.6 to 9.6 wrote, read by capture's own reader as a binlog archive.

Each file of tests/data/mysql-binlogs (see its README) is put in an archive directory and read
by :func:`binlake.bronze.binlog_reader.read_range`, the code a Spark task runs for a capture
batch. The expected values come from the statements in the files' own QUERY events and from
rust_mysql_common's published expectations for the same files (``src/binlog/mod.rs``,
``binlog_event_roundtrip`` and the GTID tests), never from binlake's output. A file whose
tables have no column names (MINIMAL row metadata) cannot be decoded into named columns:
capture records, per ROWS event, that the table changed there (op ``statement``, the reason
and the fix in ``ddl``), which stops the table in silver until it is re-snapshotted.
"""

from __future__ import annotations

import base64
import shutil
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from binlake.bronze.binlog_reader import ReadRange, read_range
from binlake.config import Secret, SourceConfig
from binlake.contract.changelog import STATEMENT_OP
from binlake.errors import BinlogDecodeError
from binlake.source.binlog.events import HEADER, TRANSACTION_PAYLOAD, EventParser, TransactionPayload

DATA = Path(__file__).parent.parent / "data" / "mysql-binlogs"
DATA_OPS = ("insert", "update", "delete")


def archive_name(file: str) -> str:
    """The name a file is archived under: binlog files are numbered."""
    return file if file.rpartition(".")[2].isdigit() else file.rpartition(".")[0] + ".000001"


def capture(tmp_path: Path, file: str, tables=("*.*",), data: bytes | None = None) -> list[dict]:
    """The change-log rows capture makes of the whole file (no side rows)."""
    name = archive_name(file)
    target = tmp_path / name
    if data is None:
        shutil.copy(DATA / file, target)
    else:
        target.write_bytes(data)
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("p"), server_id=1, tables=tables)
    rng = ReadRange(index=0, file=name, start_pos=4, end_pos=None, last=True, archive=str(tmp_path))
    rows = pa.Table.from_batches(list(read_range(source, rng))).to_pylist()
    for r in rows:
        r["before"] = dict(r["before"]) if r["before"] is not None else None
        r["after"] = dict(r["after"]) if r["after"] is not None else None
    return [r for r in rows if r["op"] not in ("stats", "schema")]


def digits(n: int) -> str:
    """``0123456789`` repeated to ``n`` characters, as the files' test strings are made."""
    return "".join(str(k % 10) for k in range(n))


def b64(raw: list[int]) -> str:
    return base64.b64encode(bytes(raw)).decode()


def test_enum_set_char_varchar_and_text_decode_to_the_values_mysql_logged(tmp_path):
    rows = [r for r in capture(tmp_path, "mysql-enum-string-set.000001") if r["op"] in DATA_OPS]
    long = digits(129) * 2 + digits(40)
    first = {"f1": digits(100), "f2": long, "f3": "var1", "f4": "one,three", "f5": digits(10)}
    second = {"f1": "field1", "f2": "field_2", "f3": "variant2", "f4": "two,four", "f5": long}
    assert [(r["op"], r["before"], r["after"]) for r in rows] == [
        ("insert", None, first),
        ("update", first, second),
        ("delete", second, None),
    ]
    assert {r["gtid"] for r in rows} == {f"93e95066-a2f4-11ec-9b69-9657f0ae95e2:{n}" for n in (3, 4, 5)}


def test_vector_columns_are_their_float32_bytes_and_never_stop_capture(tmp_path):
    rows = capture(tmp_path, "vector.binlog")
    foo = [r["after"] for r in rows if r["table"] == "foo" and r["op"] == "insert"][:2]
    assert foo == [
        {"id": "1", "vector_column": b64([205, 204, 140, 63, 205, 204, 12, 64, 51, 51, 83, 64])},
        {"id": "2", "vector_column": b64([0, 0, 128, 63, 0, 0, 128, 191, 0, 0, 0, 0])},
    ]
    # 1.1 = 0x3F8CCCCD little-endian: the bytes are VECTOR_TO_STRING's [1.1, 2.2, 3.3] as stored.
    assert struct.unpack("<3f", base64.b64decode(foo[0]["vector_column"])) == pytest.approx((1.1, 2.2, 3.3))


def test_a_vector_table_binlake_does_not_capture_is_passed_over(tmp_path):
    rows = capture(tmp_path, "vector.binlog", tables=("other.*",))
    assert [r["op"] for r in rows] == ["heartbeat"]
    assert rows[0]["pos"] == (DATA / "vector.binlog").stat().st_size


def test_invisible_columns_are_in_every_image_under_their_names(tmp_path):
    rows = capture(tmp_path, "binlog-invisible-columns.000001")
    ddl = next(r for r in rows if r["op"] == "ddl")
    assert "f1 INT UNSIGNED INVISIBLE" in ddl["ddl"]
    changes = [r for r in rows if r["op"] in DATA_OPS]
    assert [r["op"] for r in changes] == ["insert", "insert", "update"]
    assert all(list(r["after"]) == ["f1", "f2", "f3", "f4", "f5", "f6"] for r in changes)
    assert changes[2]["before"] == changes[1]["after"], "an UPDATE's before image is the row as it was"


def by_hand(body: bytes, images: int) -> list[dict]:
    """The rows of one of ``binlog-invisible-columns.000001``'s v2 ROWS events, decoded here
    from MySQL's row format for its table (INT UNSIGNED, INT UNSIGNED, INT, TEXT, BLOB, BIGINT
    UNSIGNED, all six columns in every image): post-header (table id, flags), the extra-data
    length, the column count and bitmaps, then per image a null bitmap and each non-NULL value
    (INT 4 bytes little-endian, BIGINT 8, TEXT and BLOB a 2-byte length and the bytes)."""
    off = 6 + 2
    off += struct.unpack_from("<H", body, off)[0]
    assert body[off] == 6
    off += 1 + images  # one bitmap of the six columns per image
    out = []
    while off < len(body):
        nulls = body[off]
        off += 1
        row: dict = {}
        for i, (name, kind) in enumerate(zip(["f1", "f2", "f3", "f4", "f5", "f6"], "IIittQ")):
            if nulls >> i & 1:
                row[name] = None
            elif kind in "Ii":
                row[name] = str(struct.unpack_from("<" + kind, body, off)[0])
                off += 4
            elif kind == "Q":
                row[name] = str(struct.unpack_from("<Q", body, off)[0])
                off += 8
            else:
                n = struct.unpack_from("<H", body, off)[0]
                raw = body[off + 2 : off + 2 + n]
                row[name] = raw.decode() if name == "f4" else base64.b64encode(raw).decode()
                off += 2 + n
        out.append(row)
    return out


def test_invisible_columns_have_the_values_mysql_logged(tmp_path):
    data = (DATA / "binlog-invisible-columns.000001").read_bytes()
    expected, off = [], 4
    while off < len(data):
        size, kind = HEADER.unpack_from(data, off)[3], data[off + 4]
        if kind in (30, 31):  # WRITE_ROWS, UPDATE_ROWS (v2)
            rows = by_hand(data[off + 19 : off + size - 4], 2 if kind == 31 else 1)
            expected += [("insert", None, rows[0])] if kind == 30 else [("update", rows[0], rows[1])]
        off += size
    # The second insert holds NULL in the invisible columns; the update sets two of them.
    assert expected[1][2] == {"f1": None, "f2": None, "f3": "-33", "f4": "44", "f5": "VQ==", "f6": None}
    rows = [r for r in capture(tmp_path, "binlog-invisible-columns.000001") if r["op"] in DATA_OPS]
    assert [(r["op"], r["before"], r["after"]) for r in rows] == expected


def test_json_values_decode_to_mysqls_own_text(tmp_path):
    texts = [r["after"]["a"] for r in capture(tmp_path, "json-opaque.binlog") if r["op"] == "insert"]
    assert texts == [
        '{"a": "base64:type15:VQ=="}',
        '{"b": "2012-03-18"}',
        '{"c": "2012-03-18 11:30:45.000000"}',
        '{"c": "87:31:46.654321"}',
        '{"d": 123.456}',
        '{"e": 9.00}',
        '{"e": [0, 1, true, false]}',
        '{"e": null}',
    ]


def test_a_tagged_gtid_is_kept_as_mysql_prints_it(tmp_path):
    rows = capture(tmp_path, "binlog_transaction_with_GTID_TAG.000001")
    assert {r["gtid"] for r in rows if r["op"] != "heartbeat"} == {"55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"}


def test_a_file_of_previous_gtids_only_reads_to_its_end(tmp_path):
    rows = capture(tmp_path, "binlog_transaction_previous_GTID_no_tag.000001")
    assert [(r["op"], r["pos"]) for r in rows] == [("heartbeat", 241)]


def test_statement_format_dml_is_recorded_per_table_never_dropped(tmp_path):
    rows = capture(tmp_path, "binlog_transaction_with_GTID.000001")
    assert [(r["op"], r["db"], r["table"], r["ddl"]) for r in rows if r["op"] != "heartbeat"] == [
        ("ddl", "test", "t1", "CREATE TABLE t1 (c1 INT)"),
        (STATEMENT_OP, "test", "t1", "INSERT INTO t1 VALUES (1)"),
        ("drop", "test", "t1", "DROP TABLE `t1` /* generated by server */"),
    ]


@pytest.mark.parametrize(
    ("file", "table", "events"),
    [
        ("minimal_row_metadata.000001", "noria.t1", 1),
        ("json.binlog.000001", "mysql.t", 6),
        ("transaction_compression.000001", "test.tb1", 1),
        ("binlog_transaction_with_GTID_TAG.000001", "test.orders", 1),
    ],
)
def test_rows_without_column_names_are_recorded_as_a_change_silver_must_stop_on(tmp_path, file, table, events):
    rows = capture(tmp_path, file)
    marks = [r for r in rows if r["op"] == STATEMENT_OP]
    assert not [r for r in rows if r["op"] in DATA_OPS], "no row of NULLs and no row under made-up names"
    assert len(marks) == events
    assert {f"{r['db']}.{r['table']}" for r in marks} == {table}
    assert all("binlog_row_metadata=MINIMAL" in r["ddl"] and "binlog_row_metadata=FULL" in r["ddl"] for r in marks)


def test_a_compressed_transaction_holds_its_events_in_order():
    # rust_mysql_common's expectation for this file: BEGIN, TABLE_MAP, WRITE_ROWS, XID.
    data = (DATA / "transaction_compression.000001").read_bytes()
    parser, off, payloads = EventParser(), 4, []
    while off < len(data):
        size = HEADER.unpack_from(data, off)[3]
        event = parser.parse(data[off : off + size])
        off += size
        if isinstance(event, TransactionPayload):
            payloads.append(event)
    assert len(payloads) == 1
    assert payloads[0].log_pos == 431
    assert [type(e).__name__ for e in payloads[0].events] == ["Query", "TableMapEvent", "Rows", "Xid"]


# ---------------------------------------------------------------------------------------
# The same transactions, compressed: binlog_transaction_compression=ON changes nothing


def compress(file: str) -> bytes:
    """``file`` with every BEGIN ... XID transaction put into one zstd TRANSACTION_PAYLOAD_EVENT,
    as MySQL writes it: the GTID stays outside, the inner events lose their checksums and end
    positions, and every later event moves."""
    import zstandard

    data = (DATA / file).read_bytes()
    events, off = [], 4
    while off < len(data):
        size = HEADER.unpack_from(data, off)[3]
        events.append(data[off : off + size])
        off += size
    out, group = [events[0]], None
    for ev in events[1:]:
        if group is None and ev[4] == 2 and ev[:-4].endswith(b"BEGIN"):
            group = []
        if group is None:
            out.append(ev)
            continue
        inner = bytearray(ev[:-4])
        struct.pack_into("<II", inner, 9, len(inner), 0)  # size, end position
        group.append(bytes(inner))
        if ev[4] == 16:  # the XID ends the transaction
            raw = b"".join(group)
            body = zstandard.ZstdCompressor().compress(raw)
            fields = _field(2, 0) + _field(3, len(raw)) + _field(1, len(body)) + b"\0"
            out.append(bytes([0, 0, 0, 0, TRANSACTION_PAYLOAD]) + bytes(14) + fields + body + bytes(4))
            group = None
    pos, moved = 4, []
    for ev in out:
        ev = bytearray(ev)
        pos += len(ev)
        if ev[4] != 15:  # the FORMAT_DESCRIPTION stays as it is, its checksum with it
            struct.pack_into("<III", ev, 5, 1, len(ev), pos)  # server id, size, end position
            struct.pack_into("<I", ev, len(ev) - 4, zlib.crc32(ev[:-4]))
        moved.append(bytes(ev))
    return b"\xfebin" + b"".join(moved)


def _field(kind: int, value: int) -> bytes:
    encoded = bytes([value]) if value < 251 else b"\xfe" + value.to_bytes(8, "little")
    return bytes([kind, len(encoded)]) + encoded


def test_compressed_transactions_give_exactly_the_rows_of_the_uncompressed_ones(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "zstd").mkdir()
    plain = capture(tmp_path / "plain", "mysql-enum-string-set.000001")
    compressed = capture(
        tmp_path / "zstd", "mysql-enum-string-set.000001", data=compress("mysql-enum-string-set.000001")
    )

    def changes(rows):
        return [(r["op"], r["row"], r["before"], r["after"], r["gtid"]) for r in rows if r["op"] in DATA_OPS]

    assert changes(compressed) == changes(plain)
    assert len(changes(plain)) == 3
    positions = [r["pos"] for r in compressed if r["op"] in DATA_OPS]
    assert len(set(positions)) == 3, "each compressed transaction sorts at its own payload's end"


def test_rows_of_several_events_in_one_payload_keep_a_unique_sequence(tmp_path):
    # vector.binlog's first transaction writes two tables, two rows each, in one transaction.
    rows = capture(tmp_path, "vector.binlog", data=compress("vector.binlog"))
    first = [r for r in rows if r["op"] == "insert"][:4]
    assert [(r["table"], r["row"]) for r in first] == [("foo", 0), ("foo", 1), ("bar", 2), ("bar", 3)]
    assert len({r["pos"] for r in first}) == 1, "one payload, one end position"


def test_an_event_type_binlake_does_not_know_stops_capture_with_its_position(tmp_path):
    data = bytearray((DATA / "mysql-enum-string-set.000001").read_bytes())
    # Turn the XID at 1529 (see the README's listing) into an unknown type 99, checksum fixed.
    data[1529 + 4] = 99
    size = HEADER.unpack_from(data, 1529)[3]
    struct.pack_into("<I", data, 1529 + size - 4, zlib.crc32(data[1529 : 1529 + size - 4]))
    with pytest.raises(BinlogDecodeError, match=r"mysql-enum-string-set.000001:1529: event type 99: binlake does not"):
        capture(tmp_path, "mysql-enum-string-set.000001", data=bytes(data))


def test_an_unknown_event_marked_ignorable_is_passed_over_and_counted(tmp_path):
    data = bytearray((DATA / "mysql-enum-string-set.000001").read_bytes())
    # The Previous-GTIDs event at 126 is ignorable (flag 0x80); give it a type binlake does not know.
    data[126 + 4] = 99
    size = HEADER.unpack_from(data, 126)[3]
    struct.pack_into("<I", data, 126 + size - 4, zlib.crc32(data[126 : 126 + size - 4]))
    name = archive_name("mysql-enum-string-set.000001")
    (tmp_path / name).write_bytes(bytes(data))
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("p"), server_id=1, tables=("*.*",))
    rng = ReadRange(index=0, file=name, start_pos=4, end_pos=None, last=True, archive=str(tmp_path))
    rows = pa.Table.from_batches(list(read_range(source, rng))).to_pylist()
    stats = next(r for r in rows if r["op"] == "stats")
    assert '"ignored": {"event type 99": 1}' in stats["ddl"]
    assert len([r for r in rows if r["op"] in DATA_OPS]) == 3


def test_a_rows_query_event_whose_text_is_not_utf8_changes_nothing():
    """ROWS_QUERY (binlog_rows_query_log_events=ON) carries the statement's text in the
    client's character set; capture needs only the rows after it."""
    from binlake.source.binlog.events import ROWS_QUERY, Passive

    text = b"\x01" + "UPDATE t SET v = 'é'".encode("latin-1")  # a length byte, then latin-1
    body = bytes(19) + text
    raw = bytearray(body + bytes(4))
    struct.pack_into("<IBIIIH", raw, 0, 1700000000, ROWS_QUERY, 1, len(raw), 500, 0x80)
    struct.pack_into("<I", raw, len(raw) - 4, zlib.crc32(raw[:-4]))
    parser = EventParser(checksum=True)
    assert isinstance(parser.parse(bytes(raw)), Passive)


def test_a_batch_stops_only_between_compressed_transactions_and_resumes_there(tmp_path):
    """A capture batch ends at a transaction boundary; a compressed transaction is one event,
    so the boundary is its end. Reading on from the heartbeat (what the run after a kill does)
    gives exactly the rows the first read did not, once."""
    name = archive_name("mysql-enum-string-set.000001")
    (tmp_path / name).write_bytes(compress("mysql-enum-string-set.000001"))
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("p"), server_id=1, tables=("*.*",))

    def read(start: int, max_rows: int | None) -> list[dict]:
        rng = ReadRange(0, name, start, None, last=True, max_rows=max_rows, archive=str(tmp_path))
        return [r for r in pa.Table.from_batches(list(read_range(source, rng))).to_pylist() if r["op"] != "stats"]

    whole = [(r["op"], r["pos"], r["row"]) for r in read(4, None) if r["op"] in DATA_OPS]
    first = read(4, max_rows=1)
    beat = next(r for r in first if r["op"] == "heartbeat")
    firsts = [(r["op"], r["pos"], r["row"]) for r in first if r["op"] in DATA_OPS]
    assert firsts == whole[:1], "the batch ends at the first payload's end"
    assert beat["pos"] == whole[0][1], "the batch ends at the first payload's end"
    rest = [(r["op"], r["pos"], r["row"]) for r in read(beat["pos"], None) if r["op"] in DATA_OPS]
    assert firsts + rest == whole
