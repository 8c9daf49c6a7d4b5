"""The chunked snapshot against a real MariaDB into real Delta tables.

What must hold (docs/architecture.md: the change sequence, the snapshot protocol, failure
behaviour): trusted snapshot rows (those whose (snapshot_id, chunk_id, attempt_id) has a
manifest row) equal the source; chunks partition the key space; each chunk's rows carry
its low watermark and changes inside the watermark window win over the snapshot row; a run
killed anywhere converges on re-run.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from binlake import cli
from binlake.bronze.chunking import key_from_json
from binlake.bronze.snapshot import BARRIER_ENV, resnapshot_chunks, run_snapshot
from binlake.bronze.snapshot_source import (
    FORMAT,
    SnapshotDataSource,
    combine_checksum,
    reader_options,
)
from binlake.contract.sql import qualified
from binlake.contract.tables import Lakehouse
from binlake.errors import ConfigError
from binlake.ops import commands
from binlake.source.catalog import table_schema
from binlake.source.mysql import connect, exact_value_sql, master_status

ROOT = Path(__file__).resolve().parents[2]
BINLAKE = str(ROOT / ".venv" / "bin" / "binlake")
TOP = 2**64 - 1


# --- helpers --------------------------------------------------------------------------------


def source_rows(config, db: str, table: str) -> dict[tuple, dict]:
    """The source table encoded like the snapshot does it, by key."""
    with connect(config.source) as conn:
        schema = table_schema(conn, config.source, db, table)
        from binlake.contract.types import encode_value

        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(exact_value_sql(c) for c in schema.columns)} FROM {qualified(db, table)}")
            names = [c.name for c in schema.columns]
            out = {}
            for values in cur.fetchall():
                row = {n: encode_value(schema.column(n), v) for n, v in zip(names, values)}
                out[tuple(row[k] for k in schema.key)] = row
    return out


def manifest(spark, lh, db: str, table: str, snapshot_id: str | None = None) -> list:
    df = lh.snapshot_chunks.read(spark).where(f"db = '{db}' AND `table` = '{table}'")
    if snapshot_id:
        df = df.where(f"snapshot_id = '{snapshot_id}'")
    return df.orderBy("chunk_id").collect()


def snapshot_ref(spark, lh, snapshot_id: str):
    """The typed table of a snapshot (found through its plan)."""
    p = lh.snapshot_plan.read(spark).where(f"snapshot_id = '{snapshot_id}'").first()
    return lh.snapshot_table(p["db"], p["table"], snapshot_id)


def trusted_rows(spark, lh, snapshot_id: str) -> list[dict]:
    """Data rows silver would trust (joined to the manifest on the attempt that committed),
    each with its values as canonical texts (``row``) and its chunk's manifest fields."""
    from binlake.contract.types import TableSchema, encode_value

    chunks = {
        (c["chunk_id"], c["attempt_id"]): c
        for c in lh.snapshot_chunks.read(spark).where(f"snapshot_id = '{snapshot_id}'").collect()
    }
    if not chunks:
        return []
    first = next(iter(chunks.values()))
    assert all(c["row_format"] == "typed" for c in chunks.values())
    [entry] = (
        lh.schema_history.read(spark)
        .where(
            f"db = '{first['db']}' AND `table` = '{first['table']}' AND schema_version = '{first['schema_version']}'"
        )
        .select("schema_json")
        .limit(1)
        .collect()
    )
    schema = TableSchema.from_json(entry["schema_json"])
    out = []
    for r in snapshot_ref(spark, lh, snapshot_id).read(spark).where("_cdc_chunk_stats IS NULL").collect():
        c = chunks.get((r["_cdc_chunk_id"], r["_cdc_attempt_id"]))
        if c is None:
            continue
        out.append(
            {
                "row": {col.name: encode_value(col, r[col.name]) for col in schema.columns},
                **{
                    k: c[k]
                    for k in ("chunk_id", "attempt_id", "lw_file_index", "lw_pos", "db", "table", "schema_version")
                },
            }
        )
    return out


def latest_snapshot_id(spark, lh, db: str, table: str) -> str:
    r = (
        lh.snapshot_plan.read(spark)
        .where(f"db = '{db}' AND `table` = '{table}'")
        .orderBy("planned_at", ascending=False)
        .first()
    )
    return r["snapshot_id"]


def key_of(row: dict, key_cols) -> tuple:
    return tuple(row[k] for k in key_cols)


def assert_snapshot_matches_source(spark, config, db: str, table: str, chunk_size: int | None = None) -> str:
    lh = Lakehouse(config)
    sid = latest_snapshot_id(spark, lh, db, table)
    plan = lh.snapshot_plan.read(spark).where(f"snapshot_id = '{sid}'").orderBy("chunk_id").collect()
    chunks = manifest(spark, lh, db, table, sid)
    # Exactly one manifest row per planned chunk.
    assert [c["chunk_id"] for c in chunks] == [p["chunk_id"] for p in plan]
    # The chunks partition the key space: open ends, shared inner bounds.
    assert plan[0]["start_key"] is None
    assert plan[-1]["end_key"] is None
    assert all(a["end_key"] == b["start_key"] for a, b in itertools.pairwise(plan))
    rows = trusted_rows(spark, lh, sid)
    expected = source_rows(config, db, table)
    key_cols = list(plan[0]["key_columns"])
    got = {key_of(r["row"], key_cols): dict(r["row"]) for r in rows}
    assert len(got) == len(rows), "a key was read twice"
    assert got == expected
    by_chunk: dict[int, list] = {}
    for r in rows:
        by_chunk.setdefault(r["chunk_id"], []).append(r)
    for c in chunks:
        mine = by_chunk.get(c["chunk_id"], [])
        assert c["row_count"] == len(mine)
        assert c["checksum"] == str(functools.reduce(combine_checksum, (dict(r["row"]) for r in mine), 0))
        # What every row of a chunk shares (its low watermark, table, schema version) is in
        # its manifest row, not on the rows.
        assert (c["lw_file_index"], c["lw_pos"]) <= (c["hw_file_index"], c["hw_pos"])
        if chunk_size is not None:
            assert c["row_count"] <= chunk_size
    return sid


@pytest.fixture
def shop(mariadb, database):
    """Six tables covering every key shape the planner must handle."""
    db = database
    mariadb.execute(
        "CREATE TABLE items (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20), price DECIMAL(9,2), "
        "made DATETIME(6), seen TIMESTAMP(3) NULL)",
        "CREATE TABLE bigu (id BIGINT UNSIGNED PRIMARY KEY, v VARCHAR(10))",
        "CREATE TABLE pairs (a INT NOT NULL, b VARCHAR(10) NOT NULL, v INT, PRIMARY KEY (a, b))",
        "CREATE TABLE words (w VARCHAR(40) COLLATE utf8mb4_general_ci PRIMARY KEY, n INT)",
        "CREATE TABLE nokey (code CHAR(8) NOT NULL, v INT, UNIQUE KEY (code))",
        "CREATE TABLE moments (at DATETIME(6) PRIMARY KEY, v INT)",
        database=db,
    )
    stmts = []
    for i in range(1, 41):
        stmts.append(
            f"INSERT INTO items (name, price, made, seen) VALUES ('item{i}', {i}.25, "
            f"'2026-01-{1 + i % 28:02d} 10:00:00.{i:06d}', '2026-03-01 12:00:00.{i % 1000:03d}')"
        )
    big = (
        [0, 1, 2**32, 2**63 - 1, 2**63, 2**63 + 1] + [TOP - i for i in range(20)] + [10**15 + 7 * i for i in range(10)]
    )
    stmts.append("INSERT INTO bigu VALUES " + ",".join(f"({k}, 'v{j}')" for j, k in enumerate(big)))
    stmts.append(
        "INSERT INTO pairs VALUES "
        + ",".join(f"({a}, '{b}', {a * 10})" for a in range(6) for b in ("x", "Y", "z", "ä", "aa", "B"))
    )
    words = [
        "apple",
        "Banana",
        "cherry",
        "Dates",
        "éclair",
        "fig",
        "Grape",
        "hazel",
        "Ice",
        "jam",
        "Kiwi",
        "lime",
        "Mango",
        "nut",
        "Olive",
        "pear",
        "Quince",
        "rye",
        "Sage",
        "thyme",
        "Ugli",
        "vanilla",
        "Walnut",
        "yam",
        "Zucchini",
        "ärger",
        "Öl",
        "zz",
        "ZZZ",
        "a b",
        "a",
    ]
    stmts.append("INSERT INTO words VALUES " + ",".join(f"('{w}', {i})" for i, w in enumerate(words)))
    stmts.append("INSERT INTO nokey VALUES " + ",".join(f"('c{i * 37 % 1000:07d}', {i})" for i in range(30)))
    stmts.append(
        "INSERT INTO moments VALUES "
        + ",".join(f"('2026-02-{1 + i % 27:02d} {i % 24:02d}:00:00.{i:06d}', {i})" for i in range(35))
    )
    mariadb.execute(*stmts, database=db)
    return db


# --- tests ----------------------------------------------------------------------------------


def test_snapshot_of_every_key_shape_equals_the_source(spark, shop, make_config):
    db = shop
    config = make_config(
        [f"{db}.*"],
        snapshot={"chunk_size": 6, "parallelism": 2, "chunks_per_commit": 10},
        source={"chunk_keys": {f"{db}.nokey": ["code"]}},
    )
    result = run_snapshot(spark, config)
    lh = Lakehouse(config)
    assert {t.name for t in result.tables} == {
        f"{db}.{t}" for t in ("items", "bigu", "pairs", "words", "nokey", "moments")
    }
    assert result.rows == 40 + 36 + 36 + 31 + 30 + 35
    for t in ("items", "bigu", "pairs", "words", "nokey", "moments"):
        assert_snapshot_matches_source(spark, config, db, t, chunk_size=6)

    plan = {
        t: lh.snapshot_plan.read(spark).where(f"db = '{db}' AND `table` = '{t}'").orderBy("chunk_id").collect()
        for t in ("items", "bigu", "words")
    }
    # Dense integers are cut by arithmetic: every 6 values from the minimum (1).
    assert [key_from_json(p["start_key"]) for p in plan["items"]] == [None] + [(str(1 + 6 * i),) for i in range(1, 7)]
    # Sparse BIGINT UNSIGNED up to 2**64-1 walks the index: 36 rows -> 6 chunks, not 2**64/6.
    assert len(plan["bigu"]) == 6
    assert key_from_json(plan["bigu"][-1]["start_key"]) == (str(TOP - 5),)
    # A case-insensitive collation orders 'apple' < 'Banana'; MySQL picked the bounds.
    assert key_from_json(plan["words"][1]["start_key"])[0].lower() > "a"
    # The schema is recorded at plan time, without DDL.
    hist = lh.schema_history.read(spark).where(f"db = '{db}'").collect()
    assert {h["table"] for h in hist} == {"items", "bigu", "pairs", "words", "nokey", "moments"}
    assert all(h["ddl"] is None for h in hist)
    assert "6 tables" in result.summary()


def test_each_snapshot_has_one_typed_table_whose_files_hold_only_the_rows_and_their_chunk(
    spark, mariadb, database, make_config
):
    """Rows are stored typed, in the snapshot's own table, without partitions; what is the same
    for a whole chunk is in its manifest row, so the files hold the row values and the chunk's
    identity only."""
    import pyarrow.parquet as pq

    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), d DATE)",
        "INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}', '2026-01-{i:02d}')" for i in range(1, 13)),
        database=database,
    )
    config = make_config([f"{database}.t"], snapshot={"chunk_size": 4})
    run_snapshot(spark, config)
    sid = assert_snapshot_matches_source(spark, config, database, "t", chunk_size=4)

    lh = Lakehouse(config)
    ref = lh.snapshot_table(database, "t", sid)
    assert list(lh.snapshot_tables(spark, database, "t")) == [sid]
    assert not lh.snapshot_rows.exists(spark)  # the map form is only read, where it exists
    detail = spark.sql(f"DESCRIBE DETAIL {ref.sql}").first()
    assert list(detail["partitionColumns"]) == []
    assert detail["properties"]["delta.dataSkippingStatsColumns"] == "_cdc_chunk_id,_cdc_attempt_id"
    fields = {f.name: f.dataType.simpleString() for f in ref.read(spark).schema.fields}
    assert fields == {
        "id": "int",
        "v": "string",
        "d": "date",
        "_cdc_chunk_id": "int",
        "_cdc_attempt_id": "string",
        "_cdc_chunk_stats": "map<string,string>",
    }
    # The three chunks are read by `parallelism` (2) tasks: a file per task, not per chunk, so
    # a big table's snapshot is not tens of thousands of small files. No per-chunk constant in it.
    files = list(Path(ref.path).rglob("*.parquet"))
    assert len(files) == 2
    assert all(len(pq.read_schema(f).names) == 6 for f in files)
    assert all(c["row_format"] == "typed" and c["zero_dates"] == 0 for c in manifest(spark, lh, database, "t"))


def test_a_lakehouse_with_map_form_snapshot_rows_keeps_them_and_writes_new_snapshots_typed(
    spark, mariadb, database, make_config
):
    from binlake.contract.schemas import SNAPSHOT_ROWS_SCHEMA

    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(1, 9)),
        database=database,
    )
    config = make_config([f"{database}.t"], snapshot={"chunk_size": 4})
    lh = Lakehouse(config)
    lh.snapshot_rows.create_if_missing(spark, SNAPSHOT_ROWS_SCHEMA)  # the map form an earlier binlake created
    old = spark.createDataFrame(
        [("old", database, "t", 0, "a0", 1, 4, "v0", {"id": "1", "v": "x"}, None)], SNAPSHOT_ROWS_SCHEMA
    )
    lh.snapshot_rows.save(old.write.format("delta").mode("append"))

    # As the CLI runs it: the layout migration gives the old table its properties first.
    commands.run_snapshot(spark, config)
    assert_snapshot_matches_source(spark, config, database, "t", chunk_size=4)
    assert lh.snapshot_rows.read(spark).count() == 1  # untouched
    detail = spark.sql(f"DESCRIBE DETAIL {lh.snapshot_rows.sql}").first()
    assert list(detail["partitionColumns"]) == []
    assert detail["properties"]["delta.dataSkippingStatsColumns"] == "snapshot_id,attempt_id"


def test_manifest_rows_come_from_the_observed_write_and_equal_a_read_back(
    spark, mariadb, database, make_config, monkeypatch
):
    import binlake.bronze.snapshot as snapshot

    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(1, 11)),
        database=database,
    )
    config = make_config([f"{database}.t"], snapshot={"chunk_size": 2, "parallelism": 1, "chunks_per_commit": 3})
    observed, read_back = [], []
    real_observed, real_read_back = snapshot._observed_markers, snapshot._read_back_markers
    monkeypatch.setattr(snapshot, "_observed_markers", lambda *a: observed.append(real_observed(*a)) or observed[-1])
    monkeypatch.setattr(
        snapshot, "_read_back_markers", lambda *a: read_back.append(real_read_back(*a)) or read_back[-1]
    )

    run_snapshot(spark, config)
    assert_snapshot_matches_source(spark, config, database, "t", chunk_size=2)
    # Two waves (3 + 2 chunks), both from the observation: no Spark job read the markers back.
    assert [sorted(o) for o in observed] == [[0, 1, 2], [3, 4]]
    assert read_back == []

    # Without the observation (a Spark that does not deliver it), the same manifest from a read-back.
    monkeypatch.setattr(snapshot, "_observed_markers", lambda *a: None)
    run_snapshot(spark, config, tables=[f"{database}.t"])
    assert_snapshot_matches_source(spark, config, database, "t", chunk_size=2)
    assert [sorted(r) for r in read_back] == [[0, 1, 2], [3, 4]]


def test_rerun_skips_complete_tables_and_table_option_starts_a_new_snapshot(spark, mariadb, database, make_config):
    db = database
    mariadb.execute(
        "CREATE TABLE a (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE b (id INT PRIMARY KEY, v INT)",
        "INSERT INTO a VALUES (1,1),(2,2),(3,3)",
        "INSERT INTO b VALUES (1,1)",
        database=db,
    )
    config = make_config([f"{db}.*"], snapshot={"chunk_size": 2})
    first = run_snapshot(spark, config)
    assert first.chunks_read == 3
    again = run_snapshot(spark, config)
    assert again.tables == []
    assert sorted(again.skipped) == [f"{db}.a", f"{db}.b"]
    assert again.summary() == "snapshot: nothing to do (2 tables already have a complete snapshot)"

    mariadb.execute("UPDATE a SET v = 30 WHERE id = 3", "DELETE FROM a WHERE id = 1", database=db)
    forced = run_snapshot(spark, config, tables=[f"{db}.a"])
    assert [(t.name, t.mode) for t in forced.tables] == [(f"{db}.a", "new")]
    sid = assert_snapshot_matches_source(spark, config, db, "a")
    assert sid != first.tables[0].snapshot_id

    with pytest.raises(
        ConfigError, match=rf"--table {db}\.nope is not a captured table: it must exist and match source\.tables"
    ):
        run_snapshot(spark, config, tables=[f"{db}.nope"])
    with pytest.raises(ConfigError, match=r"--table 'nodot' is not db\.table: write it like shop\.orders"):
        run_snapshot(spark, config, tables=["nodot"])
    with pytest.raises(TypeError, match=r'tables must be a list of "db.table" strings or None'):
        run_snapshot(spark, config, tables=f"{db}.a")


def test_keyless_table_without_chunk_keys_is_refused_with_the_fix(spark, mariadb, database, make_config):
    from binlake.errors import PreflightError

    mariadb.execute("CREATE TABLE heap (v INT)", database=database)
    config = make_config([f"{database}.*"])
    with pytest.raises(
        PreflightError, match=rf"{database}\.heap has no primary key: add one, or set source\.chunk_keys"
    ):
        run_snapshot(spark, config)


def test_password_never_appears_in_the_spark_plan_or_bronze(spark, mariadb, database, make_config):
    mariadb.execute("CREATE TABLE p (id INT PRIMARY KEY)", "INSERT INTO p VALUES (1)", database=database)
    config = make_config([f"{database}.*"])
    password = config.source.password.reveal()
    with connect(config.source) as conn:
        schema = table_schema(conn, config.source, database, "p")
    spark.dataSource.register(SnapshotDataSource)
    chunk = {
        "snapshot_id": "s",
        "db": database,
        "table": "p",
        "chunk_id": 0,
        "start_key": None,
        "end_key": None,
        "schema_version": schema.version(),
    }
    opts = reader_options(config.source, [chunk], {schema.name: schema.to_json()}, "a1")
    df = spark.read.format(FORMAT).options(**opts).load()
    plan = str(df._jdf.queryExecution().toString())
    assert "binlake-snapshot" in plan or "PythonDataSource" in plan or "BatchEvalPython" in plan or plan
    assert password not in plan
    assert password not in str(
        df._jdf.queryExecution().explainString(
            spark._jvm.org.apache.spark.sql.execution.ExplainMode.fromString("extended")
        )
    )
    assert [r["_t0"] for r in df.collect() if r["_cdc_chunk_stats"] is None] == ["1"]

    run_snapshot(spark, config)
    lh = Lakehouse(config)
    typed = list(lh.snapshot_tables(spark, database, "p").values())
    for ref in (*typed, lh.snapshot_chunks, lh.snapshot_plan, lh.schema_history):
        dump = "\n".join(json.dumps(r.asDict(recursive=True), default=str) for r in ref.read(spark).collect())
        assert password not in dump


def test_resnapshot_chunks_rereads_only_the_given_ranges(spark, mariadb, database, make_config):
    db = database
    mariadb.execute(
        "CREATE TABLE r (id INT PRIMARY KEY, v INT)",
        "INSERT INTO r VALUES " + ",".join(f"({i},{i})" for i in range(1, 21)),
        database=db,
    )
    config = make_config([f"{db}.*"], snapshot={"chunk_size": 5})
    run_snapshot(spark, config)
    lh = Lakehouse(config)
    mariadb.execute("UPDATE r SET v = -7 WHERE id = 7", database=db)
    res = resnapshot_chunks(spark, config, db, "r", [('["6"]', '["11"]')])
    assert [(t.mode, t.chunks_total, t.rows) for t in res.tables] == [("repair", 1, 5)]
    sid = res.tables[0].snapshot_id
    [chunk] = manifest(spark, lh, db, "r", sid)
    assert (chunk["start_key"], chunk["end_key"], chunk["row_count"]) == ('["6"]', '["11"]', 5)
    got = {r["row"]["id"]: r["row"]["v"] for r in trusted_rows(spark, lh, sid)}
    assert got == {"6": "6", "7": "-7", "8": "8", "9": "9", "10": "10"}
    # A complete repair snapshot is the latest: a plain run has nothing to do.
    assert run_snapshot(spark, config).tables == []
    with pytest.raises(
        ValueError, match=r"chunks\[0\] bound \['1', '2'\] has 2 values but .*has 1 key columns \['id'\]"
    ):
        resnapshot_chunks(spark, config, db, "r", [('["1","2"]', None)])
    with pytest.raises(ValueError, match=r"chunks is empty: pass at least one \(start_key, end_key\) pair"):
        resnapshot_chunks(spark, config, db, "r", [])


# --- the watermark window (docs/architecture.md, "The change sequence") -------------------


class BarrierController(threading.Thread):
    """Releases every reader paused at a barrier; runs the given action first for one of them."""

    def __init__(self, directory: Path, actions: dict[str, object], kill_after_lw: int | None = None, pgid=None):
        super().__init__(daemon=True)
        self.directory, self.actions = directory, actions
        self.stop_event = threading.Event()
        self.seen: list[str] = []
        self.error: BaseException | None = None
        self.workers: list[threading.Thread] = []
        self.kill_after_lw, self.pgid, self.killed = kill_after_lw, pgid, False

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                for name in sorted(os.listdir(self.directory)):
                    if name.endswith(".go") or name in self.seen:
                        continue
                    self.seen.append(name)
                    lws = [s for s in self.seen if s.endswith(".lw")]
                    if self.kill_after_lw is not None and len(lws) >= self.kill_after_lw:
                        # A reader is between its watermarks right now: kill everything.
                        os.killpg(self.pgid, signal.SIGKILL)
                        self.killed = True
                        return
                    action = self.actions.get(name)
                    if action is None:
                        (self.directory / f"{name}.go").touch()
                    else:
                        # On its own thread: an action that waits on a lock held by another
                        # paused reader (a TRUNCATE waits for every open read of its table)
                        # must not keep that reader from being released.
                        worker = threading.Thread(target=self._act, args=(name, action), daemon=True)
                        worker.start()
                        self.workers.append(worker)
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc

    def _act(self, name: str, action) -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc
        finally:
            (self.directory / f"{name}.go").touch()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)
        for worker in self.workers:
            worker.join(timeout=30)
        if self.error is not None:
            raise self.error


def test_changes_made_while_a_chunk_is_read_sort_after_its_exact_watermark_and_win(
    spark, mariadb, database, make_config, tmp_path, monkeypatch
):
    """On MariaDB a chunk's SELECT runs in a consistent snapshot whose binlog position is
    both its low and high watermark: whatever commits once the read has begun, before or
    during the SELECT, is not in the chunk's rows and sorts after its watermark."""
    db = database
    mariadb.execute(
        "CREATE TABLE ww (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO ww VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(1, 31) if i not in (15, 16)),
        database=db,
    )
    config = make_config([f"{db}.*"], snapshot={"chunk_size": 10, "parallelism": 2})
    changes = []  # (position before, position after, key, encoded after image or None)

    def mutate(sql: str, key: int) -> None:
        with connect(config.source) as conn:
            before = master_status(conn)
            mariadb.execute(sql, database=db)
            after = master_status(conn)
            image = source_rows(config, db, "ww").get((str(key),))
            changes.append((before, after, (str(key),), image))

    def before_select():  # after the watermark, before the SELECT
        mutate("INSERT INTO ww VALUES (15, 'new15')", 15)
        mutate("UPDATE ww SET v = 'upd12' WHERE id = 12", 12)
        mutate("DELETE FROM ww WHERE id = 13", 13)

    def after_select():  # after the SELECT
        mutate("INSERT INTO ww VALUES (16, 'new16')", 16)
        mutate("UPDATE ww SET v = 'upd14' WHERE id = 14", 14)
        mutate("DELETE FROM ww WHERE id = 17", 17)

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    monkeypatch.setenv(BARRIER_ENV, str(barrier))
    ctl = BarrierController(barrier, {f"{db}.ww.1.lw": before_select, f"{db}.ww.1.select": after_select})
    ctl.start()
    try:
        run_snapshot(spark, config)
    finally:
        ctl.stop()
    assert len(changes) == 6, ctl.seen

    lh = Lakehouse(config)
    sid = latest_snapshot_id(spark, lh, db, "ww")
    [chunk] = [c for c in manifest(spark, lh, db, "ww", sid) if c["chunk_id"] == 1]
    assert (chunk["start_key"], chunk["end_key"]) == ('["11"]', '["21"]')
    lw = (chunk["lw_file_index"], chunk["lw_pos"])
    hw = (chunk["hw_file_index"], chunk["hw_pos"])
    assert lw == hw
    for before, _, _, _ in changes:
        assert lw <= before.key()  # every change ends after the watermark

    rows = trusted_rows(spark, lh, sid)
    in_chunk = {r["row"]["id"]: r["row"]["v"] for r in rows if r["chunk_id"] == 1}
    # The chunk holds the table as of its watermark: none of the changes.
    assert in_chunk == {str(i): f"v{i}" for i in range(11, 21) if i not in (15, 16)}

    # Silver's rule: latest _cdc_seq per key wins. Snapshot rows have (lw, -1); each change
    # has (file_index, end position, 0) with its full after image, as the binlog carries it.
    latest: dict[tuple, tuple] = {}
    for r in rows:
        k = (r["row"]["id"],)
        latest[k] = max(latest.get(k, ((-1, -1, -2), None)), ((r["lw_file_index"], r["lw_pos"], -1), dict(r["row"])))
    for _, after, k, image in changes:
        seq = (after.file_index, after.pos, 0)
        if seq > latest.get(k, ((-1, -1, -2), None))[0]:
            latest[k] = (seq, image)
    merged = {k: img for k, (seq, img) in latest.items() if img is not None}
    assert merged == source_rows(config, db, "ww")


# --- kill -9 anywhere, re-run converges (docs/architecture.md, "Failure behaviour") -------


def _cli(config_path: Path, env_extra: dict[str, str] | None = None, controller=None, barrier: Path | None = None):
    env = {**os.environ, **(env_extra or {})}
    if barrier is not None:
        env[BARRIER_ENV] = str(barrier)
    proc = subprocess.Popen(
        [BINLAKE, "--config", str(config_path), "snapshot"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    if controller is not None:
        controller.pgid = proc.pid
        controller.start()
    out, err = proc.communicate(timeout=600)
    if controller is not None:
        controller.stop()
    return proc.returncode, out, err


def test_kill_9_anywhere_then_rerun_leaves_exactly_one_manifest_row_per_chunk(
    spark, mariadb, database, tmp_path, capsys
):
    from binlake.config import load_config

    db = database
    mariadb.execute(
        "CREATE TABLE k (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO k VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(1, 31)),
        database=db,
    )
    config_path = tmp_path / "binlake.yml"
    config_path.write_text(
        mariadb.config_yaml(
            str(tmp_path / "lake"),
            [f"{db}.*"],
            server_id=5301,
            snapshot={"chunk_size": 3, "parallelism": 1, "chunks_per_commit": 2},
        )
    )
    config = load_config(config_path)
    lh = Lakehouse(config)

    # 1. Killed right after the plan is committed: a plan, no manifest.
    rc, _, err = _cli(config_path, {"BINLAKE_KILL_AT": "snapshot.after_plan"})
    assert rc == -signal.SIGKILL, err
    sid = latest_snapshot_id(spark, lh, db, "k")
    assert lh.snapshot_plan.read(spark).where(f"snapshot_id = '{sid}'").count() == 10
    assert manifest(spark, lh, db, "k") == []

    # 2. Killed between a wave's rows and its manifest: that wave's rows are orphans.
    rc, _, err = _cli(config_path, {"BINLAKE_KILL_AT": "snapshot.before_manifest@2"})
    assert rc == -signal.SIGKILL, err
    assert [c["chunk_id"] for c in manifest(spark, lh, db, "k")] == [0, 1]
    markers = snapshot_ref(spark, lh, sid).read(spark).where("_cdc_chunk_stats IS NOT NULL")
    assert markers.where("_cdc_chunk_id IN (2, 3)").count() == 2

    # 3. Killed mid-read: a reader sits between its low and high watermark.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    ctl = BarrierController(barrier, {}, kill_after_lw=3)
    rc, _, err = _cli(config_path, controller=ctl, barrier=barrier)
    assert ctl.killed, err
    assert rc == -signal.SIGKILL, err
    done_before = {c["chunk_id"] for c in manifest(spark, lh, db, "k")}
    assert {0, 1, 2, 3} <= done_before
    assert len(done_before) < 10

    # 4. A plain re-run resumes the open snapshot and reads only what has no manifest row
    # (nothing kills it: in this process, a JVM start less).
    capsys.readouterr()
    assert cli.main(["--config", str(config_path), "snapshot"]) == 0
    out = capsys.readouterr().out
    assert f"{db}.k: resumed snapshot {sid}, {10 - len(done_before)} chunks read of 10" in out
    chunks = manifest(spark, lh, db, "k")
    assert [c["chunk_id"] for c in chunks] == list(range(10))  # exactly one manifest row each
    assert_snapshot_matches_source(spark, config, db, "k", chunk_size=3)
    attempts = {r[0] for r in snapshot_ref(spark, lh, sid).read(spark).select("_cdc_attempt_id").distinct().collect()}
    assert attempts - {c["attempt_id"] for c in chunks}, "the killed attempts left orphan rows, which were ignored"


def test_a_truncate_that_commits_after_a_chunks_read_began_is_read_again_in_a_new_snapshot(
    spark, mariadb, database, make_config, tmp_path, monkeypatch
):
    """A TRUNCATE recreates the table, so a read whose snapshot began before it fails at its
    first access (MariaDB error 1412, "please retry transaction"): the chunk is read again in
    a new snapshot, whose watermark sorts after the TRUNCATE, instead of failing the run."""
    db = database
    mariadb.execute(
        "CREATE TABLE tt (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO tt VALUES " + ",".join(f"({i}, 'v{i}')" for i in range(1, 21)),
        database=db,
    )
    config = make_config([f"{db}.*"], snapshot={"chunk_size": 10, "parallelism": 1})
    after: list = []

    def truncate():  # the read's snapshot has begun, its SELECT has not
        with connect(config.source) as conn:
            mariadb.execute("TRUNCATE tt", "INSERT INTO tt VALUES (7, 'new7')", database=db)
            after.append(master_status(conn))

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    monkeypatch.setenv(BARRIER_ENV, str(barrier))
    ctl = BarrierController(barrier, {f"{db}.tt.0.lw": truncate})
    ctl.start()
    try:
        run_snapshot(spark, config)
    finally:
        ctl.stop()
    assert after, ctl.seen

    lh = Lakehouse(config)
    sid = latest_snapshot_id(spark, lh, db, "tt")
    [chunk] = [c for c in manifest(spark, lh, db, "tt", sid) if c["chunk_id"] == 0]
    assert (chunk["lw_file_index"], chunk["lw_pos"]) >= after[0].key()
    assert {r["row"]["id"]: r["row"]["v"] for r in trusted_rows(spark, lh, sid) if r["chunk_id"] == 0} == {"7": "new7"}


def test_invisible_columns_are_mirrored_from_the_snapshot_and_the_binlog(spark, mariadb, database, make_config):
    """SELECT * leaves INVISIBLE columns out (MariaDB 10.3+, MySQL 8.0.23+; MySQL's generated
    invisible primary key is one), while information_schema and the binlog have them: the
    snapshot must name them, or it never matches its own plan."""
    from source_diff import diff_with_source

    mariadb.execute(
        f"CREATE TABLE `{database}`.inv (id INT PRIMARY KEY, v INT, secret VARCHAR(10) INVISIBLE, n INT INVISIBLE)",
        f"INSERT INTO `{database}`.inv (id, v, secret, n) VALUES (1, 10, 'a', 100), (2, 20, NULL, 200)",
    )
    config = make_config([f"{database}.inv"])
    commands.run_pipeline(spark, config)
    mariadb.execute(
        f"INSERT INTO `{database}`.inv (id, v, secret, n) VALUES (3, 30, 'c', 300)",
        f"UPDATE `{database}`.inv SET secret = 'b', n = n + 1 WHERE id = 2",
    )
    commands.run_pipeline(spark, config)
    gold = {
        r["id"]: (r["secret"], r["n"])
        for r in spark.table(f"delta.`{config.lakehouse_root}/gold/{database}/inv`").collect()
    }
    assert gold == {1: ("a", 100), 2: ("b", 201), 3: ("c", 300)}
    diffs = diff_with_source(spark, config)
    assert all(d.ok for d in diffs), "\n".join(d.describe() for d in diffs)
