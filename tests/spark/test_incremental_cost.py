"""Cost follows the changes, not the tables (docs/architecture.md, "Cost"): a table with
nothing new costs silver and gold no Spark job, no Delta read and no commit; a table's first
load is a bulk append; gold merges what changed in silver instead of rewriting the table."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import yaml
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py
from spark_costs import jobs_run  # tests/spark_costs.py

from binlake.config import load_config_text
from binlake.contract.types import Kind
from binlake.gold.publish import run_gold
from binlake.silver.run import run_silver

# Most tests build lakehouses through silver and gold and count what the next runs cost:
# left out of `make test-fast`, run by `make test`.
pytestmark = pytest.mark.slow


def t(i: int):
    return table(f"shop.t{i}", [col("id"), col("v", Kind.STRING), col("n")])


def lakehouse(spark, path, tables: int) -> Bronze:
    """``tables`` tables of three rows each, applied to silver and published to gold once."""
    b = Bronze(spark, path)
    for i in range(tables):
        b.schema(t(i))
    b.commit(*[b.insert(t(i), (1, 100 + i, r), id=r, v=f"v{r}", n=r) for i in range(tables) for r in range(3)])
    run_silver(spark, b.config)
    run_gold(spark, b.config)
    return b


@pytest.fixture(scope="module")
def one_base(spark, tmp_path_factory) -> Bronze:
    return lakehouse(spark, tmp_path_factory.mktemp("incremental_one") / "lh", 1)


@pytest.fixture
def one(one_base) -> Bronze:
    """One table of three rows, applied to silver and published to gold once; shared by the
    tests that change it from there, each test's changes cut back after it
    (tests/delta_rollback.py). The tests that count Spark jobs build their own lakehouses:
    a cut back drops Delta's cached snapshots, which a job count would see."""
    checkpoint = one_base.checkpoint()
    yield one_base
    one_base.rollback(checkpoint)


def versions(b: Bronze, spark, names) -> dict:
    return {n: b.lh.silver("shop", n).latest_version(spark) for n in names}


def test_tables_with_nothing_new_cost_silver_and_gold_no_spark_job(spark, tmp_path):
    small, large = lakehouse(spark, tmp_path / "one", 1), lakehouse(spark, tmp_path / "three", 3)
    idle = ["t1", "t2"]  # the tables of the three-table lakehouse the change leaves alone
    costs = {}
    for name, b in (("one", small), ("three", large)):
        b.commit(b.update(t(0), (2, 10, 0), {"id": 1, "v": "v1", "n": 1}, {"id": 1, "v": "changed", "n": 1}))
        idle_before = versions(b, spark, idle) if name == "three" else {}
        costs[name] = (
            jobs_run(lambda b=b: run_silver(spark, b.config)),
            jobs_run(lambda b=b: run_gold(spark, b.config)),
        )
        if name == "three":
            assert versions(b, spark, idle) == idle_before  # not written either
        assert b.lh.gold("shop", "t0").read(spark).where("id = 1").first()["v"] == "changed"
    assert costs["one"][0] > 0
    assert costs["one"][1] > 0
    assert costs["three"] == costs["one"], f"two idle tables added Spark jobs (silver, gold): {costs}"


def test_a_run_with_nothing_new_commits_nothing_and_runs_no_spark_job(spark, tmp_path):
    b = lakehouse(spark, tmp_path / "lh", 2)
    tables = [b.lh.silver_progress, b.lh.silver("shop", "t0"), b.lh.gold("shop", "t0"), b.lh.publish_log]
    before = [ref.latest_version(spark) for ref in tables]

    results = []
    assert jobs_run(lambda: results.append(run_silver(spark, b.config))) == 0
    assert jobs_run(lambda: results.append(run_gold(spark, b.config))) == 0
    silver, gold = results

    assert [ref.latest_version(spark) for ref in tables] == before
    assert silver.untouched == 2
    assert gold.status == "unchanged"


def test_a_source_without_gtids_publishes_its_commit_times_without_reading_the_change_log(spark, tmp_path):
    # The fixture's records carry commit times and no GTID, as a MySQL source with gtid_mode
    # OFF: the facts silver learnt over the commits it read go on with each run's new ones.
    b = lakehouse(spark, tmp_path / "lh", 1)
    reads = []
    real = type(b.lh.changelog).read

    def counted(ref, spark_, *args, **kwargs):
        if ref == b.lh.changelog:
            reads.append(ref)
        return real(ref, spark_, *args, **kwargs)

    for i, when in enumerate((datetime(2026, 11, 2, 3, 4, 5), datetime(2026, 11, 2, 3, 4, 9))):
        before, after = {"id": 1, "v": f"c{i - 1}", "n": 1}, {"id": 1, "v": f"c{i}", "n": 1}
        b.commit(b.update(t(0), (2, 10 + i, 0), before, after)._replace(commit_ts=when))
        run_silver(spark, b.config)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(type(b.lh.changelog), "read", counted)
            gold = run_gold(spark, b.config)
        assert (gold.gtid, str(gold.source_time)[:19]) == (None, str(when))
    assert reads == [], "gold read the change log for facts silver had learnt"


@pytest.mark.parametrize("form", ["typed", "map"])
def test_a_first_load_of_snapshot_rows_is_a_bulk_append(spark, tmp_path, form, monkeypatch):
    """Typed snapshot rows are appended as they are (no value decoded); map-form ones, which
    an earlier binlake wrote, are decoded on the way. Typed chunks' files stay apart in silver
    (not funneled into one file), so the load and gold's first read of it run in parallel."""
    from binlake.contract import types

    b = Bronze(spark, tmp_path / "lh")
    b.schema(t(0))
    rows = [{"id": i, "v": f"v{i}", "n": i} for i in range(8)]
    b.chunk(t(0), rows[:5], lw=(1, 50), start=None, end=[5], chunk_id=0, form=form)
    b.chunk(t(0), rows[5:], lw=(1, 60), start=[5], end=None, chunk_id=1, form=form)
    b.commit(heartbeat=(1, 70))

    decoded = []
    real = types.spark_decode_sql
    monkeypatch.setattr("binlake.silver.batch.spark_decode_sql", lambda *a: decoded.append(a) or real(*a))
    result = run_silver(spark, b.config)
    assert bool(decoded) == (form == "map")

    assert result.table("shop.t0").bulk_loaded
    assert result.table("shop.t0").merged == 8
    history = b.lh.silver("shop", "t0").delta(spark).history().select("operation").collect()
    assert "MERGE" not in {r["operation"] for r in history}
    rows = b.lh.silver("shop", "t0").read(spark).orderBy("id").collect()
    assert [(r["id"], r["_cdc_seq"]["pos"], r["_cdc_seq"]["row"], r["_cdc_op"]) for r in rows][:1] == [
        (0, 50, -1, "snapshot")
    ]
    assert len(rows) == 8
    assert not any(r["_cdc_deleted"] for r in rows)
    if form == "typed":
        # How Spark packs the snapshot's small files into read tasks is its own affair; what
        # binlake owns is that the load is not funneled through one task into one file.
        snapshot = b.lh.snapshot_table("shop", "t0", "snap1").read(spark).inputFiles()
        loaded = b.lh.silver("shop", "t0").read(spark).inputFiles()
        assert 1 < len(loaded) <= len(snapshot), (loaded, snapshot)


@pytest.mark.parametrize("why", ["a change-log record", "two attempts of one chunk"])
def test_anything_unusual_takes_the_merge_path(spark, tmp_path, why):
    b = Bronze(spark, tmp_path / "lh")
    b.schema(t(0))
    b.chunk(t(0), [{"id": 1, "v": "old", "n": 1}], lw=(1, 50), chunk_id=0)
    if why == "a change-log record":
        b.commit(b.update(t(0), (1, 60, 0), {"id": 1, "v": "old", "n": 1}, {"id": 1, "v": "new", "n": 1}))
    else:
        b.chunk(t(0), [{"id": 1, "v": "new", "n": 1}], lw=(1, 60), chunk_id=0, attempt_id="a2")
        b.commit(heartbeat=(1, 70))

    result = run_silver(spark, b.config)

    assert not result.table("shop.t0").bulk_loaded
    assert [(r["id"], r["v"]) for r in b.lh.silver("shop", "t0").read(spark).collect()] == [(1, "new")]


class Killed(BaseException):
    """Stands in for kill -9 at a fault point: nothing of binlake's error handling runs."""


def killed_after_the_bulk_append(spark, tmp_path, monkeypatch) -> Bronze:
    """A table's first load of four snapshot rows, killed right after its append committed
    and before its progress row."""
    from binlake import faults

    b = Bronze(spark, tmp_path / "lh")
    b.schema(t(0))
    b.chunk(t(0), [{"id": i, "v": f"v{i}", "n": i} for i in range(4)], lw=(1, 50), chunk_id=0)
    b.commit(heartbeat=(1, 70))

    def kill_after_append(name):
        if name == "silver.after_bulk_load":
            raise Killed(name)

    monkeypatch.setattr(faults, "point", kill_after_append)
    with pytest.raises(Killed):
        run_silver(spark, b.config)
    monkeypatch.undo()
    return b


def test_a_run_killed_after_the_bulk_append_converges(spark, tmp_path, monkeypatch):
    b = killed_after_the_bulk_append(spark, tmp_path, monkeypatch)

    again = run_silver(spark, b.config)  # the table is no longer empty: the same rows are MERGEd

    assert not again.table("shop.t0").bulk_loaded
    assert again.table("shop.t0").merged == 0
    assert sorted(r["id"] for r in b.lh.silver("shop", "t0").read(spark).collect()) == [0, 1, 2, 3]


def test_two_runs_that_both_found_the_table_empty_load_its_rows_once(spark, tmp_path, monkeypatch):
    from binlake.contract.tables import TableRef

    b = killed_after_the_bulk_append(spark, tmp_path, monkeypatch)  # the first run appended the rows
    # The second run checked for emptiness before the first one's append committed.
    monkeypatch.setattr(TableRef, "is_empty", lambda self, spark: True)

    again = run_silver(spark, b.config)

    assert again.table("shop.t0").bulk_loaded
    assert again.table("shop.t0").merged == 0
    assert sorted(r["id"] for r in b.lh.silver("shop", "t0").read(spark).collect()) == [0, 1, 2, 3]


def test_gold_merges_what_changed_in_silver(spark, one):
    b = one
    first = b.lh.gold("shop", "t0").latest_version(spark)
    b.commit(
        b.update(t(0), (2, 10, 0), {"id": 1, "v": "v1", "n": 1}, {"id": 1, "v": "changed", "n": 1}),
        b.delete(t(0), (2, 10, 1), id=2, v="v2", n=2),
        b.insert(t(0), (2, 10, 2), id=9, v="new", n=9),
    )
    run_silver(spark, b.config)

    result = run_gold(spark, b.config)

    [t0] = result.tables
    assert t0.mode == "incremental"
    assert t0.row_count == 3
    assert t0.silver_rows == 3
    ops = b.lh.gold("shop", "t0").delta(spark).history(t0.gold_version - first).select("operation").collect()
    assert {r["operation"] for r in ops} == {"MERGE"}
    assert sorted((r["id"], r["v"]) for r in b.lh.gold("shop", "t0").read(spark).collect()) == [
        (0, "v0"),
        (1, "changed"),
        (9, "new"),
    ]
    logged = b.lh.publish_log.read(spark).where(f"publish_id = '{result.publish_id}'").first()
    assert all(c["success"] for c in json.loads(logged["checks"])["results"])


def test_a_publish_takes_each_keys_last_change_over_several_silver_runs_and_skips_compacted_tombstones(spark, one):
    b = one
    silver, gold = b.lh.silver("shop", "t0"), b.lh.gold("shop", "t0")
    b.commit(
        b.update(t(0), (2, 10, 0), {"id": 1, "v": "v1", "n": 1}, {"id": 1, "v": "first", "n": 1}),
        b.delete(t(0), (2, 10, 1), id=2, v="v2", n=2),
        b.delete(t(0), (2, 10, 2), id=0, v="v0", n=0),
    )
    run_silver(spark, b.config)
    run_gold(spark, b.config)
    # Two silver runs between publishes, and between them what binlake maintain's tombstone
    # compaction does: the tombstone gold already applied leaves silver (a delete in its feed).
    b.commit(b.update(t(0), (2, 20, 0), {"id": 1, "v": "first", "n": 1}, {"id": 1, "v": "second", "n": 1}))
    run_silver(spark, b.config)
    spark.sql(f"DELETE FROM {silver.sql} WHERE _cdc_deleted")
    b.commit(
        b.update(t(0), (2, 30, 0), {"id": 1, "v": "second", "n": 1}, {"id": 1, "v": "third", "n": 1}),
        b.insert(t(0), (2, 30, 1), id=2, v="back", n=2),
    )
    run_silver(spark, b.config)

    [t0] = run_gold(spark, b.config).tables

    assert t0.mode == "incremental"
    assert t0.row_count == 2
    assert t0.silver_rows == 2
    assert sorted((r["id"], r["v"]) for r in gold.read(spark).collect()) == [(1, "third"), (2, "back")]


def test_optimize_on_gold_keeps_publishes_incremental_and_a_foreign_write_is_rebuilt_over(spark, one):
    b = one
    gold = b.lh.gold("shop", "t0")
    b.commit(b.insert(t(0), (1, 200, 0), id=3, v="v3", n=3))
    run_silver(spark, b.config)
    run_gold(spark, b.config)  # a second file
    published = gold.latest_version(spark)
    # What binlake maintain does: silver and gold compacted between two publishes.
    silver = b.lh.silver("shop", "t0")
    compacted = silver.latest_version(spark)
    spark.sql(f"OPTIMIZE {silver.sql}")
    spark.sql(f"OPTIMIZE {gold.sql}")
    assert gold.latest_version(spark) > published
    assert silver.latest_version(spark) > compacted
    b.commit(b.update(t(0), (2, 10, 0), {"id": 1, "v": "v1", "n": 1}, {"id": 1, "v": "changed", "n": 1}))
    run_silver(spark, b.config)

    assert [x.mode for x in run_gold(spark, b.config).tables] == ["incremental"]
    assert sorted((r["id"], r["v"]) for r in gold.read(spark).collect()) == [
        (0, "v0"),
        (1, "changed"),
        (2, "v2"),
        (3, "v3"),
    ]

    spark.sql(f"DELETE FROM {gold.sql} WHERE id = 0")  # someone's write: gold no longer what was published
    b.commit(b.update(t(0), (2, 20, 0), {"id": 1, "v": "changed", "n": 1}, {"id": 1, "v": "again", "n": 1}))
    run_silver(spark, b.config)

    assert [x.mode for x in run_gold(spark, b.config).tables] == ["rebuild"]
    assert sorted((r["id"], r["v"]) for r in gold.read(spark).collect()) == [
        (0, "v0"),
        (1, "again"),
        (2, "v2"),
        (3, "v3"),
    ]


def test_a_changed_rule_set_rebuilds_and_a_drop_rule_keeps_rows_out_of_incremental_publishes(spark, one):
    b = one
    doc = {
        "source": {
            "host": "127.0.0.1",
            "port": 3306,
            "user": "cdc",
            "password": "pw",
            "server_id": 77,
            "tables": ["shop.*"],
        },
        "lakehouse": {"path": b.config.lakehouse.path},
        "gold": {"checks": {"shop.t0": [{"column": "n", "between": [0, 10], "severity": "drop"}]}},
    }
    checked = load_config_text(yaml.safe_dump(doc))
    rebuilt = run_gold(spark, checked)
    assert [x.mode for x in rebuilt.tables] == ["rebuild"]

    b.commit(
        b.update(t(0), (2, 10, 0), {"id": 1, "v": "v1", "n": 1}, {"id": 1, "v": "v1", "n": 50}),
        b.insert(t(0), (2, 10, 1), id=7, v="ok", n=7),
    )
    run_silver(spark, checked)
    result = run_gold(spark, checked)

    [t0] = result.tables
    assert t0.mode == "incremental"
    assert t0.dropped == 1
    assert t0.row_count == 3
    assert t0.silver_rows == 4
    assert sorted(r["id"] for r in b.lh.gold("shop", "t0").read(spark).collect()) == [0, 2, 7]
    quarantined = b.lh.quarantine("shop", "t0").read(spark).where(f"_publish_id = '{result.publish_id}'").collect()
    assert [(r["id"], r["n"]) for r in quarantined] == [(1, 50)]


def test_a_publish_killed_after_its_gold_merge_converges(spark, one, monkeypatch):
    from binlake import faults

    b = one
    b.commit(
        b.update(t(0), (2, 10, 0), {"id": 1, "v": "v1", "n": 1}, {"id": 1, "v": "changed", "n": 1}),
        b.delete(t(0), (2, 10, 1), id=2, v="v2", n=2),
    )
    run_silver(spark, b.config)

    def kill_after_merge(name):
        if name == "gold.after_incremental_merge":
            raise Killed(name)

    monkeypatch.setattr(faults, "point", kill_after_merge)
    with pytest.raises(Killed):
        run_gold(spark, b.config)
    monkeypatch.undo()

    again = run_gold(spark, b.config)  # gold moved by the killed publish: its MERGE runs again

    assert [x.mode for x in again.tables] == ["incremental"]
    assert again.tables[0].row_count == 2
    assert sorted((r["id"], r["v"]) for r in b.lh.gold("shop", "t0").read(spark).collect()) == [
        (0, "v0"),
        (1, "changed"),
    ]
