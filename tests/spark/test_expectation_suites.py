"""Gold's checks are Great Expectations suites: a suite written as GE's documentation writes
one, each severity's behaviour, GE's validation result kept with every publish, and the cost:
row-level expectations on the changed rows and table-level ones on the table as published, in
one query each."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from bronze_fixtures import Bronze, table  # tests/spark/bronze_fixtures.py
from bronze_fixtures import col as bcol
from gold_fixtures import Lake, col, table_schema  # tests/spark/gold_fixtures.py

from binlake.config import load_config_text
from binlake.contract.types import Kind
from binlake.errors import QualityCheckFailed
from binlake.gold.publish import run_gold
from binlake.silver.run import run_silver

ORDERS = table_schema(
    "shop",
    "orders",
    [col("id", "int", False), col("status", "string"), col("email", "string"), col("amount", "double")],
    key=["id"],
)
CUSTOMERS = table_schema("crm", "customers", [col("id", "int", False), col("email", "string")], key=["id"])

# As GE's documentation writes a suite (ExpectationSuite.to_json_dict), severities in meta.
ORDERS_SUITE = {
    "name": "shop_orders",
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "status"}},
        {
            "type": "expect_column_values_to_be_in_set",
            "kwargs": {"column": "status", "value_set": ["new", "paid", "shipped"]},
            "meta": {"severity": "warn"},
        },
        {
            "type": "expect_column_values_to_match_regex",
            "kwargs": {"column": "email", "regex": "^[^@]+@[^@]+$"},
            "meta": {"severity": "drop", "name": "email looks like an address"},
        },
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "amount", "min_value": 0, "max_value": 10000},
            "meta": {"severity": "drop"},
        },
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1, "max_value": 1000}},
        {
            "type": "expect_column_mean_to_be_between",
            "kwargs": {"column": "amount", "min_value": 1, "max_value": 500},
            "meta": {"severity": "fail"},
        },
    ],
}
BETWEEN = 'expect_column_values_to_be_between(column="amount", min_value=0, max_value=10000)'
IN_SET = 'expect_column_values_to_be_in_set(column="status", value_set=["new", "paid", "shipped"])'
MEAN = 'expect_column_mean_to_be_between(column="amount", min_value=1, max_value=500)'


def order(i, status, email, amount, pos):
    return {"id": i, "status": status, "email": email, "amount": amount, "seq": (3, pos, 0)}


def suite_file(tmp_path, suite, name="suite.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(suite, indent=2))
    return str(path)


@pytest.fixture
def lake(spark, tmp_path) -> Lake:
    lake = Lake(
        spark,
        tmp_path,
        tables=("shop.*", "crm.*"),
        expectations={"shop.orders": suite_file(tmp_path, ORDERS_SUITE)},
    )
    lake.add_table(ORDERS)
    lake.add_table(CUSTOMERS)
    lake.silver("crm", "customers", [{"id": 7, "email": "a@example.com", "seq": (3, 10, 0)}])
    lake.snapshot("shop", "orders", chunks=[((1, 10), (1, 20))])
    lake.snapshot("crm", "customers", chunks=[((1, 10), (1, 20))])
    lake.heartbeat(3, 900, commit_ts="2026-11-01 08:00:00")
    lake.progress("shop", "orders", 3, 900, also=[("crm", "customers")])
    return lake


def stored_results(lake, publish_id):
    """Each table's stored result, read back with GE's own schema (so it is valid GE JSON)."""
    from great_expectations.core.expectation_validation_result import expectationSuiteValidationResultSchema

    rows = lake.lh.check_results.read(lake.spark).where(f"publish_id = '{publish_id}'").collect()
    return {r["table"]: (r, expectationSuiteValidationResultSchema.load(json.loads(r["result"]))) for r in rows}


def test_each_severity_of_a_suite_written_as_ge_writes_one(spark, lake):
    lake.silver(
        "shop",
        "orders",
        [
            order(1, "paid", "a@example.com", 10.0, 100),
            order(2, "lost", "b@example.com", 20.0, 110),  # warn: published, recorded
            order(3, "new", "not-an-address", 30.0, 120),  # drop
            order(4, "new", "d@example.com", -5.0, 130),  # drop
            order(5, "new", "also bad", 99999.0, 140),  # drop, by two expectations
        ],
    )

    result = run_gold(spark, lake.config)

    assert sorted(r["id"] for r in lake.gold("shop", "orders").collect()) == [1, 2]
    quarantine = lake.lh.quarantine("shop", "orders").read(spark)
    assert sorted((r["id"], r["_quarantine_check"]) for r in quarantine.collect()) == [
        (3, "email looks like an address"),
        (4, BETWEEN),
        (5, "email looks like an address"),
        (5, BETWEEN),
    ]
    assert result.warnings == [f"shop.orders {IN_SET}: 1 unexpected"]
    # The mean is judged on the table as published: 99999 is held back, so it passes.
    log = {r["table"]: r for r in lake.publish_log().collect()}
    checks = {c["name"]: c for c in json.loads(log["orders"]["checks"])["results"]}
    assert checks[MEAN]["success"] is True
    assert checks[MEAN]["engine"] == "great_expectations"
    assert log["orders"]["row_count"] == 2
    assert log["orders"]["silver_rows"] == 5
    assert checks["row_count_equals_silver(5)"]["success"] is True

    # GE's own validation result, kept beside the publish log (crm.customers has no suite).
    shop = next(g for g in result.groups if g.group == "shop")
    assert set(stored_results(lake, shop.publish_id)) == {"orders"}
    row, ge = stored_results(lake, shop.publish_id)["orders"]
    assert row["status"] == "published"
    assert row["success"] is False
    by_name = {r.expectation_config.meta["name"]: r for r in ge.results}
    assert len(by_name) == 6
    assert by_name[BETWEEN].expectation_config.meta["severity"] == "drop"
    assert by_name[BETWEEN].result["unexpected_count"] == 2
    assert sorted(by_name[BETWEEN].result["partial_unexpected_list"]) == [-5.0, 99999.0]
    assert by_name[MEAN].success
    assert by_name[MEAN].result["observed_value"] == 15.0


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless browser: make setup installs chromium")
@pytest.mark.slow
def test_binlake_checks_lists_the_failures_and_renders_ge_data_docs(spark, lake, tmp_path, capsys):
    from binlake.cli import main

    lake.silver("shop", "orders", [order(1, "paid", "a@example.com", 10.0, 100), order(4, "new", "d@x.com", -5.0, 130)])
    run_gold(spark, lake.config)
    config = lake.config_file(tmp_path / "binlake.yml")

    assert main(["--config", str(config), "checks", "--docs", str(tmp_path / "docs")]) == 0

    out = capsys.readouterr().out
    assert "shop.orders publish 000003-900-" in out
    assert "5 of 6 expectations passed" in out
    assert f"  failed: {BETWEEN} (drop): 1 unexpected rows" in out
    index = tmp_path / "docs" / "index.html"
    assert f"Data Docs written to {index}" in out
    pages = list((tmp_path / "docs" / "validations").rglob("*.html"))
    assert len(pages) == 1
    browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    dom = subprocess.run(
        [*browser, "--dump-dom", pages[0].as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    # GE's own validation page: the suite, the failed expectation and its unexpected value.
    assert "shop.orders" in dom
    assert "-5" in dom
    assert "amount" in dom
    index_dom = subprocess.run([*browser, "--dump-dom", index.as_uri()], capture_output=True, text=True, timeout=120)
    assert "shop.orders" in index_dom.stdout


@pytest.mark.slow
def test_a_failing_fail_expectation_blocks_its_group_and_the_other_group_publishes(spark, lake):
    lake.silver("shop", "orders", [order(1, "paid", "a@example.com", 900.0, 100)])

    with pytest.raises(QualityCheckFailed) as err:
        run_gold(spark, lake.config)

    assert err.value.exit_code == 7
    assert (
        f"group shop: gold not published at mysql-bin.000003:900, the last good gold versions are kept: "
        f"failed checks: shop.orders {MEAN} (fail): observed 900.0"
    ) in str(err.value)
    assert [g.group for g in err.value.result.groups] == ["crm"]
    assert not lake.lh.gold("shop", "orders").exists(spark)
    failed = lake.publish_log().where("status = 'failed'").first()
    _, ge = stored_results(lake, failed["publish_id"])["orders"]
    assert ge.success is False


@pytest.mark.slow
def test_an_expectation_ge_cannot_evaluate_stops_the_group_with_its_name(spark, lake, tmp_path):
    # A valid Python regex that Java's (Spark's) rejects: GE raises inside its metric.
    suite = {
        "expectations": [
            {
                "type": "expect_column_values_to_match_regex",
                "kwargs": {"column": "email", "regex": "(?P<user>.+)@"},
                "meta": {"severity": "warn"},
            }
        ]
    }
    broken = lake.with_checks({}, {"shop.orders": suite_file(tmp_path, suite, "broken.json")})
    lake.silver("shop", "orders", [order(1, "paid", "a@example.com", 10.0, 100)])

    with pytest.raises(QualityCheckFailed) as err:
        run_gold(spark, broken.config)

    message = str(err.value)
    assert err.value.exit_code == 7
    assert "\n" not in message
    assert "Traceback" not in message
    assert (
        'shop.orders expect_column_values_to_match_regex(column="email", regex="(?P<user>.+)@") (warn): error '
        in message
    )


# ---------------------------------------------------------------------------------------
# Incremental publishes: what is checked where, and what it costs

SALES = table(
    "shop.sales", [bcol("id"), bcol("status", Kind.STRING), bcol("code", Kind.STRING), bcol("amount", Kind.DOUBLE)]
)
SIX_MAP_TWO_TABLE = {
    "name": "sales",
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "status"}},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "amount"}},
        {
            "type": "expect_column_values_to_be_in_set",
            "kwargs": {"column": "status", "value_set": ["new", "paid"]},
            "meta": {"severity": "warn"},
        },
        {"type": "expect_column_values_to_match_regex", "kwargs": {"column": "code", "regex": "^S[0-9]+$"}},
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "amount", "min_value": 0, "max_value": 1000},
            "meta": {"severity": "drop"},
        },
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "id", "min_value": 0}},
        {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
        {"type": "expect_column_mean_to_be_between", "kwargs": {"column": "amount", "min_value": 40, "max_value": 60}},
    ],
}


def sales_lake(spark, tmp_path) -> Bronze:
    """Ten sales of amount 50, one with a status outside the set (a warn), published once."""
    b = Bronze(spark, tmp_path / "lh")
    doc = {
        "source": {
            "host": "127.0.0.1",
            "port": 3306,
            "user": "cdc",
            "password": "pw",
            "server_id": 77,
            "tables": ["shop.*"],
        },
        "lakehouse": {"path": str(tmp_path / "lh")},
        "gold": {"expectations": {"shop.sales": suite_file(tmp_path, SIX_MAP_TWO_TABLE)}},
    }
    b.config = load_config_text(yaml.safe_dump(doc))
    b.schema(SALES)
    b.commit(
        *[
            b.insert(SALES, (1, 100 + i, 0), id=i, status="lost" if i == 0 else "new", code=f"S{i}", amount=50.0)
            for i in range(10)
        ]
    )
    run_silver(spark, b.config)
    run_gold(spark, b.config)
    return b


def check_queries(spark, step) -> list[str]:
    """The Spark SQL queries the quality checks ran during ``step()``, by their call site (GE's
    code or binlake's quality package). A query may run as more than one Spark job (adaptive
    execution runs each shuffle stage as its own); it is one pass over its rows."""
    store = spark._jsparkSession.sharedState().statusStore()
    bus = spark.sparkContext._jsc.sc().listenerBus()
    bus.waitUntilEmpty(30_000)  # the store learns of queries through the listener bus
    count = store.executionsCount()
    newest = store.executionsList(count - 1, 1).apply(0).executionId() if count else -1
    step()
    bus.waitUntilEmpty(30_000)
    fresh = store.executionsList(0, store.executionsCount())
    runs = [fresh.apply(i) for i in range(fresh.size())]
    # A query's nested executions (Delta listing the files it reads) carry its description too.
    descriptions = [
        e.description() for e in runs if e.executionId() > newest and e.rootExecutionId() == e.executionId()
    ]
    return [d for d in descriptions if "great_expectations" in d or "binlake/quality" in d]


@pytest.mark.slow
def test_an_incremental_publish_checks_in_at_most_two_queries(spark, tmp_path):
    b = sales_lake(spark, tmp_path)
    b.commit(
        b.update(
            SALES,
            (2, 10, 0),
            {"id": 1, "status": "new", "code": "S1", "amount": 50.0},
            {"id": 1, "status": "paid", "code": "S1", "amount": 90.0},
        ),
        b.insert(SALES, (2, 10, 1), id=10, status="new", code="S10", amount=50.0),
    )
    run_silver(spark, b.config)

    queries = check_queries(spark, lambda: run_gold(spark, b.config))

    # The row-level six with the built-ins on the changed rows, the table-level two on the table.
    assert len(queries) <= 2, queries
    log = b.lh.publish_log.read(spark).orderBy("published_at").collect()[-1]
    checks = {c["name"]: c for c in json.loads(log["checks"])["results"]}
    assert all(c["success"] for c in checks.values()), checks
    # The mean of the changed rows (70) fails [40, 60]; the table's ((10 * 50 + 90) / 11) passes:
    # the table-level expectation judged the table as published.
    assert log["row_count"] == 11


@pytest.mark.slow
def test_row_level_expectations_judge_only_the_changed_rows(spark, tmp_path):
    b = sales_lake(spark, tmp_path)
    first = b.lh.publish_log.read(spark).first()
    warned = {c["name"]: c for c in json.loads(first["checks"])["results"]}
    in_set = 'expect_column_values_to_be_in_set(column="status", value_set=["new", "paid"])'
    assert warned[in_set]["unexpected_count"] == 1  # sale 0, "lost"
    b.commit(
        b.update(
            SALES,
            (2, 10, 0),
            {"id": 3, "status": "new", "code": "S3", "amount": 50.0},
            {"id": 3, "status": "paid", "code": "S3", "amount": 2000.0},
        )
    )
    run_silver(spark, b.config)

    result = run_gold(spark, b.config)

    # Sale 0 is unchanged: it passed (with its warning) when it was published.
    assert result.warnings == []
    assert [t.dropped for t in result.tables] == [1]  # sale 3's new amount is out of range
    assert sorted(r["id"] for r in b.lh.gold("shop", "sales").read(spark).collect()) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
