"""What a step learnt about change-log positions (a GTID, a source commit time) is kept for the
later steps of the process, for its most recent positions only: ``run --continuous`` applies a
new position every round, for weeks."""

from __future__ import annotations

from binlake.contract import position_facts as facts
from binlake.contract.memo import Memo
from binlake.contract.position import BinlogPosition
from binlake.contract.position_facts import position_facts, remember_position_facts
from binlake.contract.tables import TableRef

CHANGELOG = TableRef(path="/lake/bronze/changelog")
ROUNDS = 5_000  # positions a continuous run applies in an hour or two


def at(pos: int) -> BinlogPosition:
    return BinlogPosition("mysql-bin.000001", pos)


def test_a_long_run_keeps_the_facts_of_its_latest_positions_only(monkeypatch):
    monkeypatch.setattr(facts, "_POSITION_FACTS", Memo(kept=facts.POSITION_FACTS_KEPT))
    for pos in range(4, 4 + ROUNDS):
        remember_position_facts(CHANGELOG, at(pos), f"0-1-{pos}", "2026-01-01 00:00:00.000000")

    assert len(facts._POSITION_FACTS) <= ROUNDS // 4
    newest = 4 + ROUNDS - 1
    # Gold asks for the position silver applied last: still known.
    assert position_facts(CHANGELOG, at(newest)) == (f"0-1-{newest}", "2026-01-01 00:00:00.000000")
    assert position_facts(CHANGELOG, at(4)) is None  # forgotten: gold would read the change log


def test_a_fact_remembered_again_counts_as_recent(monkeypatch):
    monkeypatch.setattr(facts, "_POSITION_FACTS", Memo(kept=facts.POSITION_FACTS_KEPT))
    remember_position_facts(CHANGELOG, at(4), "0-1-4", None)
    others = range(5, 4 + facts.POSITION_FACTS_KEPT)  # the memo is full after these
    for pos in others:
        remember_position_facts(CHANGELOG, at(pos), None, None)
    remember_position_facts(CHANGELOG, at(4), "0-1-4", None)
    remember_position_facts(CHANGELOG, at(others[-1] + 1), None, None)  # one too many: the oldest goes
    assert position_facts(CHANGELOG, at(4)) == ("0-1-4", None)
    assert position_facts(CHANGELOG, at(5)) is None
