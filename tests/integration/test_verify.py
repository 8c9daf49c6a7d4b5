"""``verify`` finds what differs between the source and silver, chunk by chunk, and
``--repair`` re-reads only those chunks. Silver is corrupted on purpose by writing to its
Delta table directly, the way a bad manual fix or a bug would."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from delta_rollback import delta_versions, roll_back  # tests/delta_rollback.py

from binlake import cli
from binlake.config import load_config
from binlake.contract.tables import Lakehouse
from binlake.errors import ConfigError, VerifyMismatch
from binlake.ops.verify import run_verify

pytestmark = pytest.mark.slow
ROWS = 30
CHUNK = 10  # ids 1..30 -> chunks (-inf,11) [11,21) [21,+inf)


def _mirror(mariadb, spark, database: str, config):
    """``database``.accounts mirrored into silver (snapshot, capture, silver), 3 chunks of 10 rows."""
    from binlake.bronze.capture import run_capture
    from binlake.bronze.snapshot import run_snapshot
    from binlake.silver.run import run_silver

    mariadb.execute(
        f"CREATE TABLE `{database}`.accounts (id INT PRIMARY KEY, owner VARCHAR(40), balance DECIMAL(12,2), "
        "opened DATETIME(3), note TEXT)",
        f"INSERT INTO `{database}`.accounts SELECT seq, CONCAT('owner ', seq), seq * 10.25, "
        f"'2026-01-01 00:00:00' + INTERVAL seq HOUR, IF(seq % 3 = 0, NULL, 'n') FROM seq_1_to_{ROWS}",
        database=database,  # the sequence engine's seq_1_to_N lives in the current database
    )
    run_snapshot(spark, config)
    run_capture(spark, config)
    run_silver(spark, config)
    return config, Lakehouse(config).silver(database, "accounts")


@pytest.fixture
def mirrored(mariadb, database, make_config, spark):
    """A mirror of the test's own, for tests that change the source."""
    return _mirror(mariadb, spark, database, make_config([f"{database}.*"], snapshot={"chunk_size": CHUNK}))


@pytest.fixture(scope="module")
def shared_mirror(mariadb, spark, tmp_path_factory):
    database = f"verify_{uuid.uuid4().hex[:8]}"
    mariadb.execute(f"CREATE DATABASE `{database}`")
    path = tmp_path_factory.mktemp("verify") / "binlake.yml"
    path.write_text(
        mariadb.config_yaml(
            str(path.parent / "lakehouse"), [f"{database}.*"], server_id=5990, snapshot={"chunk_size": CHUNK}
        )
    )
    yield (*_mirror(mariadb, spark, database, load_config(path)), database)
    mariadb.execute(f"DROP DATABASE IF EXISTS `{database}`")


@pytest.fixture
def mirror(shared_mirror, spark):
    """One mirror shared by the tests that change only the lakehouse; each test's changes are
    rolled back (tests/delta_rollback.py). Yields (config, silver ref, database)."""
    config = shared_mirror[0]
    versions = delta_versions(Path(config.lakehouse_root))
    yield shared_mirror
    roll_back(spark, Path(config.lakehouse_root), versions)


def test_a_faithful_mirror_verifies_clean_and_only_the_named_tables_are_verified(mirror, spark):
    config, _, database = mirror
    result = run_verify(spark, config)
    assert result.ok
    [table] = result.tables
    assert table.name == f"{database}.accounts"
    assert [c.source_rows for c in table.chunks] == [10, 10, 10]
    assert [c.silver_rows for c in table.chunks] == [10, 10, 10]
    assert result.summary().splitlines()[0].endswith("source and silver agree")

    assert [t.name for t in run_verify(spark, config, tables=[f"{database}.accounts"]).tables] == [
        f"{database}.accounts"
    ]
    with pytest.raises(ConfigError) as info:
        run_verify(spark, config, tables=[f"{database}.nope"])
    assert str(info.value) == (
        f"--table {database}.nope is not a captured table: it must exist and match "
        "source.tables (and no source.exclude pattern)"
    )


def test_a_corrupted_silver_value_is_found_in_its_chunk_and_repaired(mirror, spark):
    config, ref, database = mirror
    spark.sql(f"UPDATE {ref.sql} SET balance = balance + 0.01 WHERE id = 15")

    with pytest.raises(VerifyMismatch) as info:
        run_verify(spark, config)
    message = str(info.value)
    assert message == (
        f'verify: 1 chunk(s) differ between source and silver: {database}.accounts chunk 1 [["11"], ["21"]): '
        "10 row(s) on both sides, checksums differ: run binlake verify --repair to re-read only these chunks"
    )
    [bad] = info.value.result.mismatches
    assert bad[1].chunk_id == 1
    assert bad[1].source_checksum != bad[1].silver_checksum

    repaired = run_verify(spark, config, repair=True)
    assert repaired.ok
    assert [(name, c.chunk_id) for name, c in repaired.repaired] == [(f"{database}.accounts", 1)]
    assert "repair: re-read 1 chunk(s) and verified again: clean" in repaired.summary()
    row = ref.read(spark).where("id = 15").collect()[0]
    assert row["balance"] == Decimal("153.75")
    assert not row["_cdc_deleted"]

    assert run_verify(spark, config).ok


def test_missing_and_extra_silver_rows_are_count_mismatches_repair_fixes_both(mirror, spark):
    config, ref, _database = mirror
    # Row 3 vanishes from silver; row 25 is marked deleted although the source still has it;
    # row 1000 exists only in silver (a missed delete).
    spark.sql(f"DELETE FROM {ref.sql} WHERE id = 3")
    spark.sql(f"UPDATE {ref.sql} SET _cdc_deleted = true WHERE id = 25")
    spark.sql(
        f"INSERT INTO {ref.sql} SELECT 1000, owner, balance, opened, note, _cdc_seq, _cdc_op, _cdc_deleted, "
        f"_cdc_commit_ts FROM {ref.sql} WHERE id = 4"
    )

    with pytest.raises(VerifyMismatch) as info:
        run_verify(spark, config)
    diffs = {c.chunk_id: (c.source_rows, c.silver_rows) for _, c in info.value.result.mismatches}
    assert diffs == {0: (10, 9), 2: (10, 10)}  # chunk 2: 25 missing, 1000 extra

    assert run_verify(spark, config, repair=True).ok
    live = {r["id"] for r in ref.read(spark).where("NOT _cdc_deleted").collect()}
    assert live == set(range(1, ROWS + 1))


def test_verify_catches_silver_up_before_comparing(mirrored, mariadb, spark, database):
    config, ref = mirrored
    # Changes silver has not seen yet are not a mismatch: verify captures and applies first.
    mariadb.execute(
        f"UPDATE `{database}`.accounts SET owner = 'new owner' WHERE id = 7",
        f"DELETE FROM `{database}`.accounts WHERE id = 29",
        f"INSERT INTO `{database}`.accounts (id, owner) VALUES (31, 'late')",
    )
    assert run_verify(spark, config).ok
    assert ref.read(spark).where("id = 7").collect()[0]["owner"] == "new owner"


def test_the_command_exits_8_on_a_mismatch_with_one_line(mirror, spark, capsys):
    config, ref, database = mirror
    spark.sql(f"UPDATE {ref.sql} SET owner = 'tampered' WHERE id = 2")
    cfg_file = next(Path(config.base_dir).glob("binlake*.yml"))
    capsys.readouterr()
    assert cli.main(["--config", str(cfg_file), "verify"]) == 8
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert errors == [
        f"error: verify: 1 chunk(s) differ between source and silver: {database}.accounts chunk 0 "
        '[-inf, ["11"]): 10 row(s) on both sides, checksums differ: run binlake verify --repair to '
        "re-read only these chunks"
    ]


def test_a_differing_chunk_that_keeps_changing_is_checked_twice_and_reported_as_changing(
    mirrored, mariadb, spark, database, monkeypatch
):
    from binlake.ops import verify

    config, ref = mirrored
    spark.sql(f"UPDATE {ref.sql} SET owner = 'tampered' WHERE id = 14")

    # The table keeps changing: a write lands just before and just after each read of the
    # source, so every read is followed by a change inside the same chunk. (Written at those
    # points, not by a timed writer: on a busy box a read can fall between two timed writes.)
    def write():
        mariadb.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 15", database=database)

    def source_side_while_writing(*args, **kwargs):
        write()
        try:
            return read_source(*args, **kwargs)
        finally:
            write()

    read_source = verify._source_side
    monkeypatch.setattr(verify, "_source_side", source_side_while_writing)
    with pytest.raises(VerifyMismatch) as info:
        run_verify(spark, config)
    monkeypatch.setattr(verify, "_source_side", read_source)
    [table] = info.value.result.tables
    assert table.rechecked
    assert [(c.chunk_id, c.status) for c in table.chunks] == [(0, "ok"), (1, "changing"), (2, "ok")]
    assert "(the table kept changing during verify)" in str(info.value)
    # Once the writes stop, repair settles it.
    assert run_verify(spark, config, repair=True).ok


# Spark SQL values that differ from what silver holds for the row named, one per type group.
# Odd rows (id % 10 == 3) hold zeros, empties and zero dates; edge rows (id % 10 == 1) extremes.
CORRUPTIONS = {
    "ti": (3, "CAST(5 AS TINYINT)"),
    "bi": (1, "CAST(-9223372036854775807 AS BIGINT)"),
    "biu": (13, "CAST(1 AS DECIMAL(20,0))"),
    "d": (23, "CAST(0.01 AS DECIMAL(10,2))"),
    "d38": (33, "CAST(0.0000000001 AS DECIMAL(38,10))"),
    "d65": (43, "'0.000000000000000000000000000002'"),  # wider than Spark's DECIMAL: silver holds text
    "f": (53, "CAST(0.48237517 AS FLOAT)"),  # the next float32 up
    "db": (63, "CAST(1e307 AS DOUBLE)"),
    "dt": (73, "DATE'2020-01-15'"),  # the source has an invalid date: NULL in silver
    "dtm6": (83, "TIMESTAMP_NTZ'9999-12-31 23:59:59.000002'"),
    "ts3": (11, "ts3 + INTERVAL 1 MILLISECOND"),
    "ts0": (21, "TIMESTAMP'2000-01-01 00:00:00'"),  # a zero TIMESTAMP: NULL in silver
    "tm": (31, "'-838:59:58'"),
    "tm6": (93, "'-00:00:01.250001'"),
    "y": (103, "CAST(1901 AS SMALLINT)"),
    "vc": (113, "' '"),
    "e": (123, "'a'"),
    "st": (133, "'x'"),
    "j": (143, "'\"Str\"'"),
    "bn": (153, "X'00000001'"),
    "bl": (41, "X'DEADBEEE'"),
    "g": (163, "X'00'"),
    "b64": (51, "CAST(-2 AS BIGINT)"),
    "vb": (61, "CAST(NULL AS BINARY)"),  # a value that became NULL
}


def _chunk_holding(chunks, key: int):
    import json

    def inside(c):
        lo = json.loads(c.start_key)[0] if c.start_key else None
        hi = json.loads(c.end_key)[0] if c.end_key else None
        return (lo is None or int(lo) <= key) and (hi is None or key < int(hi))

    [chunk] = [c for c in chunks if inside(c)]
    return chunk.chunk_id


def test_every_type_verifies_clean_and_a_changed_value_of_each_type_is_found(
    mariadb, database, make_config, spark_with_code_generation
):
    spark = spark_with_code_generation
    from mysql_types import COLUMNS, EDGE_ROW, NULL_ROW, ODD_ROW, TYPES

    from binlake.bronze.capture import run_capture
    from binlake.bronze.snapshot import run_snapshot
    from binlake.silver.run import run_silver

    names = ", ".join(f"`{name}`" for name, _, _ in TYPES)
    # Zero dates need a permissive sql_mode; a non-UTC session writes the TIMESTAMPs.
    mariadb.execute(
        f"CREATE TABLE `{database}`.types ({COLUMNS})",
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '+05:30'",
        f"INSERT INTO `{database}`.types VALUES {EDGE_ROW}, {NULL_ROW}, {ODD_ROW}",
        # Copies of the edge and odd rows, so every corruption below gets a row of its own.
        f"INSERT INTO `{database}`.types SELECT id + 10 * seq, {names} FROM `{database}`.types "
        f"JOIN seq_1_to_16 WHERE id IN (1, 3)",
        database=database,
    )
    config = make_config([f"{database}.*"], snapshot={"chunk_size": 1})
    run_snapshot(spark, config)
    run_capture(spark, config)
    run_silver(spark, config)

    result = run_verify(spark, config)
    assert result.ok, result.summary()
    [table] = result.tables
    assert table.source_rows == 35

    ref = Lakehouse(config).silver(database, "types")
    sets = ", ".join(
        f"`{col}` = CASE WHEN id = {key} THEN {value} ELSE `{col}` END" for col, (key, value) in CORRUPTIONS.items()
    )
    spark.sql(f"UPDATE {ref.sql} SET {sets}")

    with pytest.raises(VerifyMismatch) as info:
        run_verify(spark, config)
    [table] = info.value.result.tables
    found = {c.chunk_id for c in table.mismatches}
    expected = {col: _chunk_holding(table.chunks, key) for col, (key, _) in CORRUPTIONS.items()}
    assert {col for col, chunk in expected.items() if chunk not in found} == set(), "every changed value is found"
    assert found == set(expected.values()), "and nothing else"
    assert all(c.source_rows == c.silver_rows == 1 for c in table.mismatches)


@pytest.mark.parametrize("chunk_size", [1, 2])
def test_a_case_insensitive_string_key_is_chunked_by_bytes_on_both_sides(
    mariadb, database, make_config, spark, chunk_size
):
    from binlake.bronze.capture import run_capture
    from binlake.bronze.snapshot import run_snapshot
    from binlake.silver.run import run_silver

    # Collation order a < B < c < É; byte order B < a < c < É: the snapshot's chunk bounds
    # follow the collation, verify must put each key in the same chunk on both sides.
    mariadb.execute(
        f"CREATE TABLE `{database}`.words (word VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, "
        "n INT) DEFAULT CHARSET = utf8mb4",
        f"INSERT INTO `{database}`.words VALUES ('a', 1), ('B', 2), ('c', 3), ('É', 4)",
    )
    config = make_config([f"{database}.*"], snapshot={"chunk_size": chunk_size})
    run_snapshot(spark, config)
    run_capture(spark, config)
    run_silver(spark, config)

    result = run_verify(spark, config)
    assert result.ok, result.summary()
    [table] = result.tables
    assert table.source_rows == 4
    assert len(table.chunks) > 1

    ref = Lakehouse(config).silver(database, "words")
    spark.sql(f"UPDATE {ref.sql} SET n = 5 WHERE word = 'a'")
    with pytest.raises(VerifyMismatch) as info:
        run_verify(spark, config)
    [(_, bad)] = info.value.result.mismatches
    assert bad.source_rows == bad.silver_rows, "the same key in the same chunk on both sides"


# ---------------------------------------------------------------------------------------
# Flink CDC's every-type table (tests/mysql_types.py): row 1 read by the snapshot, row 2 by
# the binlog, on an idle source.


@pytest.fixture(scope="module")
def shared_full_types(mariadb, spark, tmp_path_factory):
    from mysql_types import FULL_TYPES, FULL_TYPES_ROW_1, FULL_TYPES_ROW_2

    from binlake.bronze.capture import run_capture
    from binlake.bronze.snapshot import run_snapshot
    from binlake.silver.run import run_silver

    database = f"verify_types_{uuid.uuid4().hex[:8]}"
    mariadb.execute(f"CREATE DATABASE `{database}`")
    mariadb.execute(FULL_TYPES, FULL_TYPES_ROW_1, database=database)
    path = tmp_path_factory.mktemp("verify_types") / "binlake.yml"
    path.write_text(
        mariadb.config_yaml(
            str(path.parent / "lakehouse"), [f"{database}.*"], server_id=5991, snapshot={"chunk_size": 1}
        )
    )
    config = load_config(path)
    run_snapshot(spark, config)
    mariadb.execute(FULL_TYPES_ROW_2, database=database)
    run_capture(spark, config)
    run_silver(spark, config)
    yield config, Lakehouse(config).silver(database, "full_types"), database
    mariadb.execute(f"DROP DATABASE IF EXISTS `{database}`")


@pytest.fixture
def full_types(shared_full_types, spark):
    """The mirrored full_types; each test's lakehouse changes are rolled back. Yields
    (config, silver ref, database)."""
    config = shared_full_types[0]
    versions = delta_versions(Path(config.lakehouse_root))
    yield shared_full_types
    roll_back(spark, Path(config.lakehouse_root), versions)


def _full_types_schema(config, database):
    from binlake.source.catalog import table_schema
    from binlake.source.mysql import connect

    with connect(config.source) as conn:
        return table_schema(conn, config.source, database, "full_types")


def test_every_full_types_column_has_the_sources_verify_text_in_silver(full_types, spark):
    from pyspark.sql import functions as F

    from binlake.contract.sql import qualified, quote_ident
    from binlake.ops.verify_sql import mysql_text_sql, spark_text_sql
    from binlake.source.mysql import connect

    config, ref, database = full_types
    schema = _full_types_schema(config, database)
    texts = ", ".join(mysql_text_sql(c) for c in schema.columns)
    with connect(config.source) as conn, conn.cursor() as cur:  # connect() reads in UTC, as verify does
        # With parameters (none), as verify runs them: the texts write a literal % as %%.
        cur.execute(f"SELECT {texts} FROM {qualified(database, 'full_types')} ORDER BY id", ())
        source = [[v.decode() if isinstance(v, bytes) else v for v in row] for row in cur.fetchall()]
    aliases = [f"_v{i}" for i in range(len(schema.columns))]
    typed = (
        ref.read(spark)
        .where("NOT _cdc_deleted")
        .orderBy("id")
        .select(*[F.col(quote_ident(c.name)).cast(c.spark_type).alias(v) for c, v in zip(schema.columns, aliases)])
    )
    silver = [
        list(r)
        for r in typed.select(*[F.expr(spark_text_sql(c, v)) for c, v in zip(schema.columns, aliases)]).collect()
    ]

    differing = {
        f"{c.name} {c.mysql_type}": {"source": [row[i] for row in source], "silver": [row[i] for row in silver]}
        for i, c in enumerate(schema.columns)
        if [row[i] for row in source] != [row[i] for row in silver]
    }
    assert differing == {}, "each column's text is the same on both sides, for both rows"
    assert [c.name for i, c in enumerate(schema.columns) if source[0][i] == source[1][i]] == [], (
        "and tells the two rows apart in every column"
    )
    nulls = [[c.name for i, c in enumerate(schema.columns) if row[i] is None] for row in source]
    assert nulls == [[], ["varchar_len0_c"]], "no value the rows were written with became NULL"


def test_full_types_verifies_clean_with_one_row_by_snapshot_and_one_by_the_binlog(full_types, spark, capsys):
    from binlake.contract.position import SNAPSHOT_ROW

    config, ref, database = full_types
    origin = {r["id"]: r["_cdc_seq"]["row"] for r in ref.read(spark).collect()}
    assert origin[1] == SNAPSHOT_ROW, "row 1 from the snapshot, row 2 from the binlog"
    assert origin[2] >= 0, "row 1 from the snapshot, row 2 from the binlog"

    cfg_file = next(Path(config.base_dir).glob("binlake*.yml"))
    capsys.readouterr()
    assert cli.main(["--config", str(cfg_file), "verify"]) == 0
    assert f"  {database}.full_types: 2 chunk(s), 2 rows, ok" in capsys.readouterr().out.splitlines()


def test_a_full_types_difference_on_either_side_is_found_and_repair_clears_it(full_types, mariadb, spark, capsys):
    config, ref, database = full_types
    cfg_file = next(Path(config.base_dir).glob("binlake*.yml"))
    # Silver: row 2's ZEROFILL decimal changes behind binlake's back. Source: row 1's ZEROFILL
    # tinyint changes with the binlog off for that session, so capture never hears of it.
    spark.sql(f"UPDATE {ref.sql} SET decimal_un_z_c = 1.5001 WHERE id = 2")
    mariadb.execute(
        "SET SESSION sql_log_bin = 0", "UPDATE full_types SET tiny_un_z_c = 254 WHERE id = 1", database=database
    )
    try:
        capsys.readouterr()
        assert cli.main(["--config", str(cfg_file), "verify"]) == 8
        errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
        assert errors == [
            f"error: verify: 2 chunk(s) differ between source and silver: {database}.full_types chunk 0 "
            f'[-inf, ["2"]): 1 row(s) on both sides, checksums differ; {database}.full_types chunk 1 [["2"], '
            "+inf): 1 row(s) on both sides, checksums differ: run binlake verify --repair to re-read only these chunks"
        ]

        assert cli.main(["--config", str(cfg_file), "verify", "--repair"]) == 0
        assert "repair: re-read 2 chunk(s) and verified again: clean" in capsys.readouterr().out
        live = {r["id"]: r for r in ref.read(spark).where("NOT _cdc_deleted").collect()}
        assert (live[1]["tiny_un_z_c"], live[2]["decimal_un_z_c"]) == (254, Decimal("1.5000"))
    finally:
        mariadb.execute(
            "SET SESSION sql_log_bin = 0", "UPDATE full_types SET tiny_un_z_c = 255 WHERE id = 1", database=database
        )


# HotSpot compiles no method longer than this many bytes of bytecode (-XX:+DontCompileHugeMethods,
# the default; Spark's spark.sql.codegen.hugeMethodLimit documents it): such a method runs interpreted.
HOTSPOT_HUGE_METHOD = 8000


def _whole_stage_method_sizes(frame) -> list[int]:
    """The largest method of each whole-stage code generation stage of ``frame``'s executed
    plan, in bytes of bytecode; -1 for a stage whose code does not compile."""
    jvm = frame.sparkSession._jvm
    debug = getattr(getattr(jvm.org.apache.spark.sql.execution.debug, "package$"), "MODULE$")
    stages = debug.codegenStringSeq(frame._jdf.queryExecution().executedPlan())
    return [stages.apply(i)._3().maxMethodCodeSize() for i in range(stages.size())]


def test_a_wide_tables_silver_side_runs_whole_stage_compiled_in_methods_hotspot_compiles(
    full_types, spark_with_code_generation
):
    from binlake.ops import verify

    spark = spark_with_code_generation
    config, _, database = full_types
    schema = _full_types_schema(config, database)
    assert len(schema.columns) == 59

    frame = verify._silver_stats_frame(spark, Lakehouse(config), schema, [(0, None, None)])
    assert [r["n"] for r in frame.collect()] == [2]
    sizes = _whole_stage_method_sizes(frame)
    assert sizes, "the query runs in whole-stage generated code"
    assert all(0 < size <= HOTSPOT_HUGE_METHOD for size in sizes), sizes
