"""``binlake-snapshot``: a Spark Python Data Source whose partitions are snapshot chunks.

Each partition reads one chunk on an executor: one SELECT of the key range inside a
consistent-snapshot transaction (no locks), bounded by its low and high binlog watermarks
(:class:`binlake.source.mysql.consistent_read`: on MariaDB both are the exact position the
snapshot sees). All chunks of one read belong to one snapshot, so to one table and one schema
version: it yields each row as one canonical text per column (``_t0``, ``_t1``, ... in the
order of the option ``columns``, the stored schema's columns), with the chunk's identity
(``_cdc_chunk_id``, ``_cdc_attempt_id``), and then one marker row (every text NULL) whose
``_cdc_chunk_stats`` hold the snapshot id, ``lw_file``, ``lw_file_index``, ``lw_pos``,
``hw_file``, ``hw_pos``, ``row_count``, ``checksum`` (see :func:`row_hashes`) and
``zero_dates``. The driver types the texts with silver's decode expressions
(:func:`typed_columns`) on their way into the snapshot's typed table. Rows go to Spark as Arrow
record batches (:func:`arrow_schema`), never one Python tuple per row.

The reader keeps no state between partitions and pickles: everything a partition needs is
in the partition object or in the (string) options. The password travels only under the
option key ``password``, which Spark's ``spark.redaction.regex`` masks in plan text.

Example (the driver code in :mod:`binlake.bronze.snapshot` does this per wave)::

    spark.dataSource.register(SnapshotDataSource)
    df = spark.read.format("binlake-snapshot").options(**reader_options(...)).load()
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from binlake.bronze.chunking import key_from_json, range_condition
from binlake.config import ColumnRule, SourceConfig
from binlake.contract.columns import masked_text
from binlake.contract.position import BinlogPosition
from binlake.contract.schemas import SNAPSHOT_ATTEMPT_ID, SNAPSHOT_CHUNK_ID, SNAPSHOT_CHUNK_STATS
from binlake.contract.sql import Sql, qualified, quote_ident, sql, sql_list
from binlake.contract.types import Column, Kind, TableSchema, spark_decode_sql
from binlake.errors import SchemaChangeError, SourceChangedError, TableDefinitionChanged

if TYPE_CHECKING:  # imported where used: the driver never loads them
    import numpy as np
    import pyarrow as pa
from binlake.source.mysql import connect, consistent_read, exact_value_sql, server_id

ER_BAD_FIELD_ERROR = 1054  # a planned column no longer exists
ER_TABLE_DEF_CHANGED = 1412  # a DDL committed after the read's snapshot began
TABLE_DEF_ATTEMPTS = 5


def _read_again(exc: Exception, attempt: int) -> bool:
    """True if ``exc`` is error 1412 and an attempt remains to read the chunk again."""
    return exc.args[0] == ER_TABLE_DEF_CHANGED and attempt < TABLE_DEF_ATTEMPTS


def _first_access_checked(blocks, attempt: int):
    """``blocks``, with error 1412 before the first one (the server opens the table as the
    rows start to stream) turned into :class:`TableDefinitionChanged` while attempts remain."""
    import pymysql

    first = True
    while True:
        try:
            block = next(blocks)
        except StopIteration:
            return
        except pymysql.err.OperationalError as exc:
            if first and _read_again(exc, attempt):
                raise TableDefinitionChanged() from exc
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


def row_hashes(names: Sequence[str], items) -> np.ndarray:
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
    stored: TableSchema | None = None,
) -> dict[str, str]:
    """Options for one read: chunks (dicts with snapshot_id, db, table, chunk_id, start_key,
    end_key, schema_version) of one snapshot, table schemas as JSON by ``db.table``, the
    schema binlake stores the table with (``stored``: the columns the read yields; default
    the table's schema), and the connection. Watermarks are positions of source epoch
    ``epoch``, valid only on server ``server_id`` (when given: a reader that finds another
    server there fails instead of mixing them)."""
    chunks = list(chunks)
    if stored is None:
        stored = TableSchema.from_json(dict(schemas)[f"{chunks[0]['db']}.{chunks[0]['table']}"])
    opts = {
        **source.executor_options(),
        "chunks": json.dumps(chunks, separators=(",", ":")),
        "schemas": json.dumps(dict(schemas), separators=(",", ":")),
        "attempt_id": attempt_id,
        "epoch": str(int(epoch)),
        "columns": json.dumps([c.name for c in stored.columns], separators=(",", ":")),
        "zero_date_columns": json.dumps([c.name for c in stored.columns if _has_zero_dates(c)], separators=(",", ":")),
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
        return read_schema(len(json.loads(self.options["columns"])))

    def reader(self, schema) -> SnapshotReader:
        return SnapshotReader(dict(self.options))


class SnapshotReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]):
        for key in ("source", "password", "chunks", "schemas", "attempt_id", "columns"):
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

    # PySpark types the argument as any InputPartition; Spark hands back those partitions() made.
    def read(self, partition: ChunkPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
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


def read_schema(n: int) -> str:
    """The read's schema for a table of ``n`` stored columns: one text per column, then the
    chunk identity and the marker's stats."""
    texts = "".join(f"{text_column(i)} STRING, " for i in range(n))
    return f"{texts}{SNAPSHOT_CHUNK_ID} INT, {SNAPSHOT_ATTEMPT_ID} STRING, {SNAPSHOT_CHUNK_STATS} MAP<STRING, STRING>"


def text_column(i: int) -> str:
    """The name of the read's ``i``-th text column (source names may be any text)."""
    return f"_t{i}"


def arrow_schema(n: int):
    """:func:`read_schema` as Arrow: the reader yields ``RecordBatch`` es of it."""
    import pyarrow as pa

    return pa.schema(
        [
            *((text_column(i), pa.string()) for i in range(n)),
            (SNAPSHOT_CHUNK_ID, pa.int32()),
            (SNAPSHOT_ATTEMPT_ID, pa.string()),
            (SNAPSHOT_CHUNK_STATS, pa.map_(pa.string(), pa.string())),
        ]
    )


def typed_columns(stored: TableSchema) -> list[str]:
    """The SQL that types a read of ``stored``'s columns as the snapshot's typed table holds
    them: silver's own decode expression per column (zero dates become NULL, as in silver),
    then the chunk identity and stats."""
    from binlake.contract.sql import quote_ident as q

    typed = [f"{spark_decode_sql(c, text_column(i))} AS {q(c.name)}" for i, c in enumerate(stored.columns)]
    return [*typed, SNAPSHOT_CHUNK_ID, SNAPSHOT_ATTEMPT_ID, SNAPSHOT_CHUNK_STATS]


def _has_zero_dates(col: Column) -> bool:
    """Whether the column's canonical texts can be a zero date (``0000-...``), which silver's
    decode turns into NULL and counts (:func:`binlake.contract.types.is_zero_date_sql`)."""
    return col.kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP)


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


# ---------------------------------------------------------------------------------------
# Planning a chunk's read: everything decided before and after the SELECT, without a server


@dataclass(frozen=True)
class ChunkRead:
    """How one chunk is read, planned from its table's schema and column rule."""

    name: str  # ``db.table``
    schema: TableSchema  # the table when the snapshot was planned
    rule: ColumnRule | None
    salt: str  # the mask salt, if the rule hashes a column
    select: str  # the chunk's rows: the exact re-selects first, then the table's columns
    params: list  # the key bounds in ``select``'s WHERE
    probe: str | None  # when the rule drops columns: a ``LIMIT 0`` SELECT of ``*``, for its names
    exact: tuple[Column, ...]  # the columns ``select`` reads again exactly, ahead of the others

    def check_columns(self, present: Sequence[str]) -> None:
        """Raise :class:`SchemaChangeError` unless the table has exactly the planned columns:
        rows decoded with the planned schema would be silently wrong. The driver re-plans the
        table when its schema version moved. ``present`` comes from ``*``, which leaves
        invisible columns out: the planned ones are named in the SELECT itself, and one that
        no longer exists fails it."""
        invisible = {c.name for c in self.schema.columns if not c.visible}
        if set(present) | invisible != {c.name for c in self.schema.columns}:
            raise SchemaChangeError(
                f"{self.name} changed during the snapshot (columns now {sorted(present)}): "
                "re-run binlake snapshot, which re-plans it with the new schema"
            )

    def row_encoding(
        self, result_names: Sequence[str], binary: Sequence[bool], type_codes: Sequence[int]
    ) -> RowEncoding:
        """How the SELECT's result becomes canonical texts. ``result_names``, ``binary`` (the
        protocol sends the column as bytes) and ``type_codes`` (its protocol type) describe
        every result column, the exact re-selects first."""
        skip = len(self.exact)
        names = list(result_names[skip:])
        by_name = {c.name: c for c in self.schema.columns}
        exact_at = {c.name: k for k, c in enumerate(self.exact)}
        as_is: list[int] = []
        encoded: list[tuple[int, int, Mapping]] = []
        for i, name in enumerate(names):
            col, src = by_name[name], exact_at.get(name, skip + i)
            canonical = src == skip + i and not binary[src] and raw_is_canonical(col)
            how = self.rule.mask.get(name) if self.rule is not None else None
            if how is not None:
                # Masked after the canonical text, as capture does: equal values, equal hashes.
                base = None if canonical else _encoder(col, type_codes[src])
                encoded.append((i, src, _Memo(functools.partial(_masked, how, self.salt, base))))
            elif canonical:
                as_is.append(i)
            else:
                encoded.append((i, src, _encoder(col, type_codes[src])))
        return RowEncoding(names, skip, as_is, encoded)


def _masked(how: str, salt: str, base: Mapping | None, raw: str | None) -> str | None:
    """``raw``'s canonical text (``base``; None: ``raw`` is canonical) as the mask stores it."""
    return masked_text(how, salt, raw if base is None else base[raw])


def plan_chunk_read(p: ChunkPartition, schema: TableSchema, rule: ColumnRule | None, salt: str) -> ChunkRead:
    """The statements that read chunk ``p`` of a table with ``schema`` under column rule ``rule``."""
    where, params = range_condition(schema.key_columns, key_from_json(p.start_key), key_from_json(p.end_key))
    # Columns whose text form loses bits are selected again, exactly, ahead of ``*``;
    # ``*`` itself stays so that a column added or dropped since planning is noticed.
    kept = [c for c in schema.columns if rule is None or rule.keeps(c.name)]
    exact = tuple(c for c in kept if exact_value_sql(c) != quote_ident(c.name))
    table_sql = qualified(p.db, p.table)
    if len(kept) == len(schema.columns):
        # ``*`` leaves invisible columns out (MySQL 8.0.23+, MariaDB 10.3+): they are named after it.
        hidden = [Sql(f"{table_sql}.{quote_ident(c.name)}") for c in kept if not c.visible]
        columns = sql_list([Sql(f"{table_sql}.*"), *hidden])
        probe = None
    else:
        # A dropped column is never selected: its values must not reach this process. The
        # column list is checked by a ``LIMIT 0`` probe of ``*`` (names only, no rows) in
        # the same transaction, whose metadata lock keeps it until the chunk is read.
        columns = sql_list(quote_ident(c.name) for c in kept)
        probe = sql("SELECT * FROM {t} LIMIT 0", t=table_sql)
    selected = sql_list([*(Sql(exact_value_sql(c)) for c in exact), columns])
    select = sql("SELECT {columns} FROM {t} WHERE {where}", columns=selected, t=table_sql, where=Sql(where))
    return ChunkRead(f"{p.db}.{p.table}", schema, rule, salt, select, params, probe, exact)


class RowEncoding:
    """How the result columns of a chunk's SELECT become its rows' texts: planned once per
    chunk (:meth:`ChunkRead.row_encoding`), applied to each block of rows with Arrow and numpy,
    so Python touches each distinct value of a block once and no row on its own."""

    def __init__(self, names: list[str], skip: int, as_is: list[int], encoded: list[tuple[int, int, Mapping]]):
        """``names``: the row's columns, which are the result's columns after the first ``skip``
        (the exact re-selects). ``as_is``: the columns whose protocol text is canonical, passed
        through untouched. ``encoded``: (column, the result column it is read from, raw text ->
        text) for the others."""
        import pyarrow as pa

        self.names = names
        self.as_is = as_is
        self.as_is_src = [skip + i for i in as_is]
        self.encoded = encoded
        self.keys = pa.array(names, pa.string())

    def texts(self, block) -> pa.Array:
        """The texts of a :class:`binlake.source.textrows.RowBlock`'s rows, row after row, each
        in ``names`` order."""
        import numpy as np
        import pyarrow as pa

        if not self.encoded:
            return block.items(self.as_is_src)
        m, n, as_is = block.rows, len(self.names), self.as_is
        # Rows x columns positions into [as-is texts, then each encoded column].
        index = np.empty((m, n), dtype=np.int64)
        index[:, as_is] = np.arange(m * len(as_is)).reshape(m, len(as_is))
        parts = [block.items(self.as_is_src)] if as_is else []
        base = m * len(as_is)
        for i, src, encode in self.encoded:
            # Python sees each distinct value of the block once, not each row.
            raw = block.column(src).dictionary_encode()
            texts = pa.array([encode[v] for v in raw.dictionary.to_pylist()], pa.string())
            parts.append(texts.take(raw.indices))
            index[:, i] = base + np.arange(m)
            base += m
        return pa.concat_arrays(parts).take(pa.array(index.ravel()))

    def columns(self, texts: pa.Array, m: int, order: Sequence[str]) -> list[pa.Array]:
        """``m`` rows' :meth:`texts` as one array per column, in ``order`` (column names)."""
        import numpy as np
        import pyarrow as pa

        n = len(self.names)
        at = {name: j for j, name in enumerate(self.names)}
        return [texts.take(pa.array(np.arange(at[name], m * n, n, dtype=np.int64))) for name in order]


class ChunkBatches:
    """The record batches of one chunk's read: its rows, then its marker row."""

    def __init__(self, p: ChunkPartition, attempt_id: str, columns: Sequence[str]):
        import pyarrow as pa

        self.columns = list(columns)
        self.schema = arrow_schema(len(self.columns))
        self.snapshot_id = p.snapshot_id
        self.chunk_id = pa.scalar(p.chunk_id, pa.int32())
        self.attempt_id = pa.scalar(attempt_id, pa.string())

    def rows(self, texts: Sequence[pa.Array]) -> pa.RecordBatch:
        """A batch of data rows: their texts, one array per column in ``columns`` order."""
        import pyarrow as pa

        n = len(texts[0]) if texts else 0
        return self._batch(n, list(texts), pa.nulls(n, self.schema.field(SNAPSHOT_CHUNK_STATS).type))

    def marker(
        self, lw: BinlogPosition, hw: BinlogPosition, count: int, checksum: int, zero_dates: int = 0
    ) -> pa.RecordBatch:
        """The row (every text NULL) that tells the driver the chunk is complete, and what it held."""
        import pyarrow as pa

        stats = {
            "snapshot_id": self.snapshot_id,
            "lw_file": lw.file,
            "lw_file_index": str(lw.log_index),
            "lw_pos": str(lw.pos),
            "hw_file": hw.file,
            "hw_pos": str(hw.pos),
            "row_count": str(count),
            "checksum": str(checksum),
            "zero_dates": str(zero_dates),
        }
        texts = [pa.nulls(1, pa.string()) for _ in self.columns]
        return self._batch(1, texts, pa.array([list(stats.items())], self.schema.field(SNAPSHOT_CHUNK_STATS).type))

    def _batch(self, n: int, texts: list, stats) -> pa.RecordBatch:
        import pyarrow as pa

        ids = [pa.repeat(self.chunk_id, n), pa.repeat(self.attempt_id, n)]
        return pa.RecordBatch.from_arrays([*texts, *ids, stats], schema=self.schema)


# ---------------------------------------------------------------------------------------
# The read (runs on executors)


def read_chunk(options: Mapping[str, str], p: ChunkPartition) -> Iterator[pa.RecordBatch]:
    """Read one chunk as Arrow batches: data rows, then the marker row. Runs on an executor.

    Why this shape: a snapshot reads every row of the source, and per-row Python (pymysql
    decoding each value to an object, encoding it back to text, a dict and a tuple per row,
    Spark's per-row conversion) was most of its cost. Here the rows come off the socket in
    blocks (:mod:`binlake.source.textrows`), columns whose protocol text is already
    canonical go to Arrow as they are, and only the others are decoded, once per distinct
    value, through pymysql's converters and ``encode_value``, as a plain pymysql cursor
    would have done.
    """
    schema = TableSchema.from_json(json.loads(options["schemas"])[f"{p.db}.{p.table}"])
    source = SourceConfig.from_executor_options(options)
    rule = source.column_rule(p.db, p.table)
    plan = plan_chunk_read(p, schema, rule, source.salt_for(rule))
    columns = json.loads(options["columns"])
    zero_date_columns = json.loads(options.get("zero_date_columns") or "[]")
    batches = ChunkBatches(p, options["attempt_id"], columns)
    epoch = int(options.get("epoch") or 0)
    conn = connect(source)
    try:
        _check_server(conn, options.get("server_id"), plan.name)
        # A DDL that commits after the read's snapshot began (a TRUNCATE recreates the table)
        # makes the first access fail with 1412 before any row is read: read the chunk again
        # in a new snapshot, with a new low watermark.
        for attempt in range(1, TABLE_DEF_ATTEMPTS + 1):
            try:
                with consistent_read(conn) as read:
                    lw = read.low.in_epoch(epoch)
                    _barrier(options, p, "lw")
                    count, checksum, zero = yield from _read_rows(conn, plan, attempt, batches, zero_date_columns)
                    _barrier(options, p, "select")
            except TableDefinitionChanged:
                continue
            break
        hw = read.high.in_epoch(epoch)
    finally:
        conn.close()
    yield batches.marker(lw, hw, count, checksum, zero)


def _check_server(conn, expected: str | None, name: str) -> None:
    """Watermarks are positions in one server's binlog: fail on another server."""
    if expected is not None and server_id(conn) != int(expected):
        raise SourceChangedError(
            f"the source is now server {server_id(conn)}, not server {expected} that the snapshot of "
            f"{name} was planned on: run binlake capture, then binlake snapshot again"
        )


def _read_rows(conn, plan: ChunkRead, attempt: int, batches: ChunkBatches, zero_date_columns: Sequence[str]):
    """Yield the chunk's row batches, inside the consistent read; returns (row count,
    checksum, zero dates: how many of the texts in ``zero_date_columns`` are a zero date)."""
    import numpy as np
    import pyarrow.compute as pc
    import pymysql.cursors

    from binlake.source import textrows  # numpy and pyarrow: imported where rows are read

    count = 0
    checksum = 0
    zero = 0
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        present = _execute(cur, plan, attempt)
        result_names = [d[0] for d in cur.description]
        plan.check_columns(present if present is not None else result_names[len(plan.exact) :])
        encoding = plan.row_encoding(
            result_names, [enc is None for enc, _ in cur._result.converters], [d[1] for d in cur.description]
        )
        for block in _first_access_checked(textrows.blocks(cur, BATCH_ROWS), attempt):
            texts = encoding.texts(block)
            checksum = (checksum + int(row_hashes(encoding.names, texts).sum(dtype=np.uint64))) & _MASK64
            count += block.rows
            columns = encoding.columns(texts, block.rows, batches.columns)
            for name, values in zip(batches.columns, columns):
                if name in zero_date_columns:
                    zero += int(pc.sum(pc.starts_with(values, "0000-")).as_py() or 0)
            yield batches.rows(columns)
    return count, checksum, zero


def _execute(cur, plan: ChunkRead, attempt: int) -> list[str] | None:
    """Run the chunk's SELECT, after the probe if there is one; returns the column names the
    probe saw (None without a probe). Error 1412 becomes :class:`TableDefinitionChanged` while
    attempts remain, a vanished column (1054) a :class:`SchemaChangeError`."""
    import pymysql

    present = None
    try:
        if plan.probe is not None:
            cur.execute(plan.probe)
            present = [d[0] for d in cur.description]
            cur.fetchall()
        cur.execute(plan.select, plan.params)
    except pymysql.err.OperationalError as exc:
        if _read_again(exc, attempt):
            raise TableDefinitionChanged() from exc
        if exc.args[0] != ER_BAD_FIELD_ERROR:
            raise
        raise SchemaChangeError(
            f"{plan.name} changed during the snapshot ({exc.args[1]}): "
            "re-run binlake snapshot, which re-plans it with the new schema"
        ) from exc
    return present
