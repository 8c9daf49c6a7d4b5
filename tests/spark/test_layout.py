"""The layout migration (binlake.contract.layout) on a lakehouse laid out as earlier binlake
versions left it (layout 0), built here table by table as their code created it: binlake's own
tables in gold and silver with leading underscores, the publish log without its change data
feed and without silver_rows and publish_group, the progress table without silver_version,
stopped and history_version, snapshot_rows without its write properties, and the continuous
state under <path>/_system. tests/integration/test_layout_migration.py migrates a lakehouse
the pipeline wrote and runs every command on it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from binlake.config import Config, LakehouseConfig, Secret, SourceConfig
from binlake.contract import layout
from binlake.contract.layout import LAYOUT_VERSION, ensure_current_layout, layout_version, require_current_layout
from binlake.contract.leases import LAYOUT_PROPERTY, Holder
from binlake.contract.schemas import CHECK_RESULTS_SCHEMA, METRICS_SCHEMA, SNAPSHOT_ROWS_SCHEMA
from binlake.contract.tables import Lakehouse, TableRef
from binlake.errors import LayoutOutdatedError, LayoutTooNewError

# The column sets of layout 0, as the earliest binlake with these tables created them.
OLD_PUBLISH_LOG = (
    "publish_id STRING, db STRING, `table` STRING, gold_version BIGINT, silver_version BIGINT, "
    "binlog_file STRING, file_index BIGINT, pos BIGINT, gtid STRING, source_time TIMESTAMP, "
    "published_at TIMESTAMP, row_count BIGINT, checks STRING, status STRING"
)
OLD_PROGRESS = (
    "db STRING, `table` STRING, changelog_version BIGINT, chunks_version BIGINT, "
    "applied_file STRING, applied_file_index BIGINT, applied_pos BIGINT, zero_dates BIGINT, updated_at TIMESTAMP"
)
T = datetime(2026, 11, 20, 10, 0, 0)


def _config(root: Path) -> Config:
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("pw"), server_id=9, tables=("shop.*",))
    return Config(source=source, lakehouse=LakehouseConfig(path=str(root)))


@pytest.fixture
def old_lake(spark, tmp_path):
    """A layout 0 lakehouse with rows in every system table."""
    layout.forget_checked_layouts()
    lh = Lakehouse(_config(tmp_path / "lake"))

    def table(ref: TableRef, schema: str, rows: list[tuple]) -> None:
        spark.createDataFrame(rows, schema).write.format("delta").save(ref.path)

    table(
        lh.layout_0_table("publish_log"),
        OLD_PUBLISH_LOG,
        [
            ("p1", "shop", "orders", 1, 3, "mysql-bin.000001", 1, 400, None, T, T, 2, "[]", "published"),
            ("p2", "shop", "orders", 2, 5, "mysql-bin.000001", 1, 900, None, T, T, 3, "[]", "published"),
        ],
    )
    table(
        lh.layout_0_table("silver_progress"),
        OLD_PROGRESS,
        [("shop", "orders", 7, 2, "mysql-bin.000001", 1, 900, 0, T)],
    )
    table(
        lh.layout_0_table("metrics"),
        METRICS_SCHEMA,
        [("r1", "run", "gold", None, None, T, 1.5, "ok") + (None,) * 11],
    )
    table(
        lh.layout_0_table("check_results"),
        CHECK_RESULTS_SCHEMA,
        [("p2", "shop", "shop", "orders", "published", True, T, "1.0", "{}")],
    )
    table(
        TableRef(path=str(Path(lh.root, "gold", "_quarantine", "shop", "orders"))),
        "id INT, qty INT, _quarantine_check STRING, _publish_id STRING",
        [(9, 500, "between(qty, 0, 100)", "p2")],
    )
    table(lh.snapshot_rows, SNAPSHOT_ROWS_SCHEMA, [("s1", "shop", "orders", 0, "a", 1, 4, "v1", {"id": "1"}, None)])
    state = Path(lh.root, "_system", "continuous", "state.json")
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"loops": 3}))
    return lh


def _rows(spark, ref: TableRef) -> list[tuple]:
    return sorted(tuple(r) for r in ref.read(spark).collect())


def test_a_new_lakehouse_starts_at_the_current_layout_and_runs_no_step(spark, tmp_path):
    layout.forget_checked_layouts()
    lh = Lakehouse(_config(tmp_path / "new"))
    assert layout_version(spark, lh) is None
    require_current_layout(spark, lh)  # nothing to read yet: nothing to refuse
    assert ensure_current_layout(spark, lh, Holder("capture")) == []
    assert lh.leases.properties(spark)[LAYOUT_PROPERTY] == str(LAYOUT_VERSION)


@pytest.mark.slow
def test_an_earlier_layout_is_refused_by_readers_and_migrated_once_by_a_writer(spark, old_lake):
    lh = old_lake
    before = {name: _rows(spark, lh.layout_0_table(name)) for name in ("publish_log", "metrics", "check_results")}
    with pytest.raises(LayoutOutdatedError, match=r"^the lakehouse has layout 0, .* run `binlake migrate` once"):
        require_current_layout(spark, lh)

    steps = ensure_current_layout(spark, lh, Holder("run"))
    assert [s.number for s in steps] == list(range(1, LAYOUT_VERSION + 1))
    assert lh.leases.properties(spark)[LAYOUT_PROPERTY] == str(LAYOUT_VERSION)
    require_current_layout(spark, lh)

    # Every row moved, nothing doubled; columns an earlier binlake lacked are NULL in its rows.
    log = lh.publish_log.read(spark)
    assert "silver_rows" in log.columns
    assert "publish_group" in log.columns
    assert sorted(tuple(r[c] for c in log.columns[:14]) for r in log.collect()) == before["publish_log"]
    assert {(r.silver_rows, r.publish_group) for r in log.collect()} == {(None, None)}
    assert lh.publish_log.properties(spark)["delta.enableChangeDataFeed"] == "true"
    assert _rows(spark, lh.metrics) == before["metrics"]
    assert _rows(spark, lh.check_results) == before["check_results"]
    progress = lh.silver_progress.read(spark).collect()
    assert [(r.db, r.table, r.applied_pos, r.silver_version, r.stopped, r.history_version) for r in progress] == [
        ("shop", "orders", 900, None, None, None)
    ]
    assert [(r.id, r._quarantine_check) for r in lh.quarantine("shop", "orders").read(spark).collect()] == [
        (9, "between(qty, 0, 100)")
    ]
    # The old places are gone, so gold and silver hold only mirrored tables.
    assert sorted(p.name for p in Path(lh.root, "gold").iterdir()) == []
    assert sorted(p.name for p in Path(lh.root, "silver").iterdir()) == []
    assert json.loads(Path(lh.system_dir("continuous"), "state.json").read_text()) == {"loops": 3}
    assert not Path(lh.root, "_system").exists()
    props = lh.snapshot_rows.properties(spark)
    assert props["delta.dataSkippingStatsColumns"] == "snapshot_id,attempt_id"  # unpartitioned: its own set

    # Run once: the next writer, in this process or another, finds nothing to do.
    layout.forget_checked_layouts()
    assert ensure_current_layout(spark, lh, Holder("gold")) == []


@pytest.mark.slow
def test_a_migration_killed_between_a_copy_and_its_drop_finishes_without_copying_twice(spark, old_lake, monkeypatch):
    lh = old_lake
    original = TableRef.drop

    def killed(self, spark):
        raise KeyboardInterrupt("killed after the copy")

    monkeypatch.setattr(TableRef, "drop", killed)
    with pytest.raises(KeyboardInterrupt):
        ensure_current_layout(spark, lh, Holder("run"))
    # The first table (silver progress) was copied, and its old place not yet dropped.
    assert lh.silver_progress.exists(spark)
    assert lh.layout_0_table("silver_progress").exists(spark)
    assert lh.leases.properties(spark)[LAYOUT_PROPERTY] == "0"  # the step is not recorded as done

    monkeypatch.setattr(TableRef, "drop", original)
    layout.forget_checked_layouts()
    assert ensure_current_layout(spark, lh, Holder("run"))
    assert lh.silver_progress.read(spark).count() == 1
    assert not lh.layout_0_table("silver_progress").exists(spark)
    assert lh.publish_log.read(spark).count() == 2


def test_rows_a_writer_put_at_the_new_place_before_the_move_are_kept_beside_the_old_ones(spark, old_lake):
    lh = old_lake
    # A layer function called directly (no migration) appended metrics at the new place.
    spark.createDataFrame(
        [("r2", "gold", "gold", None, None, T, 2.0, "ok") + (None,) * 11], METRICS_SCHEMA
    ).write.format("delta").save(lh.metrics.path)
    ensure_current_layout(spark, lh, Holder("run"))
    assert sorted(r.run_id for r in lh.metrics.read(spark).collect()) == ["r1", "r2"]


def test_a_lakehouse_from_a_newer_binlake_is_refused_by_readers_and_writers(spark, tmp_path):
    layout.forget_checked_layouts()
    lh = Lakehouse(_config(tmp_path / "newer"))
    ensure_current_layout(spark, lh, Holder("capture"))
    spark.sql(f"ALTER TABLE {lh.leases.sql} SET TBLPROPERTIES ('{LAYOUT_PROPERTY}' = '{LAYOUT_VERSION + 1}')")
    layout.forget_checked_layouts()
    for check in (
        lambda: require_current_layout(spark, lh),
        lambda: ensure_current_layout(spark, lh, Holder("capture")),
    ):
        with pytest.raises(LayoutTooNewError, match=rf"has layout {LAYOUT_VERSION + 1}, written by a newer binlake"):
            check()


# The manifest as binlake wrote it before typed snapshot rows (layout 3): no row_format, no zero_dates.
OLD_SNAPSHOT_CHUNKS = (
    "snapshot_id STRING, db STRING, `table` STRING, chunk_id INT, attempt_id STRING, "
    "key_columns ARRAY<STRING>, start_key STRING, end_key STRING, "
    "lw_file STRING, lw_file_index BIGINT, lw_pos BIGINT, hw_file STRING, hw_file_index BIGINT, hw_pos BIGINT, "
    "row_count BIGINT, checksum STRING, schema_version STRING, committed_at TIMESTAMP"
)


@pytest.mark.slow
def test_map_form_snapshot_rows_of_a_layout_3_lakehouse_are_migrated_in_place_and_read_by_silver(spark, tmp_path):
    """Step 4 adds the manifest's row_format and zero_dates (NULL in the rows already there:
    map form); silver then loads the old snapshot's map rows, and a new typed chunk beside
    them, into one table."""
    from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py

    from binlake.contract.types import Kind
    from binlake.silver.run import run_silver

    layout.forget_checked_layouts()
    root = tmp_path / "lake"
    lh = Lakehouse(_config(root))
    orders = table("shop.orders", [col("id"), col("v", Kind.STRING), col("d", Kind.DATE)])
    lh.snapshot_chunks.create_if_missing(spark, OLD_SNAPSHOT_CHUNKS, {"delta.enableChangeDataFeed": "true"})
    ensure_current_layout(spark, lh, Holder("run"))  # a new lakehouse: stamped current...
    spark.sql(f"ALTER TABLE {lh.leases.sql} SET TBLPROPERTIES ('{LAYOUT_PROPERTY}' = '3')")  # ...as layout 3 was
    layout.forget_checked_layouts()

    b = Bronze(spark, root)
    b.schema(orders)
    old = [{"id": 1, "v": "a", "d": "2026-01-02"}, {"id": 2, "v": "b", "d": "0000-00-00"}]
    b.chunk(orders, old, lw=(1, 50), end=[3], snapshot_id="old", chunk_id=0, form="map", manifest=False)
    # One row of the old manifest: the chunk, its bounds and low watermark; then its high
    # watermark, row count, checksum, schema version and commit time.
    manifest = [
        (
            *("old", "shop", "orders", 0, "a1", ["id"], None, '["3"]', "mysql-bin.000001", 1, 50),
            *("mysql-bin.000001", 1, 60, 2, "x", b.version("shop.orders"), T),
        )
    ]
    lh.snapshot_chunks.save(spark.createDataFrame(manifest, OLD_SNAPSHOT_CHUNKS).write.format("delta").mode("append"))

    assert [s.number for s in ensure_current_layout(spark, lh, Holder("run"))] == [4]
    chunks = lh.snapshot_chunks.read(spark).collect()
    assert [(c.snapshot_id, c.row_format, c.zero_dates) for c in chunks] == [("old", None, None)]

    b.chunk(orders, [{"id": 3, "v": "c", "d": "2026-01-04"}], lw=(1, 70), start=[3], snapshot_id="old", chunk_id=1)
    b.commit(heartbeat=(1, 80))
    result = run_silver(spark, b.config)
    assert result.table("shop.orders").zero_dates == 1  # counted from the map row's text
    rows = lh.silver("shop", "orders").read(spark).orderBy("id").collect()
    assert [(r.id, r.v, str(r.d)) for r in rows] == [(1, "a", "2026-01-02"), (2, "b", "None"), (3, "c", "2026-01-04")]
    assert {r._cdc_op for r in rows} == {"snapshot"}
