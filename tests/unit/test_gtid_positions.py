"""MariaDB GTID positions as capture records and compares them."""

import pytest

from binlake.source import gtid


def test_a_position_holds_the_last_gtid_of_each_domain():
    assert gtid.parse("0-1-100,1-2-7") == {0: (1, 100), 1: (2, 7)}
    assert gtid.parse("") == {}
    assert gtid.parse(None) == {}
    assert gtid.text({1: (2, 7), 0: (1, 100)}) == "0-1-100,1-2-7"


def test_a_batch_advances_only_the_domains_it_wrote():
    assert gtid.advance("0-1-100,1-2-7", "0-1-105") == "0-1-105,1-2-7"
    assert gtid.advance("0-1-100", "0-2-101,3-3-1") == "0-2-101,3-3-1"
    assert gtid.advance("0-1-100", None) == "0-1-100"
    assert gtid.advance(None, "0-1-5") is None  # an unknown start stays unknown


def test_a_server_covers_a_position_when_every_domain_reached_it():
    assert gtid.covers("0-2-120,1-2-9", "0-1-100,1-2-7")
    assert not gtid.covers("0-2-99", "0-1-100")
    assert not gtid.covers("0-2-120", "0-1-100,1-2-7")  # a domain the server never logged


def test_a_malformed_gtid_is_refused_with_the_expected_form():
    with pytest.raises(ValueError, match="DOMAIN-SERVER-SEQUENCE"):
        gtid.parse("0-1")
