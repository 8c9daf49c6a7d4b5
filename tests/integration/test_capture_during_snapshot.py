"""The very first capture, started while the first snapshot is reading (docs/architecture.md,
"The snapshot protocol": capture must start at or before the smallest low watermark of any
chunk it replays against).

A chunk's low watermark is taken long before its manifest row is committed. A first capture
that looked only at the manifest started at the server's current position, after that low
watermark, so a change between the chunk's SELECT and the capture's start was in neither
the snapshot nor the change log, and silver (and gold) silently kept the old row. This is
what happens when ``binlake capture --continuous`` and ``binlake snapshot`` are started
together on a new deployment.
"""

from __future__ import annotations

import os
import threading
import time

from binlake.bronze.capture import run_capture
from binlake.bronze.snapshot import BARRIER_ENV, run_snapshot
from binlake.contract.tables import Lakehouse
from binlake.silver.run import run_silver


def test_first_capture_while_a_chunk_is_in_flight_starts_before_its_low_watermark(
    spark, mariadb, database, make_config, tmp_path, monkeypatch
):
    db = database
    mariadb.execute(
        "CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO r VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(1, 21)),
        database=db,
    )
    config = make_config([f"{db}.*"], snapshot={"chunk_size": 100, "parallelism": 1})  # one chunk
    first = []

    def after_select():
        # The chunk has its low watermark and its rows; its manifest row is far away.
        mariadb.execute(
            "UPDATE r SET v = 'changed' WHERE id = 5",
            "DELETE FROM r WHERE id = 7",
            "INSERT INTO r VALUES (25, 'new')",
            database=db,
        )
        first.append(run_capture(spark, config))  # no capture state, no manifest row yet

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    monkeypatch.setenv(BARRIER_ENV, str(barrier))
    stop, errors = threading.Event(), []

    def release():  # every reader stage passes; the first capture runs at the SELECT's end
        try:
            while not stop.is_set():
                for name in os.listdir(barrier):
                    if name.endswith(".go") or os.path.exists(barrier / f"{name}.go"):
                        continue
                    if name == f"{db}.r.0.select":
                        after_select()
                    (barrier / f"{name}.go").touch()
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            stop.set()

    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    try:
        run_snapshot(spark, config)
    finally:
        stop.set()
        releaser.join(timeout=60)
    assert not errors, errors
    assert len(first) == 1

    lh = Lakehouse(config)
    [chunk] = lh.snapshot_chunks.read(spark).where(f"db = '{db}'").collect()
    assert first[0].start.key() <= (chunk["lw_file_index"], chunk["lw_pos"])

    run_capture(spark, config)
    run_silver(spark, config)
    live = {r["id"]: r["v"] for r in lh.silver(db, "r").read(spark).where("NOT _cdc_deleted").collect()}
    expected = {i: f"v{i}" for i in range(1, 21) if i != 7} | {5: "changed", 25: "new"}
    assert live == expected
