"""Property: silver converges to the source state under any order and duplication of batches."""

from __future__ import annotations

import itertools

import pytest
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binlake.contract.types import Kind
from binlake.silver.run import run_silver

T = table("shop.t", [col("id"), col("v", Kind.STRING)])
_runs = itertools.count()

# A history: per step, which key and whether it is written or deleted.
steps = st.lists(st.tuples(st.integers(1, 3), st.booleans(), st.integers(0, 9)), min_size=1, max_size=8)


def history(ops):
    """Change-log records in source order plus the source's final state."""
    state: dict[int, str] = {}
    records = []
    for i, (k, write, val) in enumerate(ops):
        seq = (1, 100 + 10 * i, 0)
        if write:
            v = f"v{val}"
            records.append(("update", seq, k, state[k], v) if k in state else ("insert", seq, k, None, v))
            state[k] = v
        elif k in state:
            records.append(("delete", seq, k, state.pop(k), None))
    return records, state


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=steps, data=st.data())
def test_merge_converges_under_any_permutation_and_duplication(spark, tmp_path_factory, ops, data):
    records, expected = history(ops)
    if not records:
        return
    cut = sorted(data.draw(st.sets(st.integers(1, max(1, len(records) - 1)), max_size=3)))
    batches = [records[a:b] for a, b in zip([0, *cut], [*cut, len(records)]) if records[a:b]]
    order = data.draw(st.permutations(batches))
    dupes = data.draw(st.lists(st.sampled_from(batches), max_size=2))
    b = Bronze(spark, tmp_path_factory.mktemp(f"prop{next(_runs)}") / "lh")
    b.schema(T)
    for i, batch in enumerate([*order, *dupes]):
        recs = []
        for op, seq, k, old, new in batch:
            if op == "insert":
                recs.append(b.insert(T, seq, id=k, v=new))
            elif op == "update":
                recs.append(b.update(T, seq, {"id": k, "v": old}, {"id": k, "v": new}))
            else:
                recs.append(b.delete(T, seq, id=k, v=old))
        b.commit(*recs)
        if i % 2 == 1:  # several commits per silver run, and several runs
            run_silver(spark, b.config)
    run_silver(spark, b.config)
    live = {r["id"]: r["v"] for r in b.lh.silver("shop", "t").read(spark).where("NOT _cdc_deleted").collect()}
    assert live == expected
