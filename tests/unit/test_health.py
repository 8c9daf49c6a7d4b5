"""Health without a server: the lag bound's config, `status --check`'s verdict, the page's
rendering of what it is given, and the metrics rows a step's result becomes."""

from __future__ import annotations

from datetime import datetime

import pytest
import yaml

from binlake.config import load_config_text
from binlake.contract.position import BinlogPosition
from binlake.errors import ConfigError, LagExceededError
from binlake.ops.health_page import render_page
from binlake.ops.metrics import MetricsRecorder, SourceHead, lag_seconds
from binlake.ops.status import check_lag
from binlake.source.binlog.files import BinlogFile

BASE = {
    "source": {"host": "h", "user": "u", "password": "p", "server_id": 5401, "tables": ["shop.*"]},
    "lakehouse": {"path": "/tmp/lh"},
}


def _config(**sections):
    return load_config_text(yaml.safe_dump({**BASE, **sections}), environ={})


def test_the_lag_bound_defaults_to_an_hour_and_must_be_positive():
    assert _config().health.max_lag_seconds == 3600
    assert _config(health={"max_lag_seconds": 60}).health.max_lag_seconds == 60
    with pytest.raises(ConfigError, match=r"^health.max_lag_seconds must be at least 1, got 0$"):
        _config(health={"max_lag_seconds": 0})


def _status(capture_lag, *tables):
    return {
        "lag": {"seconds": capture_lag},
        "tables": [{"table": t, "group": g, "gold_lag_seconds": lag} for t, g, lag in tables],
    }


def test_check_passes_at_or_below_the_bound_and_names_each_layer_above_it():
    check_lag(_status(0.0, ("shop.a", "shop", 60.0)), 60)
    check_lag(_status(None, ("shop.a", "shop", None)), 60)  # unknown is not over
    with pytest.raises(LagExceededError) as err:
        check_lag(_status(75.0, ("shop.a", "shop", 10.0), ("crm.b", "crm", 90.0), ("crm.c", "crm", 200.0)), 60)
    assert str(err.value) == (
        "behind the source by more than health.max_lag_seconds=60: capture 75 s; "
        "gold group crm 200 s (upper bounds; binlake status shows where each layer is)"
    )
    assert err.value.exit_code == 12


def test_the_page_escapes_what_it_shows_and_says_when_nothing_was_recorded():
    status = {
        "generated_at": "2026-11-26 10:00:00",
        "tables": [
            {
                "table": "shop.<b>",
                "group": "shop",
                "silver_position": "mysql-bin.000001:4",
                "published_position": None,
                "gold_version": None,
                "last_attempt_status": None,
                "gold_lag_seconds": None,
                "stopped": "schema change <script>: run binlake snapshot --table shop.b",
            }
        ],
    }
    page = render_page(status, {})
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "No metrics recorded yet" in page
    assert "shop.&lt;b&gt;" in page


def test_a_capture_result_becomes_a_step_row_with_lag_and_a_row_per_table():
    from binlake.bronze.capture import CaptureResult

    config = _config()
    head = SourceHead(
        (BinlogFile("mysql-bin.000001", 1000), BinlogFile("mysql-bin.000002", 300)),
        BinlogPosition("mysql-bin.000002", 300),
        datetime(2026, 11, 26, 10, 0, 30),
    )
    result = CaptureResult(
        end=BinlogPosition("mysql-bin.000001", 900),
        changes=5,
        table_changes={"shop.a": 3, "shop.b": 2},
        last_commit_ts=int(datetime(2026, 11, 26, 10, 0, 0).timestamp() * 1_000_000),
    )
    recorder = MetricsRecorder(config, "capture")
    recorder.add("capture", result, 1.5, head=head)
    step, *tables = recorder.rows
    assert (step["table"], step["status"], step["rows_in"], step["seconds"]) == (None, "ok", 5, 1.5)
    assert step["lag_bytes"] == 100 + 300
    assert step["lag_seconds"] is not None
    assert [(t["table"], t["rows_in"], t["publish_group"]) for t in tables] == [
        ("shop.a", 3, "shop"),
        ("shop.b", 2, "shop"),
    ]


def test_a_failed_step_is_recorded_with_its_one_line_error():
    recorder = MetricsRecorder(_config(), "silver")
    recorder.add("silver", None, 0.2, RuntimeError("disk\nfull"))
    (row,) = recorder.rows
    assert (row["status"], row["detail"]) == ("failed", "RuntimeError: disk full")


def test_maintain_and_verify_results_become_rows_per_table():
    from decimal import Decimal

    from binlake.ops.maintain import MaintainResult
    from binlake.ops.verify import ChunkCheck, TableCheck, VerifyResult

    recorder = MetricsRecorder(_config(), "maintain")
    recorder.add("maintain", MaintainResult(tombstones_removed={"shop.a": 4}, changelog_rows_removed=10), 3.0)
    step, table = recorder.rows
    assert (step["rows_out"], step["status"], table["table"], table["rows_out"]) == (14, "ok", "shop.a", 4)

    differs = ChunkCheck(1, None, None, 5, 4, Decimal(1), Decimal(2), status="mismatch")
    same = ChunkCheck(0, None, None, 3, 3, Decimal(1), Decimal(1))
    recorder = MetricsRecorder(_config(), "verify")
    recorder.add(
        "verify", VerifyResult(tables=[TableCheck("shop", "a", [same, differs]), TableCheck("shop", "b", [same])]), 2.0
    )
    step, a, b = recorder.rows
    assert (step["status"], step["checks_failed"], step["rows_in"]) == ("mismatch", 1, 11)
    assert (a["status"], a["checks_failed"], b["status"], b["checks_failed"]) == ("mismatch", 1, "ok", 0)


def test_lag_is_zero_when_caught_up_else_an_upper_bound_and_unknown_without_a_basis():
    now, newest = datetime(2026, 1, 1, 12, 0, 10), datetime(2026, 1, 1, 12, 0, 0, 250000)
    assert lag_seconds(now, newest, caught_up=True) == 0.0
    assert lag_seconds(now, newest, caught_up=False) == 9.75
    assert lag_seconds(now, None, caught_up=False) is None
    assert lag_seconds(now, newest, caught_up=None) is None
    assert lag_seconds(newest, now, caught_up=False) == 0.0  # a source clock ahead is no negative lag
