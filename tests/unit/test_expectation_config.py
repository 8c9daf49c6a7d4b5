"""Expectation suites in the config: GE's JSON format read at load, the shorthand compiled to the
same GE expectations, and every bad input refused with one line that names the file and the fix
(at load, or against GE and the table's columns before a publish or in preflight)."""

from __future__ import annotations

import json

import pytest

from binlake.config import Severity, load_config_text
from binlake.contract.types import Column, Kind, TableSchema
from binlake.errors import ConfigError
from binlake.quality.suites import plan_table

ORDERS = TableSchema(
    "shop",
    "orders",
    (Column("id", Kind.INT, bits=32, nullable=False), Column("status", Kind.STRING), Column("amount", Kind.DOUBLE)),
    ("id",),
)
SOURCE = 'source: {host: h, port: 1, user: u, password: p, server_id: 5, tables: ["shop.*"]'


def config(tmp_path, suite=None, raw=None, source_extra="", gold_extra=""):
    if suite is not None or raw is not None:
        (tmp_path / "orders.json").write_text(raw if raw is not None else json.dumps(suite))
    expectations = 'expectations: {"shop.orders": orders.json}' if (suite is not None or raw is not None) else ""
    gold = ", ".join(x for x in (expectations, gold_extra) if x)
    text = f"{SOURCE}{source_extra}}}\nlakehouse: {{path: x}}\ngold: {{{gold}}}\n"
    return load_config_text(text, base_dir=str(tmp_path))


def one(type_, severity=None, name=None, **kwargs):
    meta = {k: v for k, v in (("severity", severity), ("name", name)) if v}
    return {"expectations": [{"type": type_, "kwargs": kwargs, **({"meta": meta} if meta else {})}]}


def test_a_suite_is_read_with_its_severities_and_names(tmp_path):
    cfg = config(
        tmp_path,
        {
            "name": "shop_orders",
            "expectations": [
                {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "status"}},
                {
                    "type": "expect_column_values_to_be_between",
                    "kwargs": {"column": "amount", "min_value": 0},
                    "meta": {"severity": "drop", "name": "amount is positive", "owner": "sales"},
                },
            ],
        },
    )

    first, second = cfg.gold.suite("shop", "orders")

    assert (first.type, first.severity, first.name) == (
        "expect_column_values_to_not_be_null",
        Severity.FAIL,
        'expect_column_values_to_not_be_null(column="status")',
    )
    assert (second.severity, second.name) == (Severity.DROP, "amount is positive")
    assert second.to_json() == {
        "type": "expect_column_values_to_be_between",
        "kwargs": {"column": "amount", "min_value": 0},
        "meta": {"owner": "sales", "severity": "drop", "name": "amount is positive"},
    }
    assert cfg.gold.suite("shop", "other") == cfg.gold.suite_file("shop", "orders").expectations[:0]


def test_the_shorthand_compiles_to_ge_expectations_after_the_suite(tmp_path):
    cfg = config(
        tmp_path,
        one("expect_column_values_to_not_be_null", column="status"),
        gold_extra='checks: {"shop.orders": [{column: amount, between: [0, null], severity: warn}, '
        "{column: status, values: [new, paid]}, {column: status, regex: '^[a-z]+$'}, "
        "{column: amount, not_null: true}, {row_count: [1, 100]}]}",
    )

    compiled = [(e.type, dict(e.kwargs), e.name) for e in cfg.gold.suite("shop", "orders")[1:]]

    assert compiled == [
        ("expect_column_values_to_be_between", {"column": "amount", "min_value": 0}, "between(amount, 0, null)"),
        (
            "expect_column_values_to_be_in_set",
            {"column": "status", "value_set": ["new", "paid"]},
            "values(status, ['new', 'paid'])",
        ),
        ("expect_column_values_to_match_regex", {"column": "status", "regex": "^[a-z]+$"}, "regex(status, ^[a-z]+$)"),
        ("expect_column_values_to_not_be_null", {"column": "amount"}, "not_null(amount)"),
        ("expect_table_row_count_to_be_between", {"min_value": 1, "max_value": 100}, "row_count(1, 100)"),
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            '{"expectations": [ {"type": 1,} ]}',
            r"orders\.json is not valid JSON \(line 1, column 31: .*\): fix the syntax",
        ),
        ('["a list"]', r"orders\.json is not an expectation suite: write it in GE's format"),
        (
            '{"expectations": [{"expectation_type": "expect_column_values_to_not_be_null", "kwargs": {}}]}',
            r"orders\.json expectations\[0\] uses \"expectation_type\" \(Great Expectations 0\.x\): rename it to "
            r"\"type\"",
        ),
        ('{"expectations": [{"kwargs": {}}]}', r"orders\.json expectations\[0\] has no expectation \"type\""),
        (
            '{"expectations": [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}, '
            '"meta": {"severity": "critical"}}]}',
            r"\(expect_column_values_to_not_be_null\): meta\.severity must be warn, drop or fail, got 'critical'",
        ),
        (
            '{"expectations": [{"type": "expect_column_values_to_not_be_null", "kwargs": []}]}',
            r"kwargs must be an object of the expectation's arguments",
        ),
        ('{"expectations": [], "checkpoint": 1}', r"unknown key orders\.json\.checkpoint"),
    ],
)
def test_a_malformed_suite_file_is_refused_at_load(tmp_path, raw, message):
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, raw=raw)


def test_a_missing_suite_file_names_the_directory_it_was_looked_for_in(tmp_path):
    with pytest.raises(ConfigError, match=r"suite file gone\.json not found \(a relative path is read from the config"):
        load_config_text(
            f'{SOURCE}}}\nlakehouse: {{path: x}}\ngold: {{expectations: {{"shop.orders": gone.json}}}}\n',
            base_dir=str(tmp_path),
        )


def test_an_expectation_on_a_column_source_columns_drops_is_refused_at_load(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"orders\.json expectations\[0\] \(expect_column_values_to_not_be_null\) names column status, "
        r"which source\.columns\['shop\.orders'\] drops: remove the expectation or keep the column",
    ):
        config(
            tmp_path,
            one("expect_column_values_to_not_be_null", column="status"),
            source_extra=', columns: {"shop.orders": {exclude: [status]}}',
        )


@pytest.mark.parametrize(
    ("suite", "message"),
    [
        (
            one("expect_colum_values_to_not_be_null", column="status"),
            r"orders\.json expectations\[0\]: unknown expectation type 'expect_colum_values_to_not_be_null': "
            r"did you mean expect_column_values_to_not_be_null\?",
        ),
        (
            one("expect_column_values_to_be_between", column="amount", min_value="cheap"),
            r"orders\.json expectations\[0\] \(expect_column_values_to_be_between\): GE rejects its kwargs: "
            r".*min_value",
        ),
        (
            one("expect_column_values_to_not_be_null", column="state"),
            r"names column 'state', which shop\.orders does not have \(or source\.columns drops\): "
            r"use one of id, status, amount",
        ),
        (
            one("expect_column_mean_to_be_between", severity="drop", column="amount", min_value=1),
            r"\(expect_column_mean_to_be_between\): severity drop quarantines the rows a condition on one column "
            r"rejects, and this expectation has none .*: use warn or fail",
        ),
        (
            one("expect_column_values_to_be_in_set", severity="drop", column="status", value_set=["a"], mostly=0.9),
            r"severity drop quarantines the rows",
        ),
        (
            one("expect_column_values_to_be_unique", severity="drop", column="status"),
            r"severity drop quarantines the rows",
        ),
    ],
)
def test_an_expectation_ge_or_the_table_rejects_is_refused_before_a_publish(tmp_path, suite, message):
    cfg = config(tmp_path, suite)

    with pytest.raises(ConfigError, match=message):
        plan_table(cfg, ORDERS)


def test_row_level_expectations_are_told_from_table_level_ones(tmp_path):
    cfg = config(
        tmp_path,
        {
            "expectations": [
                {"type": "expect_column_values_to_be_between", "kwargs": {"column": "amount", "min_value": 0}},
                {
                    "type": "expect_column_values_to_be_in_set",
                    "kwargs": {"column": "status", "value_set": ["a"], "mostly": 0.95},
                },
                {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "status"}},
                {"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
                {
                    "type": "expect_column_pair_values_a_to_be_greater_than_b",
                    "kwargs": {"column_A": "amount", "column_B": "id"},
                },
            ]
        },
    )

    plan = plan_table(cfg, ORDERS)

    assert [(p.spec.type, p.row_level, p.droppable) for p in plan.expectations] == [
        ("expect_column_values_to_be_between", True, True),
        ("expect_column_values_to_be_in_set", False, False),  # mostly: a share of the whole table
        ("expect_column_values_to_be_unique", False, False),  # GE computes it with a window
        ("expect_table_row_count_to_be_between", False, False),
        ("expect_column_pair_values_a_to_be_greater_than_b", True, False),  # per row, but two columns
    ]


def test_a_table_without_expectations_plans_nothing(tmp_path):
    assert plan_table(config(tmp_path), ORDERS).expectations == ()


def test_a_table_without_expectations_never_imports_great_expectations(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from binlake.config import load_config_text\n"
        "from binlake.contract.types import Column, Kind, TableSchema\n"
        "import binlake.gold.publish, binlake.quality.checks\n"
        "from binlake.quality.checks import table_plan\n"
        "cfg = load_config_text('source: {host: h, port: 1, user: u, password: p, server_id: 5, "
        'tables: ["shop.*"]}\\nlakehouse: {path: x}\\n\')\n'
        "schema = TableSchema('shop', 'orders', (Column('id', Kind.INT, bits=32, nullable=False),), ('id',))\n"
        "assert table_plan(cfg, schema).expectations.expectations == ()\n"
        "print('great_expectations' in sys.modules)\n"
    )

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    assert out.strip() == "False"
