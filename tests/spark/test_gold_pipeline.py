"""``binlake run`` runs snapshot, capture, silver and gold in that order and stops at the first
failure with that failure's own error; a silver that stopped only some tables lets gold run
first."""

from __future__ import annotations

import pytest

from binlake.errors import NotReadyError, SilverTableError
from binlake.ops.pipeline import STEPS, pipeline_steps, run_steps
from binlake.silver.run import SilverResult, TableResult


class Done:
    def __init__(self, text):
        self.text = text

    def summary(self):
        return self.text


def test_the_scheduled_job_runs_the_four_layers_in_order():
    assert (
        [name for name, _ in pipeline_steps(None, None, None)]
        == list(STEPS)
        == ["snapshot", "capture", "silver", "gold"]
    )


def test_every_step_runs_and_the_summary_has_one_entry_per_step():
    ran = []

    def step(name):
        return name, lambda: ran.append(name) or Done(f"{name} ok\nsecond line")

    result = run_steps([step(n) for n in STEPS])

    assert ran == list(STEPS)
    assert result.ok
    assert result.failed_step is None
    lines = result.summary().splitlines()
    assert [line.split(" ", 1)[0] for line in lines if not line.startswith(" ")] == list(STEPS)
    assert lines[0].startswith("snapshot (")
    assert lines[0].endswith("s): snapshot ok")
    assert lines[1] == "  second line"


def test_the_first_failure_stops_the_run_and_propagates_unchanged():
    ran = []
    blocked = NotReadyError("silver has not run")

    def fail():
        ran.append("silver")
        raise blocked

    steps = [
        ("snapshot", lambda: ran.append("snapshot") or Done("ok")),
        ("capture", lambda: ran.append("capture") or Done("ok")),
        ("silver", fail),
        ("gold", lambda: ran.append("gold") or Done("ok")),
    ]

    with pytest.raises(NotReadyError) as err:
        run_steps(steps)

    assert err.value is blocked
    assert err.value.exit_code == 10
    assert ran == ["snapshot", "capture", "silver"]
    partial = err.value.pipeline_result
    assert [s.name for s in partial.steps] == ["snapshot", "capture", "silver"]
    assert partial.failed_step == "silver"
    assert not partial.ok
    assert partial.steps[-1].summary().endswith("FAILED: silver has not run")


def test_gold_runs_after_a_silver_that_stopped_one_table_and_the_run_fails_with_silvers_error():
    ran = []
    stopped = SilverTableError(
        "1 silver table(s) stopped, the others were applied: silver stopped shop.items: ...",
        result=SilverResult([TableResult("shop.items", error="silver stopped shop.items: ..."), TableResult("crm.a")]),
    )

    def silver():
        ran.append("silver")
        raise stopped

    def gold():
        ran.append("gold")
        raise NotReadyError("1 of 2 publish groups blocked (the others published: crm ...): shop.items blocks")

    steps = [("capture", lambda: ran.append("capture") or Done("ok")), ("silver", silver), ("gold", gold)]
    with pytest.raises(SilverTableError) as err:
        run_steps(steps)

    assert err.value is stopped
    assert err.value.exit_code == 18
    assert ran == ["capture", "silver", "gold"]
    partial = err.value.pipeline_result
    assert [(s.name, type(s.error).__name__) for s in partial.steps] == [
        ("capture", "NoneType"),
        ("silver", "SilverTableError"),
        ("gold", "NotReadyError"),
    ]
    assert partial.steps[1].result is stopped.result
    assert partial.failed_step == "silver"
