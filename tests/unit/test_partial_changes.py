"""The decisions about changes the binlog holds only in part (binlake.silver.partial): which
snapshot recovers a stopped table, and what the stop says."""

from __future__ import annotations

import itertools
import json

from binlake.silver.batch import TableNews
from binlake.silver.partial import (
    KEY_MOVE,
    NO_PREVIOUS,
    PARTIAL_INSERT,
    STATEMENT,
    Problem,
    covers_key_space,
    find_cover,
    stop_error,
)


def key(*values):
    return json.dumps([str(v) for v in values])


def chunk(snapshot_id, start, end, lw, chunk_id=0):
    return {
        "snapshot_id": snapshot_id,
        "chunk_id": chunk_id,
        "attempt_id": "a1",
        "start_key": start,
        "end_key": end,
        "lw_file_index": lw[0],
        "lw_pos": lw[1],
    }


def plan(snapshot_id, *bounds):
    return [{"snapshot_id": snapshot_id, "start_key": lo, "end_key": hi} for lo, hi in itertools.pairwise(bounds)]


STATEMENT_AT_500 = Problem(STATEMENT, (3, 500, 0), "mysql-bin.000003", detail="UPDATE t SET n = n + 1")


def test_a_snapshot_covers_the_key_space_when_its_chunks_chain_from_unbounded_to_unbounded():
    assert covers_key_space([chunk("s", None, None, (1, 1))])
    assert covers_key_space(
        [chunk("s", key(5), key(9), (1, 2)), chunk("s", None, key(5), (1, 1)), chunk("s", key(9), None, (1, 3))]
    )
    # A chunk still missing, or a verify --repair of some ranges, leaves keys unread.
    assert not covers_key_space([chunk("s", None, key(5), (1, 1)), chunk("s", key(9), None, (1, 3))])
    assert not covers_key_space([chunk("s", key(5), key(9), (1, 2))])


def test_the_cover_is_the_earliest_complete_snapshot_read_at_or_after_every_problem():
    manifest = [
        chunk("before", None, None, (3, 400)),  # read before the statement
        chunk("later", None, None, (3, 900)),
        chunk("first", None, key(5), (3, 500)),  # its lw is the statement's end: read after it
        chunk("first", key(5), None, (3, 700), 1),
    ]
    cover, pending = find_cover([STATEMENT_AT_500], manifest)
    assert (cover.snapshot_id, cover.floor, pending) == ("first", (3, 500), None)
    assert [c["chunk_id"] for c in cover.chunks] == [0, 1]
    # Every problem must be covered: one at (3, 800) leaves only the later snapshot.
    late = Problem(NO_PREVIOUS, (3, 800, 2), op="update", detail="id=1", missing=("n",))
    assert find_cover([STATEMENT_AT_500, late], manifest)[0].snapshot_id == "later"


def test_an_unfinished_resnapshot_is_named_and_a_repair_is_not():
    manifest = [chunk("re", None, key(5), (3, 600)), chunk("repair", key(1), key(2), (3, 650))]
    planned = plan("re", None, key(5), None) + plan("repair", key(1), key(2))
    assert find_cover([STATEMENT_AT_500], manifest, planned) == (None, "re")
    assert find_cover([STATEMENT_AT_500], manifest[1:], planned) == (None, None)


def test_a_stop_is_one_line_naming_what_happened_and_the_fix():
    err = stop_error("shop.t", STATEMENT_AT_500)
    text = str(err)
    assert err.exit_code == 6
    assert "\n" not in text
    assert text.startswith("silver stopped shop.t: ")
    assert "mysql-bin.000003:500" in text
    assert "'UPDATE t SET n = n + 1'" in text
    assert "binlog_format=STATEMENT" in text
    assert "recover with: binlake snapshot --table shop.t" in text
    assert "finish its re-snapshot re, read after it, with: binlake snapshot" in str(
        stop_error("shop.t", STATEMENT_AT_500, "re")
    )


def test_a_rows_event_capture_could_not_keep_as_rows_is_named_with_capture_s_own_reason():
    reason = "UPDATE_ROWS_EVENT: the table map has no column names (binlog_row_metadata=MINIMAL): set it to FULL"
    text = Problem(STATEMENT, (1, 5, 0), "b.1", detail=reason).describe()
    assert text.endswith(f"could not keep as rows: {reason}")
    assert "binlog_format" not in text


def test_each_problem_says_what_the_binlog_lacks():
    insert = Problem(PARTIAL_INSERT, (1, 5, 0), "b.1", "insert", "id=3", ("n", "body")).describe()
    assert "an INSERT of row (id=3)" in insert
    assert "without columns n, body" in insert
    assert "DEFAULT" in insert
    move = Problem(KEY_MOVE, (1, 5, 0), "b.1", "update", "id=5", ("title",)).describe()
    assert "moved a row to key (id=5)" in move
    assert "binlog_row_image=MINIMAL or NOBLOB" in move
    missing = Problem(NO_PREVIOUS, (1, 5, 0), "b.1", "update", "id=9", ("title",)).describe()
    assert "an UPDATE of row (id=9)" in missing
    assert "no live earlier state" in missing


def test_news_gather_the_statements_of_the_table_and_of_its_database():
    first = {"seq": (2, 100, 0), "binlog_file": "b.2", "ddl": "UPDATE t SET a = 1"}
    last = {"seq": (2, 300, 0), "binlog_file": "b.2", "ddl": "DELETE FROM t"}
    news = TableNews(changes=1, statements=2, first_statement=first, last_statement=last)
    database = {"seq": (2, 50, 0), "binlog_file": "b.2", "ddl": "CALL etl()"}
    merged = news.with_statements([database])
    assert (merged.statements, merged.first_statement, merged.last_statement) == (3, database, last)
    assert TableNews().with_statements([database]).any
    assert news.with_statements([]) is news
