"""Every ```sql block of docs/analysts.md runs on local Spark + Delta against small tables built
to the documented layout, and the queries that answer a question give the right answer.

The page names tables as Unity Catalog names (main.binlake_<layer>.<table>); the test swaps in
the local Delta paths of the same tables, exactly as the page's naming section describes."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from binlake.bronze.snapshot import create_snapshot_table
from binlake.config import Config, LakehouseConfig, Secret, SourceConfig
from binlake.contract.changelog import CHANGELOG_SCHEMA
from binlake.contract.schemas import (
    HISTORY_METADATA_COLUMNS,
    PROGRESS_SCHEMA,
    PUBLISH_LOG_SCHEMA,
    SCHEMA_HISTORY_SCHEMA,
    SILVER_METADATA_COLUMNS,
    SNAPSHOT_CHUNKS_SCHEMA,
    SNAPSHOT_ROWS_SCHEMA,
    TYPED_ROWS,
)
from binlake.contract.tables import Lakehouse
from binlake.contract.types import Column, Kind, TableSchema

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "analysts.md"
SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.S)
UC_NAME = re.compile(r"\bmain\.binlake_(?:bronze|silver|gold|system)\.(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)")
# The snapshot id of the page's example snapshot table.
SNAPSHOT_ID = "20261120T091500000000Z-5f2c9a1e"
TABLE_CHANGES = re.compile(r"table_changes\('(main\.binlake_silver\.[A-Za-z0-9_]+)'")


def _config(**lakehouse) -> Config:
    source = SourceConfig(host="h", port=3306, user="u", password=Secret("pw"), server_id=9, tables=("shop.*",))
    return Config(source=source, lakehouse=LakehouseConfig(**lakehouse))


def _blocks() -> list[str]:
    return SQL_BLOCK.findall(DOC.read_text(encoding="utf-8"))


def _block(marker: str) -> str:
    (found,) = [b for b in _blocks() if marker in b]
    return found


@pytest.fixture(scope="module")
def lakehouse(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("analyst-lake")
    local = Lakehouse(_config(path=str(root)))
    uc = Lakehouse(
        _config(
            catalog="main",
            bronze_schema="binlake_bronze",
            silver_schema="binlake_silver",
            gold_schema="binlake_gold",
            system_path="/Volumes/main/binlake_bronze/binlake_system",
        )
    )
    pairs = [
        (uc.changelog, local.changelog),
        (uc.snapshot_table("shop", "orders", SNAPSHOT_ID), local.snapshot_table("shop", "orders", SNAPSHOT_ID)),
        (uc.snapshot_rows, local.snapshot_rows),
        (uc.snapshot_chunks, local.snapshot_chunks),
        (uc.schema_history, local.schema_history),
        (uc.silver("shop", "orders"), local.silver("shop", "orders")),
        (uc.silver_progress, local.silver_progress),
        (uc.silver_history("shop", "orders"), local.silver_history("shop", "orders")),
        (uc.gold("shop", "orders"), local.gold("shop", "orders")),
        (uc.publish_log, local.publish_log),
        (uc.quarantine("shop", "orders"), local.quarantine("shop", "orders")),
    ]
    # The UC names the page uses are the ones binlake's Lakehouse gives on Databricks.
    names = {ucref.name.replace("`", ""): localref for ucref, localref in pairs}
    _build(spark, local)
    return names


def _sql(spark, text: str, names):
    text = TABLE_CHANGES.sub(lambda m: f"table_changes_by_path('{names[m.group(1)].path}'", text)
    for name in {found.replace("`", "") for found in UC_NAME.findall(text)}:
        assert name in names, f"docs/analysts.md names {name}, which binlake does not create"
    text = UC_NAME.sub(lambda m: names[m.group(0).replace("`", "")].sql, text)
    return spark.sql(text)


# ---------------------------------------------------------------------------------------------
# the scenario: shop.orders (id INT PRIMARY KEY, status VARCHAR, amount DECIMAL(10,2))
#
#   snapshot chunk 0, low watermark mysql-bin.000041:100   ids 1, 2, 3 status 'new'
#   41:500 row 0  update id 1 new -> paid      41:500 row 1  update id 2 new -> paid
#   42:900        delete id 3                  42:1337       update id 1 paid -> shipped
#   43:200        insert id 4 'new'            43:250        update id 2 paid -> refunded
#   publishes: #1 at 41:600 (gold v1), #2 at 42:1337 (gold v2), #3 at 43:250 (gold v3), a failed one at 43:300


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s)


def _img(id_, status, amount):
    return {"id": str(id_), "status": status, "amount": amount}


def _build(spark, lh: Lakehouse) -> None:
    for ref, schema in (
        (lh.changelog, CHANGELOG_SCHEMA),
        (lh.snapshot_rows, SNAPSHOT_ROWS_SCHEMA),
        (lh.snapshot_chunks, SNAPSHOT_CHUNKS_SCHEMA),
        (lh.schema_history, SCHEMA_HISTORY_SCHEMA),
        (lh.silver_progress, PROGRESS_SCHEMA),
        (lh.publish_log, PUBLISH_LOG_SCHEMA),
    ):
        ref.create_if_missing(spark, schema)

    def change(op, fi, pos, row, before, after, ts, ddl=None, db="shop", table="orders"):
        return (db, table, op, fi, pos, row, f"mysql-bin.{fi:06d}", before, after, _ts(ts), None, 1, "v1", ddl, _ts(ts))

    changes = [
        change(
            "ddl",
            41,
            50,
            0,
            None,
            None,
            "2026-11-20 09:00:00",
            ddl="ALTER TABLE orders ADD COLUMN amount DECIMAL(10,2)",
        ),
        change("update", 41, 500, 0, _img(1, "new", "10.00"), _img(1, "paid", "10.00"), "2026-11-20 09:30:00"),
        change("update", 41, 500, 1, _img(2, "new", "20.00"), _img(2, "paid", "20.00"), "2026-11-20 09:30:00"),
        change("heartbeat", 41, 600, 0, None, None, "2026-11-20 09:31:00", db=None, table=None),
        change("delete", 42, 900, 0, _img(3, "new", "30.00"), None, "2026-11-21 09:00:00"),
        change("update", 42, 1337, 0, _img(1, "paid", "10.00"), _img(1, "shipped", "10.00"), "2026-11-21 09:10:00"),
        change("insert", 43, 200, 0, None, _img(4, "new", "40.00"), "2026-11-22 09:00:00"),
        change("update", 43, 250, 0, _img(2, "paid", "20.00"), _img(2, "refunded", "20.00"), "2026-11-22 09:05:00"),
        # Another table in the same log: the filters must keep it out.
        change("update", 43, 260, 0, _img(1, "x", "1.00"), _img(1, "y", "1.00"), "2026-11-22 09:06:00", table="items"),
    ]
    spark.createDataFrame(changes, CHANGELOG_SCHEMA).write.format("delta").mode("append").save(lh.changelog.path)

    # The snapshot, typed as the snapshot writes it: chunk 0's rows and its marker row, and the
    # row of an attempt a killed run left (no manifest row for a0, so it must never count).
    orders = TableSchema(
        database="shop",
        table="orders",
        columns=(
            Column(name="id", kind=Kind.INT, bits=32),
            Column(name="status", kind=Kind.STRING),
            Column(name="amount", kind=Kind.DECIMAL, precision=10, scale=2),
        ),
        key=("id",),
    )
    snapshot = lh.snapshot_table("shop", "orders", SNAPSHOT_ID)
    create_snapshot_table(spark, snapshot, orders, SNAPSHOT_ID)
    stats = {"snapshot_id": SNAPSHOT_ID, "hw_file": "mysql-bin.000041", "hw_pos": "120", "row_count": "3"}
    typed_rows = [(i, "new", Decimal(f"{i}0.00"), 0, "a1", None) for i in (1, 2, 3)]
    typed_rows += [(None, None, None, 0, "a1", stats), (9, "ghost", Decimal("99.00"), 0, "a0", None)]
    typed_schema = spark.read.format("delta").load(snapshot.path).schema
    spark.createDataFrame(typed_rows, typed_schema).write.format("delta").mode("append").save(snapshot.path)
    spark.createDataFrame(
        [
            (
                SNAPSHOT_ID,
                "shop",
                "orders",
                0,
                "a1",
                ["id"],
                None,
                None,
                "mysql-bin.000041",
                41,
                100,
                "mysql-bin.000041",
                41,
                120,
                3,
                "c0ffee",
                "v1",
                _ts("2026-11-20 09:20:00"),
                TYPED_ROWS,
                0,
            )
        ],
        SNAPSHOT_CHUNKS_SCHEMA,
    ).write.format("delta").mode("append").save(lh.snapshot_chunks.path)
    spark.createDataFrame(
        [("shop", "orders", 3, 0, "mysql-bin.000043", 43, 250, 0, _ts("2026-11-22 09:06:00"), 3, None, None)],
        PROGRESS_SCHEMA,
    ).write.format("delta").mode("append").save(lh.silver_progress.path)

    # silver: v0 create, v1 snapshot rows, v2 the 41/42 changes, v3 the 43 changes (MERGE, as silver does)
    meta = ", ".join(f"{name} {type_}" for name, type_, _ in SILVER_METADATA_COLUMNS)
    silver = lh.silver("shop", "orders")
    silver.create_if_missing(
        spark, f"id INT, status STRING, amount DECIMAL(10,2), {meta}", properties={"delta.enableChangeDataFeed": "true"}
    )
    seq = "named_struct('file_index', CAST({} AS BIGINT), 'pos', CAST({} AS BIGINT), 'row', {})"
    batches = [
        [
            (1, "new", "10.00", seq.format(41, 100, -1), "snapshot", "false", "NULL"),
            (2, "new", "20.00", seq.format(41, 100, -1), "snapshot", "false", "NULL"),
            (3, "new", "30.00", seq.format(41, 100, -1), "snapshot", "false", "NULL"),
        ],
        [
            (1, "shipped", "10.00", seq.format(42, 1337, 0), "update", "false", "TIMESTAMP'2026-11-21 09:10:00'"),
            (2, "paid", "20.00", seq.format(41, 500, 1), "update", "false", "TIMESTAMP'2026-11-20 09:30:00'"),
            (3, "new", "30.00", seq.format(42, 900, 0), "delete", "true", "TIMESTAMP'2026-11-21 09:00:00'"),
        ],
        [
            (4, "new", "40.00", seq.format(43, 200, 0), "insert", "false", "TIMESTAMP'2026-11-22 09:00:00'"),
            (2, "refunded", "20.00", seq.format(43, 250, 0), "update", "false", "TIMESTAMP'2026-11-22 09:05:00'"),
        ],
    ]
    for batch in batches:
        values = ", ".join(
            f"({i}, '{s}', CAST({a} AS DECIMAL(10,2)), {q}, '{o}', {d}, {t})" for i, s, a, q, o, d, t in batch
        )
        spark.sql(f"""
            MERGE INTO {silver.sql} AS t
            USING (SELECT * FROM VALUES {values}
                   AS v(id, status, amount, _cdc_seq, _cdc_op, _cdc_deleted, _cdc_commit_ts)) AS s
            ON t.id = s.id
            WHEN MATCHED AND s._cdc_seq > t._cdc_seq THEN UPDATE SET *
            WHEN NOT MATCHED THEN INSERT *""")

    # silver history: every version of each order, as silver/history.py derives it from the records above
    history = lh.silver_history("shop", "orders")
    history.create_if_missing(
        spark,
        "id INT, status STRING, amount DECIMAL(10,2), "
        + ", ".join(f"{name} {type_}" for name, type_, _ in HISTORY_METADATA_COLUMNS),
    )
    snap, to = seq.format(41, 100, -1), "TIMESTAMP'2026-11-{}'"
    versions = [  # id, status, amount, valid_from, valid_to, from_ts, to_ts, current, ended by delete
        (1, "new", "10.00", snap, seq.format(41, 500, 0), "NULL", to.format("20 09:30:00"), "false", "false"),
        (
            1,
            "paid",
            "10.00",
            seq.format(41, 500, 0),
            seq.format(42, 1337, 0),
            to.format("20 09:30:00"),
            to.format("21 09:10:00"),
            "false",
            "false",
        ),
        (1, "shipped", "10.00", seq.format(42, 1337, 0), "NULL", to.format("21 09:10:00"), "NULL", "true", "false"),
        (2, "new", "20.00", snap, seq.format(41, 500, 1), "NULL", to.format("20 09:30:00"), "false", "false"),
        (
            2,
            "paid",
            "20.00",
            seq.format(41, 500, 1),
            seq.format(43, 250, 0),
            to.format("20 09:30:00"),
            to.format("22 09:05:00"),
            "false",
            "false",
        ),
        (2, "refunded", "20.00", seq.format(43, 250, 0), "NULL", to.format("22 09:05:00"), "NULL", "true", "false"),
        (3, "new", "30.00", snap, seq.format(42, 900, 0), "NULL", to.format("21 09:00:00"), "false", "true"),
        (4, "new", "40.00", seq.format(43, 200, 0), "NULL", to.format("22 09:00:00"), "NULL", "true", "false"),
    ]
    values = ", ".join(
        f"({i}, '{s}', CAST({a} AS DECIMAL(10,2)), {f}, {t}, {fts}, {tts}, {c}, {d})"
        for i, s, a, f, t, fts, tts, c, d in versions
    )
    spark.sql(f"INSERT INTO {history.sql} SELECT * FROM VALUES {values}")

    # gold: v1, v2, v3 are the three successful publishes
    gold = lh.gold("shop", "orders")
    gold.create_if_missing(
        spark,
        "id INT, status STRING, amount DECIMAL(10,2), _cdc_seq STRUCT<file_index: BIGINT, pos: BIGINT, row: INT>, "
        "_cdc_commit_ts TIMESTAMP",
    )
    publishes = [
        [(1, "paid", 41, 500, 0), (2, "paid", 41, 500, 1), (3, "new", 41, 100, -1)],
        [(1, "shipped", 42, 1337, 0), (2, "paid", 41, 500, 1)],
        [(1, "shipped", 42, 1337, 0), (2, "refunded", 43, 250, 0), (4, "new", 43, 200, 0)],
    ]
    for rows in publishes:
        values = ", ".join(
            f"({i}, '{s}', CAST({i}0 AS DECIMAL(10,2)), {seq.format(f, p, r)}, NULL)" for i, s, f, p, r in rows
        )
        spark.sql(f"INSERT OVERWRITE {gold.sql} SELECT * FROM VALUES {values}")

    def publish(pid, version, fi, pos, src, at, rows, status="published"):
        return (
            pid,
            "shop",
            "orders",
            version,
            version,
            f"mysql-bin.{fi:06d}",
            fi,
            pos,
            None,
            _ts(src),
            _ts(at),
            rows,
            "[]",
            status,
            rows,
            "shop",
        )

    spark.createDataFrame(
        [
            publish("p1", 1, 41, 600, "2026-11-20 09:31:00", "2026-11-20 10:00:00", 3),
            publish("p2", 2, 42, 1337, "2026-11-21 09:10:00", "2026-11-21 10:00:00", 2),
            publish("p3", 3, 43, 250, "2026-11-22 09:05:00", "2026-11-22 10:00:00", 3),
            publish("p4", 3, 43, 300, "2026-11-22 10:20:00", "2026-11-22 10:30:00", 3, status="failed"),
        ],
        PUBLISH_LOG_SCHEMA,
    ).write.format("delta").mode("append").save(lh.publish_log.path)


# ---------------------------------------------------------------------------------------------


def test_the_page_has_sql_for_every_question_it_promises():
    text = "\n".join(_blocks())
    for needle in (
        "WHERE NOT _cdc_deleted",
        "ROW_NUMBER() OVER (PARTITION BY id ORDER BY _cdc_seq DESC)",
        "table_changes(",
        "VERSION AS OF",
        "main.binlake_bronze.changelog",
        "main.binlake_system.publish_log",
    ):
        assert needle in text
    assert len(_blocks()) >= 10


@pytest.mark.parametrize("index", range(len(_blocks())), ids=lambda i: _blocks()[i].splitlines()[0][3:40])
def test_every_sql_block_runs(spark, lakehouse, index):
    block = _blocks()[index]
    assert block.lstrip().startswith("--"), "each block opens with a comment saying what it answers"
    _sql(spark, block, lakehouse).collect()


def test_the_dedup_query_returns_silvers_live_rows(spark, lakehouse):
    rows = _sql(spark, _block("ROW_NUMBER() OVER"), lakehouse).collect()
    assert [(r.id, r.status, r.amount, r._cdc_op, tuple(r._cdc_seq)) for r in rows] == [
        (1, "shipped", Decimal("10.00"), "update", (42, 1337, 0)),
        (2, "refunded", Decimal("20.00"), "update", (43, 250, 0)),
        (4, "new", Decimal("40.00"), "insert", (43, 200, 0)),
    ]
    silver = _sql(spark, _block("current state from silver"), lakehouse).collect()
    assert [(r.id, r.status, r.amount) for r in silver] == [(r.id, r.status, r.amount) for r in rows]


def test_the_history_query_shows_every_change_of_the_row_in_binlog_order(spark, lakehouse):
    rows = _sql(spark, _block("every change of order 1"), lakehouse).collect()
    assert [(r.op, r.status_before, r.status_after) for r in rows] == [
        ("update", "new", "paid"),
        ("update", "paid", "shipped"),
    ]


def test_the_change_feed_query_shows_deletes_as_tombstones(spark, lakehouse):
    rows = _sql(spark, _block("table_changes("), lakehouse).collect()
    assert [(r.id, r.change, r._commit_version) for r in rows] == [
        (1, "update_postimage", 2),
        (2, "update_postimage", 2),
        (3, "deleted", 2),
        (2, "update_postimage", 3),
        (4, "insert", 3),
    ]


def test_gold_as_of_a_position_and_as_of_a_time_find_the_publish_then_time_travel(spark, lakehouse):
    (by_position,) = _sql(spark, _block("as of binlog position mysql-bin.000042:2000"), lakehouse).collect()
    (by_time,) = _sql(spark, _block("for a point in time"), lakehouse).collect()
    assert by_position.gold_version == by_time.gold_version == 2
    assert (by_position.binlog_file, by_position.pos) == ("mysql-bin.000042", 1337)
    rows = _sql(spark, _block("VERSION AS OF 2"), lakehouse).collect()
    assert [(r.id, r.status) for r in rows] == [(1, "shipped"), (2, "paid")]


def test_the_consistent_cut_ignores_failed_publishes(spark, lakehouse):
    rows = _sql(spark, _block("one consistent cut"), lakehouse).collect()
    assert [(r.table, r.gold_version, r.pos) for r in rows] == [("orders", 3, 250)]


def test_jobs_status_adds_the_last_publish_position_when_spark_is_at_hand(spark, lakehouse, tmp_path):
    from binlake.deploy.jobs import last_publish

    root = Path(lakehouse["main.binlake_system.publish_log"].path).parents[1]
    publish = last_publish(_config(path=str(root)), spark)
    # The newest row is a failed attempt, which did not change gold: the last good publish counts.
    assert publish["position"] == "mysql-bin.000043:250"
    assert publish["publish_id"] == "p3"
    assert last_publish(_config(path=str(tmp_path / "empty")), spark) is None


def test_the_operator_browse_helpers_read_bronze_newest_first(spark, lakehouse):
    import binlake

    root = Path(lakehouse["main.binlake_bronze.changelog"].path).parents[1]
    changes = binlake.recent_changes(spark, _config(path=str(root)), db="shop", table="orders", limit=2).collect()
    assert [(r.file_index, r.pos, r.row) for r in changes] == [(43, 250, 0), (43, 200, 0)]
    (chunk,) = binlake.snapshot_chunks(spark, _config(path=str(root)), limit=5).collect()
    assert chunk.row_count == 3
    with pytest.raises(ValueError, match=r"^limit must be a whole number >= 1, got 0$"):
        binlake.recent_changes(spark, _config(path=str(root)), limit=0)


def test_all_versions_of_a_key_in_sequence_order(spark, lakehouse):
    rows = _sql(spark, _block("every version of order 2"), lakehouse).collect()
    assert [(r.status, tuple(r._cdc_valid_from), r._cdc_is_current) for r in rows] == [
        ("new", (41, 100, -1), False),
        ("paid", (41, 500, 1), False),
        ("refunded", (43, 250, 0), True),
    ]


def test_the_row_as_of_a_time_is_the_version_open_at_the_last_change_before_it(spark, lakehouse):
    # 09:05 on the 21st: order 3 was deleted at 09:00, order 1 shipped only at 09:10.
    (row,) = _sql(spark, _block("order 1 as it was on 2026-11-21 at 09:05"), lakehouse).collect()
    assert (row.id, row.status, tuple(row._cdc_valid_from)) == (1, "paid", (41, 500, 0))
    whole_table = _block("order 1 as it was on 2026-11-21 at 09:05").replace("WHERE h.id = 1\n  AND", "WHERE")
    rows = _sql(spark, whole_table + " ORDER BY h.id", lakehouse).collect()
    assert [(r.id, r.status) for r in rows] == [(1, "paid"), (2, "paid")]
