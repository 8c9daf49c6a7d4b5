"""Column rules: what a rule keeps and masks, the errors that name the fix, and the schema
binlake stores for a table under a rule."""

from __future__ import annotations

import pytest

from binlake.contract.columns import (
    ColumnRule,
    ColumnRuleError,
    apply_to_image,
    apply_to_schema,
    masked_text,
    rule_for,
)
from binlake.contract.types import Column, Kind, TableSchema

SCHEMA = TableSchema("shop", "customers", (
    Column("id", Kind.INT, bits=32, nullable=False), Column("email", Kind.STRING),
    Column("ssn", Kind.STRING), Column("age", Kind.INT, bits=32)), key=("id",))


def test_the_first_matching_pattern_is_the_rule():
    a, b = ColumnRule("shop.customers", exclude=("ssn",)), ColumnRule("shop.*", include=("id",))
    assert rule_for((a, b), "shop", "customers") is a and rule_for((a, b), "shop", "orders") is b
    assert rule_for((a, b), "crm", "people") is None


def test_excluded_columns_leave_the_image_and_masked_ones_are_hashed_or_null():
    rule = ColumnRule("shop.*", exclude=("ssn",), mask={"email": "hash", "age": "null"})
    image = apply_to_image(rule, "salt", {"id": "1", "email": "a@b", "ssn": "123", "age": "40"})
    assert image == {"id": "1", "email": masked_text("hash", "salt", "a@b"), "age": None}
    assert len(image["email"]) == 64 and image["email"] != masked_text("hash", "other salt", "a@b")
    assert masked_text("hash", "salt", None) is None
    assert apply_to_image(None, "salt", {"id": "1"}) == {"id": "1"}


def test_the_stored_schema_keeps_the_kept_columns_and_types_hashes_as_strings():
    rule = ColumnRule("shop.*", exclude=("ssn",), mask={"age": "hash"})
    stored = apply_to_schema(rule, SCHEMA)
    assert [c.name for c in stored.columns] == ["id", "email", "age"]
    assert stored.column("age").kind is Kind.STRING and stored.column_rules == rule.digest()
    # A different rule is a different schema version, also when the columns look the same.
    other = apply_to_schema(ColumnRule("shop.*", exclude=("ssn",), mask={"age": "hash", "email": "hash"}), SCHEMA)
    assert other.version() != stored.version()
    assert apply_to_schema(None, SCHEMA).version() == SCHEMA.version()
    assert TableSchema.from_json(stored.to_json()) == stored


@pytest.mark.parametrize("rule, message", [
    (ColumnRule("shop.*", exclude=("id",)), "drops key column id of shop.customers: binlake needs the key"),
    (ColumnRule("shop.*", include=("email",)), "drops key column id of shop.customers"),
    (ColumnRule("shop.*", mask={"id": "hash"}), "masks key column id of shop.customers: that changes what rows join on; "
                                                "add mask_key: true"),
    (ColumnRule("shop.*", exclude=("phone",)), "names phone, which shop.customers does not have"),
])
def test_a_rule_that_does_not_fit_the_table_names_the_fix(rule, message):
    with pytest.raises(ColumnRuleError, match=message):
        apply_to_schema(rule, SCHEMA)


def test_a_masked_key_is_allowed_when_the_rule_says_so():
    stored = apply_to_schema(ColumnRule("shop.*", mask={"id": "hash"}, mask_key=True), SCHEMA)
    assert stored.column("id").kind is Kind.STRING


@pytest.mark.parametrize("kwargs, message", [
    (dict(include=("id",), exclude=("ssn",)), "has both include and exclude"),
    (dict(include=()), "include is empty"),
    (dict(mask={"email": "scramble"}), "mask.email must be hash or null"),
    (dict(exclude=("email",), mask={"email": "hash"}), "masks email, which it also drops"),
])
def test_a_rule_that_contradicts_itself_is_refused(kwargs, message):
    with pytest.raises(ColumnRuleError, match=message):
        ColumnRule("shop.*", **kwargs)
