"""What a warm round costs around its MERGEs (issue 36's floor: one Delta MERGE per changed
table per layer). One changed table, counted in Spark jobs and Delta commits: silver and gold
may each spend the bare MERGE's jobs plus a small constant, and commit the MERGE plus one
bookkeeping commit (silver's progress, gold's publish log). A change that adds a job or a
commit around the MERGE fails here, not only in ``make bench``."""

from __future__ import annotations

import pytest
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py
from delta_rollback import delta_versions  # tests/delta_rollback.py
from spark_costs import jobs_run  # tests/spark_costs.py

from binlake.contract.types import Kind
from binlake.gold.publish import run_gold
from binlake.silver.run import run_silver

T = table("shop.t0", [col("id"), col("v", Kind.STRING), col("n")])
# Jobs each layer may spend beyond the bare MERGE of the same change set (measured: silver 7-10,
# gold 1 more than a 19-job bare MERGE; adaptive execution may add a stage job or two).
# Silver: the new commits read once for every table (one aggregate), the batch's decode with
# its key bounds, the progress write. Gold: the changed keys and their rows from one read of
# silver's change feed, their checks, the publish log write; the GTID and commit time it
# publishes come from what silver learnt, also for this fixture's source without GTIDs.
SILVER_EXTRA_JOBS = 10
GOLD_EXTRA_JOBS = 4


def jobs_and_commits(spark, root, step) -> tuple[int, int]:
    versions_before = delta_versions(root)
    jobs = jobs_run(step)
    commits = sum(v - versions_before.get(t, -1) for t, v in delta_versions(root).items())
    return jobs, commits


def bare_merge_jobs(spark, b: Bronze, tmp_path) -> int:
    """Jobs of the plainest MERGE of a five-row change set into a copy of the silver table."""
    from delta.tables import DeltaTable

    copy = str(tmp_path / "copy")
    spark.sql(f"CREATE OR REPLACE TABLE delta.`{copy}` SHALLOW CLONE {b.lh.silver('shop', 't0').sql}")
    source = b.lh.silver("shop", "t0").read(spark).where("id < 5").localCheckpoint()
    return jobs_run(
        lambda: (
            DeltaTable.forPath(spark, copy)
            .alias("t")
            .merge(source.alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )
    )


@pytest.mark.slow
def test_a_warm_round_with_one_changed_table_costs_its_merges_and_a_small_constant(spark, tmp_path):
    root = tmp_path / "lh"
    b = Bronze(spark, root)
    b.schema(T)
    b.commit(*[b.insert(T, (1, 100, r), id=r, v=f"v{r}", n=r) for r in range(50)])
    run_silver(spark, b.config)
    run_gold(spark, b.config)
    for i in range(2):  # two warm rounds: the second is measured
        b.commit(
            *[
                b.update(T, (2 + i, 10, r), {"id": r, "v": f"v{r}", "n": r}, {"id": r, "v": f"c{i}", "n": r})
                for r in range(5)
            ]
        )
        silver = jobs_and_commits(spark, root, lambda: run_silver(spark, b.config))
        gold = jobs_and_commits(spark, root, lambda: run_gold(spark, b.config))
    merge = bare_merge_jobs(spark, b, tmp_path)

    print(f"bare MERGE {merge} jobs; silver {silver}, gold {gold} (jobs, commits)")
    assert silver[1] == 2, f"silver committed {silver[1]} times: the MERGE and its progress"
    assert gold[1] == 2, f"gold committed {gold[1]} times: the MERGE and its publish log"
    assert silver[0] <= merge + SILVER_EXTRA_JOBS, f"silver ran {silver[0]} jobs around a {merge}-job MERGE"
    assert gold[0] <= merge + GOLD_EXTRA_JOBS, f"gold ran {gold[0]} jobs around a {merge}-job MERGE"
