"""Reading binlog ranges on Spark executors: a Python batch data source, one partition per file.

A capture batch covers ``[start, end)`` where both ends are transaction boundaries. The
range is cut at binlog FILE boundaries into :class:`ReadRange` partitions, so the files of a
backlog are read in parallel by executors, each over its own dump connection.

Server ids: a binlog dump registers as a replica, and two dumps with one server id kick each
other off the server. Partition ``i`` of a batch therefore uses ``source.server_id + 1 + i``
(the driver's own short probes use ``source.server_id``). Keep the ``server_id`` values of
different binlake deployments (and real replicas) at least ``max_parallel_files + 1`` apart;
:data:`MAX_PARALLEL_FILES` caps the partitions per batch so the block of ids is bounded.

Each partition yields change-log tuples (``CHANGELOG_SCHEMA``) plus one extra column,
``schema_json``, set only on ``op='schema'`` side rows: the first time a partition sees a
table schema version in a TABLE_MAP, it reports it so the driver can record it in
``schema_history`` before committing the batch. Only the last partition of a batch emits the
heartbeat, at the position where it stopped.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from binlake.bronze.binlog_rows import RowsDecoder, compile_rows_decoder
from binlake.config import BINLOG_READERS, ColumnRule, SourceConfig
from binlake.contract.columns import FlatMasker, apply_to_image, stored_schema
from binlake.contract.ddl import ddl_effects
from binlake.contract.lakehouse import CHANGELOG_SCHEMA, HEARTBEAT_OP
from binlake.contract.position import HEARTBEAT_ROW, BinlogPosition, file_index, log_index
from binlake.contract.types import (
    ZERO_DATE,
    ZERO_DATETIME,
    Column,
    Kind,
    TableSchema,
    encode_value,
)
from binlake.source.binlog.files import is_transaction_end, open_stream

SOURCE_NAME = "binlake_binlog"
READ_SCHEMA = CHANGELOG_SCHEMA + ", schema_json STRING"
MAX_PARALLEL_FILES = BINLOG_READERS


class BinlogEndedEarly(RuntimeError):
    """The dump ended before the planned end of the range (the server lost its tail)."""


@dataclass(frozen=True)
class ReadRange:
    """One partition: ``file`` from ``start_pos`` to ``end_pos`` (None: to the end of the file).

    Its methods are the rules for where the read of the range stops.
    """

    index: int
    file: str
    start_pos: int
    end_pos: int | None
    last: bool
    max_rows: int | None = None  # the last partition may stop early, at a transaction boundary
    epoch: int = 0  # the source epoch the file belongs to (binlake.contract.position)

    def is_empty(self) -> bool:
        return self.end_pos is not None and self.start_pos >= self.end_pos

    def stops_early(self, rows: int, boundary: int) -> bool:
        """True when the read may stop at the transaction boundary ``boundary``, having emitted
        ``rows`` row changes: only the last partition stops before its planned end."""
        return (
            self.last
            and self.max_rows is not None
            and rows >= self.max_rows
            and (self.end_pos is None or boundary < self.end_pos)
        )

    def reached_end(self, log_file: str, log_pos: int) -> bool:
        """True when the stream, now at ``log_file:log_pos``, has read the range to its planned end."""
        return self.end_pos is not None and log_pos >= self.end_pos and log_file == self.file

    def end_of_dump(self, log_file: str, log_pos: int) -> int | None:
        """The heartbeat position when the dump ran out of events before a stop rule fired:
        where the stream stopped, if still in this file. Only the last partition has one."""
        if not self.last:
            return None
        if self.end_pos is not None:
            raise BinlogEndedEarly(f"binlog {self.file} ended before position {self.end_pos}")
        return log_pos if log_file == self.file else None


# ---------------------------------------------------------------------------------------
# TABLE_MAP metadata -> binlake types


def column_from_binlog(col: Any, nullable: bool = True) -> Column:  # noqa: C901 (one branch per MySQL column type)
    """A :class:`Column` from python-mysql-replication's TABLE_MAP column (FULL row metadata).

    Gives the same :meth:`Column.signature` as ``column_from_information_schema`` for the
    same column: the Spark type depends only on kind, integer width, signedness and
    DECIMAL precision/scale, all of which the metadata carries.
    """
    from pymysqlreplication.constants import FIELD_TYPE as T

    t = col.type
    name = col.name
    common = dict(name=name, nullable=nullable, mysql_type=_TYPE_NAMES.get(t, str(t)))
    ints = {T.TINY: 8, T.SHORT: 16, T.INT24: 24, T.LONG: 32, T.LONGLONG: 64}
    if t in ints:
        return Column(kind=Kind.UINT if col.unsigned else Kind.INT, bits=ints[t], **common)
    if t in (T.NEWDECIMAL, T.DECIMAL):
        return Column(
            kind=Kind.DECIMAL,
            precision=int(getattr(col, "precision", 10)),
            scale=int(getattr(col, "decimals", 0)),
            **common,
        )
    if t == T.FLOAT:
        return Column(kind=Kind.FLOAT, **common)
    if t == T.DOUBLE:
        return Column(kind=Kind.DOUBLE, **common)
    if t in (T.DATE, T.NEWDATE):
        return Column(kind=Kind.DATE, **common)
    if t in (T.DATETIME, T.DATETIME2):
        return Column(kind=Kind.DATETIME, fsp=int(getattr(col, "fsp", 0) or 0), **common)
    if t in (T.TIMESTAMP, T.TIMESTAMP2):
        return Column(kind=Kind.TIMESTAMP, fsp=int(getattr(col, "fsp", 0) or 0), **common)
    if t in (T.TIME, T.TIME2):
        return Column(kind=Kind.TIME, fsp=int(getattr(col, "fsp", 0) or 0), **common)
    if t == T.YEAR:
        return Column(kind=Kind.YEAR, **common)
    if t == T.ENUM:
        return Column(kind=Kind.ENUM, labels=tuple((col.enum_values or [""])[1:]), **common)
    if t == T.SET:
        return Column(kind=Kind.SET, labels=tuple(col.set_values or ()), **common)
    if t == T.JSON:
        return Column(kind=Kind.JSON, **common)
    if t == T.BIT:
        return Column(kind=Kind.BIT, bits=int(getattr(col, "bits", 1)), **common)
    if t == T.GEOMETRY:
        return Column(kind=Kind.BINARY, **common)
    if t in (T.VARCHAR, T.VAR_STRING, T.STRING, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.BLOB):
        binary = getattr(col, "collation_name", None) == "binary" or (
            t in (T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB, T.BLOB) and getattr(col, "collation_name", None) is None
        )
        return Column(kind=Kind.BINARY if binary else Kind.STRING, **common)
    from binlake.contract.types import UnsupportedTypeError

    raise UnsupportedTypeError(f"column {name!r} has binlog type {t}, which binlake does not map")


def _type_names() -> dict[int, str]:
    from pymysqlreplication.constants import FIELD_TYPE as T

    return {v: k.lower() for k, v in vars(T).items() if k.isupper() and isinstance(v, int)}


_TYPE_NAMES = _type_names()


def schema_from_table_map(event: Any) -> TableSchema:
    """The table schema a TABLE_MAP event describes (names need binlog_row_metadata=FULL)."""
    mask = bytes(event.null_bitmask) if event.null_bitmask else b""
    cols = []
    for i, c in enumerate(event.columns):
        nullable = bool(mask[i // 8] & (1 << (i % 8))) if i // 8 < len(mask) else True
        cols.append(column_from_binlog(c, nullable=nullable))
    meta = event.optional_metadata
    key_idx = list(meta.simple_primary_key_list or []) or list((meta.primary_keys_with_prefix or {}).keys())
    key = tuple(cols[i].name for i in key_idx)
    return TableSchema(database=event.schema, table=event.table, columns=tuple(cols), key=key)


# ---------------------------------------------------------------------------------------
# Row images


_ZERO_BY_SOURCE = {"out of date range", "out of datetime range", "out of datetime2 range"}


def encode_image(
    schema: TableSchema, cols: dict[str, Column], values: dict, none_sources: dict, pads: dict[str, int] | None = None
) -> dict[str, str | None]:
    """Canonical texts of one binlog row image, equal to the snapshot's for the same values.

    ``pads``: BINARY(n) columns and their n. The binlog drops their trailing zero bytes,
    which a SELECT returns.
    """
    out: dict[str, str | None] = {}
    for name, value in values.items():
        col = cols.get(name)
        if col is None:
            out[name] = None if value is None else str(value)
            continue
        if pads and name in pads and value is not None:
            raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
            value = raw.ljust(pads[name], b"\0")
        if value is None:
            why = none_sources.get(name)
            if why in _ZERO_BY_SOURCE:
                # The decoder gives None for zero/invalid dates; the snapshot sees '0000-00-00'.
                out[name] = ZERO_DATE if col.kind is Kind.DATE else ZERO_DATETIME
            elif why == "empty set":
                out[name] = ""
            else:
                out[name] = None
            continue
        if col.kind is Kind.TIMESTAMP and isinstance(value, dt.datetime) and value == _EPOCH:
            # TIMESTAMP cannot hold the epoch itself; 0 is how the binlog stores the zero value.
            out[name] = ZERO_DATETIME
            continue
        if col.kind is Kind.TIME and isinstance(value, dt.timedelta) and value < dt.timedelta(0):
            value = fix_negative_time(value)
        if col.kind is Kind.YEAR and value == 1900:
            # The binlog stores YEAR as an offset from 1900; 0 is the zero year 0000, not 1900.
            out[name] = "0"
            continue
        out[name] = encode_value(col, value)
    return out


_EPOCH = dt.datetime(1970, 1, 1)


def fix_negative_time(value: dt.timedelta) -> dt.timedelta:
    """Undo python-mysql-replication's decoding of negative TIME(fsp) with a fraction.

    It returns -(W + 1 - f) for the stored -(W + f) (W whole seconds, f the fraction), as
    probed against MariaDB 10.11 for fsp 1..6; whole-second values come back right.
    """
    magnitude = -(value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds)
    whole, frac = divmod(magnitude, 1_000_000)
    if frac == 0:
        return value
    return -dt.timedelta(microseconds=whole * 1_000_000 + (1_000_000 - frac))


# ---------------------------------------------------------------------------------------
# Planning a TABLE_MAP: how the ROWS events after it are decoded


# The ROWS events the fast decoder reads (MySQL's PARTIAL_UPDATE_ROWS_EVENT is not one).
PLAIN_ROWS_EVENTS = frozenset(
    {
        BINLOG.WRITE_ROWS_EVENT_V1,
        BINLOG.WRITE_ROWS_EVENT_V2,
        BINLOG.UPDATE_ROWS_EVENT_V1,
        BINLOG.UPDATE_ROWS_EVENT_V2,
        BINLOG.DELETE_ROWS_EVENT_V1,
        BINLOG.DELETE_ROWS_EVENT_V2,
    }
)


@dataclass(frozen=True)
class TablePlan:
    """How the ROWS events after one TABLE_MAP become change-log rows. Everything that does not
    depend on the event is decided here, once per TABLE_MAP; the ROWS handler only picks the
    decode path per event."""

    schema: TableSchema  # the table as the TABLE_MAP describes it
    name: str  # ``db.table``
    stored: TableSchema  # the table as binlake stores it: its column rule applied
    version: str  # the stored schema's version, on every row
    columns_by_name: dict[str, Column]  # ``schema``'s columns, for encode_image
    pads: dict[str, int]  # BINARY(n) columns and their n (see encode_image)
    decoder: RowsDecoder | None  # event bytes to canonical texts; None: the library decodes
    rule: ColumnRule | None
    masker: FlatMasker | None  # ``rule`` for the decoder's flat texts

    def decodes_fast(self, event: Any, update: bool) -> bool:
        """True when the decoder reads the event: a plain ROWS event whose images hold every column."""
        decoder = self.decoder
        return (
            decoder is not None
            and event.event_type in PLAIN_ROWS_EVENTS
            and decoder.full_image(event.columns_present_bitmap)
            and (not update or decoder.full_image(event.columns_present_bitmap2))
        )


class TablePlanner:
    """The :class:`TablePlan` of each TABLE_MAP event of one range."""

    def __init__(self, source: SourceConfig, fast_rows: bool = True):
        self.source = source
        self.fast_rows = fast_rows  # False: the library decodes every row (tests compare both)
        self.salt = source.salt_for_any()
        # A TABLE_MAP comes with every transaction: the column rule is applied once per
        # table and source schema, not per transaction.
        self._stored: dict[tuple, tuple[ColumnRule | None, TableSchema, str]] = {}

    def plan(self, event: Any) -> TablePlan | None:
        """The plan for a TABLE_MAP event, None when its table is not captured."""
        if not self.source.captures(event.schema, event.table):
            return None
        schema = schema_from_table_map(event)
        shape = (schema.database, schema.table, schema.columns, schema.key)
        if shape not in self._stored:
            stored = stored_schema(self.source, schema, strict=False)
            self._stored[shape] = (self.source.column_rule(schema.database, schema.table), stored, stored.version())
        rule, stored, version = self._stored[shape]
        # Decoded with the source's own column types, then masked: the snapshot does the
        # same, so both paths store the same text for the same value.
        decoder = compile_rows_decoder(event.columns, schema) if self.fast_rows else None
        return TablePlan(
            schema=schema,
            name=schema.name,
            stored=stored,
            version=version,
            columns_by_name={c.name: c for c in schema.columns},
            pads={
                c.name: c.max_length
                for c in event.columns
                if c.type == FIELD_TYPE.STRING and getattr(c, "collation_name", None) == "binary"
            },
            decoder=decoder,
            rule=rule,
            masker=FlatMasker(rule, self.salt, decoder.names) if rule is not None and decoder is not None else None,
        )


# ---------------------------------------------------------------------------------------
# DDL

# Statements a QUERY event carries that change no table.
_TRANSACTION_CONTROL = ("BEGIN", "COMMIT")
_TRANSACTION_CONTROL_PREFIXES = ("XA ", "SAVEPOINT")


def captured_ddl(source: SourceConfig, text: str, default_db: str | None) -> list[tuple[int, str, str | None, str]]:
    """``(row, db, table, op)`` for each captured table the statement of a QUERY event
    changes; ``row`` is the table's index in the statement (captured or not), so a DDL row's
    sequence does not depend on the capture filter. ``table`` is None for a statement that
    names no table (CREATE DATABASE ...), kept when its database may hold captured tables."""
    upper = text.strip().upper()
    if upper in _TRANSACTION_CONTROL or upper.startswith(_TRANSACTION_CONTROL_PREFIXES):
        return []
    out = []
    for row, (db, table, op) in enumerate(ddl_effects(text, default_db or None)):
        if source.captures(db, table) if (db and table) else _db_captured(source, db):
            out.append((row, db, table, op))
    return out


def _db_captured(source: SourceConfig, db: str | None) -> bool:
    return db is not None and any(fnmatch.fnmatchcase(db, p) for p in source.databases)


# ---------------------------------------------------------------------------------------
# Stats


@dataclass
class RangeStats:
    """What one partition emitted, for its ``op='stats'`` side row (see :func:`read_range`)."""

    ops: dict[str, int] = field(default_factory=dict)  # records per op, DDL records included
    tables: dict[str, int] = field(default_factory=dict)  # row changes per ``db.table``
    rows: int = 0  # row changes in all
    last_ts: int | None = None  # commit time of the newest row change, microseconds
    # MariaDB: the last GTID of each replication domain in the range, so the driver can
    # carry the GTID state from one batch's end to the next without asking the server.
    last_gtids: dict[str, str] = field(default_factory=dict)

    def add_rows(self, op: str, table: str, n: int, commit_ts: int) -> None:
        self.ops[op] = self.ops.get(op, 0) + n
        self.tables[table] = self.tables.get(table, 0) + n
        self.rows += n
        self.last_ts = commit_ts

    def add_ddl(self, op: str) -> None:
        self.ops[op] = self.ops.get(op, 0) + 1

    def add_mariadb_gtid(self, gtid: str) -> None:
        """``gtid`` is ``domain-server-sequence``."""
        self.last_gtids[gtid.split("-", 1)[0]] = gtid

    def counts_json(self) -> str:
        return json.dumps({"ops": self.ops, "tables": self.tables, "last_ts": self.last_ts})

    def gtid_position(self) -> str | None:
        """The last GTID of each domain, comma-joined in domain order; None when there was none."""
        return ",".join(self.last_gtids[d] for d in sorted(self.last_gtids)) or None


# ---------------------------------------------------------------------------------------
# The reader (runs on executors)


# Side rows: never written to the change log, collected by the driver before the commit.
SIDE_OPS = ("schema", "stats")
# Rows per Arrow record batch handed to Spark.
BATCH_ROWS = 8192


@functools.lru_cache(maxsize=1)
def arrow_schema():
    """READ_SCHEMA as Arrow, exactly as Spark converts it (checked in ``BinlogDataSource.reader``)."""
    import pyarrow as pa

    image = pa.map_(pa.string(), pa.string())
    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            ("db", pa.string()),
            ("table", pa.string()),
            ("op", pa.string()),
            ("file_index", pa.int64()),
            ("pos", pa.int64()),
            ("row", pa.int32()),
            ("binlog_file", pa.string()),
            ("before", image),
            ("after", image),
            ("commit_ts", ts),
            ("gtid", pa.string()),
            ("server_id", pa.int64()),
            ("schema_version", pa.string()),
            ("ddl", pa.string()),
            ("captured_at", ts),
            ("schema_json", pa.string()),
        ]
    )


class _Images:
    """One MAP<STRING, STRING> column (before or after images), built as flat keys/values/offsets."""

    def __init__(self):
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = [0]
        self.null: list[bool] = []

    def add(self, image: dict | None) -> None:
        if image is not None:
            self.keys.extend(image)
            self.values.extend(image.values())
        self.offsets.append(len(self.keys))
        self.null.append(image is None)

    def add_flat(self, names: list[str], values: list | None, n: int) -> None:
        """``n`` images whose texts are ``values`` (row after row, in ``names`` order); None: n NULLs."""
        end = len(self.keys)
        if values is None:
            self.offsets.extend([end] * n)
            self.null.extend([True] * n)
            return
        k = len(names)
        self.keys.extend(names * n)
        self.values.extend(values)
        self.offsets.extend(range(end + k, end + k * n + 1, k))
        self.null.extend([False] * n)

    def array(self, pa):
        mask = pa.array(self.null, pa.bool_()) if any(self.null) else None
        return pa.MapArray.from_arrays(
            pa.array(self.offsets, pa.int32()),
            pa.array(self.keys, pa.string()),
            pa.array(self.values, pa.string()),
            mask=mask,
        )


class _ChangeColumns:
    """Change-log rows of one partition, gathered column by column into Arrow record batches.

    Why not yield tuples: Spark converts a Python data source's tuples to Arrow value by value
    in Python (the map images key by key), which cost more than decoding the binlog. The rows of
    one ROWS event share all columns but ``row`` and the images, so they are added in bulk.
    """

    _SCALARS = (
        "db",
        "table",
        "op",
        "pos",
        "row",
        "commit_ts",
        "gtid",
        "server_id",
        "schema_version",
        "ddl",
        "schema_json",
    )

    def __init__(self, file: str, file_index: int, captured_at: dt.datetime):
        self.file = file
        self.file_index = file_index
        self.captured_at = int(captured_at.timestamp() * 1_000_000)
        self._reset()

    def _reset(self) -> None:
        self.n = 0
        self.cols: dict[str, list] = {name: [] for name in self._SCALARS}
        self.before = _Images()
        self.after = _Images()

    def add(
        self,
        db,
        table,
        op,
        pos,
        row,
        *,
        before=None,
        after=None,
        commit_ts=None,
        gtid=None,
        server_id=None,
        schema_version=None,
        ddl=None,
        schema_json=None,
    ) -> None:
        """One row; ``commit_ts`` in microseconds since the epoch."""
        c = self.cols
        for name, value in (
            ("db", db),
            ("table", table),
            ("op", op),
            ("pos", pos),
            ("row", row),
            ("commit_ts", commit_ts),
            ("gtid", gtid),
            ("server_id", server_id),
            ("schema_version", schema_version),
            ("ddl", ddl),
            ("schema_json", schema_json),
        ):
            c[name].append(value)
        self.before.add(before)
        self.after.add(after)
        self.n += 1

    def add_event(self, db, table, op, pos, n, names, before, after, commit_ts, gtid, server_id, schema_version):
        """The ``n`` rows of one ROWS event; ``before``/``after``: flat texts (see _Images.add_flat) or None."""
        c = self.cols
        for name, value in (
            ("db", db),
            ("table", table),
            ("op", op),
            ("pos", pos),
            ("commit_ts", commit_ts),
            ("gtid", gtid),
            ("server_id", server_id),
            ("schema_version", schema_version),
            ("ddl", None),
            ("schema_json", None),
        ):
            c[name].extend([value] * n)
        c["row"].extend(range(n))
        self.before.add_flat(names, before, n)
        self.after.add_flat(names, after, n)
        self.n += n

    def batch(self):
        import pyarrow as pa

        c, n = self.cols, self.n
        s, i64 = pa.string(), pa.int64()
        ts = pa.timestamp("us", tz="UTC")
        arrays = [
            pa.array(c["db"], s),
            pa.array(c["table"], s),
            pa.array(c["op"], s),
            pa.repeat(pa.scalar(self.file_index, i64), n),
            pa.array(c["pos"], i64),
            pa.array(c["row"], pa.int32()),
            pa.repeat(pa.scalar(self.file, s), n),
            self.before.array(pa),
            self.after.array(pa),
            pa.array(c["commit_ts"], ts),
            pa.array(c["gtid"], s),
            pa.array(c["server_id"], i64),
            pa.array(c["schema_version"], s),
            pa.array(c["ddl"], s),
            pa.repeat(pa.scalar(self.captured_at, ts), n),
            pa.array(c["schema_json"], s),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema())


class EventHandlers(dict):
    """Event handlers by event class. A class without an entry of its own gets the handler of
    its nearest base class that has one (MySQL's PartialUpdateRowsEvent is an UpdateRowsEvent),
    as an ``isinstance`` test would, or None; each class is looked up once."""

    def __missing__(self, cls: type):
        handler = self[cls] = next((self[base] for base in cls.__mro__[1:] if base in self), None)
        return handler


class _RangeReader:
    """Reads one :class:`ReadRange` into change-log rows: one handler per kind of event.

    A handler gets the event and its end position, adds rows to ``out`` and counts them in
    ``stats``; it returns True when the event ends a transaction, the only place a read may
    stop before its planned end. Events of other kinds only move the stream on.
    """

    def __init__(self, source: SourceConfig, rng: ReadRange, fast_rows: bool):
        self.source = source
        self.rng = rng
        self.planner = TablePlanner(source, fast_rows)
        self.out = _ChangeColumns(
            rng.file, log_index(rng.epoch, file_index(rng.file)), dt.datetime.now(dt.timezone.utc)
        )
        self.stats = RangeStats()
        self.plans: dict[int, TablePlan | None] = {}  # by the table id TABLE_MAP events assign
        self.reported: set[tuple[str, str, str]] = set()  # (db, table, version) sent to the driver
        self.gtid: str | None = None  # of the transaction being read
        self.handlers = EventHandlers(
            {
                GtidEvent: self.on_gtid,
                MariadbGtidEvent: self.on_mariadb_gtid,
                TableMapEvent: self.on_table_map,
                WriteRowsEvent: functools.partial(self.on_rows, "insert"),
                UpdateRowsEvent: functools.partial(self.on_rows, "update"),
                DeleteRowsEvent: functools.partial(self.on_rows, "delete"),
                QueryEvent: self.on_query,
                XidEvent: self.on_xid,
            }
        )

    def batches(self) -> Iterator:
        """The range's record batches; the last one holds the heartbeat and the stats."""
        rng, out, stats, handlers = self.rng, self.out, self.stats, self.handlers
        if rng.is_empty():
            yield self.finish(rng.end_pos)
            return
        stream = open_stream(
            self.source,
            self.source.server_id + 1 + rng.index,
            BinlogPosition(rng.file, rng.start_pos),
            # Every event, also the ones the library does not implement: the end check must see
            # the last event before the end (often a MariaDB Binlog_checkpoint, written late).
            filter_non_implemented_events=False,
        )
        stop_pos: int | None = None
        try:
            for event in stream:
                if stream.log_file != rng.file:
                    # Rotated into the next file: this file is complete (its ROTATE or STOP event
                    # was its last), so the planned end, never beyond the file's size, is reached.
                    stop_pos = rng.end_pos
                    break
                pos = event.packet.log_pos
                handle = handlers[type(event)]
                if handle is not None and handle(event, pos) and rng.stops_early(stats.rows, pos):
                    stop_pos = pos
                    break
                if rng.reached_end(stream.log_file, stream.log_pos):
                    stop_pos = rng.end_pos
                    break
                if out.n >= BATCH_ROWS:
                    yield out.batch()
        finally:
            stream.close()
        if stop_pos is None:
            stop_pos = rng.end_of_dump(stream.log_file, stream.log_pos)
        yield self.finish(stop_pos)

    def finish(self, heartbeat_pos: int | None):
        """The partition's last batch: the heartbeat (last partition only), then the stats."""
        if self.rng.last:
            self.out.add(None, None, HEARTBEAT_OP, heartbeat_pos, HEARTBEAT_ROW)
        stats = self.stats
        self.out.add(None, None, "stats", self.rng.start_pos, 0, ddl=stats.counts_json(), gtid=stats.gtid_position())
        return self.out.batch()

    # One handler per kind of event.

    def on_gtid(self, event: Any, pos: int) -> bool:
        self.gtid = event.gtid
        return False

    def on_mariadb_gtid(self, event: Any, pos: int) -> bool:
        self.gtid = event.gtid
        self.stats.add_mariadb_gtid(event.gtid)
        return False

    def on_table_map(self, event: Any, pos: int) -> bool:
        plan = self.plans[event.table_id] = self.planner.plan(event)
        if plan is not None and (plan.schema.database, plan.schema.table, plan.version) not in self.reported:
            self.reported.add((plan.schema.database, plan.schema.table, plan.version))
            self.out.add(
                plan.schema.database,
                plan.schema.table,
                "schema",
                pos,
                0,
                schema_version=plan.version,
                schema_json=plan.stored.to_json(),
            )
        return False

    def on_rows(self, op: str, event: Any, pos: int) -> bool:
        plan = self.plans.get(event.table_id)
        if plan is None:
            return False
        commit_ts = event.timestamp * 1_000_000
        if plan.decodes_fast(event, op == "update"):
            n = self._add_decoded_rows(plan, op, event, pos, commit_ts)
        else:
            n = self._add_library_rows(plan, op, event, pos, commit_ts)
        self.stats.add_rows(op, plan.name, n, commit_ts)
        return False

    def on_query(self, event: Any, pos: int) -> bool:
        text = event.query.decode("utf-8", "replace") if isinstance(event.query, bytes) else str(event.query)
        default_db = event.schema.decode("utf-8", "replace") if isinstance(event.schema, bytes) else event.schema
        for row, db, table, op in captured_ddl(self.source, text, default_db):
            self.out.add(
                db,
                table,
                op,
                pos,
                row,
                commit_ts=event.timestamp * 1_000_000,
                gtid=self.gtid,
                server_id=event.packet.server_id,
                ddl=text,
            )
            self.stats.add_ddl(op)
        if is_transaction_end(event):  # a COMMIT, or DDL, which commits implicitly
            self.gtid = None
            return True
        return False

    def on_xid(self, event: Any, pos: int) -> bool:
        """The commit of a transaction."""
        self.gtid = None
        return True

    # The two ways of decoding a ROWS event; each adds all of its rows.

    def _add_decoded_rows(self, plan: TablePlan, op: str, event: Any, pos: int, commit_ts: int) -> int:
        """The fast path: the event's row bytes straight to canonical texts."""
        update = op == "update"
        packet = event.packet
        first: list = []
        second: list = []
        n = plan.decoder.decode(
            packet.read(event.event_size - packet.read_bytes), [first, second] if update else [first]
        )
        before, after = (first, second) if update else (None, first) if op == "insert" else (first, None)
        names = plan.decoder.names
        masker = plan.masker
        if masker is not None:
            names = masker.names
            before = masker.apply(before, n) if before is not None else None
            after = masker.apply(after, n) if after is not None else None
        schema = plan.schema
        self.out.add_event(
            schema.database,
            schema.table,
            op,
            pos,
            n,
            names,
            before,
            after,
            commit_ts,
            self.gtid,
            packet.server_id,
            plan.version,
        )
        return n

    def _add_library_rows(self, plan: TablePlan, op: str, event: Any, pos: int, commit_ts: int) -> int:
        """python-mysql-replication decodes each row; encode_image makes the texts."""
        schema, cols, pads, rule, salt = plan.schema, plan.columns_by_name, plan.pads, plan.rule, self.planner.salt
        out, gtid, sid, version = self.out, self.gtid, event.packet.server_id, plan.version
        n = 0
        for i, row in enumerate(event.rows):
            if op == "insert":
                before, after = None, encode_image(schema, cols, row["values"], row["none_sources"], pads)
            elif op == "delete":
                before, after = encode_image(schema, cols, row["values"], row["none_sources"], pads), None
            else:
                before = encode_image(schema, cols, row["before_values"], row["before_none_sources"], pads)
                after = encode_image(schema, cols, row["after_values"], row["after_none_sources"], pads)
            out.add(
                schema.database,
                schema.table,
                op,
                pos,
                i,
                before=apply_to_image(rule, salt, before),
                after=apply_to_image(rule, salt, after),
                commit_ts=commit_ts,
                gtid=gtid,
                server_id=sid,
                schema_version=version,
            )
            n += 1
        return n


def read_range(source: SourceConfig, rng: ReadRange, fast_rows: bool = True) -> Iterator:
    """Decode one file range into Arrow record batches of change-log rows (see the module doc).

    Every partition ends with one ``op='stats'`` side row whose ``ddl`` holds, as JSON, its row
    counts per op (``ops``) and per ``db.table`` (``tables``) and the commit time of its newest
    row change (``last_ts``, microseconds), so the driver needs no aggregation job.
    ``fast_rows=False`` decodes every row through python-mysql-replication (tests compare both
    paths).
    """
    yield from _RangeReader(source, rng, fast_rows).batches()


class _Partition(InputPartition):
    def __init__(self, rng: ReadRange):
        super().__init__(rng.index)
        self.rng = rng


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        self.options = {k: options[k] for k in ("source", "password", "mask_salt_secret") if k in options}
        self.ranges = [ReadRange(**r) for r in json.loads(options["ranges"])]

    def partitions(self):
        return [_Partition(r) for r in self.ranges]

    def read(self, partition):
        yield from read_range(SourceConfig.from_executor_options(self.options), partition.rng)


class BinlogDataSource(DataSource):
    """``spark.read.format("binlake_binlog")``: options ``source`` and ``password``
    (:meth:`SourceConfig.executor_options`) and ``ranges``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return READ_SCHEMA

    def reader(self, schema):
        from pyspark.sql.pandas.types import to_arrow_schema

        # The reader yields Arrow batches built for arrow_schema(); Spark checks only names.
        if not to_arrow_schema(schema).equals(arrow_schema()):
            raise ValueError(f"{SOURCE_NAME} reads only its own schema: {READ_SCHEMA}")
        return _Reader(self.options)


def read_dataframe(spark, source: SourceConfig, ranges: list[ReadRange]):
    """A DataFrame over the ranges; the password travels as an option named ``password``,
    which Spark redacts in plan text."""
    spark.dataSource.register(BinlogDataSource)
    return (
        spark.read.format(SOURCE_NAME)
        .schema(READ_SCHEMA)  # given, so Spark need not start a Python worker to ask for it
        .options(**source.executor_options())
        .option("ranges", json.dumps([asdict(r) for r in ranges]))
        .load()
    )
