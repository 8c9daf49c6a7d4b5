"""capture.on_purge: archive: binlog files the server purged are read from a binlog archive.

The archive is what MariaDB's own archive keeper writes, ``mariadb-binlog
--read-from-remote-server --raw --stop-never`` (MySQL's ``mysqlbinlog`` has the same options),
running beside the server. Changes are made across several files, the files holding changes
capture has not read yet are purged from the server, and capture is killed after its first
commit from the archive and run again: every change is in the change log exactly once, capture
ends at the server's position, and gold equals the source.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from source_diff import diff_with_source

from binlake.bronze.capture import capture_position, run_capture
from binlake.config import load_config
from binlake.contract.tables import Lakehouse
from binlake.errors import BinlogPurgedError
from binlake.ops.commands import run_gold, run_silver
from binlake.source.mysql import master_status
from tests.capture_process import capture_process

ROOT = Path(__file__).resolve().parents[2]
BINLAKE = str(ROOT / ".venv" / "bin" / "binlake")


def _keep_archive(mariadb, archive: Path, first_file: str) -> subprocess.Popen:
    """MariaDB's archive keeper, writing every binlog file from ``first_file`` on into ``archive``."""
    return subprocess.Popen(
        [
            "mariadb-binlog",
            "--read-from-remote-server",
            "--raw",
            "--stop-never",
            "--stop-never-slave-server-id=64999",
            "--host=127.0.0.1",
            f"--port={mariadb.port}",
            "--user=cdc",
            f"--password={mariadb.cdc_password}",
            f"--result-file={archive}/",
            first_file,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_archived(mariadb, archive: Path, timeout: float = 60) -> None:
    """Until every closed binlog file is in the archive whole."""
    deadline = time.monotonic() + timeout
    while True:
        with mariadb.root_connection() as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = cur.fetchall()
        closed = files[:-1]
        if all((archive / name).exists() and (archive / name).stat().st_size == size for name, size, *_ in closed):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the archive keeper did not copy {closed} in {timeout}s")
        time.sleep(0.2)


def test_purged_binlogs_are_read_from_the_archive_exactly_once_across_a_kill(spark, mariadb, database, tmp_path):
    db = database
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT, note VARCHAR(20))")
    archive = tmp_path / "archive"
    archive.mkdir()
    config_path = tmp_path / "binlake.yml"
    config_path.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lake"),
            [f"{db}.*"],
            server_id=7300,
            capture={"startup": "latest", "on_purge": "archive", "archive": str(archive), "max_batch_rows": 20},
        )
    )
    config = load_config(config_path)
    run_capture(spark, config)  # the resume position, before every change below
    with mariadb.root_connection() as conn:
        keeper = _keep_archive(mariadb, archive, master_status(conn).file)
    try:
        for wave in range(3):
            base = wave * 100
            mariadb.execute(
                f"INSERT INTO `{db}`.t VALUES " + ",".join(f"({base + i}, {i}, 'w{wave}')" for i in range(40)),
                f"UPDATE `{db}`.t SET v = v + 1000 WHERE id >= {base} AND id < {base + 15}",
                f"DELETE FROM `{db}`.t WHERE id >= {base + 30}",
                "FLUSH BINARY LOGS",
            )
        _wait_archived(mariadb, archive)
    finally:
        keeper.send_signal(signal.SIGTERM)
        keeper.wait(timeout=30)
    # A change only the server has: capture moves from the archive to the server.
    mariadb.execute(f"INSERT INTO `{db}`.t VALUES (1000, 1, 'server')")
    mariadb.purge_binlogs()

    assert capture_process(config_path, kill_at="capture.after_commit@1") == -signal.SIGKILL
    assert capture_process(config_path) == 0

    lh = Lakehouse(config)
    rows = lh.changelog.read(spark).where(f"db = '{db}'").collect()
    counts = Counter(r.op for r in rows)
    assert counts == {"insert": 3 * 40 + 1, "update": 3 * 15, "delete": 3 * 10}, counts
    seqs = [(r.file_index, r.pos, r.row) for r in rows]
    assert len(seqs) == len(set(seqs)), "no change twice across the kill"
    with mariadb.root_connection() as conn:
        assert capture_position(spark, lh) == master_status(conn)

    run_silver(spark, config)
    run_gold(spark, config)
    diffs = diff_with_source(spark, config)
    assert all(d.ok for d in diffs), "\n".join(d.describe() for d in diffs)


def test_a_gap_the_archive_does_not_close_is_named_with_its_fix(spark, mariadb, database, tmp_path):
    mariadb.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    archive = tmp_path / "archive"
    archive.mkdir()
    config = load_config(
        _write(
            tmp_path,
            mariadb.config_yaml(
                str(tmp_path / "lake"),
                [f"{database}.*"],
                server_id=7310,
                capture={"startup": "latest", "on_purge": "archive", "archive": str(archive)},
            ),
        )
    )
    run_capture(spark, config)
    missing = capture_position(spark, Lakehouse(config)).file
    mariadb.execute(f"INSERT INTO `{database}`.t VALUES (1)", "FLUSH BINARY LOGS")
    mariadb.purge_binlogs()
    with pytest.raises(BinlogPurgedError, match=rf"{missing} .*neither on the server .* nor in capture.archive"):
        run_capture(spark, config)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "binlake.yml"
    path.write_text(text)
    return path
