"""Names that cannot collide: every captured table gets lakehouse tables of its own, on Unity
Catalog (``<db>__<table>``, case-insensitive) and locally alike; two source tables that would
share one are refused with the fix (binlake.contract.tables.name_clashes)."""

from __future__ import annotations

import pytest

from binlake.config import Config, LakehouseConfig, Secret, SourceConfig
from binlake.contract.tables import Lakehouse, name_clashes


def test_distinct_tables_do_not_clash():
    assert name_clashes([("shop", "orders"), ("shop", "order_lines"), ("crm", "orders"), ("shop", "history")]) == []


@pytest.mark.parametrize(
    ("tables", "shared", "roles"),
    [
        # The separator is ambiguous: both are a__b__c on Unity Catalog.
        ([("a__b", "c"), ("a", "b__c")], "a__b__c", "the table of a.b__c and the table of a__b.c"),
        # A source table named like another's history table (history may be enabled later).
        (
            [("shop", "x"), ("shop", "x__history")],
            "shop__x__history",
            "the history table of shop.x and the table of shop.x__history",
        ),
        ([("shop", "x"), ("shop", "x__history_facts")], "shop__x__history_facts", "the history facts table of shop.x"),
        # Unity Catalog compares names without case.
        (
            [("Shop", "Orders"), ("shop", "orders")],
            "shop__orders",
            "the table of Shop.Orders and the table of shop.orders",
        ),
    ],
)
def test_tables_that_would_share_a_lakehouse_table_are_refused_with_the_fix(tables, shared, roles):
    (clash,) = name_clashes(tables)
    assert f"would share the lakehouse table {shared} ({roles}" in clash
    assert clash.endswith("exclude one of them with source.exclude")


def test_the_rule_covers_every_table_binlake_names_after_a_source_table():
    # What the clash check reasons about is what Lakehouse names: a table's own and its history tables.
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("pw"), server_id=9, tables=("a.*",))
    uc = Lakehouse(Config(source, LakehouseConfig(catalog="main", system_path="/Volumes/main/b/s")))
    names = {
        uc.silver("a", "b__c").name,
        uc.silver("a__b", "c").name,
        uc.silver_history("shop", "x").name,
        uc.silver("shop", "x__history").name,
    }
    assert len(names) == 2
