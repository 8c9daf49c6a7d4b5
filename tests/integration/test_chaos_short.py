"""The short form of `make chaos`: kill -9 in each layer and a binlog rotation burst under a
concurrent write load; gold must equal the source with nothing missing, extra or different."""

import os

import pytest
from chaos.driver import SHORT, run


@pytest.mark.slow
@pytest.mark.chaos
def test_faults_lose_and_double_nothing(tmp_path, monkeypatch):
    # The driver points MYSQL_PASSWORD at its own server; the session server's tests run after.
    monkeypatch.setenv("MYSQL_PASSWORD", os.environ.get("MYSQL_PASSWORD", ""))
    outcomes = run(list(SHORT), full=False, workdir=tmp_path / "chaos")

    for o in outcomes:
        assert o.faults > 0, f"{o.scenario}: no fault was injected ({o.notes})"
        assert o.ok, f"{o.scenario}: {o.rows_missing} missing, {o.rows_extra} extra, {o.rows_different} different: {o.notes}"
