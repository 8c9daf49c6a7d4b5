"""Online schema changes under a write load: a real pt-online-schema-change, and gh-ost's
statement sequence as gh-ost issues it. Gold equals the source after the cut-over, and the
source table is read by no snapshot after the first: the shadow's rows, copied and changed
through the binlog, become the table."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import threading

import pytest

from binlake.bronze.capture import run_capture
from binlake.bronze.osc_replay import REPLAY_SUFFIX
from binlake.config import load_config
from binlake.contract.tables import Lakehouse
from binlake.ops.pipeline import run_pipeline
from binlake.ops.status import collect_status, format_status
from tests.capture_process import capture_process
from tests.source_diff import diff_with_source

ROWS = 3000


def _table(mariadb, db: str) -> None:
    mariadb.execute(
        f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40))",
        *[
            f"INSERT INTO `{db}`.t VALUES " + ",".join(f"({i}, {i % 97}, 's{i}')" for i in range(k, k + 500))
            for k in range(1, ROWS + 1, 500)
        ],
    )


def _chunks(spark, config, db: str) -> tuple[int, int]:
    """(manifest rows of snapshots that read the source table, manifest rows of replays)."""
    rows = Lakehouse(config).snapshot_chunks.read(spark).where(f"db = '{db}' AND `table` = 't'").collect()
    replays = sum(1 for r in rows if r["snapshot_id"].endswith(REPLAY_SUFFIX))
    return len(rows) - replays, replays


def _run(spark, config):
    result = run_pipeline(spark, config)
    assert result.ok, result.summary()
    return result


def _gold_equals_source(spark, config) -> None:
    diffs = diff_with_source(spark, config)
    assert diffs, "\n".join(d.describe() for d in diffs)
    assert all(d.ok for d in diffs), "\n".join(d.describe() for d in diffs)


class _Writer(threading.Thread):
    """Autocommit inserts, updates and deletes on ``t`` until stopped; ``mirror`` is called
    after each with (statement kind, id), as gh-ost applies what it reads in the binlog."""

    def __init__(self, mariadb, db: str, mirror=None, seed: int = 7):
        super().__init__(daemon=True)
        self.mariadb, self.db, self.mirror = mariadb, db, mirror
        self.stop = threading.Event()
        self.rng = random.Random(seed)
        self.done = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.mariadb.root_connection(self.db) as conn, conn.cursor() as cur:
                next_id = ROWS + 1
                while not self.stop.is_set():
                    kind = self.rng.choice(("insert", "update", "update", "delete"))
                    if kind == "insert":
                        key, next_id = next_id, next_id + 1
                        cur.execute("INSERT INTO t (id, v, s) VALUES (%s, %s, %s)", (key, key % 13, f"new{key}"))
                    else:
                        key = self.rng.randint(1, next_id - 1)
                        if kind == "update":
                            cur.execute("UPDATE t SET v = v + 1, s = CONCAT('u', id) WHERE id = %s", (key,))
                        else:
                            cur.execute("DELETE FROM t WHERE id = %s", (key,))
                    if self.mirror is not None:
                        self.mirror(cur, kind, key)
                    self.done += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.join(60)
        assert self.error is None, self.error
        assert self.done > 20, "the write load ran"


def _ghost_apply(cur, kind: str, key: int) -> None:
    """gh-ost's applier: a row event of ``t`` applied to ``_t_gho`` (REPLACE for inserts and
    updates, DELETE for deletes), with the columns the two tables share."""
    if kind == "delete":
        cur.execute("delete /* gh-ost */ from `_t_gho` where id = %s", (key,))
    else:
        cur.execute("replace /* gh-ost */ into `_t_gho` (id, v, s) select id, v, s from t where id = %s", (key,))


def _ghost_tables(mariadb, db: str) -> None:
    """gh-ost's first statements (go/logic/applier.go) for --alter 'ADD COLUMN note ...': its
    changelog table and the ghost table."""
    q = f"`{db}`"
    mariadb.execute(
        f"drop /* gh-ost */ table if exists {q}.`_t_ghc`",
        f"create /* gh-ost */ table {q}.`_t_ghc` (id bigint auto_increment, last_update timestamp not null "
        "default current_timestamp on update current_timestamp, hint varchar(64) charset ascii not null, "
        "value varchar(4096) charset ascii not null, primary key(id), unique key hint_uidx(hint)) auto_increment=256",
        f"create /* gh-ost */ table {q}.`_t_gho` like {q}.`t`",
        f"alter /* gh-ost */ table {q}.`_t_gho` add column note varchar(20) not null default 'ghost'",
        f"insert /* gh-ost */ into {q}.`_t_ghc` (id, hint, value) values (NULLIF(2, 0), 'state', 'GhostTableMigrated') "
        "on duplicate key update last_update=NOW(), value=VALUES(value)",
    )


def _ghost_migration(spark, config, mariadb, db: str, capture_midway: bool = True, create: bool = True) -> None:
    """gh-ost's statements for --alter 'ADD COLUMN note ...', up to and including its atomic
    cut-over, with the write load on ``t`` applied to the ghost table (``create`` False: its
    tables exist already)."""
    q = f"`{db}`"
    if create:
        _ghost_tables(mariadb, db)
    writer = _Writer(mariadb, db, mirror=_ghost_apply)
    writer.start()
    step = 400
    for low in range(1, ROWS + 2000, step):
        mariadb.execute(
            f"insert /* gh-ost `{db}`.`t` */ ignore into {q}.`_t_gho` (`id`, `v`, `s`) "
            f"(select `id`, `v`, `s` from {q}.`t` force index (`PRIMARY`) "
            f"where ((`id` >= {low}) and (`id` < {low + step})) lock in share mode)"
        )
        if capture_midway and low == 1 + 2 * step:
            run_capture(spark, config)  # the copy spans several capture batches
    writer.finish()
    mariadb.execute(
        f"create /* gh-ost */ table {q}.`_t_del` (id int auto_increment primary key) engine=InnoDB "
        "comment='ghost-cut-over-sentry'",
        f"drop /* gh-ost */ table if exists {q}.`_t_del`",
        f"rename /* gh-ost */ table {q}.`t` to {q}.`_t_del`, {q}.`_t_gho` to {q}.`t`",
        f"drop /* gh-ost */ table if exists {q}.`_t_del`",
        f"drop /* gh-ost */ table if exists {q}.`_t_ghc`",
        # Changes after the cut-over, on the new table.
        f"UPDATE {q}.t SET note = 'after', v = v + 100 WHERE id % 50 = 0",
        f"DELETE FROM {q}.t WHERE id % 77 = 0",
        f"INSERT INTO {q}.t (id, v, s, note) VALUES (999999, 1, 'last', 'post')",
    )


def test_gh_ost_migration_under_load_is_replayed_and_gold_equals_the_source(spark, mariadb, database, make_config):
    _table(mariadb, database)
    config = make_config([f"{database}.t"], capture={"max_batch_rows": 2000})
    _run(spark, config)
    read_before, _ = _chunks(spark, config, database)

    _ghost_migration(spark, config, mariadb, database)
    result = _run(spark, config)

    capture = next(s.result for s in result.steps if s.name == "capture")
    _gold_equals_source(spark, config)
    read_after, replays = _chunks(spark, config, database)
    assert read_after == read_before, "the source table was read by no snapshot after the first"
    assert replays == 1, "the cut-over is one replayed chunk"
    assert [r.replayed for r in capture.replays] == [True], capture.summary()
    gold = Lakehouse(config).gold(database, "t").read(spark)
    assert "note" in gold.columns
    assert not Lakehouse(config).silver(database, "_t_gho").exists(spark), "the shadow is mirrored in bronze only"


@pytest.mark.skipif(shutil.which("pt-online-schema-change") is None, reason="make percona-toolkit-package")
def test_a_real_pt_online_schema_change_under_load_is_replayed_and_gold_equals_the_source(
    spark, mariadb, database, make_config
):
    _table(mariadb, database)
    config = make_config([f"{database}.t"])
    _run(spark, config)
    read_before, _ = _chunks(spark, config, database)

    writer = _Writer(mariadb, database)
    writer.start()
    try:
        done = subprocess.run(
            [
                "pt-online-schema-change",
                "--alter",
                "ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'pt'",
                "--execute",
                "--recursion-method=none",
                "--chunk-size=300",
                "--no-check-alter",
                "--set-vars=lock_wait_timeout=30",
                f"S={mariadb.socket_path},u=root,D={database},t=t",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        writer.finish()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Swapped original and new tables OK" in done.stdout
    mariadb.execute(f"UPDATE `{database}`.t SET note = 'after' WHERE id % 40 = 0")
    _run(spark, config)

    _gold_equals_source(spark, config)
    read_after, replays = _chunks(spark, config, database)
    assert read_after == read_before, "the source table was read by no snapshot after the first"
    assert replays == 1


def _plans_without_manifest(spark, config, db: str) -> list[str]:
    """Snapshot ids of ``t`` with a plan row but no manifest row: a chunk left to read from the source."""
    lh = Lakehouse(config)
    where = f"db = '{db}' AND `table` = 't'"
    planned = {r["snapshot_id"] for r in lh.snapshot_plan.read(spark).where(where).select("snapshot_id").collect()}
    done = {r["snapshot_id"] for r in lh.snapshot_chunks.read(spark).where(where).select("snapshot_id").collect()}
    return sorted(planned - done)


@pytest.mark.parametrize(
    "kill_at", ["capture.replay_before_manifest", "capture.replay_before_plan", "capture.before_commit"]
)
def test_a_kill_during_the_cut_over_converges(spark, mariadb, database, tmp_path, kill_at):
    _table(mariadb, database)
    config_path = tmp_path / "binlake.yml"
    config_path.write_text(mariadb.config_yaml(str(tmp_path / "lake"), [f"{database}.t"], server_id=7300))
    config = load_config(config_path)
    _run(spark, config)
    read_before, _ = _chunks(spark, config, database)

    _ghost_migration(spark, config, mariadb, database, capture_midway=False)
    # The batch holding the RENAME: killed after the replay's rows, after its manifest row
    # (before its plan row), or after the whole replay, before the batch's commit.
    assert capture_process(config_path, kill_at) == -signal.SIGKILL
    assert _plans_without_manifest(spark, config, database) == [], "a plan row with no rows"
    _run(spark, config)

    _gold_equals_source(spark, config)
    read_after, replays = _chunks(spark, config, database)
    assert read_after == read_before, "the source table was read by no snapshot after the first"
    assert replays == 1, "a re-read batch replays a cut-over once"


def test_a_shadow_created_before_capture_started_falls_back_to_a_re_snapshot(
    spark, mariadb, database, tmp_path, make_config
):
    _table(mariadb, database)
    # The ghost table and part of its copy precede capture's start: the change log cannot hold all of its rows.
    _ghost_tables(mariadb, database)
    mariadb.execute(f"INSERT INTO `{database}`._t_gho (id, v, s) SELECT id, v, s FROM `{database}`.t WHERE id < 100")
    config_path = tmp_path / "binlake.yml"
    config_path.write_text(mariadb.config_yaml(str(tmp_path / "lake"), [f"{database}.t"], server_id=7400))
    config = load_config(config_path)
    _run(spark, config)
    read_before, _ = _chunks(spark, config, database)

    _ghost_migration(spark, config, mariadb, database, capture_midway=False, create=False)
    assert capture_process(config_path) == 0  # the CLI records the metrics status reads
    _run(spark, config)

    _gold_equals_source(spark, config)
    read_after, replays = _chunks(spark, config, database)
    assert replays == 0, "the table was re-snapshotted, not replayed"
    assert read_after > read_before, "the table was re-snapshotted, not replayed"
    changes = collect_status(spark, config)["online_schema_changes"]
    assert [(c["table"], c["replayed"]) for c in changes] == [(f"{database}.t", False)], changes
    assert f"CREATE TABLE of {database}._t_gho is not in the change log" in changes[0]["detail"]
    assert "re-snapshotted" in format_status(collect_status(spark, config))
