"""SCD type 2 history tables (docs/history.md): one row per version of each key, derived from
the records silver applies, ordered by _cdc_seq, the same whatever the batches' order."""

from __future__ import annotations

import dataclasses

import pytest
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py

from binlake.config import HistoryConfig, HistoryTable
from binlake.contract.types import Kind
from binlake.silver.run import run_silver

ORDERS = table("shop.orders", [col("id"), col("status", Kind.STRING), col("note", Kind.STRING)])


def keeping_history(b: Bronze, *rules: HistoryTable) -> Bronze:
    b.config = dataclasses.replace(b.config, history=HistoryConfig(rules or (HistoryTable("shop.orders"),)))
    return b


@pytest.fixture
def bronze(spark, tmp_path):
    b = Bronze(spark, tmp_path / "lh")
    b.schema(ORDERS)
    return keeping_history(b)


def versions(spark, b, name="shop.orders", cols=("id", "status")):
    """The history as tuples: (*cols, valid_from, valid_to, is_current, ended_by_delete)."""
    db, t = name.split(".")
    rows = b.lh.silver_history(db, t).read(spark).orderBy(*cols[:1], "_cdc_valid_from").collect()
    seq = lambda s: None if s is None else tuple(s)  # noqa: E731
    return [(*(r[c] for c in cols), seq(r._cdc_valid_from), seq(r._cdc_valid_to), r._cdc_is_current,
             r._cdc_ended_by_delete) for r in rows]


def test_each_change_of_a_tracked_column_opens_a_version_that_the_next_one_ends(spark, bronze):
    b = bronze
    b.commit(b.insert(ORDERS, (1, 100, 0), id=1, status="new", note="x"),
             b.update(ORDERS, (1, 200, 0), {"id": 1, "status": "new", "note": "x"}, {"id": 1, "status": "paid", "note": "x"}))
    run_silver(spark, b.config)
    assert versions(spark, b) == [
        (1, "new", (1, 100, 0), (1, 200, 0), False, False),
        (1, "paid", (1, 200, 0), None, True, False),
    ]
