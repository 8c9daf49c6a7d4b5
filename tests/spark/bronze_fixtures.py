"""Bronze written by hand, exactly as the contract in binlake.lakehouse says capture and
snapshot write it, so silver can be specified without a MySQL server.

    b = Bronze(spark, tmp_path)
    b.schema(ORDERS)                                       # schema_history entry
    b.commit(b.insert(ORDERS, (1, 100, 0), id="1", v="a"))  # one capture commit + heartbeat
    b.chunk(ORDERS, [{"id": "1", "v": "a"}], lw=(1, 50))     # one snapshot chunk + manifest
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime

from binlake.bronze.tables import ensure_bronze_tables
from binlake.config import load_config_text
from binlake.lakehouse import (
    CHANGELOG_SCHEMA,
    SCHEMA_HISTORY_SCHEMA,
    SNAPSHOT_CHUNKS_SCHEMA,
    SNAPSHOT_ROWS_SCHEMA,
    Lakehouse,
)
from binlake.source.types import Column, Kind, TableSchema

T0 = datetime(2026, 11, 1, 12, 0, 0)


def make_config(lakehouse_path, tables=("shop.*",)):
    tables_yaml = ", ".join(f'"{t}"' for t in tables)
    return load_config_text(
        "source: {host: 127.0.0.1, port: 3306, user: cdc, password: pw, server_id: 77, tables: [" + tables_yaml + "]}\n"
        f"lakehouse: {{path: '{lakehouse_path}'}}\n"
    )


def col(name, kind=Kind.INT, **kw) -> Column:
    if kind in (Kind.INT, Kind.UINT) and "bits" not in kw:
        kw["bits"] = 32
    return Column(name=name, kind=kind, **kw)


def table(name: str, columns, key=("id",), comment="", fks=()) -> TableSchema:
    db, tbl = name.split(".")
    return TableSchema(database=db, table=tbl, columns=tuple(columns), key=tuple(key), comment=comment,
                       foreign_keys=tuple(fks))


class Bronze:
    """Appends contract-shaped rows to real bronze Delta tables."""

    def __init__(self, spark, lakehouse_path, tables=("shop.*",)):
        self.spark = spark
        self.config = make_config(lakehouse_path, tables)
        self.lh = Lakehouse(self.config)
        ensure_bronze_tables(spark, self.lh)
        self._current: dict[str, TableSchema] = {}
        self._chunk_ids = itertools.count()
        self.heartbeat_pos = (0, 0)

    # schema_history -------------------------------------------------------------------
    def schema(self, schema: TableSchema, at=(1, 4), ddl: str | None = None) -> TableSchema:
        self._current[schema.name] = schema
        row = (schema.database, schema.table, schema.version(), at[0], at[1], ddl, schema.to_json(), T0)
        self.lh.schema_history.save(
            self.spark.createDataFrame([row], SCHEMA_HISTORY_SCHEMA).write.format("delta").mode("append"))
        return schema

    def version(self, name: str) -> str:
        return self._current[name].version()

    # changelog --------------------------------------------------------------------------
    def _rec(self, schema, op, seq, before=None, after=None, ddl=None, version=None):
        fi, pos, row = seq
        return (schema.database, schema.table, op, fi, pos, row, f"mysql-bin.{fi:06d}", before, after,
                T0, None, 1, version or self.version(schema.name), ddl, T0)

    def insert(self, schema, seq, **after):
        return self._rec(schema, "insert", seq, after=_texts(after))

    def update(self, schema, seq, before: dict, after: dict):
        return self._rec(schema, "update", seq, before=_texts(before), after=_texts(after))

    def delete(self, schema, seq, **before):
        return self._rec(schema, "delete", seq, before=_texts(before))

    def truncate(self, schema, seq):
        return self._rec(schema, "truncate", seq)

    def ddl(self, schema, seq, text):
        return self._rec(schema, "ddl", seq, ddl=text)

    def commit(self, *records, heartbeat=None) -> int:
        """One capture commit: the records plus the heartbeat that ends it; returns its version."""
        recs = list(records)
        if heartbeat is None:
            top = max([(r[3], r[4]) for r in recs] + [self.heartbeat_pos])
            heartbeat = (top[0], top[1] + 1)
        self.heartbeat_pos = max(self.heartbeat_pos, tuple(heartbeat))
        fi, pos = heartbeat
        recs.append((None, None, "heartbeat", fi, pos, 0, f"mysql-bin.{fi:06d}", None, None, T0, None, 1, None, None, T0))
        self.lh.changelog.save(self.spark.createDataFrame(recs, CHANGELOG_SCHEMA).write.format("delta").mode("append"))
        return self.lh.changelog.delta(self.spark).history(1).first()["version"]

    # snapshot -----------------------------------------------------------------------------
    def chunk(self, schema, rows, lw, hw=None, start=None, end=None, snapshot_id="snap1", manifest=True,
              chunk_id=None, attempt_id="a1", version=None):
        """Rows read by one chunk [start, end) plus its marker; the manifest row last."""
        chunk_id = next(self._chunk_ids) if chunk_id is None else chunk_id
        hw = hw or (lw[0], lw[1] + 10)
        version = version or self.version(schema.name)
        data = [(snapshot_id, schema.database, schema.table, chunk_id, attempt_id, lw[0], lw[1], version,
                 _texts(r), None) for r in rows]
        data.append((snapshot_id, schema.database, schema.table, chunk_id, attempt_id, lw[0], lw[1], version, None,
                     {"hw_file": f"mysql-bin.{hw[0]:06d}", "hw_pos": str(hw[1]), "row_count": str(len(rows))}))
        self.lh.snapshot_rows.save(
            self.spark.createDataFrame(data, SNAPSHOT_ROWS_SCHEMA).write.format("delta").mode("append"))
        if manifest:
            self.manifest(schema, chunk_id, lw, hw, start, end, len(rows), snapshot_id, attempt_id, version)
        return chunk_id

    def manifest(self, schema, chunk_id, lw, hw, start, end, row_count, snapshot_id="snap1", attempt_id="a1",
                 version=None):
        enc = lambda b: None if b is None else json.dumps([str(x) for x in b])  # noqa: E731
        row = (snapshot_id, schema.database, schema.table, chunk_id, attempt_id, list(schema.key), enc(start), enc(end),
               f"mysql-bin.{lw[0]:06d}", lw[0], lw[1], f"mysql-bin.{hw[0]:06d}", hw[0], hw[1], row_count, "x",
               version or self.version(schema.name), T0)
        self.lh.snapshot_chunks.save(
            self.spark.createDataFrame([row], SNAPSHOT_CHUNKS_SCHEMA).write.format("delta").mode("append"))


def _texts(values: dict) -> dict:
    return {k: None if v is None else str(v) for k, v in values.items()}
