"""Capture throughput: rows/s into bronze vs a bare python-mysql-replication loop.

Both read the same binlog range in the same run: the peer iterates the rows of every row
event of the benchmark table (decoding included, writing nothing); binlake decodes, encodes
to canonical texts and commits to the Delta change log. The data is spread over several
binlog files (FLUSH BINARY LOGS during the load) because reading files in parallel on
executors is how capture can outrun the single-threaded loop.
"""

from __future__ import annotations

import time

from benchmarks.run import result


def _load(mariadb, db: str, rows: int, files: int) -> None:
    mariadb.execute(f"DROP DATABASE IF EXISTS `{db}`", f"CREATE DATABASE `{db}`")
    mariadb.execute(
        f"CREATE TABLE `{db}`.orders (id BIGINT PRIMARY KEY, customer INT NOT NULL, note VARCHAR(40), "
        "amount DECIMAL(12,2), created DATETIME(6), status ENUM('new','paid','sent'))"
    )
    per_file = max(1, rows // files)
    stmt_rows = 500
    with mariadb.root_connection(db) as conn, conn.cursor() as cur:
        for start in range(0, rows, stmt_rows):
            values = ",".join(
                f"({i}, {i % 977}, 'note {i}', {i % 10000}.{i % 100:02d}, '2026-01-01 00:00:00.{i % 1000000:06d}', "
                f"'{('new', 'paid', 'sent')[i % 3]}')"
                for i in range(start, min(rows, start + stmt_rows))
            )
            cur.execute(f"INSERT INTO orders VALUES {values}")
            if (start + stmt_rows) % per_file < stmt_rows and start + stmt_rows < rows:
                cur.execute("FLUSH BINARY LOGS")


def _bare_loop(config, db: str, start, end) -> tuple[int, float]:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import (
        DeleteRowsEvent,
        UpdateRowsEvent,
        WriteRowsEvent,
    )

    from binlake.source.binlog.dump import stream_settings

    began = time.monotonic()
    stream = BinLogStreamReader(
        connection_settings=stream_settings(config.source),
        server_id=config.source.server_id + 200,
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=False,
        enable_logging=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    n = 0
    try:
        for event in stream:
            if event.schema == db:
                for _ in event.rows:
                    n += 1
            if (stream.log_file, stream.log_pos) >= (end.file, end.pos) and stream.log_file == end.file:
                break
    finally:
        stream.close()
    return n, time.monotonic() - began


def _lakehouse_at(ctx, db: str, start, run_no: int):
    """A fresh lakehouse whose capture has started at ``start`` (bronze tables created, the
    start committed), so that the timed run is steady state, as every scheduled run but the first."""
    from binlake.bronze.capture import run_capture
    from binlake.config import load_config

    path = ctx.workdir / f"capture_{run_no}.yml"
    path.write_text(
        ctx.mariadb.config_yaml(
            str(ctx.workdir / f"capture_lake_{run_no}"),
            [f"{db}.*"],
            server_id=9100 + run_no,
            capture={"startup": "position", "start_position": str(start)},
        )
    )
    config = load_config(path)
    run_capture(ctx.spark, config)
    return config


def run(ctx) -> list[dict]:
    from binlake.bronze.capture import run_capture
    from binlake.config import load_config
    from binlake.source.mysql import connect, master_status

    rows, files = (20_000, 4) if ctx.quick else (400_000, 8)
    db = "bench_capture"
    ctx.mariadb.execute(f"DROP DATABASE IF EXISTS `{db}`", "FLUSH BINARY LOGS")
    path = ctx.workdir / "capture.yml"
    path.write_text(ctx.mariadb.config_yaml(str(ctx.workdir / "capture_lake"), [f"{db}.*"], server_id=9100))
    config = load_config(path)
    with connect(config.source) as conn:
        start = master_status(conn)
    lakehouses = [_lakehouse_at(ctx, db, start, run_no) for run_no in (1, 2)]
    _load(ctx.mariadb, db, rows, files)
    with connect(config.source) as conn:
        end = master_status(conn)

    # Alternating, best of two each: right after the load the server is still flushing, and
    # whoever reads first would pay for it.
    peer_runs, runs = [], []
    for lakehouse in lakehouses:
        peer_rows, seconds = _bare_loop(config, db, start, end)
        peer_runs.append(seconds)
        began = time.monotonic()
        changes = run_capture(ctx.spark, lakehouse).changes
        runs.append(time.monotonic() - began)
        if changes != rows or peer_rows != rows:
            raise AssertionError(f"expected {rows} rows, capture wrote {changes}, the loop saw {peer_rows}")
    seconds, peer_seconds = min(runs), min(peer_runs)
    print(
        f"   capture: {rows} rows over {files} files, best of 2: binlake {seconds:.1f}s "
        f"(runs {', '.join(f'{r:.1f}' for r in runs)}), bare loop {peer_seconds:.1f}s "
        f"(runs {', '.join(f'{r:.1f}' for r in peer_runs)})",
        flush=True,
    )
    return [
        result("capture_rows_per_s", rows / seconds, "rows/s", "python-mysql-replication loop", rows / peer_seconds)
    ]
