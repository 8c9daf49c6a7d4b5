"""``binlake erase --key``: every key column once, nothing else, with the fix in the message."""

from __future__ import annotations

import pytest

from binlake.contract.types import Column, Kind, TableSchema
from binlake.errors import ConfigError
from binlake.ops.erase import parse_key


def _schema(*key: str) -> TableSchema:
    cols = tuple(Column(name=n, kind=Kind.INT, bits=32) for n in (*key, "email"))
    return TableSchema("shop", "customers", cols, key=key)


def test_each_key_column_is_given_once_by_name():
    assert parse_key(_schema("id"), ["id=42"]) == {"id": "42"}
    assert parse_key(_schema("region", "id"), ["id=7", "region=eu=west"]) == {"id": "7", "region": "eu=west"}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["42"], "--key '42' is not column=value: write it like --key id=42"),
        (["email=a@b"], "--key email is not a key column of shop.customers: its key is (id)"),
        (["id=1", "id=2"], "--key id is given twice: give each key column once"),
    ],
)
def test_a_bad_key_names_the_fix(pairs, message):
    with pytest.raises(ConfigError, match=f"^{message.replace('(', '[(]').replace(')', '[)]')}$"):
        parse_key(_schema("id"), pairs)


def test_a_composite_key_needs_every_column():
    with pytest.raises(
        ConfigError,
        match=r"--key misses region: shop.customers's key is \(region, id\); "
        r"give every key column, e.g. --key region=... --key id=...",
    ):
        parse_key(_schema("region", "id"), ["id=7"])
