"""Bronze written by hand, exactly as the contract in binlake.contract.lakehouse says capture and
snapshot write it, so silver can be specified without a MySQL server.

    b = Bronze(spark, tmp_path)
    b.schema(ORDERS)                                       # schema_history entry
    b.commit(b.insert(ORDERS, (1, 100, 0), id="1", v="a"))  # one capture commit + heartbeat
    b.chunk(ORDERS, [{"id": "1", "v": "a"}], lw=(1, 50))     # one snapshot chunk + manifest

Snapshot chunks are written typed, as the snapshot writes them now, or with ``form="map"`` as
row images in ``snapshot_rows``, as binlake wrote them before typed snapshot rows (silver reads
both).
"""

from __future__ import annotations

import copy
import itertools
import json
from datetime import datetime
from pathlib import Path

from delta_rollback import delta_versions, roll_back  # tests/delta_rollback.py

from binlake.bronze.tables import ensure_bronze_tables
from binlake.config import load_config_text
from binlake.contract.changelog import CHANGELOG_SCHEMA, ChangeRow, heartbeat_row
from binlake.contract.position import BinlogPosition
from binlake.contract.schemas import (
    SCHEMA_HISTORY_SCHEMA,
    SNAPSHOT_CHUNKS_SCHEMA,
    SNAPSHOT_ROWS_SCHEMA,
    TYPED_ROWS,
    ManifestRow,
)
from binlake.contract.tables import Lakehouse
from binlake.contract.types import Column, Kind, TableSchema

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
    return TableSchema(
        database=db, table=tbl, columns=tuple(columns), key=tuple(key), comment=comment, foreign_keys=tuple(fks)
    )


class Bronze:
    """Appends contract-shaped rows to real bronze Delta tables."""

    def __init__(self, spark, lakehouse_path, tables=("shop.*",)):
        self.spark = spark
        self.config = make_config(lakehouse_path, tables)
        self.lh = Lakehouse(self.config)
        ensure_bronze_tables(spark, self.lh)
        self._current: dict[str, TableSchema] = {}
        self._versions: dict[str, TableSchema] = {}
        self._chunk_ids = itertools.count()
        self.heartbeat_pos = (0, 0)

    # schema_history -------------------------------------------------------------------
    def schema(self, schema: TableSchema, at=(1, 4), ddl: str | None = None) -> TableSchema:
        self._current[schema.name] = schema
        self._versions[schema.version()] = schema
        row = (schema.database, schema.table, schema.version(), at[0], at[1], ddl, schema.to_json(), T0)
        self.lh.schema_history.save(
            self.spark.createDataFrame([row], SCHEMA_HISTORY_SCHEMA).write.format("delta").mode("append")
        )
        return schema

    def version(self, name: str) -> str:
        return self._current[name].version()

    # changelog --------------------------------------------------------------------------
    # Row images are FULL (binlog_row_image=FULL): a column a test leaves out is NULL. With
    # partial_image=True an image holds only the given columns, as a writer session with
    # binlog_row_image=MINIMAL or NOBLOB logs them (a missing column was not logged).
    def _rec(self, schema, op, seq, before=None, after=None, ddl=None, version=None, partial_image=False):
        fi, pos, row = seq
        version = version or self.version(schema.name)
        if not partial_image:
            columns = [c.name for c in self._versions.get(version, schema).columns]
            before, after = (None if img is None else {c: None for c in columns} | img for img in (before, after))
        return ChangeRow(
            db=schema.database,
            table=schema.table,
            op=op,
            file_index=fi,
            pos=pos,
            row=row,
            binlog_file=f"mysql-bin.{fi:06d}",
            before=before,
            after=after,
            commit_ts=T0,
            gtid=None,
            server_id=1,
            schema_version=version,
            ddl=ddl,
            captured_at=T0,
        )

    def insert(self, schema, seq, partial_image=False, **after):
        return self._rec(schema, "insert", seq, after=_texts(after), partial_image=partial_image)

    def update(self, schema, seq, before: dict, after: dict, partial_image=False):
        return self._rec(schema, "update", seq, before=_texts(before), after=_texts(after), partial_image=partial_image)

    def delete(self, schema, seq, partial_image=False, **before):
        return self._rec(schema, "delete", seq, before=_texts(before), partial_image=partial_image)

    def statement(self, schema, seq, sql: str, whole_database=False):
        """A statement-format change (binlog_format=STATEMENT or MIXED) of the table, or, with
        ``whole_database``, of its database where capture could not tell the table."""
        rec = self._rec(schema, "statement", seq, ddl=sql)
        return rec._replace(table=None, schema_version=None) if whole_database else rec

    def truncate(self, schema, seq):
        return self._rec(schema, "truncate", seq)

    def ddl(self, schema, seq, text):
        return self._rec(schema, "ddl", seq, ddl=text)

    def commit(self, *records, heartbeat=None) -> int:
        """One capture commit: the records plus the heartbeat that ends it; returns its version."""
        recs = list(records)
        if heartbeat is None:
            top = max([(r.file_index, r.pos) for r in recs] + [self.heartbeat_pos])
            heartbeat = (top[0], top[1] + 1)
        self.heartbeat_pos = max(self.heartbeat_pos, tuple(heartbeat))
        fi, pos = heartbeat
        recs.append(heartbeat_row(BinlogPosition(f"mysql-bin.{fi:06d}", pos), captured_at=T0))
        self.lh.changelog.save(self.spark.createDataFrame(recs, CHANGELOG_SCHEMA).write.format("delta").mode("append"))
        return self.lh.changelog.latest_version(self.spark)  # Delta's log object: no Spark job

    # sharing one lakehouse between tests (tests/delta_rollback.py) ---------------------------
    def checkpoint(self) -> tuple:
        """Every Delta table's version and this writer's own state, for :meth:`rollback`."""
        return (
            delta_versions(Path(self.config.lakehouse_root)),
            dict(self._current),
            copy.copy(self._chunk_ids),
            self.heartbeat_pos,
            self.config,
        )

    def rollback(self, checkpoint: tuple) -> None:
        """Undo what a test did, in the lakehouse and in this writer."""
        versions, current, chunk_ids, self.heartbeat_pos, self.config = checkpoint
        self._current, self._chunk_ids = dict(current), copy.copy(chunk_ids)
        self.lh = Lakehouse(self.config)
        roll_back(self.spark, Path(self.config.lakehouse_root), versions)

    # snapshot -----------------------------------------------------------------------------
    def plan(self, schema, snapshot_id, bounds, version=None):
        """The plan of a snapshot: chunk i is ``[bounds[i], bounds[i + 1])``, ``bounds`` from
        None to None (key values as lists)."""
        from binlake.contract.schemas import SNAPSHOT_PLAN_SCHEMA

        enc = lambda k: None if k is None else json.dumps([str(x) for x in k])  # noqa: E731
        rows = [
            (
                snapshot_id,
                schema.database,
                schema.table,
                i,
                list(schema.key),
                enc(lo),
                enc(hi),
                version or self.version(schema.name),
                T0,
            )
            for i, (lo, hi) in enumerate(itertools.pairwise(bounds))
        ]
        self.lh.snapshot_plan.save(
            self.spark.createDataFrame(rows, SNAPSHOT_PLAN_SCHEMA).write.format("delta").mode("append")
        )

    def chunk(
        self,
        schema,
        rows,
        lw,
        hw=None,
        start=None,
        end=None,
        snapshot_id="snap1",
        manifest=True,
        chunk_id=None,
        attempt_id="a1",
        version=None,
        form="typed",
    ):
        """Rows read by one chunk [start, end) plus its marker; the manifest row last."""
        chunk_id = next(self._chunk_ids) if chunk_id is None else chunk_id
        hw = hw or (lw[0], lw[1] + 10)
        version = version or self.version(schema.name)
        if form == "typed":
            zero = self._typed_chunk(
                self._versions.get(version, schema), rows, lw, hw, snapshot_id, chunk_id, attempt_id
            )
            if manifest:
                self.manifest(
                    schema, chunk_id, lw, hw, start, end, len(rows), snapshot_id, attempt_id, version, TYPED_ROWS, zero
                )
            return chunk_id
        data = [
            (snapshot_id, schema.database, schema.table, chunk_id, attempt_id, lw[0], lw[1], version, _texts(r), None)
            for r in rows
        ]
        data.append(
            (
                snapshot_id,
                schema.database,
                schema.table,
                chunk_id,
                attempt_id,
                lw[0],
                lw[1],
                version,
                None,
                {"hw_file": f"mysql-bin.{hw[0]:06d}", "hw_pos": str(hw[1]), "row_count": str(len(rows))},
            )
        )
        self.lh.snapshot_rows.save(
            self.spark.createDataFrame(data, SNAPSHOT_ROWS_SCHEMA).write.format("delta").mode("append")
        )
        if manifest:
            self.manifest(schema, chunk_id, lw, hw, start, end, len(rows), snapshot_id, attempt_id, version)
        return chunk_id

    def _typed_chunk(self, schema, rows, lw, hw, snapshot_id, chunk_id, attempt_id) -> int:
        """The chunk's rows typed by silver's decoder, as the snapshot writes them; returns the
        zero dates they held (the snapshot counts them per chunk)."""
        from binlake.bronze.snapshot import create_snapshot_table
        from binlake.contract.sql import quote_ident, spark_string
        from binlake.contract.types import spark_decode_sql

        ref = self.lh.snapshot_table(schema.database, schema.table, snapshot_id)
        if not ref.exists(self.spark):
            create_snapshot_table(self.spark, ref, schema, snapshot_id)
        stats = {
            "snapshot_id": snapshot_id,
            "lw_file": f"mysql-bin.{lw[0]:06d}",
            "lw_file_index": str(lw[0]),
            "lw_pos": str(lw[1]),
            "hw_file": f"mysql-bin.{hw[0]:06d}",
            "hw_pos": str(hw[1]),
            "row_count": str(len(rows)),
        }
        texts = [(chunk_id, attempt_id, _texts(r), None) for r in rows] + [(chunk_id, attempt_id, None, stats)]
        df = self.spark.createDataFrame(
            texts,
            "_cdc_chunk_id INT, _cdc_attempt_id STRING, img MAP<STRING,STRING>, _cdc_chunk_stats MAP<STRING,STRING>",
        ).selectExpr(
            *[
                f"{spark_decode_sql(c, f'try_element_at(img, {spark_string(c.name)})')} AS {quote_ident(c.name)}"
                for c in schema.columns
            ],
            "_cdc_chunk_id",
            "_cdc_attempt_id",
            "_cdc_chunk_stats",
        )
        ref.save(df.write.format("delta").mode("append"))
        temporal = {c.name for c in schema.columns if c.kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP)}
        return sum(1 for r in rows for k, v in r.items() if k in temporal and str(v).startswith("0000-"))

    def manifest(
        self,
        schema,
        chunk_id,
        lw,
        hw,
        start,
        end,
        row_count,
        snapshot_id="snap1",
        attempt_id="a1",
        version=None,
        row_format=None,
        zero_dates=0,
    ):
        enc = lambda b: None if b is None else json.dumps([str(x) for x in b])  # noqa: E731
        row = ManifestRow(
            snapshot_id=snapshot_id,
            db=schema.database,
            table=schema.table,
            chunk_id=chunk_id,
            attempt_id=attempt_id,
            key_columns=list(schema.key),
            start_key=enc(start),
            end_key=enc(end),
            lw_file=f"mysql-bin.{lw[0]:06d}",
            lw_file_index=lw[0],
            lw_pos=lw[1],
            hw_file=f"mysql-bin.{hw[0]:06d}",
            hw_file_index=hw[0],
            hw_pos=hw[1],
            row_count=row_count,
            checksum="x",
            schema_version=version or self.version(schema.name),
            committed_at=T0,
            row_format=row_format,
            zero_dates=zero_dates if row_format else None,
        )
        self.lh.snapshot_chunks.save(
            self.spark.createDataFrame([row], SNAPSHOT_CHUNKS_SCHEMA).write.format("delta").mode("append")
        )


def _texts(values: dict) -> dict:
    return {k: None if v is None else str(v) for k, v in values.items()}
