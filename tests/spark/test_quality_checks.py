"""Gold quality checks and their severities: warn publishes and records, drop quarantines the
failing rows and publishes the rest, fail publishes nothing and keeps the last good gold."""

from __future__ import annotations

import datetime
import json

import pytest
from chispa import assert_df_equality
from gold_fixtures import Lake, col, table_schema  # tests/spark/gold_fixtures.py

from binlake.config import Severity
from binlake.errors import ConfigError, QualityCheckFailed
from binlake.gold.publish import run_gold
from binlake.quality.checks import builtin_checks, check_rows, keep_frame, table_plan

ITEMS = table_schema(
    "shop",
    "items",
    [col("id", "int", False), col("name", "string", False), col("price", "double"), col("added", "date", False)],
    key=["id"],
)
LINES = table_schema(
    "shop",
    "lines",
    [col("order_id", "int", False), col("line", "int", False), col("sku", "string")],
    key=["order_id", "line"],
)


@pytest.fixture(scope="module")
def base(spark, tmp_path_factory) -> Lake:
    lake = Lake(spark, tmp_path_factory.mktemp("quality"))
    lake.add_table(ITEMS)
    lake.add_table(LINES)
    lake.silver("shop", "lines", [{"order_id": 1, "line": 1, "sku": "A-1", "seq": (2, 10, 0)}])
    lake.snapshot("shop", "items", chunks=[((1, 10), (1, 20))])
    lake.heartbeat(3, 900, gtid="0-1-9", commit_ts="2026-11-01 08:00:00")
    lake.progress("shop", "items", 3, 900, also=[("shop", "lines")])
    return lake


@pytest.fixture
def lake_with(base):
    """lake_with(items rows, gold.checks): the shared lake with these silver items and checks."""
    checkpoint = base.checkpoint()

    def make(items, checks=None) -> Lake:
        base.silver("shop", "items", items)
        return base.with_checks(checks or {})

    yield make
    base.rollback(checkpoint)


def item(i, name, price, seq_pos, deleted=False):
    return {
        "id": i,
        "name": name,
        "price": price,
        "added": datetime.date(2026, 1, i),
        "seq": (3, seq_pos, 0),
        "deleted": deleted,
    }


ROWS = [
    item(1, "pen", 2.5, 100),
    item(2, "ink", 700.0, 200),
    item(3, "cap", -1.0, 300),
    item(4, "old", 9999.0, 400, deleted=True),
]


def checks_of(lake, table="items"):
    row = lake.publish_log().where(f"`table` = '{table}'").orderBy("published_at").collect()[-1]
    return row, {c["name"]: c for c in json.loads(row["checks"])["results"]}


def test_warn_publishes_every_row_and_records_the_failure(spark, lake_with):
    lake = lake_with(ROWS, {"shop.items": [{"column": "price", "between": [0, 100], "severity": "warn"}]})

    result = run_gold(spark, lake.config)

    assert sorted(r["id"] for r in lake.gold("shop", "items").collect()) == [1, 2, 3]
    row, checks = checks_of(lake)
    assert row["status"] == "published"
    assert checks["between(price, 0, 100)"] == {
        **checks["between(price, 0, 100)"],
        "success": False,
        "severity": "warn",
        "unexpected_count": 2,
    }
    assert result.warnings == ["shop.items between(price, 0, 100): 2 unexpected"]
    assert "warning: shop.items between(price, 0, 100): 2 unexpected" in result.summary()


def test_drop_quarantines_failing_rows_with_their_sequence_and_publishes_the_rest(spark, lake_with):
    lake = lake_with(
        ROWS,
        {
            "shop.items": [
                {"column": "price", "between": [0, 100], "severity": "drop"},
                {"column": "name", "regex": "^[a-p]", "severity": "drop"},
            ]
        },
    )

    result = run_gold(spark, lake.config)

    assert sorted(r["id"] for r in lake.gold("shop", "items").collect()) == [1]
    quarantine = lake.lh.quarantine("shop", "items").read(spark)
    expected = spark.createDataFrame(
        [
            (2, "ink", 700.0, (3, 200, 0), "between(price, 0, 100)", result.publish_id),
            (3, "cap", -1.0, (3, 300, 0), "between(price, 0, 100)", result.publish_id),
        ],
        "id INT, name STRING, price DOUBLE, _cdc_seq STRUCT<file_index: BIGINT, pos: BIGINT, row: INT>, "
        "_quarantine_check STRING, _publish_id STRING",
    )
    assert_df_equality(
        quarantine.select(*expected.columns),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
    row, checks = checks_of(lake)
    assert row["row_count"] == 1
    assert row["status"] == "published"
    assert checks["regex(name, ^[a-p])"]["success"] is True
    assert {t.table: t.dropped for t in result.tables} == {"items": 2, "lines": 0}


@pytest.mark.slow
def test_a_rerun_of_the_same_publish_replaces_its_quarantine_rows_instead_of_doubling_them(spark, lake_with):
    checks = {"shop.items": [{"column": "price", "between": [0, 100], "severity": "drop"}]}
    lake = lake_with(ROWS, checks)
    first = run_gold(spark, lake.config)
    # A publish killed after writing gold and quarantine, before its publish-log rows.
    lake.lh.publish_log.delta(spark).delete(f"publish_id = '{first.publish_id}'")

    again = run_gold(spark, lake.config)

    assert again.publish_id == first.publish_id
    assert again.status == "published"
    assert lake.lh.quarantine("shop", "items").read(spark).count() == 2


@pytest.mark.slow
def test_fail_publishes_nothing_keeps_the_last_good_gold_and_raises(spark, lake_with):
    lake = lake_with(ROWS[:1])
    run_gold(spark, lake.config)
    good = {t: lake.gold_version("shop", t) for t in ("items", "lines")}
    lake.silver("shop", "items", ROWS)
    lake.silver("shop", "lines", [{"order_id": 1, "line": 1, "sku": "B-2", "seq": (3, 950, 0)}])
    lake.heartbeat(3, 990, commit_ts="2026-11-01 08:05:00")
    lake.progress("shop", "items", 3, 990, also=[("shop", "lines")])
    strict = lake.with_checks({"shop.items": [{"column": "price", "between": [0, 100], "severity": "fail"}]})

    with pytest.raises(
        QualityCheckFailed,
        match=r"gold not published at mysql-bin\.000003:990, the last good gold "
        r"versions are kept: failed checks: shop\.items between\(price, 0, 100\) "
        r"\(fail\): 2 unexpected rows",
    ) as err:
        run_gold(spark, strict.config)

    assert err.value.exit_code == 7
    assert {t: lake.gold_version("shop", t) for t in ("items", "lines")} == good
    assert lake.gold("shop", "lines").first()["sku"] == "A-1"  # the other table of the group is not published either
    failed = lake.publish_log().where("status = 'failed'").collect()
    assert {r["table"] for r in failed} == {"items", "lines"}
    assert all(r["pos"] == 990 for r in failed)


def test_a_duplicate_primary_key_in_silver_fails_the_built_in_check(spark, lake_with):
    lake = lake_with([item(1, "pen", 2.5, 100), item(1, "pen again", 2.5, 200)])

    # Rows beyond the first of a key are the unexpected ones.
    with pytest.raises(QualityCheckFailed, match=r"shop\.items primary_key_unique\(id\) \(fail\): 1 unexpected rows"):
        run_gold(spark, lake.config)

    assert not lake.lh.gold("shop", "items").exists(spark)


def test_a_null_in_a_not_null_column_fails_a_first_publish_and_leaves_gold_empty(spark, lake_with):
    lake = lake_with([item(1, "pen", 2.5, 100), item(2, None, 3.0, 200)])

    with pytest.raises(QualityCheckFailed, match=r"shop\.items not_null\(name\) \(fail\): 1 unexpected rows"):
        run_gold(spark, lake.config)

    # The check rode on gold's write, which the failure undid: no reader keeps the rows.
    assert lake.gold("shop", "items").count() == 0
    assert lake.gold("shop", "lines").count() == 0  # nor the group's other table
    assert {r["status"] for r in lake.publish_log().collect()} == {"failed"}


@pytest.mark.slow
def test_a_null_in_a_not_null_column_stops_a_rebuild_before_it_writes(spark, lake_with):
    lake = lake_with(ROWS[:1])
    run_gold(spark, lake.config)
    lake.lh.gold("shop", "items").delta(spark).delete("id = 1")  # another writer: the table is rebuilt
    good = lake.gold_version("shop", "items")
    lake.silver("shop", "items", [item(2, None, 3.0, 500)])
    lake.heartbeat(3, 990)
    lake.progress("shop", "items", 3, 990, also=[("shop", "lines")])

    with pytest.raises(QualityCheckFailed, match=r"shop\.items not_null\(name\) \(fail\): 1 unexpected rows"):
        run_gold(spark, lake.config)

    # The last good gold is never replaced, not even for a moment.
    assert lake.gold_version("shop", "items") == good


def test_a_whole_table_write_carries_the_not_null_checks_so_their_query_reads_only_the_key(spark, base):
    from pyspark.sql import functions as F

    from binlake.quality.checks import observing, settle_observed

    plan = table_plan(base.config, ITEMS)
    day = datetime.date(2026, 1, 1)
    rows = spark.createDataFrame(
        [(1, "pen", 2.5, day), (2, None, 3.0, day), (3, None, 1.0, day)],
        "id INT, name STRING, price DOUBLE, added DATE",
    )
    unreadable = rows.withColumn("name", F.expr("CAST(raise_error('name was read') AS STRING)"))

    outcome = check_rows(unreadable, plan, table_level=True, observe_columns=True)

    assert outcome.rows == 3
    assert not outcome.blocking  # the key alone was read
    outcome = check_rows(rows, plan, table_level=True, observe_columns=True)
    frame, observation = observing(rows, outcome, "test_not_null_on_the_write")
    frame.write.format("noop").mode("overwrite").save()
    settle_observed(outcome, observation.get)
    assert [(r.name, r.unexpected_count) for r in outcome.blocking] == [("not_null(name)", 2)]
    assert not outcome.observed


def test_a_row_count_rule_checks_the_published_table_size(spark, lake_with):
    lake = lake_with(ROWS, {"shop.items": [{"row_count": [5, None], "severity": "fail"}]})

    with pytest.raises(QualityCheckFailed, match=r"shop\.items row_count\(5, null\) \(fail\): observed 3"):
        run_gold(spark, lake.config)


def test_built_in_checks_cover_the_key_and_declared_not_null_columns():
    names = {(c.name, c.severity) for c in builtin_checks(LINES, 7)}
    assert names == {
        ("primary_key_unique(order_id, line)", Severity.FAIL),
        ("primary_key_not_null(order_id)", Severity.FAIL),
        ("primary_key_not_null(line)", Severity.FAIL),
        ("row_count_equals_silver(7)", Severity.FAIL),
    }
    by_name = {c.name: c for c in builtin_checks(ITEMS, 0)}
    assert by_name["not_null(name)"].severity is Severity.FAIL
    # A NOT NULL DATE may hold a zero date, which silver maps to NULL by design.
    assert by_name["not_null(added)"].severity is Severity.WARN


def test_rules_that_name_an_unknown_column_are_refused(base):
    lake = base.with_checks({"shop.items": [{"column": "cost", "not_null": True, "severity": "warn"}]})

    with pytest.raises(
        ConfigError,
        match=r"gold\.checks\.shop\.items\[0\] \(expect_column_values_to_not_be_null\) names column 'cost', "
        r"which shop\.items does not have \(or source\.columns drops\): use one of id, name, price, added",
    ):
        table_plan(lake.config, ITEMS)


AGREE = table_schema("shop", "agree", [col("id", "int", False), col("code", "string"), col("n", "int")], key=["id"])


def test_each_rule_kind_quarantines_exactly_the_rows_ge_counts_as_unexpected(spark, base):
    df = spark.createDataFrame(
        [(1, "a1", 5), (2, "b2", 50), (3, None, None), (4, "zz", 7)], "id INT, code STRING, n INT"
    )
    rules = [
        {"column": "n", "between": [0, 10], "severity": "drop"},
        {"column": "code", "values": ["a1", "zz"], "severity": "drop"},
        {"column": "code", "regex": "^[a-b][0-9]$", "severity": "drop"},
        {"column": "code", "not_null": True, "severity": "drop"},
        {"column": "n", "between": [None, 6], "severity": "drop"},
    ]
    plan = table_plan(base.with_checks({"shop.agree": rules}).config, AGREE)

    outcome = check_rows(df, plan, table_level=True)

    counts = {r.name: r.unexpected_count for r in outcome.results if r.origin == "expectation"}
    assert list(counts.values()) == [1, 1, 1, 1, 2]
    for name, condition in outcome.conditions.items():
        assert df.where(condition).count() == counts[name], name
    assert outcome.held_back == 3  # ids 2, 3 and 4 (a row failing two rules is held back once)
    assert sorted(r["id"] for r in keep_frame(df, outcome).collect()) == [1]


def test_checks_leave_the_checked_frame_uncached(spark, base):
    df = spark.createDataFrame([(1, "x", 5), (2, "y", 50)], "id INT, code STRING, n INT")
    plan = table_plan(
        base.with_checks({"shop.agree": [{"column": "n", "between": [0, 10], "severity": "warn"}]}).config, AGREE
    )

    outcome = check_rows(df, plan, table_level=True)

    assert [r.unexpected_count for r in outcome.results if r.origin == "expectation"] == [1]
    assert not df.is_cached
