"""One writer per layer: the lease rules of binlake.contract.leases, on a local lakehouse.

Two processes are simulated by two holders (each holder is one command in one process; the
table compares holder ids). tests/integration/test_leases.py runs real processes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from binlake.config import Config, LakehouseConfig, Secret, SourceConfig
from binlake.contract.leases import LAYERS, Holder, current_holders, ensure_leases_table, holding
from binlake.contract.tables import Lakehouse
from binlake.contract.write_errors import with_retry
from binlake.errors import LeaseHeldError, LeaseLostError


@pytest.fixture
def lh(tmp_path, spark):
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("pw"), server_id=9, tables=("shop.*",))
    lake = Lakehouse(Config(source=source, lakehouse=LakehouseConfig(path=str(tmp_path / "lake"))))
    ensure_leases_table(spark, lake, layout_version=3)
    return lake


def _expire(spark, lh, layer):
    """What time does to a lease nobody renews (retried: it may race the holder's renewal)."""
    statement = (
        f"UPDATE {lh.leases.sql} SET expires_at = current_timestamp() - INTERVAL 1 SECOND WHERE layer = '{layer}'"
    )
    with_retry("expire", lambda: spark.sql(statement).collect())


def _take(spark, lh, layers, holder):
    """Take the leases and give them back: a refusal raises from here."""
    with holding(spark, lh, layers, holder):
        pass


def test_a_second_writer_of_a_layer_is_refused_with_the_holder_and_what_to_do(spark, lh):
    first = Holder("run --continuous", job_id="11", job_run_id="22")
    with holding(spark, lh, LAYERS, first), pytest.raises(LeaseHeldError) as refused:
        _take(spark, lh, ["capture"], Holder("capture"))
    message = str(refused.value)
    assert message.startswith(f"the capture layer is being written by `binlake run --continuous` (pid {first.pid} on ")
    assert ", job 11 run 22)" in message
    assert "\n" not in message
    assert "binlake_continuous and the scheduled binlake_pipeline must not both run" in message
    assert refused.value.exit_code == 15


def test_other_layers_stay_free_and_a_refusal_takes_nothing(spark, lh):
    with holding(spark, lh, ["gold"], Holder("gold")):
        with holding(spark, lh, ["capture", "silver"], Holder("run")):
            assert set(current_holders(spark, lh)) == set(LAYERS)
        # `run` needs gold too: refused, and it keeps neither capture nor silver.
        with pytest.raises(LeaseHeldError, match="the gold layer is being written by `binlake gold`"):
            _take(spark, lh, LAYERS, Holder("run"))
        assert set(current_holders(spark, lh)) == {"gold"}
    assert current_holders(spark, lh) == {}


@pytest.mark.slow
def test_a_lease_given_back_or_expired_is_free(spark, lh):
    with holding(spark, lh, ["silver"], Holder("silver")):
        pass
    with holding(spark, lh, ["silver"], Holder("silver")):  # given back on exit
        pass
    # A holder on another host that never gave its lease back blocks until the lease expires.
    ghost = Holder("silver", host="another-host", pid=1)
    with holding(spark, lh, ["silver"], ghost):
        with pytest.raises(LeaseHeldError, match=r"pid 1 on another-host\)"):
            _take(spark, lh, ["silver"], Holder("silver"))
        _expire(spark, lh, "silver")
        with holding(spark, lh, ["silver"], Holder("silver")):
            assert "`binlake silver` (pid" in current_holders(spark, lh)["silver"]["holder"]


def test_a_killed_process_on_this_host_or_an_earlier_run_of_the_same_job_is_taken_over_at_once(spark, lh):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    killed = Holder("run --continuous", pid=int(dead.stdout))
    with holding(spark, lh, LAYERS, killed), holding(spark, lh, ["capture"], Holder("capture")):
        assert current_holders(spark, lh)["capture"]["holder"].startswith("`binlake capture`")
    restarted = Holder("run --continuous", job_id="7", job_run_id="2", host="new-cluster")
    earlier = Holder("run --continuous", job_id="7", job_run_id="1", host="old-cluster")
    with holding(spark, lh, LAYERS, earlier), holding(spark, lh, LAYERS, restarted):
        assert "job 7 run 2" in current_holders(spark, lh)["gold"]["holder"]


def _expiry(spark, lh, layer):
    return spark.sql(f"SELECT expires_at FROM {lh.leases.sql} WHERE layer = '{layer}'").first()[0]


def test_renewal_pushes_the_expiry_on_and_a_holder_taken_over_learns_it_lost(spark, lh):
    lost = threading.Event()
    with holding(spark, lh, ["gold"], Holder("gold"), on_lost=lost.set, lease_seconds=60, renew_seconds=1) as held:
        taken = _expiry(spark, lh, "gold")
        deadline = time.monotonic() + 120
        while _expiry(spark, lh, "gold") <= taken and time.monotonic() < deadline:
            time.sleep(1)
        assert _expiry(spark, lh, "gold") > taken, "not renewed"
        # Another writer took the layer (as it would once this one stalled past its lease).
        statement = f"UPDATE {lh.leases.sql} SET holder_id = 'another', host = 'elsewhere' WHERE layer = 'gold'"
        with_retry("take over", lambda: spark.sql(statement).collect())
        assert lost.wait(120), "the renewal did not notice"
    assert current_holders(spark, lh)["gold"]["holder"].endswith("on elsewhere)"), "its release freed another's lease"
    with pytest.raises(LeaseLostError, match=r"^the gold lease of `binlake gold` \(pid .*\) was taken over"):
        held.raise_if_lost()


def test_two_processes_racing_for_a_free_layer_get_one_winner(spark, lh):
    results = []

    def take(name):
        try:
            with holding(spark, lh, ["capture"], Holder(name)):
                results.append(("won", name))
                time.sleep(3)
        except LeaseHeldError:
            results.append(("refused", name))

    threads = [threading.Thread(target=take, args=(f"capture {i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r[0] for r in results) == ["refused", "won"]


def test_commands_starting_at_once_on_a_new_lakehouse_create_the_leases_table_once(spark, tmp_path):
    """`binlake run` and `binlake maintain` started together both find the leases table missing:
    each creates it, or finds it created, and neither reads it half made."""
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("pw"), server_id=9, tables=("shop.*",))
    lake = Lakehouse(Config(source=source, lakehouse=LakehouseConfig(path=str(tmp_path / "new"))))
    failures = []

    def create():
        try:
            ensure_leases_table(spark, lake, layout_version=3)
            lake.leases.properties(spark)
        except Exception as exc:  # noqa: BLE001 - the test reports any failure of either
            failures.append(exc)

    threads = [threading.Thread(target=create) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert sorted(r.layer for r in lake.leases.read(spark).collect()) == sorted(LAYERS)


@pytest.mark.parametrize("left_behind", ["_delta_log/", "part-00000-killed.snappy.parquet"])
def test_a_table_whose_first_commit_is_not_written_yet_does_not_exist_and_a_killed_creation_is_redone(
    spark, tmp_path, monkeypatch, left_behind
):
    """A creation killed before its first commit leaves an empty log directory, or the data
    files of its CREATE ... AS SELECT: neither is a table, and the next command creates it."""
    from binlake.contract import leases

    monkeypatch.setattr(leases, "INCOMPLETE_CREATE_SECONDS", 1)
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("pw"), server_id=9, tables=("shop.*",))
    lake = Lakehouse(Config(source=source, lakehouse=LakehouseConfig(path=str(tmp_path / "new"))))
    table_dir = tmp_path / "new" / "system" / "leases"
    table_dir.mkdir(parents=True)
    if left_behind.endswith("/"):
        (table_dir / left_behind).mkdir()
    else:
        (table_dir / left_behind).write_bytes(b"PAR1 not committed")
    assert not lake.leases.exists(spark)
    ensure_leases_table(spark, lake, layout_version=3)
    assert lake.leases.exists(spark)
    assert sorted(r.layer for r in lake.leases.read(spark).collect()) == sorted(LAYERS)
