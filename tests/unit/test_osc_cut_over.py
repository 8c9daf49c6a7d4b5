"""The pure parts of the online schema change replay: which tables are shadows, which RENAME is
a cut-over, and when the shadow's records are trusted to be the table.

Names and statements are the tools' own: gh-ost's ghost table is ``_<table>_gho``
(go/base/context.go, GetGhostTableName) and its cut-over ``RENAME TABLE t TO _t_del, _t_gho TO t``
(go/logic/applier.go, AtomicCutOverMagicQuery); pt-online-schema-change's new table is ``_<table>_new``
with more leading ``_`` while the name is taken, and its swap ``RENAME TABLE t TO _t_old, _t_new TO t``.
"""

from __future__ import annotations

import pytest

from binlake.bronze.osc_replay import CutOver, Replay, ShadowFacts, cut_overs, verdict
from binlake.config import SourceConfig
from binlake.config.secrets import Secret
from binlake.config.source import shadow_targets
from binlake.contract.changelog import RENAMED_INTO_OP
from binlake.contract.ddl import creates_table, ddl_effects
from binlake.contract.position import EPOCH_SHIFT
from binlake.contract.types import TableSchema


def _source(*tables: str) -> SourceConfig:
    return SourceConfig(host="h", port=3306, user="u", password=Secret("p"), server_id=1, tables=tables)


@pytest.mark.parametrize(
    ("name", "targets"),
    [
        ("_t_gho", ["t"]),
        ("_orders_gho", ["orders"]),
        ("_t_new", ["t"]),
        ("__t_new", ["_t", "t"]),  # pt-osc's second try, or the first for a table named _t
        ("_my_gho_new", ["my_gho"]),
        ("_t_ghc", []),  # gh-ost's changelog table holds no rows of t
        ("_t_del", []),
        ("_t_old", []),
        ("t_new", []),  # pt-osc always prefixes
        ("_gho", []),
        ("t", []),
    ],
)
def test_shadow_targets_are_the_tools_names(name, targets):
    assert shadow_targets(name) == targets


def test_a_shadow_is_mirrored_only_for_a_captured_table():
    source = _source("shop.orders", "crm.*")
    assert source.shadow_of("shop", "_orders_gho") == "orders"
    assert source.mirrors("shop", "_orders_new")
    assert source.shadow_of("shop", "_items_gho") is None
    assert not source.mirrors("shop", "_items_gho")
    assert source.shadow_of("other", "_orders_gho") is None
    # A wildcard captures the shadow itself; it is still the shadow of the captured table.
    assert source.captures("crm", "_people_gho")
    assert source.shadow_of("crm", "_people_gho") == "people"


def _renamed(statement: str, db: str = "shop") -> list[dict]:
    """The renamed_into records capture makes of one RENAME at position 500 of file 3."""
    return [
        {"db": d, "table": t, "binlog_file": "mysql-bin.000003", "file_index": 3, "pos": 500, "ddl": statement}
        for d, t, op in ddl_effects(statement, db)
        if op == RENAMED_INTO_OP
    ]


def test_gh_ost_and_pt_osc_swaps_are_cut_overs():
    source = _source("shop.orders")
    ghost = "rename /* gh-ost */ table `shop`.`orders` to `shop`.`_orders_del`, `shop`.`_orders_gho` to `shop`.`orders`"
    pt = "RENAME TABLE `shop`.`orders` TO `shop`.`_orders_old`, `shop`.`_orders_new` TO `shop`.`orders`"
    two_step = "RENAME TABLE `shop`.`_orders_gho` TO `shop`.`orders`"  # gh-ost --cut-over=two-step, after t's rename
    for statement, shadow in ((ghost, "_orders_gho"), (pt, "_orders_new"), (two_step, "_orders_gho")):
        assert cut_overs(source, _renamed(statement)) == [
            CutOver("shop", "orders", shadow, "mysql-bin.000003", 3, 500, statement)
        ]


@pytest.mark.parametrize(
    "statement",
    [
        "RENAME TABLE orders TO orders_2024, orders_next TO orders",  # not a shadow's name
        "RENAME TABLE `shop`.`orders` TO `shop`.`_orders_del`, `other`.`_orders_gho` TO `shop`.`orders`",
    ],
)
def test_other_renames_are_not_cut_overs(statement):
    assert cut_overs(_source("shop.orders"), _renamed(statement)) == []


def test_the_shadows_create_is_told_from_other_ddl():
    assert creates_table("create /* gh-ost */ table `shop`.`_orders_gho` like `shop`.`orders`")
    assert creates_table("CREATE TABLE IF NOT EXISTS `_orders_new` (id INT PRIMARY KEY)")
    assert not creates_table("CREATE TEMPORARY TABLE x (id INT)")
    assert not creates_table("alter /* gh-ost */ table `_orders_gho` add column note int")
    assert not creates_table("DROP TABLE IF EXISTS `_orders_gho`")


CUT = CutOver("shop", "orders", "_orders_gho", "mysql-bin.000003", 3, 500, "rename ...")
SCHEMA = TableSchema("shop", "_orders_gho", (), ("id",))
CREATED = (3, 100, 0)


@pytest.mark.parametrize(
    ("facts", "schema", "why"),
    [
        (ShadowFacts(None, None, None), SCHEMA, "CREATE TABLE of shop._orders_gho is not in the change log"),
        (ShadowFacts(((1 << EPOCH_SHIFT) | 3, 100, 0), (3, 200, 0), None), SCHEMA, "another source epoch"),
        (ShadowFacts(CREATED, (3, 200, 0), None, emptied=1), SCHEMA, "truncated, dropped or renamed into"),
        (ShadowFacts(CREATED, (3, 200, 0), None, statements=2), SCHEMA, "2 change(s) of shop._orders_gho are logged"),
        (ShadowFacts(CREATED, (3, 200, 0), (3, 300, 0)), SCHEMA, "schema changed after rows were copied"),
        (ShadowFacts(CREATED, None, None), None, "no row change of shop._orders_gho was logged"),
        (ShadowFacts(CREATED, (3, 200, 0), None), TableSchema("shop", "_orders_gho", (), ()), "no primary key"),
    ],
)
def test_a_replay_that_cannot_be_trusted_says_why(facts, schema, why):
    reason = verdict(CUT, facts, schema)
    assert reason is not None
    assert why in reason
    assert Replay(CUT, reason=reason).describe() == (
        f"online schema change of shop.orders at mysql-bin.000003:500: re-snapshotted, since {reason}"
    )


def test_a_shadow_logged_whole_since_its_create_is_replayed():
    # gh-ost's ALTER of the ghost table comes before its row copy: trusted.
    facts = ShadowFacts(CREATED, first_row=(3, 200, 0), last_ddl=(3, 150, 0))
    assert verdict(CUT, facts, SCHEMA) is None
    assert Replay(CUT, rows=1234).describe().endswith("replayed 1,234 row(s) from shop._orders_gho, no snapshot read")
