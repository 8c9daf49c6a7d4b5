"""A warm loop against its floor: what a round of changes costs beyond the MERGEs it needs.

``loop_vs_floor``: 16 tables of 5,000 rows (as ``bench_incremental``), mirrored once; then per
round 1,000 row changes over 10 of them, and one warm loop in this process as
``run --continuous`` runs it (capture, silver, gold), timed from its start until gold has
published the round. The floor is the same round's deduplicated change sets (silver's rows
the round wrote, tombstones included) MERGEd into copies of the same silver and gold tables
(their directories copied before the round) with the plainest Delta MERGE on the key (update all
when matched, insert all when not, delete for a delete), one MERGE per changed table per
layer, on the same number of threads as silver and gold use, in the same session, right after
the loop. Best of ``ROUNDS`` measured rounds after a warm-up round. Goal: 1.5 or less.

``idle_loop_s``: the same warm loop with nothing new (goal 0.5 s).

Each round prints where the loop's time went: per stage against the floor's per layer, and
per changed table each layer's seconds (silver's and gold's own per-table figures, as the
metrics table records them) against that table's MERGE in the floor.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.bench_incremental import CHANGED_TABLES, CHANGES, ROWS, change, load
from benchmarks.run import result

TABLES = 16
ROUNDS = 3
GOAL_RATIO = 1.5
GOAL_IDLE_S = 0.5
THREADS = 4  # silver's and gold's TABLE_THREADS


def _config(ctx, db: str):
    from binlake.config import load_config

    path = ctx.workdir / "loop.yml"
    path.write_text(
        ctx.mariadb.config_yaml(
            str(ctx.workdir / "loop_lake"), [f"{db}.*"], server_id=9900, snapshot={"chunk_size": 50000}
        )
    )
    return load_config(path)


def _loop(spark, config, per_table: dict | None = None) -> dict[str, float]:
    """One round as run --continuous's stages run it, one after the other (a round's change
    passes them in turn), each sized by what capture committed; seconds per stage. With
    ``per_table``, also each table's seconds in silver and gold, as their results report them."""
    from binlake.bronze.capture import run_capture
    from binlake.gold.publish import run_gold
    from binlake.silver.run import run_silver
    from binlake.spark import small_plans

    steps = {}
    started = time.perf_counter()
    captured = run_capture(spark, config)
    steps["capture"] = time.perf_counter() - started
    for name, step in (("silver", run_silver), ("gold", run_gold)):
        started = time.perf_counter()
        with small_plans(spark, captured.changes):
            result = step(spark, config)
        steps[name] = time.perf_counter() - started
        if per_table is not None:
            tables = [t for g in (getattr(result, "groups", None) or [result]) for t in g.tables]
            per_table[name] = {t.name.split(".", 1)[1]: t.seconds for t in tables if t.seconds}
    return steps


def _clone(spark, ref, path: str) -> str:
    """A copy of the table at ``path``: its directory copied where the table has one. A shallow
    clone's MERGE costs Delta more than the same MERGE into the table itself (about three
    jobs and a few tenths of a second a table), which would flatter the ratio."""
    import shutil

    if ref.path:
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(ref.path, path)
    else:
        spark.sql(f"CREATE OR REPLACE TABLE delta.`{path}` SHALLOW CLONE {ref.sql}")
    return path


def _merge(spark, path: str, source, key: list[str], columns: list[str]) -> float:
    """The plainest MERGE of ``source`` into the table at ``path``; its seconds."""
    from delta.tables import DeltaTable

    started = time.perf_counter()
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in key)
    values = {f"`{c}`": f"s.`{c}`" for c in columns}
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(source.alias("s"), on)
        .whenMatchedDelete(condition="s._cdc_deleted")
        .whenMatchedUpdate(set=values)
        .whenNotMatchedInsert(condition="NOT s._cdc_deleted", values=values)
        .execute()
    )
    return time.perf_counter() - started


def _floor(
    spark, lh, db: str, tables: list[str], clones: dict, since: tuple[int, int], per_table: dict
) -> dict[str, float]:
    """The round's change sets MERGEd into the clones, silver then gold: seconds per layer,
    and each table's MERGE seconds per layer into ``per_table``."""
    from pyspark.sql import functions as F

    after = F.struct(F.lit(since[0]).cast("bigint"), F.lit(since[1]).cast("bigint"), F.lit(2**31 - 1))
    sets = {}
    for t in tables:
        silver = lh.silver(db, t).read(spark)
        changed = silver.where(F.struct("_cdc_seq.file_index", "_cdc_seq.pos", "_cdc_seq.row") > after)
        sets[t] = changed.localCheckpoint()  # not timed: the floor starts from the change set
    from binlake.spark import small_plans

    gold_columns = [c for c in lh.gold(db, tables[0]).read(spark).columns]
    layers = {}
    for layer in ("silver", "gold"):
        started = time.perf_counter()
        # The plan settings binlake's round had (small_plans), so they favour neither side.
        with small_plans(spark, CHANGES), ThreadPoolExecutor(THREADS) as pool:
            futures = {}
            for t in tables:
                source = sets[t]
                cols = source.columns if layer == "silver" else gold_columns
                key = ["id"]
                futures[t] = pool.submit(_merge, spark, clones[(layer, t)], source, key, [c for c in cols])
            per_table[layer] = {t: f.result() for t, f in futures.items()}
        layers[layer] = time.perf_counter() - started
    return layers


def _changed_tables(spark, lh, db: str, names: list[str], since: tuple[int, int]) -> list[str]:
    from pyspark.sql import functions as F

    after = F.struct(F.lit(since[0]).cast("bigint"), F.lit(since[1]).cast("bigint"), F.lit(2**31 - 1))
    out = []
    for t in names:
        silver = lh.silver(db, t).read(spark)
        if silver.where(F.struct("_cdc_seq.file_index", "_cdc_seq.pos", "_cdc_seq.row") > after).limit(1).count():
            out.append(t)
    return out


def _position(spark, lh) -> tuple[int, int]:
    from binlake.gold.publish_log import last_published

    last = last_published(spark, lh)
    row = max(last.values(), key=lambda r: (r["file_index"], r["pos"]))
    return int(row["file_index"]), int(row["pos"])


def run(ctx) -> list[dict]:
    from binlake.bronze.snapshot import run_snapshot
    from binlake.contract.tables import Lakehouse

    spark = ctx.spark
    db = "loopbench"
    names = load(ctx.mariadb, db, TABLES, ROWS)
    config = _config(ctx, db)
    lh = Lakehouse(config)
    run_snapshot(spark, config)
    _loop(spark, config)
    rng, next_id = random.Random(36), {}
    idle = [sum(_loop(spark, config).values()) for _ in range(3)]
    ratios = []
    for i in range(ROUNDS + 1):
        since = _position(spark, lh)
        clones = {
            (layer, t): _clone(spark, getattr(lh, layer)(db, t), str(ctx.workdir / "floor" / f"r{i}_{layer}_{t}"))
            for layer in ("silver", "gold")
            for t in names
        }
        change(ctx.mariadb, db, names, rng, next_id)
        loop_tables, floor_tables = {}, {}
        steps = _loop(spark, config, loop_tables)
        loop_s = sum(steps.values())
        changed = _changed_tables(spark, lh, db, names, since)
        assert len(changed) == CHANGED_TABLES, changed
        floor = _floor(spark, lh, db, changed, clones, since, floor_tables)
        floor_s = sum(floor.values())
        label = "warm-up" if i == 0 else f"round {i}"
        print(
            f"   {label}: loop {loop_s:.1f}s ({', '.join(f'{k} {v:.1f}s' for k, v in steps.items())}) / "
            f"floor {floor_s:.1f}s (silver {floor['silver']:.1f}s, gold {floor['gold']:.1f}s) = {loop_s / floor_s:.2f}",
            flush=True,
        )
        for layer in ("silver", "gold"):
            # Each changed table's own seconds, four tables at a time on both sides.
            pairs = sorted(changed, key=lambda t: -loop_tables[layer].get(t, 0.0))
            print(
                f"     {layer} per table, loop/floor: "
                + ", ".join(f"{t} {loop_tables[layer].get(t, 0.0):.1f}/{floor_tables[layer][t]:.1f}s" for t in pairs),
                flush=True,
            )
        if i:
            ratios.append((loop_s / floor_s, loop_s, floor_s))
    best = min(ratios)
    print(f"   idle loops: {', '.join(f'{s:.2f}s' for s in idle)}")
    return [
        result("loop_vs_floor", best[0], "x (loop/floor, goal <= 1.5)", "goal", GOAL_RATIO, higher_is_better=False),
        result("loop_round_s", best[1], "s (the same round's loop)", "floor: the MERGEs alone", best[2], False),
        result("idle_loop_s", min(idle), "s (lower is better)", "goal", GOAL_IDLE_S, higher_is_better=False),
    ]
