"""``binlake-snapshot``: a Spark Python Data Source whose partitions are snapshot chunks.

Each partition reads one chunk on an executor: low watermark (``SHOW MASTER STATUS``), one
autocommit SELECT of the key range (a consistent read, no locks), high watermark. It
yields the chunk's data rows and then one marker row (``row`` NULL) whose ``chunk_stats``
hold ``lw_file``, ``hw_file``, ``hw_pos``, ``row_count`` and ``checksum`` (see
:func:`row_hash`). The schema is :data:`binlake.lakehouse.SNAPSHOT_ROWS_SCHEMA`.

The reader keeps no state between partitions and pickles: everything a partition needs is
in the partition object or in the (string) options. The password travels only under the
option key ``password``, which Spark's ``spark.redaction.regex`` masks in plan text.

Example (the driver code in :mod:`binlake.bronze.snapshot` does this per wave)::

    spark.dataSource.register(SnapshotDataSource)
    df = spark.read.format("binlake-snapshot").options(**reader_options(...)).load()
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from binlake.lakehouse import SNAPSHOT_ROWS_SCHEMA

ER_BAD_FIELD_ERROR = 1054  # a planned column no longer exists

FORMAT = "binlake-snapshot"
_MASK64 = (1 << 64) - 1
# How long a reader waits on a test barrier before giving up (testing only).
_BARRIER_TIMEOUT_S = 60.0


def row_hash(row: Mapping[str, str | None]) -> int:
    """A stable 64-bit hash of one encoded row (column name -> canonical text or None).

    Independent of column order. ``verify`` hashes the source's rows the same way, so a
    chunk's checksum compares across the source, bronze and silver.
    """
    data = json.dumps(sorted(row.items()), separators=(",", ":"), ensure_ascii=True)
    return int.from_bytes(hashlib.blake2b(data.encode("ascii"), digest_size=8).digest(), "big")


def combine_checksum(total: int, row: Mapping[str, str | None]) -> int:
    """Add one row to an order-independent checksum: the sum of row hashes mod 2**64."""
    return (total + row_hash(row)) & _MASK64


def chunk_checksum(rows: Iterator[Mapping[str, str | None]]) -> str:
    """The checksum of a whole chunk as stored in ``chunk_stats`` and the manifest (decimal text)."""
    total = 0
    for row in rows:
        total = combine_checksum(total, row)
    return str(total)


class ChunkPartition(InputPartition):
    """One chunk to read: picklable, plain values only."""

    def __init__(self, snapshot_id: str, db: str, table: str, chunk_id: int,
                 start_key: str | None, end_key: str | None, schema_version: str):
        self.snapshot_id = snapshot_id
        self.db = db
        self.table = table
        self.chunk_id = chunk_id
        self.start_key = start_key
        self.end_key = end_key
        self.schema_version = schema_version

    def __repr__(self) -> str:
        return f"ChunkPartition({self.db}.{self.table}#{self.chunk_id})"


def reader_options(source, chunks: Sequence[dict], schemas: Mapping[str, str], attempt_id: str,
                   barrier_dir: str | None = None) -> dict[str, str]:
    """Options for one read: chunks (dicts with snapshot_id, db, table, chunk_id, start_key,
    end_key, schema_version), table schemas as JSON by ``db.table``, and the connection."""
    opts = {
        "source": json.dumps({
            "host": source.host, "port": source.port, "user": source.user,
            "connect_timeout": source.connect_timeout,
            "tls": {"ca": source.tls.ca, "cert": source.tls.cert, "key": source.tls.key,
                    "verify_identity": source.tls.verify_identity},
        }),
        # Spark redacts option values whose key matches spark.redaction.regex ((?i)secret|password|...).
        "password": source.password.reveal(),
        "chunks": json.dumps(list(chunks), separators=(",", ":")),
        "schemas": json.dumps(dict(schemas), separators=(",", ":")),
        "attempt_id": attempt_id,
    }
    if barrier_dir:
        opts["testing.barrier_dir"] = barrier_dir
    return opts


class SnapshotDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SNAPSHOT_ROWS_SCHEMA

    def reader(self, schema) -> "SnapshotReader":
        return SnapshotReader(dict(self.options))


class SnapshotReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]):
        for key in ("source", "password", "chunks", "schemas", "attempt_id"):
            if key not in options:
                raise ValueError(f"{FORMAT} needs the option {key!r}")
        self.options = dict(options)

    def partitions(self) -> list[ChunkPartition]:
        return [
            ChunkPartition(c["snapshot_id"], c["db"], c["table"], int(c["chunk_id"]), c.get("start_key"),
                           c.get("end_key"), c["schema_version"])
            for c in json.loads(self.options["chunks"])
        ]

    def read(self, partition: ChunkPartition) -> Iterator[tuple]:
        yield from read_chunk(self.options, partition)


def _source_config(options: Mapping[str, str]):
    from binlake.config import Secret, SourceConfig, TlsConfig

    s = json.loads(options["source"])
    tls = s.get("tls") or {}
    return SourceConfig(
        host=s["host"], port=int(s["port"]), user=s["user"], password=Secret(options["password"]),
        # Only the connection settings matter on an executor; these two are required fields.
        server_id=1, tables=("_._",),
        tls=TlsConfig(ca=tls.get("ca"), cert=tls.get("cert"), key=tls.get("key"),
                      verify_identity=tls.get("verify_identity", True)),
        connect_timeout=int(s.get("connect_timeout", 10)),
    )


def _barrier(options: Mapping[str, str], p: ChunkPartition, stage: str) -> None:
    """Testing only: announce ``stage`` with a file, then wait until the test releases it."""
    directory = options.get("testing.barrier_dir")
    if not directory:
        return
    base = os.path.join(directory, f"{p.db}.{p.table}.{p.chunk_id}.{stage}")
    with open(base, "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + _BARRIER_TIMEOUT_S
    while not os.path.exists(base + ".go") and time.monotonic() < deadline:
        time.sleep(0.02)


def read_chunk(options: Mapping[str, str], p: ChunkPartition) -> Iterator[tuple]:
    """Read one chunk: data rows, then the marker row. Runs on an executor."""
    import pymysql.cursors

    from binlake.bronze.chunking import key_from_json, range_condition
    from binlake.errors import SchemaChangeError
    from binlake.source.mysql import connect, exact_value_sql, master_status, qualified, quote_ident
    from binlake.source.types import TableSchema, encode_value

    schema = TableSchema.from_json(json.loads(options["schemas"])[f"{p.db}.{p.table}"])
    attempt_id = options["attempt_id"]
    where, params = range_condition(schema.key_columns, key_from_json(p.start_key), key_from_json(p.end_key))
    by_name = {c.name: c for c in schema.columns}
    # Columns whose text form loses bits are selected again, exactly, ahead of ``*``;
    # ``*`` itself stays so that a column added or dropped since planning is noticed.
    exact = [c for c in schema.columns if exact_value_sql(c) != quote_ident(c.name)]
    extra = "".join(f"{exact_value_sql(c)}, " for c in exact)
    sql = f"SELECT {extra}{qualified(p.db, p.table)}.* FROM {qualified(p.db, p.table)} WHERE {where}"

    conn = connect(_source_config(options))
    try:
        lw = master_status(conn)
        _barrier(options, p, "lw")
        head = (p.snapshot_id, p.db, p.table, p.chunk_id, attempt_id, lw.file_index, lw.pos, p.schema_version)
        count = 0
        checksum = 0
        with conn.cursor(pymysql.cursors.SSCursor) as cur:
            try:
                cur.execute(sql, params)
            except pymysql.err.OperationalError as exc:
                if exc.args[0] != ER_BAD_FIELD_ERROR:
                    raise
                raise SchemaChangeError(
                    f"{p.db}.{p.table} changed during the snapshot ({exc.args[1]}): "
                    "re-run binlake snapshot, which re-plans it with the new schema"
                ) from exc
            names = [d[0] for d in cur.description][len(exact):]
            if set(names) != set(by_name):
                # Rows decoded with the planned schema would be silently wrong; the driver
                # re-plans the table when its schema version moved.
                raise SchemaChangeError(
                    f"{p.db}.{p.table} changed during the snapshot (columns now {sorted(names)}): "
                    "re-run binlake snapshot, which re-plans it with the new schema"
                )
            cols = [by_name[n] for n in names]
            exact_at = {c.name: i for i, c in enumerate(exact)}
            picks = [exact_at.get(c.name, len(exact) + i) for i, c in enumerate(cols)]
            for values in cur:
                row = {c.name: encode_value(c, values[j]) for c, j in zip(cols, picks)}
                checksum = (checksum + row_hash(row)) & _MASK64
                count += 1
                yield head + (row, None)
        _barrier(options, p, "select")
        hw = master_status(conn)
    finally:
        conn.close()
    stats = {"lw_file": lw.file, "hw_file": hw.file, "hw_pos": str(hw.pos), "row_count": str(count),
             "checksum": str(checksum)}
    yield head + (None, stats)

