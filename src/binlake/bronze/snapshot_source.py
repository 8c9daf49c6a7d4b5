"""``binlake-snapshot``: a Spark Python Data Source whose partitions are snapshot chunks.

Each partition reads one chunk on an executor: one SELECT of the key range inside a
consistent-snapshot transaction (no locks), bounded by its low and high binlog watermarks
(:class:`binlake.source.mysql.consistent_read`: on MariaDB both are the exact position the
snapshot sees). It
yields the chunk's data rows and then one marker row (``row`` NULL) whose ``chunk_stats``
hold ``lw_file``, ``hw_file``, ``hw_pos``, ``row_count`` and ``checksum`` (see
:func:`row_hashes`). The schema is :data:`binlake.contract.lakehouse.SNAPSHOT_ROWS_SCHEMA`; rows go to
Spark as Arrow record batches (:func:`arrow_schema`), never one Python tuple per row.

The reader keeps no state between partitions and pickles: everything a partition needs is
in the partition object or in the (string) options. The password travels only under the
option key ``password``, which Spark's ``spark.redaction.regex`` masks in plan text.

Example (the driver code in :mod:`binlake.bronze.snapshot` does this per wave)::

    spark.dataSource.register(SnapshotDataSource)
    df = spark.read.format("binlake-snapshot").options(**reader_options(...)).load()
"""

from __future__ import annotations

import json
import os
import time
from typing import Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from binlake.contract.lakehouse import SNAPSHOT_ROWS_SCHEMA

ER_BAD_FIELD_ERROR = 1054  # a planned column no longer exists
ER_TABLE_DEF_CHANGED = 1412  # a DDL committed after the read's snapshot began
TABLE_DEF_ATTEMPTS = 5


class _TableDefChanged(Exception):
    """The chunk's table changed definition after its read's snapshot began (error 1412)."""


def _read_again(exc: Exception, attempt: int) -> bool:
    """True if ``exc`` is error 1412 and an attempt remains to read the chunk again."""
    return exc.args[0] == ER_TABLE_DEF_CHANGED and attempt < TABLE_DEF_ATTEMPTS


def _first_access_checked(blocks, attempt: int):
    """``blocks``, with error 1412 before the first one (the server opens the table as the
    rows start to stream) turned into :class:`_TableDefChanged` while attempts remain."""
    import pymysql

    first = True
    while True:
        try:
            block = next(blocks)
        except StopIteration:
            return
        except pymysql.err.OperationalError as exc:
            if first and _read_again(exc, attempt):
                raise _TableDefChanged() from exc
            raise
        first = False
        yield block


FORMAT = "binlake-snapshot"
_MASK64 = (1 << 64) - 1
# Rows fetched from the server and shipped to Spark per Arrow batch: big enough that the
# per-batch work (Arrow arrays, hashing) is noise, small enough to keep memory flat.
BATCH_ROWS = 10_000
# How long a reader waits on a test barrier before giving up (testing only).
_BARRIER_TIMEOUT_S = 60.0


def row_bytes(row: Mapping[str, str | None]) -> bytes:
    """The bytes a row's hash is taken over: its values in column-name order, each as a
    4-byte little-endian length (-1 for NULL) and its UTF-8 bytes. Unambiguous, and the
    same whatever order the columns come in."""
    out = bytearray()
    for name in sorted(row):
        value = row[name]
        data = b"" if value is None else value.encode("utf-8", "surrogateescape")
        out += (-1 if value is None else len(data)).to_bytes(4, "little", signed=True) + data
    return bytes(out)


def row_hash(row: Mapping[str, str | None]) -> int:
    """A stable 64-bit hash of one encoded row (column name -> canonical text or None):
    SipHash-2-4 (pandas' ``hash_array``, fixed key) of :func:`row_bytes`."""
    import numpy as np
    import pandas as pd

    return int(pd.util.hash_array(np.array([row_bytes(row)], dtype=object), categorize=False)[0])


def row_hashes(names: Sequence[str], items) -> "np.ndarray":
    """:func:`row_hash` of every row of a batch, vectorised: ``items`` is an Arrow string
    array holding the rows one after the other, ``len(names)`` values each, in ``names``
    order. Returns a uint64 array. Python touches each row once (one bytes object), never
    each value: the reader hashes every row it reads, so this must cost little."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    n = len(names)
    m = len(items) // n
    order = np.argsort(np.array(names, dtype=object), kind="stable")
    items = items.take(pa.array((np.arange(m)[:, None] * n + order[None, :]).ravel()))  # name order
    offsets = np.frombuffer(items.buffers()[1], dtype=np.int32)[items.offset : items.offset + len(items) + 1]
    data = (
        np.frombuffer(items.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
        if items.buffers()[2]
        else np.zeros(0, np.uint8)
    )
    size = np.diff(offsets).astype(np.int64)
    # Output: per value a 4-byte length, then its bytes. Value i's bytes start after i+1 lengths.
    at = offsets[:-1].astype(np.int64) - offsets[0] + 4 * np.arange(1, len(size) + 1)
    out = np.empty(len(data) + 4 * len(size), dtype=np.uint8)
    is_value = np.ones(len(out), dtype=bool)
    lengths = np.where(items.is_null().to_numpy(zero_copy_only=False), -1, size).astype("<i4").view(np.uint8)
    for k in range(4):
        out[at - 4 + k] = lengths[k::4]
        is_value[at - 4 + k] = False
    out[is_value] = data
    row_offsets = np.append(at[::n] - 4, len(out)).astype(np.int64)
    rows = pa.Array.from_buffers(pa.large_binary(), m, [None, pa.py_buffer(row_offsets), pa.py_buffer(out)])
    return pd.util.hash_array(rows.to_numpy(zero_copy_only=False), categorize=False)


def combine_checksum(total: int, row: Mapping[str, str | None]) -> int:
    """Add one row to an order-independent checksum: the sum of row hashes mod 2**64."""
    return (total + row_hash(row)) & _MASK64


class ChunkPartition(InputPartition):
    """One chunk to read: picklable, plain values only."""

    def __init__(
        self,
        snapshot_id: str,
        db: str,
        table: str,
        chunk_id: int,
        start_key: str | None,
        end_key: str | None,
        schema_version: str,
    ):
        self.snapshot_id = snapshot_id
        self.db = db
        self.table = table
        self.chunk_id = chunk_id
        self.start_key = start_key
        self.end_key = end_key
        self.schema_version = schema_version

    def __repr__(self) -> str:
        return f"ChunkPartition({self.db}.{self.table}#{self.chunk_id})"


def reader_options(
    source,
    chunks: Sequence[dict],
    schemas: Mapping[str, str],
    attempt_id: str,
    barrier_dir: str | None = None,
    epoch: int = 0,
    server_id: int | None = None,
) -> dict[str, str]:
    """Options for one read: chunks (dicts with snapshot_id, db, table, chunk_id, start_key,
    end_key, schema_version), table schemas as JSON by ``db.table``, and the connection.
    Watermarks are positions of source epoch ``epoch``, valid only on server ``server_id``
    (when given: a reader that finds another server there fails instead of mixing them)."""
    opts = {
        **source.executor_options(),
        "chunks": json.dumps(list(chunks), separators=(",", ":")),
        "schemas": json.dumps(dict(schemas), separators=(",", ":")),
        "attempt_id": attempt_id,
        "epoch": str(int(epoch)),
    }
    if server_id is not None:
        opts["server_id"] = str(int(server_id))
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
            ChunkPartition(
                c["snapshot_id"],
                c["db"],
                c["table"],
                int(c["chunk_id"]),
                c.get("start_key"),
                c.get("end_key"),
                c["schema_version"],
            )
            for c in json.loads(self.options["chunks"])
        ]

    def read(self, partition: ChunkPartition) -> Iterator["pa.RecordBatch"]:
        yield from read_chunk(self.options, partition)


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


def arrow_schema():
    """:data:`SNAPSHOT_ROWS_SCHEMA` as Arrow: the reader yields ``RecordBatch`` es of it."""
    import pyarrow as pa

    texts = pa.map_(pa.string(), pa.string())
    return pa.schema(
        [
            ("snapshot_id", pa.string()),
            ("db", pa.string()),
            ("table", pa.string()),
            ("chunk_id", pa.int32()),
            ("attempt_id", pa.string()),
            ("lw_file_index", pa.int64()),
            ("lw_pos", pa.int64()),
            ("schema_version", pa.string()),
            ("row", texts),
            ("chunk_stats", texts),
        ]
    )


def raw_is_canonical(col) -> bool:
    """True when the text protocol's value is already the column's canonical text.

    Those values go from the socket into Arrow untouched; every other column goes through
    pymysql's decoder and :func:`binlake.contract.types.encode_value`, exactly as a plain
    pymysql cursor plus ``encode_value`` would (``test_capture_types`` holds both to the
    binlog's texts). ZEROFILL pads (``0042``) where the canonical text has no padding.
    """
    from binlake.contract.types import Kind

    if col.kind in (Kind.INT, Kind.UINT, Kind.DECIMAL):
        return "zerofill" not in col.mysql_type.lower()
    return col.kind in (Kind.STRING, Kind.ENUM, Kind.JSON)


class _Memo(dict):
    """raw text -> canonical text, encoded once per distinct value: DATEs, ENUMs, SETs repeat
    a lot, so most values cost a dict lookup."""

    def __init__(self, encode):
        super().__init__({None: None})
        self.encode = encode

    def __missing__(self, raw):
        text = self[raw] = self.encode(raw)
        return text


# Memos by (column, protocol type code), kept for the life of the Python worker, which Spark
# reuses across tasks: a value repeated across chunks (lineitem's 2,500 dates in every chunk)
# is encoded once per worker, not once per chunk. The encoding is a pure function of the
# column, the type code and the raw text (snapshot sessions pin time_zone), so sharing is
# safe; the sizes are bounded so that a column of distinct values cannot hold memory.
_MEMOS: dict[tuple, _Memo] = {}
_MEMO_VALUES = 100_000
_MEMO_COLUMNS = 1_000


def _encoder(col, type_code: int) -> _Memo:
    import pymysql.converters

    from binlake.contract.types import encode_value

    memo = _MEMOS.get((col, type_code))
    if memo is None or len(memo) > _MEMO_VALUES:
        if len(_MEMOS) >= _MEMO_COLUMNS:
            _MEMOS.clear()
        decode = pymysql.converters.decoders.get(type_code) or pymysql.converters.through
        memo = _MEMOS[(col, type_code)] = _Memo(lambda raw: encode_value(col, decode(raw)))
    return memo


def read_chunk(options: Mapping[str, str], p: ChunkPartition) -> Iterator["pa.RecordBatch"]:
    """Read one chunk as Arrow batches: data rows, then the marker row. Runs on an executor.

    Why this shape: a snapshot reads every row of the source, and per-row Python (pymysql
    decoding each value to an object, encoding it back to text, a dict and a tuple per row,
    Spark's per-row conversion) was most of its cost. Here the rows come off the socket in
    blocks (:mod:`binlake.source.textrows`), columns whose protocol text is already
    canonical go to Arrow as they are, and only the others are decoded, once per distinct
    value, through pymysql's converters and ``encode_value``, as a plain pymysql cursor
    would have done.
    """
    import numpy as np
    import pyarrow as pa
    import pymysql.converters
    import pymysql.cursors

    from binlake.bronze.chunking import key_from_json, range_condition
    from binlake.config import SourceConfig
    from binlake.contract.columns import masked_text
    from binlake.contract.sql import qualified, quote_ident
    from binlake.contract.types import TableSchema
    from binlake.errors import SchemaChangeError, SourceChangedError
    from binlake.source import textrows
    from binlake.source.mysql import (
        connect,
        consistent_read,
        exact_value_sql,
        server_id,
    )

    schema = TableSchema.from_json(json.loads(options["schemas"])[f"{p.db}.{p.table}"])
    source = SourceConfig.from_executor_options(options)
    rule = source.column_rule(p.db, p.table)
    salt = source.salt_for(rule)
    attempt_id = options["attempt_id"]
    where, params = range_condition(schema.key_columns, key_from_json(p.start_key), key_from_json(p.end_key))
    by_name = {c.name: c for c in schema.columns}
    # Columns whose text form loses bits are selected again, exactly, ahead of ``*``;
    # ``*`` itself stays so that a column added or dropped since planning is noticed.
    kept = [c for c in schema.columns if rule is None or rule.keeps(c.name)]
    exact = [c for c in kept if exact_value_sql(c) != quote_ident(c.name)]
    extra = "".join(f"{exact_value_sql(c)}, " for c in exact)
    table_sql = qualified(p.db, p.table)
    if len(kept) == len(schema.columns):
        sql = f"SELECT {extra}{table_sql}.* FROM {table_sql} WHERE {where}"
    else:
        # A dropped column is never selected: its values must not reach this process. The
        # column list is checked by a ``LIMIT 0`` probe of ``*`` (names only, no rows) in
        # the same transaction, whose metadata lock keeps it until the chunk is read.
        sql = f"SELECT {extra}{', '.join(quote_ident(c.name) for c in kept)} FROM {table_sql} WHERE {where}"

    out_schema = arrow_schema()
    texts_type = out_schema.field("row").type
    head = {
        "snapshot_id": p.snapshot_id,
        "db": p.db,
        "table": p.table,
        "chunk_id": p.chunk_id,
        "attempt_id": attempt_id,
        "schema_version": p.schema_version,
    }

    def batch(n: int, lw, rows, stats):
        values = {**head, "lw_file_index": lw.log_index, "lw_pos": lw.pos}
        consts = [pa.repeat(pa.scalar(values[f.name], f.type), n) for f in out_schema if f.name in values]
        return pa.RecordBatch.from_arrays([*consts, rows, stats], schema=out_schema)

    epoch = int(options.get("epoch") or 0)
    conn = connect(source)
    try:
        expected = options.get("server_id")
        if expected is not None and server_id(conn) != int(expected):
            raise SourceChangedError(
                f"the source is now server {server_id(conn)}, not server {expected} that the snapshot of "
                f"{p.db}.{p.table} was planned on: run binlake capture, then binlake snapshot again"
            )
        # A DDL that commits after the read's snapshot began (a TRUNCATE recreates the table)
        # makes the first access fail with 1412 before any row is read: read the chunk again
        # in a new snapshot, with a new low watermark.
        for attempt in range(1, TABLE_DEF_ATTEMPTS + 1):
            try:
                with consistent_read(conn) as read:
                    lw = read.low.in_epoch(epoch)
                    _barrier(options, p, "lw")
                    count = 0
                    checksum = 0
                    with conn.cursor(pymysql.cursors.SSCursor) as cur:
                        try:
                            if len(kept) < len(schema.columns):
                                cur.execute(f"SELECT * FROM {table_sql} LIMIT 0")
                                present = [d[0] for d in cur.description]
                                cur.fetchall()
                            cur.execute(sql, params)
                        except pymysql.err.OperationalError as exc:
                            if _read_again(exc, attempt):
                                raise _TableDefChanged() from exc
                            if exc.args[0] != ER_BAD_FIELD_ERROR:
                                raise
                            raise SchemaChangeError(
                                f"{p.db}.{p.table} changed during the snapshot ({exc.args[1]}): "
                                "re-run binlake snapshot, which re-plans it with the new schema"
                            ) from exc
                        names = [d[0] for d in cur.description][len(exact) :]
                        if len(kept) == len(schema.columns):
                            present = names
                        if set(present) != set(by_name):
                            # Rows decoded with the planned schema would be silently wrong; the driver
                            # re-plans the table when its schema version moved.
                            raise SchemaChangeError(
                                f"{p.db}.{p.table} changed during the snapshot (columns now {sorted(present)}): "
                                "re-run binlake snapshot, which re-plans it with the new schema"
                            )
                        n = len(names)
                        # Output column i: either the protocol text of result column len(exact) + i as it
                        # is, or an encoder applied to result column ``src`` (its exact re-select, if any).
                        binary = [enc is None for enc, _ in cur._result.converters]
                        exact_at = {c.name: k for k, c in enumerate(exact)}
                        as_is, encoded = [], []
                        for i, name in enumerate(names):
                            c, src = by_name[name], exact_at.get(name, len(exact) + i)
                            canonical = src == len(exact) + i and not binary[src] and raw_is_canonical(c)
                            how = rule.mask.get(name) if rule is not None else None
                            if how is not None:
                                # Masked after the canonical text, as capture does: equal values, equal hashes.
                                base = None if canonical else _encoder(c, cur.description[src][1])
                                encoded.append(
                                    (
                                        i,
                                        src,
                                        _Memo(
                                            lambda raw, base=base, how=how: masked_text(
                                                how, salt, raw if base is None else base[raw]
                                            )
                                        ),
                                    )
                                )
                            elif canonical:
                                as_is.append(i)
                            else:
                                encoded.append((i, src, _encoder(c, cur.description[src][1])))
                        keys = pa.array(names, pa.string())
                        for block in _first_access_checked(textrows.blocks(cur, BATCH_ROWS), attempt):
                            m = block.rows
                            if encoded:
                                # Rows x columns positions into [as-is texts, then each encoded column].
                                index = np.empty((m, n), dtype=np.int64)
                                index[:, as_is] = np.arange(m * len(as_is)).reshape(m, len(as_is))
                                parts = [block.items([len(exact) + i for i in as_is])] if as_is else []
                                base = m * len(as_is)
                                for i, src, encode in encoded:
                                    # Python sees each distinct value of the block once, not each row.
                                    raw = block.column(src).dictionary_encode()
                                    texts = pa.array([encode[v] for v in raw.dictionary.to_pylist()], pa.string())
                                    parts.append(texts.take(raw.indices))
                                    index[:, i] = base + np.arange(m)
                                    base += m
                                items = pa.concat_arrays(parts).take(pa.array(index.ravel()))
                            else:
                                items = block.items([len(exact) + i for i in as_is])
                            offsets = pa.array(np.arange(0, (m + 1) * n, n, dtype=np.int32))
                            texts = pa.MapArray.from_arrays(
                                offsets, keys.take(pa.array(np.tile(np.arange(n), m))), items
                            )
                            checksum = (checksum + int(row_hashes(names, items).sum(dtype=np.uint64))) & _MASK64
                            count += m
                            yield batch(m, lw, texts, pa.nulls(m, texts_type))
                    _barrier(options, p, "select")
            except _TableDefChanged:
                continue
            break
        hw = read.high.in_epoch(epoch)
    finally:
        conn.close()
    stats = {
        "lw_file": lw.file,
        "hw_file": hw.file,
        "hw_pos": str(hw.pos),
        "row_count": str(count),
        "checksum": str(checksum),
    }
    yield batch(1, lw, pa.nulls(1, texts_type), pa.array([list(stats.items())], out_schema.field("chunk_stats").type))
