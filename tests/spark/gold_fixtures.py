"""A hand-built lakehouse for gold tests: the bronze and silver tables gold reads, written
directly by the contract in binlake.contract.lakehouse (no MySQL, no capture, no silver job).

    lake = Lake(spark, tmp_path, checks={"shop.items": [{"column": "price", "between": [0, 100], "severity": "drop"}]})
    lake.add_table(ITEMS)
    lake.silver("shop", "items", [row(1, "pen", 2.5, seq=(3, 400, 0))])
    lake.snapshot("shop", "items", chunks=[((3, 100), (3, 200))])
    lake.heartbeat(3, 500, gtid="0-1-7", commit_ts="2026-11-01 08:00:00")
    lake.progress("shop", "items", 3, 500)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from delta_rollback import delta_versions, roll_back  # tests/delta_rollback.py

from binlake.bronze.tables import ensure_bronze_tables, record_schemas
from binlake.config import load_config_text
from binlake.contract.schemas import PROGRESS_SCHEMA, SILVER_METADATA_COLUMNS
from binlake.contract.tables import Lakehouse
from binlake.contract.types import Column, Kind, TableSchema

BINLOG = "mysql-bin.{:06d}"

_KINDS = {
    "int": dict(kind=Kind.INT, bits=32),
    "bigint": dict(kind=Kind.INT, bits=64),
    "string": dict(kind=Kind.STRING),
    "double": dict(kind=Kind.DOUBLE),
    "date": dict(kind=Kind.DATE),
}


def col(name: str, kind: str, nullable: bool = True, comment: str = "") -> Column:
    return Column(name=name, nullable=nullable, comment=comment, mysql_type=kind, **_KINDS[kind])


def table_schema(db: str, table: str, columns: Sequence[Column], key: Sequence[str], comment: str = "") -> TableSchema:
    return TableSchema(database=db, table=table, columns=tuple(columns), key=tuple(key), comment=comment)


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


class Lake:
    """One lakehouse directory with its config."""

    def __init__(
        self,
        spark,
        tmp_path: Path,
        tables: Sequence[str] = ("shop.*",),
        checks: dict | None = None,
        groups: dict | None = None,
        expectations: dict | None = None,
    ):
        self.spark = spark
        doc = {
            "source": {
                "host": "127.0.0.1",
                "port": 3306,
                "user": "cdc",
                "password": "pw",
                "server_id": 77,
                "tables": list(tables),
            },
            "lakehouse": {"path": str(tmp_path / "lakehouse")},
        }
        if checks:
            doc.setdefault("gold", {})["checks"] = checks
        if expectations:
            doc.setdefault("gold", {})["expectations"] = expectations
        if groups:
            doc.setdefault("gold", {})["groups"] = groups
        self.doc = doc
        self.config = load_config_text(yaml.safe_dump(doc))
        self.lh = Lakehouse(self.config)
        self.schemas: dict[tuple[str, str], TableSchema] = {}
        ensure_bronze_tables(spark, self.lh)
        self.lh.silver_progress.create_if_missing(spark, PROGRESS_SCHEMA)

    def with_checks(self, checks: dict, expectations: dict | None = None) -> Lake:
        """The same lakehouse with other gold.checks and gold.expectations (suite files by
        absolute path): a config change between runs."""
        other = object.__new__(Lake)
        other.__dict__.update(self.__dict__)
        doc = {
            "source": {
                "host": "127.0.0.1",
                "port": 3306,
                "user": "cdc",
                "password": "pw",
                "server_id": 77,
                "tables": list(self.config.source.tables),
            },
            "lakehouse": {"path": self.config.lakehouse.path},
            "gold": {"checks": checks, **({"expectations": expectations} if expectations else {})},
        }
        other.doc = doc
        other.config = load_config_text(yaml.safe_dump(doc))
        other.lh = Lakehouse(other.config)
        return other

    def config_file(self, path: Path) -> Path:
        """The config written as a binlake.yml, for commands run through the CLI."""
        path.write_text(yaml.safe_dump(self.doc))
        return path

    # -- bronze -----------------------------------------------------------------------
    def add_table(self, schema: TableSchema, at: tuple[int, int] = (1, 4)) -> None:
        self.schemas[(schema.database, schema.table)] = schema
        record_schemas(self.spark, self.lh, [(schema, at[0], at[1], None)])

    def heartbeat(self, file_index: int, pos: int, gtid: str | None = None, commit_ts: str | None = None) -> None:
        self.heartbeats([(file_index, pos, gtid, commit_ts)])

    def heartbeats(self, beats: Sequence[tuple[int, int, str | None, str | None]]) -> None:
        """Capture-batch heartbeats (file_index, pos, gtid, commit_ts), in one change-log commit."""
        from binlake.contract.changelog import CHANGELOG_SCHEMA

        rows = [
            (
                None,
                None,
                "heartbeat",
                fi,
                pos,
                0,
                BINLOG.format(fi),
                None,
                None,
                ts(commit) if commit else None,
                gtid,
                1,
                None,
                None,
                dt.datetime(2026, 11, 1),
            )
            for fi, pos, gtid, commit in beats
        ]
        self.lh.changelog.save(self.spark.createDataFrame(rows, CHANGELOG_SCHEMA).write.format("delta").mode("append"))

    def snapshot(
        self,
        db: str,
        table: str,
        snapshot_id: str = "snap1",
        chunks: Sequence[tuple[tuple[int, int], tuple[int, int]] | None] = (((1, 10), (1, 20)),),
        planned_at: str = "2026-11-01 07:00:00",
    ) -> None:
        """Plan len(chunks) chunks; a chunk given as (lw, hw) is complete, None is not."""
        from binlake.contract.schemas import SNAPSHOT_PLAN_SCHEMA

        key = list(self.schemas[(db, table)].key)
        plan = [(snapshot_id, db, table, i, key, None, None, "v1", ts(planned_at)) for i in range(len(chunks))]
        self.lh.snapshot_plan.save(
            self.spark.createDataFrame(plan, SNAPSHOT_PLAN_SCHEMA).write.format("delta").mode("append")
        )
        done = [
            (
                snapshot_id,
                db,
                table,
                i,
                "a1",
                key,
                None,
                None,
                BINLOG.format(lw[0]),
                lw[0],
                lw[1],
                BINLOG.format(hw[0]),
                hw[0],
                hw[1],
                0,
                "x",
                "v1",
                ts(planned_at),
                "typed",
                0,
            )
            for i, c in enumerate(chunks)
            if c is not None
            for lw, hw in [c]
        ]
        if done:
            self.complete_chunks(done)

    def complete_chunks(self, rows: list[tuple]) -> None:
        from binlake.contract.schemas import SNAPSHOT_CHUNKS_SCHEMA

        self.lh.snapshot_chunks.save(
            self.spark.createDataFrame(rows, SNAPSHOT_CHUNKS_SCHEMA).write.format("delta").mode("append")
        )

    def finish_chunk(
        self, db: str, table: str, snapshot_id: str, chunk_id: int, lw: tuple[int, int], hw: tuple[int, int]
    ) -> None:
        key = list(self.schemas[(db, table)].key)
        self.complete_chunks(
            [
                (
                    snapshot_id,
                    db,
                    table,
                    chunk_id,
                    "a1",
                    key,
                    None,
                    None,
                    BINLOG.format(lw[0]),
                    lw[0],
                    lw[1],
                    BINLOG.format(hw[0]),
                    hw[0],
                    hw[1],
                    0,
                    "x",
                    "v1",
                    ts("2026-11-01 07:30:00"),
                    "typed",
                    0,
                )
            ]
        )

    def chunks_version(self) -> int:
        return int(self.lh.snapshot_chunks.delta(self.spark).history(1).first()["version"])

    # -- silver -----------------------------------------------------------------------
    def silver_ddl(self, db: str, table: str) -> str:
        schema = self.schemas[(db, table)]
        cols = [f"`{c.name}` {c.spark_type}" for c in schema.columns]
        cols += [f"{name} {typ}" for name, typ, _ in SILVER_METADATA_COLUMNS]
        return ", ".join(cols)

    def silver(self, db: str, table: str, rows: Sequence[dict[str, Any]]) -> int:
        """Replace silver ``db.table`` with these rows (typed values plus _cdc_* keys); returns its version.

        A row dict needs ``seq`` (file_index, pos, row); ``deleted`` (default False), ``op`` and
        ``commit_ts`` are optional.
        """
        schema = self.schemas[(db, table)]
        data = []
        for r in rows:
            values = [r.get(c.name) for c in schema.columns]
            fi, pos, rw = r["seq"]
            commit = r.get("commit_ts")
            data.append(
                (
                    *values,
                    (fi, pos, rw),
                    r.get("op", "delete" if r.get("deleted") else "insert"),
                    bool(r.get("deleted", False)),
                    ts(commit) if commit else None,
                )
            )
        df = self.spark.createDataFrame(data, self.silver_ddl(db, table))
        ref = self.lh.silver(db, table)
        ref.save(df.write.format("delta").mode("overwrite"))
        return int(ref.delta(self.spark).history(1).first()["version"])

    def progress(
        self,
        db: str,
        table: str,
        file_index: int,
        pos: int,
        chunks_version: int | None = -1,
        also: Sequence[tuple[str, str]] = (),
        stopped: str | None = None,
    ) -> None:
        """Silver has applied the change log up to (file_index, pos) for db.table (and the
        ``also`` tables); by default also every manifest row committed so far
        (chunks_version = the manifest's current version)."""
        if chunks_version == -1:
            chunks_version = self.chunks_version()
        # Appended rows (silver overwrites, this appends): a later one must win the tie on position.
        self._progress_rows = getattr(self, "_progress_rows", 0) + 1
        at = dt.datetime(2026, 11, 1, 9) + dt.timedelta(milliseconds=self._progress_rows)
        rows = [
            (d, t, 0, chunks_version, BINLOG.format(file_index), file_index, pos, 0, at, None, stopped, None)
            for d, t in [(db, table), *also]
        ]
        df = self.spark.createDataFrame(rows, PROGRESS_SCHEMA)
        self.lh.silver_progress.save(df.write.format("delta").mode("append"))

    # -- sharing one lake between tests (tests/delta_rollback.py) --------------------------
    def checkpoint(self) -> dict[Path, int]:
        """Every Delta table's current version, for :meth:`rollback`."""
        return delta_versions(Path(self.config.lakehouse_root))

    def rollback(self, checkpoint: dict[Path, int]) -> None:
        """Undo what a test did: changed tables back at their versions, new tables removed."""
        roll_back(self.spark, Path(self.config.lakehouse_root), checkpoint)

    # -- gold -------------------------------------------------------------------------
    def gold(self, db: str, table: str):
        return self.lh.gold(db, table).read(self.spark)

    def gold_version(self, db: str, table: str) -> int:
        return int(self.lh.gold(db, table).delta(self.spark).history(1).first()["version"])

    def publish_log(self):
        return self.lh.publish_log.read(self.spark)
