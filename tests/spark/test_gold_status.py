"""``binlake status``: capture position and lag, purge risk, and per table what silver applied
and what gold last published; still useful when the source side cannot be asked."""

from __future__ import annotations

import json

import pytest
from gold_fixtures import Lake, col, table_schema  # tests/spark/gold_fixtures.py

from binlake.errors import QualityCheckFailed, SourceConnectionError
from binlake.gold.publish import run_gold
from binlake.ops.status import collect_status, format_status

ITEMS = table_schema("shop", "items", [col("id", "int", False), col("price", "double")], key=["id"])


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> Lake:
    """shop.items published at mysql-bin.000003:900, then a failed attempt at mysql-bin.000003:990."""
    lake = Lake(spark, tmp_path_factory.mktemp("status"))
    lake.add_table(ITEMS)
    lake.silver("shop", "items", [{"id": 1, "price": 2.0, "seq": (3, 100, 0)}])
    lake.heartbeats([(3, 900, "0-1-5", "2026-11-01 08:00:00")])
    lake.progress("shop", "items", 3, 900)
    run_gold(spark, lake.config)
    lake.silver("shop", "items", [{"id": 1, "price": -2.0, "seq": (3, 950, 0)}])
    lake.heartbeats([(3, 990, "0-1-6", "2026-11-01 08:01:00")])
    lake.progress("shop", "items", 3, 990)
    strict = lake.with_checks({"shop.items": [{"column": "price", "between": [0, None], "severity": "fail"}]})
    with pytest.raises(QualityCheckFailed):
        run_gold(spark, strict.config)
    return lake


def capture_module(monkeypatch, capture_status):
    """Stand in for binlake.bronze.capture.capture_status: it needs a live server, so the tests
    give status the dict it returns (same keys)."""
    import binlake.ops.status as status_module

    monkeypatch.setattr(status_module, "capture_status", capture_status)


def _unreachable(spark, config):
    raise SourceConnectionError("cannot connect to 127.0.0.1:3306: connection refused")


def test_status_shows_silver_and_the_last_good_publish_per_table(spark, lake, monkeypatch):
    capture_module(
        monkeypatch,
        lambda spark, config: {
            "resume_file": "mysql-bin.000003",
            "resume_pos": 990,
            "server_file": "mysql-bin.000003",
            "server_pos": 1490,
            "lag_bytes": 500,
            "oldest_binlog": "mysql-bin.000002",
            "binlog_files": 2,
            "binlog_expire_seconds": 864000,
            "purge_warning": None,
        },
    )

    status = collect_status(spark, lake.config)

    [items] = status["tables"]
    assert items["table"] == "shop.items"
    assert items["silver_position"] == "mysql-bin.000003:990"
    assert items["published_position"] == "mysql-bin.000003:900"
    assert items["source_time"] == "2026-11-01 08:00:00"
    assert items["last_attempt_status"] == "failed"
    assert items["gold_version"] == lake.gold_version("shop", "items")
    assert status["last_publish"]["gtid"] == "0-1-5"
    assert status["lag"]["bytes"] == 500
    assert status["lag"]["seconds_basis"].startswith("upper bound")
    assert any("shop.items: the last publish attempt" in w and "failed" in w for w in status["warnings"])
    json.dumps(status)  # --json needs nothing but plain values

    text = format_status(status)
    assert "capture: resume mysql-bin.000003:990, server mysql-bin.000003:1490, lag 500 bytes, <= " in text
    assert "last publish: " in text
    assert " at mysql-bin.000003:900 (GTID 0-1-5)" in text
    table_line = next(line for line in text.splitlines() if line.startswith("shop.items"))
    # Gold is at 900 while the server is at 1490: at most now minus the published source time behind.
    lag = items["gold_lag_seconds"]
    assert lag > 0
    assert status["tables"][0]["gold_lag_seconds"] is not None
    assert table_line.split() == [
        "shop.items",
        "shop",
        "mysql-bin.000003:990",
        "mysql-bin.000003:900",
        "<=",
        f"{lag:,.0f}",
        "s",
        str(items["gold_version"]),
        "failed",
    ]


def test_a_purge_warning_from_capture_is_shown_first(spark, lake, monkeypatch):
    capture_module(
        monkeypatch,
        lambda spark, config: {
            "resume_file": "mysql-bin.000003",
            "resume_pos": 990,
            "server_file": "mysql-bin.000003",
            "server_pos": 990,
            "lag_bytes": 0,
            "oldest_binlog": "mysql-bin.000003",
            "binlog_files": 1,
            "binlog_expire_seconds": 864000,
            "purge_warning": "resume file mysql-bin.000003 is the oldest on the server",
        },
    )

    status = collect_status(spark, lake.config)

    assert status["warnings"][0] == "resume file mysql-bin.000003 is the oldest on the server"
    assert (status["lag"]["seconds"], status["lag"]["seconds_basis"]) == (0.0, "caught up")
    assert "WARNING: resume file mysql-bin.000003 is the oldest on the server" in format_status(status)


def test_status_degrades_with_a_note_when_the_source_side_is_unavailable(spark, lake, monkeypatch):
    capture_module(monkeypatch, _unreachable)

    status = collect_status(spark, lake.config)

    assert status["capture"] is None
    assert status["notes"] == [
        "source position, lag and purge risk unavailable: cannot connect to 127.0.0.1:3306: connection refused"
    ]
    assert status["captured"]["position"] == "mysql-bin.000003:990"
    text = format_status(status)
    assert "capture: last batch ends at mysql-bin.000003:990" in text
    assert "note: source position, lag and purge risk unavailable" in text


def test_status_names_the_checks_the_last_attempt_failed(spark, lake, monkeypatch):
    capture_module(monkeypatch, _unreachable)

    status = collect_status(spark, lake.config)

    assert status["tables"][0]["failing_checks"] == [
        {
            "name": "between(price, 0, null)",
            "severity": "fail",
            "unexpected_count": 1,
            "observed_value": None,
            "error": None,
        }
    ]
    assert "  shop.items between(price, 0, null) (fail): 1 unexpected rows" in format_status(status)


def test_status_reads_only_the_latest_commits_of_a_long_change_log(spark, tmp_path, monkeypatch):
    import binlake.ops.status as status_module

    capture_module(monkeypatch, _unreachable)
    monkeypatch.setattr(status_module, "RECENT_COMMITS", 3)
    long_log = Lake(spark, tmp_path)
    for i in range(6):  # versions 1..6 (0 created the table), one capture batch each
        long_log.heartbeat(3, 100 + i, commit_ts=f"2026-11-01 08:00:0{i}")
    # The oldest batches' files are gone: a scan of the whole log would fail on them.
    log_dir = tmp_path / "lakehouse" / "bronze" / "changelog"
    for version in (1, 2):
        commit = (log_dir / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
        for action in map(json.loads, commit):
            if "add" in action:
                (log_dir / action["add"]["path"]).unlink()

    captured = collect_status(spark, long_log.config)["captured"]

    assert captured["position"] == "mysql-bin.000003:105"
    assert captured["last_commit_ts"] == "2026-11-01 08:00:05"


def test_status_looks_past_the_latest_commits_when_they_hold_no_change(spark, tmp_path, monkeypatch):
    import binlake.ops.status as status_module

    capture_module(monkeypatch, _unreachable)
    monkeypatch.setattr(status_module, "RECENT_COMMITS", 3)
    idle = Lake(spark, tmp_path)
    idle.heartbeat(3, 100, commit_ts="2026-11-01 08:00:00")  # the last batch with a change
    for i in range(1, 5):  # then idle batches: heartbeats without a commit time
        idle.heartbeat(3, 100 + i)

    captured = collect_status(spark, idle.config)["captured"]

    assert captured["position"] == "mysql-bin.000003:104"
    assert captured["last_commit_ts"] == "2026-11-01 08:00:00"
