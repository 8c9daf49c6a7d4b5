"""Every mapped type (docs/architecture.md, "Types") gives one canonical text whether read
by snapshot or binlog.

The same rows are read by a real snapshot (the Spark data source's chunk SELECT) and from
the binlog by capture; both must give identical texts. The change log keeps them; the snapshot
types its texts on their way into bronze with silver's own decoder, so its typed rows must
equal the binlog's texts decoded, value for value.
"""

from __future__ import annotations

from mysql_types import COLUMNS, EDGE_ROW, NULL_ROW, ODD_ROW  # tests/mysql_types.py

from binlake.bronze.capture import run_capture
from binlake.bronze.snapshot import run_snapshot
from binlake.contract.sql import qualified, quote_ident, spark_string
from binlake.contract.tables import Lakehouse
from binlake.contract.types import TableSchema, encode_value, spark_decode_sql
from binlake.source.catalog import table_schema
from binlake.source.mysql import connect, query


def test_every_type_decodes_to_the_snapshot_text(spark, mariadb, database, make_config):
    mariadb.execute(f"CREATE TABLE `{database}`.types ({COLUMNS})")
    config = make_config([f"{database}.*"], capture={"startup": "latest"})
    run_capture(spark, config)
    # Zero dates need a permissive sql_mode; the non-UTC session zone must not shift TIMESTAMPs.
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '+05:30'",
        f"INSERT INTO `{database}`.types VALUES {EDGE_ROW}, {NULL_ROW}, {ODD_ROW}",
    )
    run_snapshot(spark, config)
    snapshot_images = _reader_texts(spark, config, database)
    assert sorted(snapshot_images) == [1, 2, 3]
    mariadb.execute(f"DELETE FROM `{database}`.types WHERE id = 1")
    run_capture(spark, config)

    with connect(config.source) as conn:
        schema = table_schema(conn, config.source, database, "types")
        rows = query(conn, f"SELECT * FROM {qualified(database, 'types')} ORDER BY id")
    expected = {r["id"]: {c.name: encode_value(c, r[c.name]) for c in schema.columns} for r in rows}

    log = (
        Lakehouse(config)
        .changelog.read(spark)
        .where(f"db = '{database}'")
        .orderBy("file_index", "pos", "row")
        .collect()
    )
    inserts = {int(r.after["id"]): dict(r.after) for r in log if r.op == "insert"}
    assert sorted(inserts) == [1, 2, 3]
    for key in (1, 2, 3):
        assert snapshot_images[key] == inserts[key], f"row {key}: snapshot and binlog texts differ"
    for key in (2, 3):
        for name, text in expected[key].items():
            if name != "f":  # the text protocol prints FLOAT with 6 digits; see exact_value_sql
                assert inserts[key][name] == text, f"row {key} column {name}"
    assert inserts[3]["f"] == repr(0.48237514495849609375), "FLOAT keeps all float32 bits"
    assert all(v is None for k, v in inserts[2].items() if k != "id"), "NULL everywhere stays NULL"

    # Row 1 is gone from the source: its insert and delete images must agree with each other
    # and with the texts the snapshot path gives for the same literal values.
    deletes = [r for r in log if r.op == "delete"]
    assert len(deletes) == 1
    assert dict(deletes[0].before) == inserts[1]
    edge = inserts[1]
    assert edge["biu"] == "18446744073709551615"
    assert edge["bi"] == "-9223372036854775808"
    assert edge["d65"] == "-12345678901234567890123456789012345.123456789012345678901234567890"
    assert edge["dt"] == "0000-00-00"
    assert edge["dtm"] == "0000-00-00 00:00:00"
    assert edge["ts0"] == "0000-00-00 00:00:00"
    assert edge["dtm6"] == "2024-02-29 23:59:59.999999"
    assert edge["ts3"] == "2024-03-30T20:00:00.123000Z", "+05:30 session time converted to the UTC instant"
    assert edge["tm"] == "-838:59:59"
    assert edge["tm6"] == "-12:34:56.000001"
    assert edge["vc"] == "emoji \U0001f600 \u00fc \u4e2d"
    assert edge["e"] == "it's"
    assert edge["st"] == "x,z"
    assert edge["b64"] == "-1"
    assert edge["b1"] == "1"
    assert edge["y"] == "2155"
    assert edge["bl"] == "3q2+7w=="
    assert edge["f"] == repr(3.141590118408203)

    # Bronze's typed snapshot rows are the binlog's texts through silver's decoder.
    decode = [
        f"{spark_decode_sql(c, f'after[{spark_string(c.name)}]')} AS {quote_ident(c.name)}" for c in schema.columns
    ]
    binlog_typed = {
        r["id"]: _values(r)
        for r in Lakehouse(config)
        .changelog.read(spark)
        .where(f"db = '{database}' AND op = 'insert'")
        .selectExpr(*decode)
        .collect()
    }
    [typed] = Lakehouse(config).snapshot_tables(spark, database, "types").values()
    names = [c.name for c in schema.columns]
    snapshot_typed = {
        r["id"]: _values(r) for r in typed.read(spark).where("_cdc_chunk_stats IS NULL").select(*names).collect()
    }
    assert sorted(snapshot_typed) == [1, 2, 3]
    for key in (1, 2, 3):
        assert snapshot_typed[key] == binlog_typed[key], f"row {key}: typed snapshot and decoded binlog differ"

    # The schema version from TABLE_MAP metadata equals the information_schema one.
    assert {r.schema_version for r in log if r.op in ("insert", "delete")} == {schema.version()}
    history = (
        Lakehouse(config)
        .schema_history.read(spark)
        .where(f"db = '{database}' AND schema_version = '{schema.version()}'")
        .collect()
    )
    assert history, "the binlog schema version is recorded in schema_history"
    from_binlog = TableSchema.from_json(history[0].schema_json)
    assert [c.signature() for c in from_binlog.columns] == [c.signature() for c in schema.columns]
    assert from_binlog.key == schema.key == ("id",)


def _values(row) -> dict:
    """A collected row's values, comparable across reads (NaN equals NaN as its repr)."""
    return {k: repr(v) for k, v in row.asDict().items()}


def _reader_texts(spark, config, database) -> dict[int, dict]:
    """The snapshot reader's canonical texts of the whole table, by id: what bronze types."""
    from binlake.bronze.snapshot_source import FORMAT, SnapshotDataSource, reader_options, text_column

    with connect(config.source) as conn:
        schema = table_schema(conn, config.source, database, "types")
    chunk = {
        "snapshot_id": "texts",
        "db": database,
        "table": "types",
        "chunk_id": 0,
        "start_key": None,
        "end_key": None,
        "schema_version": schema.version(),
    }
    spark.dataSource.register(SnapshotDataSource)
    opts = reader_options(config.source, [chunk], {schema.name: schema.to_json()}, "texts")
    rows = spark.read.format(FORMAT).options(**opts).load().where("_cdc_chunk_stats IS NULL").collect()
    images = [{c.name: r[text_column(i)] for i, c in enumerate(schema.columns)} for r in rows]
    return {int(img["id"]): img for img in images}
