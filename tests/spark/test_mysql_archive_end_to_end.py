"""Binlog files MySQL wrote, mirrored end to end with no server: ``source.archive``.

Each vendored file of tests/data/mysql-binlogs (see its README) is the whole of an archive
source; ``run_pipeline`` (what ``binlake run`` does) captures it, then silver and gold run as
usual. Where a file allows it (FULL row metadata and a primary key), gold must equal the rows
its statements leave; every other file must stop capture with the named one-line error that
says what to change, and commit nothing of the file's changes.

The expected rows are written by hand from the files' own statements and the event kinds
(which table, which key was inserted or deleted), and from MySQL's manual for the stored form
of a value: a VECTOR is its float32 values, little-endian, four bytes each (VECTOR data type,
"each entry is a 4-byte single-precision floating-point value").
"""

from __future__ import annotations

import shutil
import signal
import struct
import zlib
from collections import Counter
from pathlib import Path

import pytest

from binlake.bronze.capture import capture_position, run_capture
from binlake.config import load_config
from binlake.contract.position import BinlogPosition
from binlake.contract.tables import Lakehouse
from binlake.errors import ArchiveSourceError, ArchiveUnreadableError
from binlake.gold.publish_log import gold_as_of
from binlake.ops.pipeline import NO_SNAPSHOT, run_pipeline
from tests.capture_process import capture_process

DATA = Path(__file__).resolve().parents[1] / "data" / "mysql-binlogs"
ROOT = Path(__file__).resolve().parents[2]


def archive_source(tmp_path: Path, *files: str, tables=("*.*",), exclude=(), **capture) -> Path:
    """A binlake.yml whose source is an archive holding ``files`` (numbered as binlog files are)."""
    archive = tmp_path / "archive"
    archive.mkdir(exist_ok=True)
    for file in files:
        name = file if file.rpartition(".")[2].isdigit() else file.rpartition(".")[0] + ".000001"
        shutil.copy(DATA / file, archive / name)
    path = tmp_path / "binlake.yml"
    lines = ["source:", "  archive: archive", f"  tables: {list(tables)}", f"  exclude: {list(exclude)}"]
    lines.append("lakehouse: {path: lake}")
    if capture:
        lines += ["capture:", *(f"  {k}: {v}" for k, v in capture.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def vectors(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


# MySQL 9.0.1, vector.binlog: CREATE TABLE foo(id SERIAL, vector_column VECTOR(3) NOT NULL) and
# bar(id SERIAL, vector_column VECTOR(2) NOT NULL, foo TEXT, vector_column2 VECTOR(4) NOT NULL);
# two rows into each; DROP DATABASE, the same tables and rows again; then bar's row 2 deleted
# and a row 3 inserted, in one transaction.
FOO = [
    (1, vectors(1.1, 2.2, 3.3)),
    (2, vectors(1, -1, 0)),
]
BAR = [
    (1, vectors(1.1, 2.2), None, vectors(1.1, 2.2, 3.3, 4.4)),
    (3, vectors(2.01, -2.01), None, vectors(42.1, 43.2, 44.3, 45.4)),
]


def test_a_mysql_binlog_with_full_metadata_and_keys_is_mirrored_into_gold_without_a_server(spark, tmp_path):
    config = load_config(archive_source(tmp_path, "vector.binlog"))

    result = run_pipeline(spark, config)

    assert result.ok
    assert [s.name for s in result.steps] == ["snapshot", "capture", "silver", "gold"]
    assert result.steps[0].result == NO_SNAPSHOT
    capture = result.steps[1].result
    assert capture.start == BinlogPosition("vector.000001", 4), "from the archive's first file"
    assert capture.end == BinlogPosition("vector.000001", 3466), "to its end (the server's STOP event)"
    foo = gold_as_of(spark, config, "dtb", "foo").select("id", "vector_column")
    bar = gold_as_of(spark, config, "dtb", "bar").select("id", "vector_column", "foo", "vector_column2")
    assert [(int(i), bytes(v)) for i, v in rows(foo)] == FOO
    assert [(int(i), bytes(a), f, bytes(b)) for i, a, f, b in rows(bar)] == BAR


def test_a_second_run_over_the_same_archive_reads_nothing_again(spark, tmp_path):
    config = load_config(archive_source(tmp_path, "vector.binlog"))
    run_pipeline(spark, config)

    again = run_pipeline(spark, config)

    assert again.ok
    assert again.steps[1].result.changes == 0
    changes = Lakehouse(config).changelog.read(spark).where("op IN ('insert', 'update', 'delete')").count()
    assert changes == 2 + 2 + 2 + 2 + 1 + 1, "every row event of the file once"


@pytest.mark.parametrize(
    ("file", "table"),
    [
        ("mysql-enum-string-set.000001", "mysql.t"),
        ("json-opaque.binlog", "foo.test"),
        ("binlog-invisible-columns.000001", "mysql.t1"),
    ],
)
def test_a_table_without_a_primary_key_stops_capture_naming_the_fix(spark, tmp_path, file, table):
    # FULL row metadata, but the tables were created without a key: silver could not merge them.
    config = load_config(archive_source(tmp_path, file))

    with pytest.raises(ArchiveUnreadableError, match=rf"^{table}'s TABLE_MAP ending at .* names no primary key.*"):
        run_capture(spark, config)

    assert nothing_captured(spark, config)


@pytest.mark.parametrize(
    ("file", "table"),
    [
        ("minimal_row_metadata.000001", "noria.t1"),
        ("json.binlog.000001", "mysql.t"),
        ("transaction_compression.000001", "test.tb1"),
        ("binlog_transaction_with_GTID_TAG.000001", "test.orders"),
    ],
)
def test_a_table_map_without_column_names_stops_capture_naming_the_setting(spark, tmp_path, file, table):
    config = load_config(archive_source(tmp_path, file))

    with pytest.raises(ArchiveUnreadableError, match=rf"^{table}'s TABLE_MAP .*binlog_row_metadata=MINIMAL.*FULL"):
        run_capture(spark, config)

    assert nothing_captured(spark, config)


def test_a_statement_format_change_stops_capture_since_no_server_can_re_read_the_table(spark, tmp_path):
    # MySQL 5.6.24: CREATE TABLE t1 (c1 INT); BEGIN; INSERT INTO t1 VALUES (1) as a statement; DROP TABLE.
    config = load_config(archive_source(tmp_path, "binlog_transaction_with_GTID.000001"))

    with pytest.raises(ArchiveUnreadableError, match=r"'INSERT INTO t1 VALUES \(1\)' at .* as a statement"):
        run_capture(spark, config)

    assert nothing_captured(spark, config)


def test_the_table_excluded_as_the_error_says_capture_reads_the_file_to_its_end(spark, tmp_path):
    config = load_config(archive_source(tmp_path, "mysql-enum-string-set.000001", exclude=("mysql.t",)))
    result = run_capture(spark, config)
    assert result.changes == 0
    assert result.end == BinlogPosition("mysql-enum-string-set.000001", 3331)


def test_a_file_of_previous_gtids_only_gives_an_empty_capture_to_its_end(spark, tmp_path):
    config = load_config(archive_source(tmp_path, "binlog_transaction_previous_GTID_no_tag.000001"))
    result = run_capture(spark, config)
    assert result.changes == 0
    assert result.end == BinlogPosition("binlog_transaction_previous_GTID_no_tag.000001", 241)


def test_an_unknown_ignorable_event_is_passed_over_with_a_warning_naming_it(spark, tmp_path):
    # The binlog format's own rule: an event flagged LOG_EVENT_IGNORABLE (0x80) may be skipped
    # by a reader that does not know its type. vector.binlog's Previous-GTIDs event at 127 is
    # flagged so; given a type binlake does not know, capture passes it over and says so.
    path = archive_source(tmp_path, "vector.binlog")
    target = tmp_path / "archive" / "vector.000001"
    data = bytearray(target.read_bytes())
    size = struct.unpack_from("<I", data, 127 + 9)[0]
    data[127 + 4] = 99
    struct.pack_into("<I", data, 127 + size - 4, zlib.crc32(data[127 : 127 + size - 4]))
    target.write_bytes(bytes(data))

    result = run_capture(spark, load_config(path))

    assert result.warnings == [
        "capture passed over 1 event type 99 event(s) in vector.000001: binlake does not know the type and the "
        "server marked it ignorable"
    ]
    assert result.changes == 10
    assert result.end == BinlogPosition("vector.000001", 3466)


def test_commands_that_need_a_server_say_so(spark, tmp_path):
    from binlake.bronze.snapshot import run_snapshot

    config = load_config(archive_source(tmp_path, "vector.binlog"))
    with pytest.raises(ArchiveSourceError, match=r"source.archive.*needs a MySQL server"):
        run_snapshot(spark, config)


def nothing_captured(spark, config) -> bool:
    """Only the start heartbeat is committed: none of the file's changes."""
    ops = Counter(r["op"] for r in Lakehouse(config).changelog.read(spark).select("op").collect())
    return ops == {"heartbeat": 1} and capture_position(spark, Lakehouse(config)).pos == 4


# ---------------------------------------------------------------------------------------
# A kill during the archive read


@pytest.mark.parametrize("kill_at", ["capture.before_commit@2", "capture.after_commit@2"])
def test_a_capture_killed_in_the_archive_read_converges_to_every_change_once(spark, tmp_path, kill_at):
    # One batch per transaction (max_batch_rows 1): the kill lands between two of them.
    path = archive_source(tmp_path, "vector.binlog", max_batch_rows=1)

    assert capture_process(path, kill_at=kill_at) == -signal.SIGKILL
    assert capture_process(path) == 0

    config = load_config(path)
    lh = Lakehouse(config)
    changes = lh.changelog.read(spark).where("op IN ('insert', 'update', 'delete')").collect()
    seqs = [(r["file_index"], r["pos"], r["row"]) for r in changes]
    assert len(seqs) == len(set(seqs)) == 10, "every row event of the file once across the kill"
    assert capture_position(spark, lh) == BinlogPosition("vector.000001", 3466)
    assert run_pipeline(spark, config).ok
    bar = gold_as_of(spark, config, "dtb", "bar").select("id", "vector_column", "foo", "vector_column2")
    assert [(int(i), bytes(a), f, bytes(b)) for i, a, f, b in rows(bar)] == BAR
