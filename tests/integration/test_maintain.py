"""``binlake maintain``: silver tombstones go only below the safe bound (a snapshot still being
read keeps them, so its late rows still lose), bronze keeps what a re-built silver table or
a repair needs and drops the rest, compaction and VACUUM leave every layer equal to the source."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from source_diff import assert_layers_equal_source  # tests/source_diff.py

from binlake.bronze.capture import run_capture
from binlake.bronze.snapshot import BARRIER_ENV, run_snapshot
from binlake.contract.tables import Lakehouse
from binlake.ops.maintain import run_maintain
from binlake.ops.pipeline import run_pipeline
from binlake.silver.run import run_silver


class PausedSnapshot(threading.Thread):
    """``run_snapshot`` of one table whose chunk 0 waits after its SELECT until released."""

    def __init__(self, spark, config, table: str, barrier: Path):
        super().__init__(daemon=True)
        self.spark, self.config, self.table, self.barrier = spark, config, table, barrier
        self.release = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            run_snapshot(self.spark, self.config, tables=[self.table])
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc

    def wait_until_read(self, timeout: float = 120) -> None:
        target = self.barrier / f"{self.table}.0.select"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for f in self.barrier.glob("*"):
                if f.suffix != ".go" and not Path(f"{f}.go").exists() and f != target:
                    Path(f"{f}.go").touch()  # every other pause passes at once
            if target.exists():
                return
            time.sleep(0.05)
        raise AssertionError("the snapshot reader never reached its SELECT")

    def finish(self) -> None:
        Path(f"{self.barrier / f'{self.table}.0.select'}.go").touch()
        self.join(timeout=300)
        if self.error is not None:
            raise self.error


def _silver_keys(spark, lh, db: str, deleted: bool) -> set[int]:
    df = lh.silver(db, "t").read(spark)
    return {r["id"] for r in df.where(f"_cdc_deleted = {str(deleted).lower()}").select("id").collect()}


def test_maintain_removes_only_what_nothing_needs_and_every_layer_stays_equal(
    spark, mariadb, database, make_config, tmp_path, monkeypatch
):
    db = database
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t SELECT seq, seq FROM seq_1_to_20", database=db
    )
    config = make_config(
        [f"{db}.t"],
        snapshot={"chunk_size": 100},
        maintenance={"tombstone_retention_hours": 0, "changelog_retention_days": 0, "optimize_min_files": 2},
    )
    lh = Lakehouse(config)
    assert run_pipeline(spark, config).ok
    mariadb.execute("DELETE FROM t WHERE id = 1", database=db)
    assert run_pipeline(spark, config).ok  # tombstone for 1
    first_snapshot = {r["snapshot_id"] for r in lh.snapshot_plan.read(spark).collect()}

    # A re-snapshot reads id 3; then 3 is deleted and silver applies the delete.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    monkeypatch.setenv(BARRIER_ENV, str(barrier))
    snap = PausedSnapshot(spark, config, f"{db}.t", barrier)
    snap.start()
    snap.wait_until_read()
    monkeypatch.delenv(BARRIER_ENV)
    mariadb.execute("DELETE FROM t WHERE id = 3", database=db)
    run_capture(spark, config)
    run_silver(spark, config)
    assert {1, 3} <= _silver_keys(spark, lh, db, deleted=True)

    # While that snapshot is being read, its table keeps every tombstone.
    kept = run_maintain(spark, config)
    assert kept.tombstones_kept == {f"{db}.t": "a snapshot of it is still being read"}
    assert {1, 3} <= _silver_keys(spark, lh, db, deleted=True)

    # Its late row of 3 arrives and still loses to the delete.
    snap.finish()
    run_silver(spark, config)
    assert 3 in _silver_keys(spark, lh, db, deleted=True)
    assert 3 not in _silver_keys(spark, lh, db, deleted=False)

    # Gold has not published the delete of 3 yet: its tombstone stays until it has. The first
    # snapshot's rows go (the re-snapshot is complete and applied), and the old change log.
    pruned = run_maintain(spark, config)
    assert 3 in _silver_keys(spark, lh, db, deleted=True)
    assert pruned.snapshot_files_removed > 0
    assert pruned.changelog_rows_removed > 0
    assert run_pipeline(spark, config).ok

    # Now nothing can arrive below silver's position and gold has the delete: the tombstones go.
    result = run_maintain(spark, config)
    assert result.tombstones_removed[f"{db}.t"] >= 1
    assert not result.tombstones_kept
    assert _silver_keys(spark, lh, db, deleted=True) == set()
    remaining = set(lh.snapshot_tables(spark, db, "t"))
    assert remaining
    assert not (remaining & first_snapshot)
    assert result.vacuumed
    assert "tombstone(s) removed" in result.summary()

    # Every layer still equals the source, and goes on doing so.
    def equal() -> None:
        assert_layers_equal_source(spark, config)

    mariadb.execute("UPDATE t SET v = -5 WHERE id = 5", "INSERT INTO t VALUES (1, 100)", database=db)
    assert run_pipeline(spark, config).ok
    equal()
    # New commits made new files: this run compacts them. (That a publish stays incremental
    # over a compacted gold table is tests/spark/test_incremental_cost.py's.)
    again = run_maintain(spark, config)
    assert again.snapshot_files_removed == 0
    assert again.optimized
