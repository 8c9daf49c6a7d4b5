"""binlake.contract.sql.sql: a statement is filled with quoted parts only."""

import re

import pytest

from binlake.contract.sql import Sql, qualified, quote_ident, spark_string, sql, sql_list


def test_a_template_takes_quoted_names_literals_and_integers():
    statement = sql(
        "SELECT {cols} FROM {t} WHERE v = {v} LIMIT {n}",
        cols=sql_list([quote_ident("a`b"), quote_ident("c")]),
        t=qualified("d.b", "t"),
        v=spark_string("it's"),
        n=3,
    )
    assert statement == "SELECT `a``b`, `c` FROM `d.b`.`t` WHERE v = 'it\\'s' LIMIT 3"
    assert isinstance(statement, Sql)


def test_a_part_nobody_quoted_is_refused():
    with pytest.raises(TypeError, match=r"^SQL part t must be quoted \(quote_ident, .*got str$"):
        sql("SELECT * FROM {t}", t="shop.orders")
    with pytest.raises(TypeError, match="got bool"):
        sql("LIMIT {n}", n=True)
    with pytest.raises(TypeError, match=re.escape("SQL list item 'a' must be quoted, got str")):
        sql_list([quote_ident("b"), "a"])  # type: ignore[list-item]


def test_every_field_has_a_part_and_no_format_spec():
    with pytest.raises(KeyError, match="has no part"):
        sql("SELECT * FROM {t}")
    with pytest.raises(ValueError, match="takes no format spec"):
        sql("LIMIT {n:>5}", n=3)


def test_generated_sql_is_wrapped_on_purpose():
    assert sql("WHERE {w}", w=Sql("a = 1")) == "WHERE a = 1"
