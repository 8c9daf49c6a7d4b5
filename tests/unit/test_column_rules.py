"""Column rules: what a rule keeps and masks, the errors that name the fix, and the schema
binlake stores for a table under a rule."""

from __future__ import annotations

import re

import pytest

from binlake.config import ColumnRule, Secret, SourceConfig
from binlake.contract.columns import (
    FlatMasker,
    apply_to_image,
    apply_to_schema,
    masked_text,
    rule_digest,
    stored_schema,
)
from binlake.contract.types import Column, Kind, TableSchema
from binlake.errors import ConfigError

SCHEMA = TableSchema(
    "shop",
    "customers",
    (
        Column("id", Kind.INT, bits=32, nullable=False),
        Column("email", Kind.STRING),
        Column("ssn", Kind.STRING),
        Column("age", Kind.INT, bits=32),
    ),
    key=("id",),
)


def source(*rules: ColumnRule, salt: str | None = "pepper") -> SourceConfig:
    return SourceConfig(
        host="h",
        port=3306,
        user="u",
        password=Secret("pw"),
        server_id=1,
        tables=("shop.*",),
        columns=rules,
        mask_salt=Secret(salt),
    )


def test_the_first_matching_pattern_is_the_rule():
    a, b = ColumnRule("shop.customers", exclude=("ssn",)), ColumnRule("shop.*", include=("id",))
    cfg = source(a, b)
    assert cfg.column_rule("shop", "customers") is a
    assert cfg.column_rule("shop", "orders") is b
    assert cfg.column_rule("crm", "people") is None


def test_the_rules_and_the_salt_reach_the_executors_and_the_salt_only_under_a_redacted_key():
    cfg = source(ColumnRule("shop.*", mask={"email": "hash"}))
    options = cfg.executor_options()
    assert "pepper" not in options["source"]
    assert options["mask_salt_secret"] == "pepper"
    back = SourceConfig.from_executor_options(options)
    assert back.columns == cfg.columns
    assert back.mask_salt.reveal() == "pepper"
    assert stored_schema(back, SCHEMA).version() == stored_schema(cfg, SCHEMA).version()


def test_a_new_salt_is_a_new_rule_digest_and_so_a_new_schema_version():
    rule = ColumnRule("shop.*", mask={"email": "hash"})
    assert rule_digest(source(rule), "shop", "customers") != rule_digest(
        source(rule, salt="other"), "shop", "customers"
    )
    assert "pepper" not in stored_schema(source(rule), SCHEMA).to_json()
    unsalted = ColumnRule("shop.*", mask={"email": "null"})  # no hash: the salt does not matter
    assert rule_digest(source(unsalted), "shop", "x") == rule_digest(source(unsalted, salt="other"), "shop", "x")
    assert rule_digest(source(), "shop", "customers") == ""


def test_a_hash_mask_without_a_salt_is_a_config_error():
    with pytest.raises(ConfigError, match=re.escape("masks shop.*.email with hash but source.mask_salt is not set")):
        source(ColumnRule("shop.*", mask={"email": "hash"}), salt=None)


def test_flat_images_are_masked_like_single_ones():
    rule = ColumnRule("shop.*", exclude=("ssn",), mask={"email": "hash", "age": "null"})
    names = ["id", "email", "ssn", "age"]
    rows = [["1", "a@b", "123", "40"], ["2", None, "456", "41"]]
    masker = FlatMasker(rule, "salt", names)
    flat = masker.apply([v for r in rows for v in r], 2)
    singles = [apply_to_image(rule, "salt", dict(zip(names, r))) for r in rows]
    assert masker.names == ["id", "email", "age"]
    assert [dict(zip(masker.names, flat[i * 3 : (i + 1) * 3])) for i in range(2)] == singles


def test_excluded_columns_leave_the_image_and_masked_ones_are_hashed_or_null():
    rule = ColumnRule("shop.*", exclude=("ssn",), mask={"email": "hash", "age": "null"})
    image = apply_to_image(rule, "salt", {"id": "1", "email": "a@b", "ssn": "123", "age": "40"})
    assert image == {"id": "1", "email": masked_text("hash", "salt", "a@b"), "age": None}
    assert len(image["email"]) == 64
    assert image["email"] != masked_text("hash", "other salt", "a@b")
    assert masked_text("hash", "salt", None) is None
    assert apply_to_image(None, "salt", {"id": "1"}) == {"id": "1"}


def test_the_stored_schema_keeps_the_kept_columns_and_types_hashes_as_strings():
    rule = ColumnRule("shop.*", exclude=("ssn",), mask={"age": "hash"})
    stored = apply_to_schema(rule, SCHEMA)
    assert [c.name for c in stored.columns] == ["id", "email", "age"]
    assert stored.column("age").kind is Kind.STRING
    assert stored.column_rules == rule.digest()
    # A different rule is a different schema version, also when the columns look the same.
    other = apply_to_schema(ColumnRule("shop.*", exclude=("ssn",), mask={"age": "hash", "email": "hash"}), SCHEMA)
    assert other.version() != stored.version()
    assert apply_to_schema(None, SCHEMA).version() == SCHEMA.version()
    assert TableSchema.from_json(stored.to_json()) == stored


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (ColumnRule("shop.*", exclude=("id",)), "drops key column id of shop.customers: binlake needs the key"),
        (ColumnRule("shop.*", include=("email",)), "drops key column id of shop.customers"),
        (
            ColumnRule("shop.*", mask={"id": "hash"}),
            "masks key column id of shop.customers: that changes what rows join on; add mask_key: true",
        ),
        (ColumnRule("shop.*", exclude=("phone",)), "names phone, which shop.customers does not have"),
        (ColumnRule("shop.*", mask={"id": "null"}, mask_key=True), "masks key column id of shop.customers with null"),
    ],
)
def test_a_rule_that_does_not_fit_the_table_names_the_fix(rule, message):
    with pytest.raises(ConfigError, match=message):
        apply_to_schema(rule, SCHEMA)


def test_a_masked_key_is_allowed_when_the_rule_says_so():
    stored = apply_to_schema(ColumnRule("shop.*", mask={"id": "hash"}, mask_key=True), SCHEMA)
    assert stored.column("id").kind is Kind.STRING


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(include=("id",), exclude=("ssn",)), "has both include and exclude"),
        (dict(include=()), "include is empty"),
        (dict(mask={"email": "scramble"}), "mask.email must be hash or null"),
        (dict(exclude=("email",), mask={"email": "hash"}), "masks email, which it also drops"),
    ],
)
def test_a_rule_that_contradicts_itself_is_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ColumnRule("shop.*", **kwargs)


def test_a_rule_may_not_drop_or_null_the_columns_a_cascading_foreign_key_acts_through():
    fk = {
        "name": "fk_owner",
        "columns": ["owner"],
        "parent": "shop.customers",
        "parent_columns": ["id"],
        "on_delete": "CASCADE",
        "on_update": "RESTRICT",
    }
    child = TableSchema(
        "shop",
        "pets",
        (Column("id", Kind.INT, bits=32, nullable=False), Column("owner", Kind.INT, bits=32)),
        key=("id",),
        foreign_keys=(fk,),
    )
    for rule in (ColumnRule("shop.*", exclude=("owner",)), ColumnRule("shop.*", mask={"owner": "null"})):
        with pytest.raises(
            ConfigError,
            match=re.escape(
                "drops or nulls owner of shop.pets, which its foreign key fk_owner acts through: keep the column"
            ),
        ):
            apply_to_schema(rule, child)
    restricting = TableSchema(
        "shop", "pets", child.columns, key=("id",), foreign_keys=({**fk, "on_delete": "RESTRICT"},)
    )
    assert [c.name for c in apply_to_schema(ColumnRule("shop.*", exclude=("owner",)), restricting).columns] == ["id"]
