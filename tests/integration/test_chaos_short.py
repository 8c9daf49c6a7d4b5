"""The short form of `make chaos`: kill -9 of the first load inside a typed snapshot wave and
inside silver's bulk load; then, under a concurrent write load, kill -9 of `binlake
maintain` running beside a complete `binlake run`, an online schema change (its cut-over replayed,
not re-read), a binlog rotation burst, and kill -9 of
`binlake run --continuous` in each of its overlapping stages (capture, silver, gold); gold must
equal the source with nothing missing, extra or different, and every named kill must fire.
(The kills in each layer are the full matrix's, `make chaos`, and each layer's own kill tests.)"""

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
        missed = [n for n in o.notes if "did not trigger" in n or "failed" in n]
        assert not missed, f"{o.scenario}: {missed}"
        assert o.faults > 0, f"{o.scenario}: no fault was injected ({o.notes})"
        assert o.ok, (
            f"{o.scenario}: {o.rows_missing} missing, {o.rows_extra} extra, {o.rows_different} different: {o.notes}"
        )
