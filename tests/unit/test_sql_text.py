"""binlake.contract.sql.sql: a statement is filled with quoted parts and integers only."""

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
    # A plain str at run time: DeltaTable's set= takes only exact str keys.
    assert type(statement) is str
    assert type(quote_ident("c")) is str


@pytest.mark.parametrize("part", [None, 1.5, True, b"t"])
def test_a_part_that_is_no_sql_text_nor_an_integer_is_refused(part):
    with pytest.raises(TypeError, match=r"^SQL part t must be quoted \(quote_ident, .*; got "):
        sql("SELECT * FROM {t}", t=part)


def test_a_list_item_that_is_no_sql_text_is_refused():
    with pytest.raises(TypeError, match=r"^SQL list item 3 must be quoted SQL text, got int$"):
        sql_list([quote_ident("b"), 3])  # type: ignore[list-item]


def test_every_field_has_a_part_and_no_format_spec():
    with pytest.raises(KeyError, match="has no part"):
        sql("SELECT * FROM {t}")
    with pytest.raises(ValueError, match="takes no format spec"):
        sql("LIMIT {n:>5}", n=3)


def test_generated_sql_is_wrapped_on_purpose():
    assert sql("WHERE {w}", w=Sql("a = 1")) == "WHERE a = 1"
