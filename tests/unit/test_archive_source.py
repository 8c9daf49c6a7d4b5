"""A source that is only binlog files (``source.archive``): its config, which files it reads
and where it stops, and the tables it refuses, without Spark.

The capture loop itself runs in tests/spark/test_mysql_archive_end_to_end.py; here are its
pure parts, on the binlog files MySQL wrote (tests/data/mysql-binlogs, see its README). The
positions expected below are the event headers' own (size and end position, read with
``struct`` here, not with binlake's parser): in ``mysql-enum-string-set.000001`` the
transactions end at 791 (the CREATE TABLE), 1560, 2659 and 3331 (the XIDs of the insert, the
update and the delete), and the file ends at 3331.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from binlake.bronze.binlog_reader import ReadRange, read_range
from binlake.bronze.capture_archive import archive_end, archive_files, archive_start, check_filter, check_resume
from binlake.bronze.capture_state import CaptureState
from binlake.config import SourceConfig, load_config_text
from binlake.contract.position import BinlogPosition
from binlake.errors import ArchiveSourceError, ArchiveUnreadableError, BinlogArchiveError, ConfigError
from binlake.source.mysql import connect

DATA = Path(__file__).parent.parent / "data" / "mysql-binlogs"
ENUMS = "mysql-enum-string-set.000001"


def config_text(source: dict | None = None, **sections) -> str:
    d = {"source": {"archive": "binlogs", "tables": ["shop.*"], **(source or {})}, "lakehouse": {"path": "lake"}}
    d.update(sections)
    return yaml.safe_dump(d, sort_keys=False)


def load(source: dict | None = None, **sections):
    return load_config_text(config_text(source, **sections), base_dir="/srv/binlake", origin="binlake.yml")


def refused(source: dict | None = None, **sections) -> str:
    with pytest.raises(ConfigError) as info:
        load(source, **sections)
    return str(info.value)


def headers(path: Path) -> list[tuple[int, int, int]]:
    """(start, type, end) of each event, from the v4 headers."""
    data, off, out = path.read_bytes(), 4, []
    while off + 19 <= len(data):
        _, kind, _, size, end, _ = struct.unpack_from("<IBIIIH", data, off)
        out.append((off, kind, end))
        off += size
    return out


def test_the_event_headers_are_as_this_module_says():
    xids = [end for _, kind, end in headers(DATA / ENUMS) if kind == 16]
    assert xids == [1560, 2659, 3331]
    assert (DATA / ENUMS).stat().st_size == 3331


# ---------------------------------------------------------------------------------------
# Config


def test_an_archive_source_needs_no_server_and_resolves_next_to_the_config():
    config = load()
    assert config.source.archive == "binlogs"
    assert config.source_archive == "/srv/binlake/binlogs"
    assert load({"archive": "/Volumes/main/cdc/binlogs"}).source_archive == "/Volumes/main/cdc/binlogs"


@pytest.mark.parametrize(("key", "value"), [("host", "db"), ("user", "cdc"), ("password", "pw"), ("server_id", 7)])
def test_a_server_key_beside_the_archive_is_refused_naming_both_fixes(key, value):
    assert refused({key: value}) == (
        f"source.archive reads binlog files without a server, so source.{key} does not apply: remove "
        f"source.{key} (and the other server keys), or remove source.archive to read from the server"
    )


@pytest.mark.parametrize("startup", ["latest", "timestamp"])
def test_a_startup_the_files_cannot_place_is_refused(startup):
    message = refused(capture={"startup": startup, "start_timestamp": "2026-01-01T00:00:00Z"})
    assert f"capture.startup is {startup!r}, but an archive source (source.archive) starts at its first file" in message
    assert message.endswith("set one of those")


@pytest.mark.parametrize("capture", [{"on_purge": "archive", "archive": "more"}, {"archive": "more"}])
def test_on_purge_and_a_second_archive_do_not_apply_to_an_archive_source(capture):
    assert refused(capture=capture).endswith(
        "capture.on_purge and capture.archive are for a server's purged binlogs; source.archive reads only the "
        "archive already: remove them"
    )


def test_the_config_keeps_one_line_per_error():
    assert "\n" not in refused({"host": "db"})
    assert "\n" not in refused(capture={"startup": "latest"})


def test_whatever_needs_a_server_says_so_instead_of_connecting():
    with pytest.raises(ArchiveSourceError, match=r"^the source is the binlog archive binlogs \(source.archive\), and"):
        connect(load().source)


# ---------------------------------------------------------------------------------------
# Which files, in which order


def archive(tmp_path: Path, *names: str, source: str = ENUMS) -> Path:
    for name in names:
        shutil.copy(DATA / source, tmp_path / name)
    return tmp_path


def test_the_files_are_ordered_by_their_number_not_their_name(tmp_path):
    # MySQL numbers on past 999999 with a seventh digit: by name, 1000000 would sort first.
    archive(tmp_path, "mysql-bin.1000000", "mysql-bin.999999", "mysql-bin.000002")
    files = archive_files(str(tmp_path))
    assert [f.name for f in files] == ["mysql-bin.000002", "mysql-bin.999999", "mysql-bin.1000000"]
    assert {f.archive for f in files} == {str(tmp_path)}
    assert {f.size for f in files} == {3331}


def test_what_is_not_a_numbered_file_is_not_a_binlog(tmp_path):
    archive(tmp_path, "mysql-bin.000001", "mysql-bin.index", "README.md", ".000002", "mysql-bin.000003.partial")
    (tmp_path / "mysql-bin.000004").mkdir()
    assert [f.name for f in archive_files(str(tmp_path))] == ["mysql-bin.000001"]


def test_an_empty_archive_is_refused_saying_how_files_are_named(tmp_path):
    archive(tmp_path, "mysql-bin.index")
    with pytest.raises(BinlogArchiveError) as info:
        archive_files(str(tmp_path))
    assert str(info.value) == (
        f"the binlog archive {tmp_path} (source.archive) holds no binlog files: put the files there under their "
        "own names (mysql-bin.000042)"
    )


def test_an_archive_of_two_binlogs_is_refused(tmp_path):
    archive(tmp_path, "mysql-bin.000001", "db1-bin.000001")
    with pytest.raises(BinlogArchiveError, match=r"several binlogs \(db1-bin, mysql-bin\): keep one server's binlog"):
        archive_files(str(tmp_path))


def test_a_missing_directory_is_named(tmp_path):
    with pytest.raises(BinlogArchiveError, match=rf"^cannot list the binlog archive {tmp_path}/none: "):
        archive_files(str(tmp_path / "none"))


# ---------------------------------------------------------------------------------------
# Where the archive ends


def test_the_archive_ends_at_the_newest_files_last_transaction(tmp_path):
    files = archive_files(str(archive(tmp_path, "mysql-bin.000001", "mysql-bin.000002")))
    assert archive_end(files, BinlogPosition("mysql-bin.000001", 4)) == BinlogPosition("mysql-bin.000002", 3331)
    assert archive_end(files, BinlogPosition("mysql-bin.000002", 1560)) == BinlogPosition("mysql-bin.000002", 3331)


@pytest.mark.parametrize(
    ("cut", "end"),
    [
        (2000, 1560),  # inside the UPDATE's ROWS event (1855-2628): the event is not whole yet
        (2628, 1560),  # after the UPDATE's ROWS event, before its XID: the transaction is not whole
        (2659, 2659),  # right after the XID
        (800, 791),  # inside the insert's GTID event: only the CREATE TABLE is whole
    ],
)
def test_a_newest_file_still_being_written_ends_at_its_last_whole_transaction(tmp_path, cut, end):
    archive(tmp_path, "mysql-bin.000001")
    (tmp_path / "mysql-bin.000002").write_bytes((DATA / ENUMS).read_bytes()[:cut])
    files = archive_files(str(tmp_path))
    assert archive_end(files, BinlogPosition("mysql-bin.000001", 4)) == BinlogPosition("mysql-bin.000002", end)


def test_a_position_at_the_end_is_the_end(tmp_path):
    files = archive_files(str(archive(tmp_path, "mysql-bin.000001")))
    assert archive_end(files, BinlogPosition("mysql-bin.000001", 3331)) == BinlogPosition("mysql-bin.000001", 3331)


# ---------------------------------------------------------------------------------------
# Where capture starts and resumes


def test_capture_starts_at_the_first_file_or_the_given_position(tmp_path):
    files = archive_files(str(archive(tmp_path, "mysql-bin.000003", "mysql-bin.000004")))
    assert archive_start(load(), files) == BinlogPosition("mysql-bin.000003", 4)
    at = load(capture={"startup": "position", "start_position": "mysql-bin.000004:1560"})
    assert archive_start(at, files) == BinlogPosition("mysql-bin.000004", 1560)


def state(file: str, pos: int, server_id: int | None = 1, table_filter: dict | None = None) -> CaptureState:
    return CaptureState(BinlogPosition(file, pos), server_id, None, table_filter)


def test_a_resume_position_on_an_event_boundary_of_the_same_server_passes(tmp_path):
    directory = str(archive(tmp_path, "mysql-bin.000001", "mysql-bin.000002"))
    for pos in (4, 1560, 3331):
        check_resume(directory, archive_files(directory), state("mysql-bin.000002", pos))


def test_files_missing_after_the_resume_position_are_named(tmp_path):
    directory = str(archive(tmp_path, "mysql-bin.000001", "mysql-bin.000004"))
    with pytest.raises(BinlogArchiveError) as info:
        check_resume(directory, archive_files(directory), state("mysql-bin.000001", 1560))
    assert str(info.value) == (
        f"the binlog archive {directory} lacks mysql-bin.000002, mysql-bin.000003, which capture needs from its "
        "position mysql-bin.000001:1560 on: put the files in the archive"
    )


def test_a_resume_position_inside_an_event_means_another_file(tmp_path):
    directory = str(archive(tmp_path, "mysql-bin.000001"))
    for pos in (1561, 4000):
        with pytest.raises(BinlogArchiveError, match=rf"mysql-bin.000001:{pos} is not an event boundary of"):
            check_resume(directory, archive_files(directory), state("mysql-bin.000001", pos))


def test_files_of_another_server_are_refused(tmp_path):
    # The file's FORMAT_DESCRIPTION says server 1 wrote it.
    directory = str(archive(tmp_path, "mysql-bin.000001"))
    with pytest.raises(BinlogArchiveError) as info:
        check_resume(directory, archive_files(directory), state("mysql-bin.000001", 1560, server_id=2))
    assert str(info.value) == (
        "the archive's mysql-bin.000001 was written by server 1, but capture has read server 2: point "
        "source.archive at that server's binlog files"
    )


def test_a_narrower_table_filter_passes_and_a_wider_one_is_refused():
    config = load({"tables": ["shop.*"], "exclude": ["shop.audit"]})
    check_filter(config, state("mysql-bin.000001", 4, table_filter=None))
    check_filter(config, state("mysql-bin.000001", 4, table_filter={"tables": ["shop.*", "crm.*"], "exclude": []}))
    for before in ({"tables": ["crm.*"], "exclude": []}, {"tables": ["shop.*"], "exclude": ["shop.audit", "shop.x"]}):
        with pytest.raises(ArchiveSourceError, match=r"match more than at capture's last commit.*cannot snapshot"):
            check_filter(config, state("mysql-bin.000001", 4, table_filter=before))


# ---------------------------------------------------------------------------------------
# Tables an archive cannot mirror stop capture, naming the setting


def read(tmp_path: Path, file: str, **source) -> list[dict]:
    """What capture's reader makes of the whole file, read from an archive source."""
    name = file if file.rpartition(".")[2].isdigit() else file.rpartition(".")[0] + ".000001"
    shutil.copy(DATA / file, tmp_path / name)
    config = SourceConfig(archive=str(tmp_path), **{"tables": ("*.*",), **source})
    rng = ReadRange(index=0, file=name, start_pos=4, end_pos=None, last=True, archive=str(tmp_path))
    return pa.Table.from_batches(list(read_range(config, rng))).to_pylist()


@pytest.mark.parametrize(
    ("file", "table", "end"),
    [
        ("minimal_row_metadata.000001", "noria.t1", 374),
        ("json.binlog.000001", "mysql.t", 1059),
        ("transaction_compression.000001", "test.tb1", 431),
        ("binlog_transaction_with_GTID_TAG.000001", "test.orders", 461),
    ],
)
def test_a_table_map_without_column_names_is_refused_naming_binlog_row_metadata(tmp_path, file, table, end):
    with pytest.raises(ArchiveUnreadableError) as info:
        read(tmp_path, file)
    message = str(info.value)
    assert message.startswith(
        f"{table}'s TABLE_MAP ending at {file}:{end} has no column names (binlog_row_metadata=MINIMAL)"
    )
    assert "SET PERSIST binlog_row_metadata = FULL" in message
    assert "exclude the table (source.exclude)" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("file", "table", "end"),
    [
        (ENUMS, "mysql.t", 1077),
        ("json-opaque.binlog", "foo.test", 736),
        ("binlog-invisible-columns.000001", "mysql.t1", 1027),
    ],
)
def test_a_table_without_a_primary_key_is_refused_naming_chunk_keys(tmp_path, file, table, end):
    with pytest.raises(ArchiveUnreadableError) as info:
        read(tmp_path, file)
    assert str(info.value).endswith(
        f":{end} names no primary key, and silver merges a table by its key: add a primary key to the table, or set "
        f"source.chunk_keys for {table} (NOT NULL columns that identify a row), or exclude it (source.exclude)"
    )


@pytest.mark.parametrize("keys", [["f3"], ["nope"], ["f1", "f3"]])
def test_chunk_keys_of_a_keyless_table_must_be_not_null_columns_of_it(tmp_path, keys):
    # mysql.t's columns are all nullable (the TABLE_MAP's null bitmap).
    with pytest.raises(ArchiveUnreadableError) as info:
        read(tmp_path, ENUMS, chunk_keys={"mysql.t": keys})
    assert str(info.value).startswith(f"source.chunk_keys for mysql.t names {', '.join(keys)}, which its TABLE_MAP")
    assert str(info.value).endswith(
        "does not have as a NOT NULL column: name NOT NULL columns that identify a row, or exclude the table "
        "(source.exclude)"
    )


def test_a_statement_format_change_is_refused_naming_binlog_format(tmp_path):
    # MySQL 5.6.24: BEGIN; INSERT INTO t1 VALUES (1) logged as a statement (its QUERY event at 695).
    with pytest.raises(ArchiveUnreadableError) as info:
        read(tmp_path, "binlog_transaction_with_GTID.000001")
    assert str(info.value) == (
        "'INSERT INTO t1 VALUES (1)' at binlog_transaction_with_GTID.000001:"
        f"{statement_end()} changed test.t1 as a statement (binlog_format=STATEMENT or MIXED), whose rows the binlog "
        "does not hold, and an archive source has no server to re-read the table from: exclude the table "
        "(source.exclude), or capture it from the server"
    )


def statement_end() -> int:
    """The end of the QUERY event holding the file's INSERT, from its header."""
    data = (DATA / "binlog_transaction_with_GTID.000001").read_bytes()
    at = data.index(b"INSERT INTO t1 VALUES (1)")
    return next(end for start, kind, end in headers(DATA / "binlog_transaction_with_GTID.000001") if start < at < end)


@pytest.mark.parametrize(
    ("file", "exclude"),
    [
        ("minimal_row_metadata.000001", "noria.t1"),
        (ENUMS, "mysql.t"),
        ("binlog_transaction_with_GTID.000001", "test.t1"),
    ],
)
def test_the_refused_table_excluded_as_the_error_says_the_file_reads_to_its_end(tmp_path, file, exclude):
    rows = read(tmp_path, file, exclude=(exclude,))
    assert not [r for r in rows if r["op"] in ("insert", "update", "delete", "statement")]
    assert [r["pos"] for r in rows if r["op"] == "heartbeat"] == [(DATA / file).stat().st_size]


def test_tables_with_names_and_keys_are_read_from_the_archive(tmp_path):
    # vector.binlog (FULL metadata, primary keys): 2 + 2 inserts, twice, then a delete and an insert.
    rows = read(tmp_path, "vector.binlog")
    assert len([r for r in rows if r["op"] in ("insert", "delete")]) == 10
