"""Changes the binlog holds only in part (a writer session that set binlog_row_image=MINIMAL or
NOBLOB, or binlog_format=STATEMENT): silver applies a partial row image exactly where it can,
and stops the table with IncompleteChangeError, naming the re-snapshot, where it cannot.

Each test states the SQL a writer session ran and the images MariaDB 10.11 logs for it
(measured with mysqlbinlog -vv): MINIMAL logs the key in the before image and only the columns
the statement set in the after image (an INSERT: the columns it named, plus the
auto-increment); NOBLOB leaves out BLOB/TEXT columns that neither identify the row nor changed.
The expected silver rows are what the table holds after that SQL."""

from __future__ import annotations

import pytest
from bronze_fixtures import Bronze, col, table  # tests/spark/bronze_fixtures.py
from chispa import assert_df_equality

from binlake.contract.types import Kind
from binlake.errors import IncompleteChangeError
from binlake.gold.readiness import silver_progress
from binlake.silver.run import run_silver

# body is the TEXT column NOBLOB leaves out.
DOCS = table("shop.docs", [col("id"), col("title", Kind.STRING), col("n"), col("body", Kind.STRING)])
OTHER = table("shop.other", [col("id"), col("x", Kind.STRING)])
PARENTS = table("shop.parents", [col("id"), col("code", Kind.STRING), col("name", Kind.STRING)])
KIDS = table(
    "shop.kids",
    [col("id"), col("parent_code", Kind.STRING)],
    fks=[
        {
            "name": "fk_code",
            "columns": ["parent_code"],
            "parent": "shop.parents",
            "parent_columns": ["code"],  # a UNIQUE column, not the key MINIMAL logs
            "on_delete": "CASCADE",
            "on_update": "CASCADE",
        }
    ],
)
COLS = "id INT, title STRING, n INT, body STRING"
START = [(1, "a", 10, "body one"), (2, "b", 20, "body two")]
META = (  # silver's metadata columns
    "_cdc_seq STRUCT<file_index: BIGINT, pos: BIGINT, row: INT>, _cdc_op STRING, _cdc_deleted BOOLEAN, "
    "_cdc_commit_ts TIMESTAMP"
)


@pytest.fixture(scope="module")
def b_base(spark, tmp_path_factory):
    """docs (rows 1 and 2), other (row 1), parents and their kids in silver; each test's
    changes rolled back."""
    b = Bronze(spark, tmp_path_factory.mktemp("silver_partial") / "lh")
    for schema in (DOCS, OTHER, PARENTS, KIDS):
        b.schema(schema)
    b.commit(
        b.insert(DOCS, (1, 10, 0), id=1, title="a", n=10, body="body one"),
        b.insert(DOCS, (1, 10, 1), id=2, title="b", n=20, body="body two"),
        b.insert(OTHER, (1, 20, 0), id=1, x="x"),
        b.insert(PARENTS, (1, 30, 0), id=1, code="P1", name="one"),
        b.insert(PARENTS, (1, 30, 1), id=2, code="P2", name="two"),
        b.insert(KIDS, (1, 40, 0), id=10, parent_code="P1"),
        b.insert(KIDS, (1, 40, 1), id=20, parent_code="P2"),
    )
    run_silver(spark, b.config)
    return b


@pytest.fixture
def b(b_base):
    checkpoint = b_base.checkpoint()
    yield b_base
    b_base.rollback(checkpoint)


def minimal_update(b, seq, key: dict, changed: dict, schema=DOCS):
    """UPDATE ... SET <changed> WHERE <key> as MINIMAL logs it."""
    return b.update(schema, seq, key, changed, partial_image=True)


def rows(spark, b, name="shop.docs", live=True):
    df = b.lh.silver(*name.split(".")).read(spark)
    return df.where("NOT _cdc_deleted") if live else df


def same(spark, actual, expected, schema=COLS):
    assert_df_equality(
        actual.select(*[c.split()[0] for c in schema.split(", ")]),
        spark.createDataFrame(expected, schema),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )


def stopped(spark, b) -> dict:
    return {s.name: s.stopped for s in silver_progress(spark, b.config, b.lh)}


# ---------------------------------------------------------------------------------------
# Applied exactly


def test_a_minimal_update_sets_its_columns_over_silvers_row_keyed_by_its_before_image(spark, b):
    # UPDATE docs SET title = 'A' WHERE id = 1: before {id}, after {title}. UPDATE docs SET body =
    # NULL WHERE id = 2: a NULL the image carries is a value, a column it lacks is not.
    b.commit(
        minimal_update(b, (2, 100, 0), {"id": 1}, {"title": "A"}),
        minimal_update(b, (2, 200, 0), {"id": 2}, {"body": None}),
    )
    run_silver(spark, b.config)
    same(spark, rows(spark, b), [(1, "A", 10, "body one"), (2, "b", 20, None)])
    assert rows(spark, b, live=False).count() == 2  # no row under a NULL key


def test_partial_updates_of_one_key_in_one_batch_chain_in_sequence_order(spark, b):
    # In binlog order: UPDATE SET n = 11; UPDATE SET title = 'A1', n = 12; UPDATE SET title =
    # 'A2' (all WHERE id = 1); INSERT of row 3, then UPDATE SET n = 31 WHERE id = 3. The commit
    # lists them out of order: only the sequence orders them.
    b.commit(
        minimal_update(b, (2, 300, 0), {"id": 1}, {"title": "A2"}),
        minimal_update(b, (2, 100, 0), {"id": 1}, {"n": 11}),
        minimal_update(b, (2, 200, 0), {"id": 1}, {"title": "A1", "n": 12}),
        b.insert(DOCS, (2, 400, 0), id=3, title="c", n=30, body="body three"),
        minimal_update(b, (2, 500, 0), {"id": 3}, {"n": 31}),
    )
    run_silver(spark, b.config)
    same(spark, rows(spark, b), [(1, "A2", 12, "body one"), (2, "b", 20, "body two"), (3, "c", 31, "body three")])


def test_a_noblob_update_keeps_the_text_column_it_did_not_log(spark, b):
    # UPDATE docs SET title = 'B' WHERE id = 2: NOBLOB logs every column but body, before and after.
    # UPDATE docs SET body = 'new one' WHERE id = 1: body changed, so it is in the after image.
    b.commit(
        b.update(DOCS, (2, 100, 0), {"id": 2, "title": "b", "n": 20}, {"id": 2, "title": "B", "n": 20}, True),
        b.update(
            DOCS,
            (2, 200, 0),
            {"id": 1, "title": "a", "n": 10},
            {"id": 1, "title": "a", "n": 10, "body": "new one"},
            True,
        ),
    )
    run_silver(spark, b.config)
    same(spark, rows(spark, b), [(1, "a", 10, "new one"), (2, "B", 20, "body two")])


def test_a_delete_with_a_key_only_before_image_keeps_silvers_last_values(spark, b):
    # DELETE FROM docs WHERE id = 1; UPDATE SET title = 'B' WHERE id = 2, then DELETE it: the
    # tombstones keep the rows' last values.
    b.commit(
        b.delete(DOCS, (2, 100, 0), partial_image=True, id=1),
        minimal_update(b, (2, 200, 0), {"id": 2}, {"title": "B"}),
        b.delete(DOCS, (2, 300, 0), partial_image=True, id=2),
    )
    run_silver(spark, b.config)
    assert rows(spark, b).count() == 0
    same(spark, rows(spark, b, live=False), [(1, "a", 10, "body one"), (2, "B", 20, "body two")])


def test_a_partial_update_older_than_a_snapshot_row_of_its_key_is_superseded(spark, b):
    # A snapshot read while a MINIMAL session writes: the UPDATE of row 9 (which silver never
    # had) ended before the chunk's low watermark, so the chunk's row already holds its effect.
    b.commit(minimal_update(b, (3, 100, 0), {"id": 9}, {"title": "i2"}))
    snap = [{"id": 1, "title": "a", "n": 10, "body": "body one"}, {"id": 2, "title": "b", "n": 20, "body": "body two"}]
    b.chunk(DOCS, [*snap, {"id": 9, "title": "i2", "n": 90, "body": "nine"}], lw=(3, 200), snapshot_id="s2")
    run_silver(spark, b.config)
    same(spark, rows(spark, b), [*START, (9, "i2", 90, "nine")])
    assert stopped(spark, b)["shop.docs"] is None


def test_foreign_key_actions_start_from_the_completed_parent_row(spark, b):
    # UPDATE parents SET code = 'P1b' WHERE id = 1 (MINIMAL: before {id}, after {code}): InnoDB
    # moves kid 10 along (ON UPDATE CASCADE). DELETE FROM parents WHERE id = 2 (MINIMAL: before
    # {id}): InnoDB deletes kid 20 (ON DELETE CASCADE). Both need the parent's old code.
    b.commit(
        minimal_update(b, (2, 100, 0), {"id": 1}, {"code": "P1b"}, PARENTS),
        b.delete(PARENTS, (2, 200, 0), partial_image=True, id=2),
    )
    run_silver(spark, b.config)
    same(spark, rows(spark, b, "shop.parents"), [(1, "P1b", "one")], "id INT, code STRING, name STRING")
    same(spark, rows(spark, b, "shop.kids"), [(10, "P1b")], "id INT, parent_code STRING")


@pytest.mark.slow
def test_history_versions_hold_the_completed_row(spark, b):
    import dataclasses

    from binlake.config import HistoryConfig, HistoryTable

    b.config = dataclasses.replace(b.config, history=HistoryConfig((HistoryTable("shop.docs"),)))
    run_silver(spark, b.config)  # seeds the history with silver's rows
    b.commit(minimal_update(b, (2, 100, 0), {"id": 1}, {"title": "A"}))
    run_silver(spark, b.config)
    history = b.lh.silver_history("shop", "docs").read(spark).where("id = 1")
    same(spark, history.where("_cdc_is_current"), [(1, "A", 10, "body one")])
    same(spark, history.where("NOT _cdc_is_current"), [(1, "a", 10, "body one")])


# ---------------------------------------------------------------------------------------
# Stopped, with the fix


def stops(spark, b, *needles) -> IncompleteChangeError:
    """Runs silver expecting docs to stop (and other to be applied); returns the error."""
    with pytest.raises(IncompleteChangeError) as err:
        run_silver(spark, b.config)
    message = str(err.value)
    assert err.value.exit_code == 6
    assert "\n" not in message
    for needle in (*needles, "silver stopped shop.docs", "recover with: binlake snapshot --table shop.docs"):
        assert needle in message, f"{needle!r} not in {message!r}"
    assert err.value.result.table("shop.docs").error
    same(spark, rows(spark, b), START)  # nothing of docs applied
    assert "binlake snapshot --table shop.docs" in stopped(spark, b)["shop.docs"]
    return err.value


def test_an_insert_without_some_columns_stops_the_table_alone(spark, b):
    # INSERT INTO docs (id, title) VALUES (3, 'c') under MINIMAL: n and body got their DEFAULTs,
    # which the binlog does not hold.
    b.commit(
        b.insert(DOCS, (2, 100, 0), partial_image=True, id=3, title="c"), b.insert(OTHER, (2, 100, 1), id=2, x="y")
    )
    stops(spark, b, "an INSERT of row (id=3)", "without columns n, body", "binlog_row_image=MINIMAL")
    same(spark, rows(spark, b, "shop.other"), [(1, "x"), (2, "y")], "id INT, x STRING")
    assert stopped(spark, b)["shop.other"] is None
    stops(spark, b, "an INSERT")  # still stopped: its progress did not move


def test_a_partial_update_of_a_row_silver_does_not_have_stops_the_table(spark, b):
    b.commit(minimal_update(b, (2, 100, 0), {"id": 9}, {"title": "z"}))
    stops(spark, b, "an UPDATE of row (id=9)", "no live earlier state")


def test_a_partial_update_after_a_delete_stops_the_table(spark, b):
    # DELETE FROM docs WHERE id = 1 (FULL), then, in the same batch, a MINIMAL UPDATE of row 1:
    # the row was gone, so its tombstone's values are no state to complete the update from.
    b.commit(
        b.delete(DOCS, (2, 100, 0), id=1, title="a", n=10, body="body one"),
        minimal_update(b, (2, 200, 0), {"id": 1}, {"title": "z"}),
    )
    stops(spark, b, "an UPDATE of row (id=1)")


def test_a_partial_update_that_moves_the_key_stops_the_table(spark, b):
    # UPDATE docs SET id = 5 WHERE id = 1 under MINIMAL: before {id: 1}, after {id: 5}.
    b.commit(minimal_update(b, (2, 100, 0), {"id": 1}, {"id": 5}))
    stops(spark, b, "moved a row to key (id=5)", "without columns title, n, body")


def test_a_statement_format_change_stops_the_table(spark, b):
    b.commit(b.statement(DOCS, (2, 100, 0), "UPDATE docs SET n = n + 1"), b.insert(OTHER, (2, 200, 0), id=2, x="y"))
    stops(spark, b, "as SQL text", "'UPDATE docs SET n = n + 1'", "binlog_format=STATEMENT")
    same(spark, rows(spark, b, "shop.other"), [(1, "x"), (2, "y")], "id INT, x STRING")


def test_a_statement_capture_could_not_place_stops_every_table_of_its_database(spark, b):
    b.commit(b.statement(DOCS, (2, 100, 0), "CALL etl()", whole_database=True))
    with pytest.raises(IncompleteChangeError, match=r"4 silver table\(s\) stopped") as err:
        run_silver(spark, b.config)
    for name in ("shop.docs", "shop.other", "shop.parents", "shop.kids"):
        assert f"silver stopped {name}:" in str(err.value)


# ---------------------------------------------------------------------------------------
# Recovered by a re-snapshot


def test_a_complete_resnapshot_read_after_the_stop_clears_it(spark, b):
    # In binlog order: UPDATE docs SET n = n + 1 (statement); INSERT of row 3 (rows); DELETE FROM
    # docs WHERE id = 3 (statement). The source then holds (1, a, 11) and (2, b, 21).
    b.commit(
        b.statement(DOCS, (2, 100, 0), "UPDATE docs SET n = n + 1"),
        b.insert(DOCS, (2, 150, 0), id=3, title="c", n=30, body="body three"),
        b.statement(DOCS, (2, 160, 0), "DELETE FROM docs WHERE id = 3"),
    )
    stops(spark, b, "UPDATE docs SET n = n + 1")
    # The re-snapshot's first chunk: not yet the whole table, so the stop stays, naming it.
    b.plan(DOCS, "re", [None, [2], None])
    b.chunk(DOCS, [{"id": 1, "title": "a", "n": 11, "body": "body one"}], lw=(2, 300), end=[2], snapshot_id="re")
    with pytest.raises(IncompleteChangeError, match="finish its re-snapshot re"):
        run_silver(spark, b.config)
    # Its last chunk, and a MINIMAL update after its low watermark.
    b.chunk(DOCS, [{"id": 2, "title": "b", "n": 21, "body": "body two"}], lw=(2, 310), start=[2], snapshot_id="re")
    b.commit(minimal_update(b, (2, 400, 0), {"id": 1}, {"title": "A"}))
    run_silver(spark, b.config)
    same(spark, rows(spark, b), [(1, "A", 11, "body one"), (2, "b", 21, "body two")])
    assert stopped(spark, b)["shop.docs"] is None


def test_a_partial_re_snapshot_does_not_clear_the_stop(spark, b):
    # verify --repair re-reads some ranges only: the rows elsewhere stay unknown.
    b.commit(b.statement(DOCS, (2, 100, 0), "UPDATE docs SET n = n + 1"))
    stops(spark, b, "as SQL text")
    b.chunk(DOCS, [{"id": 1, "title": "a", "n": 11, "body": "body one"}], lw=(2, 300), end=[2], snapshot_id="repair")
    stops(spark, b, "as SQL text")


def test_a_snapshot_applied_before_a_statement_it_covers_is_reconciled_again(spark, b):
    # Capture lags the snapshot: silver first applies a snapshot read at (3, 500), then capture
    # brings an INSERT of row 3 at (3, 100) (silver adds it: it had no row 3), then the
    # statement DELETE FROM docs WHERE id = 3 at (3, 200), which the snapshot had already seen.
    b.chunk(
        DOCS,
        [{"id": 1, "title": "a", "n": 10, "body": "body one"}, {"id": 2, "title": "b", "n": 20, "body": "body two"}],
        lw=(3, 500),
        snapshot_id="s2",
    )
    run_silver(spark, b.config)
    b.commit(b.insert(DOCS, (3, 100, 0), id=3, title="c", n=30, body="body three"))
    run_silver(spark, b.config)
    b.commit(b.statement(DOCS, (3, 200, 0), "DELETE FROM docs WHERE id = 3"))
    run_silver(spark, b.config)
    same(spark, rows(spark, b), START)
    assert stopped(spark, b)["shop.docs"] is None


def test_a_partial_update_building_on_an_incomplete_insert_is_not_exact(spark):
    # DELETE of row 1 (FULL), INSERT INTO docs (id, title) VALUES (1, 'new') (MINIMAL: n and body
    # got DEFAULTs the binlog lacks), UPDATE docs SET n = 5 WHERE id = 1 (MINIMAL). The deleted
    # row's body is no value of the new row: the UPDATE is inexact like the INSERT it builds on.
    from binlake.silver import partial
    from binlake.silver.batch import Decoder

    decoder = Decoder(DOCS, {DOCS.version(): {c.name: c.name for c in DOCS.columns}})
    full = {"id": "1", "title": "a", "n": "10", "body": "body one"}
    changes = spark.createDataFrame(
        [
            ("delete", DOCS.version(), 2, 100, 0, "b.2", full, None, None),
            ("insert", DOCS.version(), 2, 200, 0, "b.2", None, {"id": "1", "title": "new"}, None),
            ("update", DOCS.version(), 2, 300, 0, "b.2", {"id": "1"}, {"n": "5"}, None),
        ],
        "op STRING, schema_version STRING, file_index BIGINT, pos BIGINT, `row` INT, binlog_file STRING, "
        "before MAP<STRING,STRING>, after MAP<STRING,STRING>, commit_ts TIMESTAMP",
    )
    logged = partial.log_rows(DOCS, decoder, changes)
    base = lambda: spark.createDataFrame([], "id INT, title STRING, n INT, body STRING, " + META)  # noqa: E731
    folded = partial.fold(logged, None, DOCS, base, (), None)
    got = {r["_cdc_seq"]["pos"]: r["__problem"] for r in folded.select("_cdc_seq", "__problem").collect()}
    assert got == {100: None, 200: partial.PARTIAL_INSERT, 300: partial.NO_PREVIOUS}
