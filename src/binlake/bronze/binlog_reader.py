"""Reading one binlog range into change-log rows (this runs in a Spark task): where a range
stops, what each kind of event becomes, and the rows gathered column by column into Arrow.

A capture batch covers ``[start, end)`` where both ends are transaction boundaries, cut at
binlog FILE boundaries into :class:`ReadRange` partitions. Each partition yields change-log
rows (``CHANGELOG_SCHEMA``) plus one extra column, ``schema_json``, set only on
``op='schema'`` side rows: the first time a partition sees a table schema version in a
TABLE_MAP, it reports it so the driver can record it in ``schema_history`` before committing
the batch. Only the last partition of a batch emits the heartbeat, at the position where it
stopped.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from binlake.bronze.binlog_plan import TablePlan, TablePlanner
from binlake.config import SourceConfig
from binlake.contract.changelog import CHANGELOG_SCHEMA, HEARTBEAT_OP, INSERT, STATEMENT_OP, UPDATE
from binlake.contract.ddl import ddl_effects, statement_targets
from binlake.contract.position import HEARTBEAT_ROW, BinlogPosition, file_index, log_index
from binlake.errors import (
    ArchiveUnreadableError,
    BinlogDecodeError,
    BinlogEndedEarly,
    PartialJsonWithoutBeforeError,
    UnsupportedJsonDiffError,
)
from binlake.source.binlog.boundaries import Boundaries
from binlake.source.binlog.events import Gtid, Passive, Query, Rows, TableMapEvent, TransactionPayload
from binlake.source.binlog.stream import archive_stream, server_stream


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
    archive: str | None = None  # read the file from this binlog archive, not from the server

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
# Statements: DDL, and DML logged as statements

# Statements a QUERY event carries that change no table.
_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK")
_TRANSACTION_CONTROL_PREFIXES = ("XA ", "SAVEPOINT", "ROLLBACK TO")


def captured_ddl(source: SourceConfig, text: str, default_db: str | None) -> list[tuple[int, str, str | None, str]]:
    """``(row, db, table, op)`` for each captured table the statement of a QUERY event
    changes; ``row`` is the table's index in the statement (captured or not), so a DDL row's
    sequence does not depend on the capture filter. ``table`` is None for a statement that
    names no table (CREATE DATABASE ...), kept when its database may hold captured tables.

    A DML statement (a writer session's ``binlog_format=STATEMENT`` or MIXED) gives
    ``op='statement'`` for the tables it writes: their changes are not in the binlog as rows."""
    upper = text.strip().upper()
    if upper in _TRANSACTION_CONTROL or upper.startswith(_TRANSACTION_CONTROL_PREFIXES):
        return []
    targets = statement_targets(text, default_db or None)
    if targets is not None:
        effects = [(db, table, STATEMENT_OP) for db, table in targets]
    else:
        effects = ddl_effects(text, default_db or None)
    out = []
    for row, (db, table, op) in enumerate(effects):
        # A None db is never captured (_db_captured); testing it first types the rows db as str.
        if db is not None and (source.mirrors(db, table) if (db and table) else _db_captured(source, db)):
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
    # Events of types binlake does not know that the server marked ignorable, by type name.
    ignored: dict[str, int] = field(default_factory=dict)

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
        return json.dumps({"ops": self.ops, "tables": self.tables, "last_ts": self.last_ts, "ignored": self.ignored})

    def gtid_position(self) -> str | None:
        """The last GTID of each domain, comma-joined in domain order; None when there was none."""
        return ",".join(self.last_gtids[d] for d in sorted(self.last_gtids)) or None


# ---------------------------------------------------------------------------------------
# The reader (runs on executors)


READ_SCHEMA = CHANGELOG_SCHEMA + ", schema_json STRING"
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

    def __init__(self) -> None:
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

    def add_event(self, db, table, op, pos, first_row, n, images, commit_ts, gtid, server_id, schema_version):
        """The ``n`` rows of one ROWS event, numbered from ``first_row``; ``images``: the
        before and the after image, each ``(names, flat texts)`` (see _Images.add_flat) or None."""
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
        c["row"].extend(range(first_row, first_row + n))
        for target, image in zip((self.before, self.after), images):
            if image is None:
                target.add_flat([], None, n)
            else:
                target.add_flat(image[0], image[1], n)
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
    its nearest base class that has one, as an ``isinstance`` test would, or None; each class
    is looked up once."""

    def __missing__(self, cls: type):
        handler = self[cls] = next((self[base] for base in cls.__mro__[1:] if base in self), None)
        return handler


class _RangeReader:
    """Reads one :class:`ReadRange` into change-log rows: one handler per kind of event.

    A handler gets the event and its end position, adds rows to ``out`` and counts them in
    ``stats``. Whether an event ends a transaction, the only place a read may stop before its
    planned end, is for :class:`~binlake.source.binlog.boundaries.Boundaries` to say. Events
    of other kinds only move the stream on.
    """

    def __init__(self, source: SourceConfig, rng: ReadRange):
        self.source = source
        self.rng = rng
        self.planner = TablePlanner(source)
        self.out = _ChangeColumns(
            rng.file, log_index(rng.epoch, file_index(rng.file)), dt.datetime.now(dt.timezone.utc)
        )
        self.stats = RangeStats()
        self.boundaries = Boundaries()
        self.plans: dict[int, TablePlan | None] = {}  # by the table id TABLE_MAP events assign
        self.reported: set[tuple[str, str, str]] = set()  # (db, table, version) sent to the driver
        self.gtid: str | None = None  # of the transaction being read
        self.next_row = 0  # the row index the next ROWS event's rows start at (see on_payload)
        self.handlers = EventHandlers(
            {
                Gtid: self.on_gtid,
                TableMapEvent: self.on_table_map,
                Rows: self.on_rows,
                Query: self.on_query,
                TransactionPayload: self.on_payload,
                Passive: self.on_passive,
            }
        )

    def batches(self) -> Iterator:
        """The range's record batches; the last one holds the heartbeat and the stats."""
        rng, out, stats = self.rng, self.out, self.stats
        if rng.is_empty():
            yield self.finish(rng.end_pos)
            return
        start = BinlogPosition(rng.file, rng.start_pos)
        if rng.archive:
            stream = archive_stream(rng.archive, start)
        else:
            stream = server_stream(self.source, self.source.server_id + 1 + rng.index, start)
        stop_pos: int | None = None
        try:
            for event in stream:
                if stream.file != rng.file:
                    # Rotated into the next file: this file is complete (its ROTATE or STOP event
                    # was its last), so the planned end, never beyond the file's size, is reached.
                    stop_pos = rng.end_pos
                    break
                pos = event.log_pos
                if not pos:
                    continue  # artificial: the dump's first ROTATE and FORMAT_DESCRIPTION
                self.next_row = 0
                handle = self.handlers[type(event)]
                if handle is not None:
                    handle(event, pos)
                if self.boundaries.ends(event) and rng.stops_early(stats.rows, pos):
                    stop_pos = pos
                    break
                if rng.reached_end(stream.file, stream.pos):
                    stop_pos = rng.end_pos
                    break
                if out.n >= BATCH_ROWS:
                    yield out.batch()
        finally:
            stream.close()
        if stop_pos is None:
            stop_pos = rng.end_of_dump(stream.file, stream.pos)
        yield self.finish(stop_pos)

    def finish(self, heartbeat_pos: int | None):
        """The partition's last batch: the heartbeat (last partition only), then the stats."""
        if self.rng.last:
            self.out.add(None, None, HEARTBEAT_OP, heartbeat_pos, HEARTBEAT_ROW)
        stats = self.stats
        self.out.add(None, None, "stats", self.rng.start_pos, 0, ddl=stats.counts_json(), gtid=stats.gtid_position())
        return self.out.batch()

    # One handler per kind of event.

    def on_gtid(self, event: Gtid, pos: int) -> None:
        self.gtid = event.gtid
        if event.mariadb and event.gtid:
            self.stats.add_mariadb_gtid(event.gtid)

    def on_table_map(self, event: TableMapEvent, pos: int) -> None:
        plan = self.plans[event.table_id] = self.planner.plan(event, f"{self.rng.file}:{pos}")
        if plan is None or plan.stored is None or plan.version is None:
            return
        if (plan.database, plan.table, plan.version) not in self.reported:
            self.reported.add((plan.database, plan.table, plan.version))
            self.out.add(
                plan.database,
                plan.table,
                "schema",
                pos,
                0,
                schema_version=plan.version,
                schema_json=plan.stored.to_json(),
            )

    def on_rows(self, event: Rows, pos: int) -> None:
        if event.table_id not in self.plans:
            raise BinlogDecodeError(
                f"{event.name} at {self.rng.file}:{pos} refers to table id {event.table_id}, "
                "whose TABLE_MAP did not come before it in the binlog"
            )
        plan = self.plans[event.table_id]
        if plan is None:
            return
        commit_ts = event.timestamp * 1_000_000
        first_row = self.next_row
        if plan.unreadable is not None:
            self._add_unapplied(plan, event.name, plan.unreadable, pos, commit_ts, event.server_id)
            return
        try:
            n = self._add_decoded_rows(plan, event, pos, first_row, commit_ts)
        except PartialJsonWithoutBeforeError as exc:
            reason = (
                f"its before image lacks {', '.join(exc.columns)}, which its JSON diff applies to "
                "(binlog_row_value_options=PARTIAL_JSON with binlog_row_image=MINIMAL): "
                "SET GLOBAL binlog_row_value_options='', then re-snapshot the table"
            )
            self._add_unapplied(plan, event.name, reason, pos, commit_ts, event.server_id)
            return
        except UnsupportedJsonDiffError as exc:
            self._add_unapplied(plan, event.name, str(exc), pos, commit_ts, event.server_id)
            return
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            raise BinlogDecodeError(
                f"binlake cannot decode the rows of {event.name} at {self.rng.file}:{pos} ({plan.name}): {exc}"
            ) from exc
        self.next_row = first_row + n
        self.stats.add_rows(event.kind, plan.name, n, commit_ts)

    def on_query(self, event: Query, pos: int) -> None:
        for row, db, table, op in captured_ddl(self.source, event.text, event.schema):
            if op == STATEMENT_OP and self.source.archive is not None:
                raise ArchiveUnreadableError(
                    f"{event.text[:80]!r} at {self.rng.file}:{pos} changed {db}.{table or '*'} as a statement "
                    "(binlog_format=STATEMENT or MIXED), whose rows the binlog does not hold, and an archive source "
                    "has no server to re-read the table from: exclude the table (source.exclude), or capture it "
                    "from the server"
                )
            self.out.add(
                db,
                table,
                op,
                pos,
                row,
                commit_ts=event.timestamp * 1_000_000,
                gtid=self.gtid,
                server_id=event.server_id,
                ddl=event.text,
            )
            self.stats.add_ddl(op)

    def on_payload(self, event: TransactionPayload, pos: int) -> None:
        """A compressed transaction: its events in order, all at the payload's end position;
        their rows are numbered on from one ROWS event to the next, so ``_cdc_seq`` stays
        unique. A transaction payload is never cut: it ends with its own XID."""
        self.next_row = 0
        for inner in event.events:
            handle = self.handlers[type(inner)]
            if handle is not None and handle is not self.on_payload:
                handle(inner, pos)

    def on_passive(self, event: Passive, pos: int) -> None:
        if event.unknown:
            self.stats.ignored[event.name] = self.stats.ignored.get(event.name, 0) + 1

    # Rows.

    def _add_decoded_rows(self, plan: TablePlan, event: Rows, pos: int, first_row: int, commit_ts: int) -> int:
        """The event's row bytes straight to canonical texts, the column rule applied."""
        decoder = plan.decoder
        assert decoder is not None
        assert plan.version is not None
        kind = event.kind
        first: list = []
        images: tuple[tuple[list[str], list | None] | None, tuple[list[str], list | None] | None]
        if kind == UPDATE:
            second: list = []
            before, after = decoder.layout(event.present), decoder.layout(event.present_after or 0)
            if event.partial_json:
                n = decoder.decode_partial_update(event.body, before, after, [first, second])
            else:
                n = decoder.decode(event.body, [before, after], [first, second])
            images = (plan.masked(before, first, n), plan.masked(after, second, n))
        else:
            layout = decoder.layout(event.present)
            n = decoder.decode(event.body, [layout], [first])
            image = plan.masked(layout, first, n)
            images = (None, image) if kind == INSERT else (image, None)
        self.out.add_event(
            plan.database,
            plan.table,
            kind,
            pos,
            first_row,
            n,
            images,
            commit_ts,
            self.gtid,
            event.server_id,
            plan.version,
        )
        return n

    def _add_unapplied(self, plan: TablePlan, event_name: str, reason: str, pos: int, commit_ts: int, sid: int):
        """One record saying that the table changed here in a way bronze cannot hold as rows
        (from a server; an archive source has none to re-read the table from, so it stops)."""
        if self.source.archive is not None:
            raise ArchiveUnreadableError(
                f"{event_name} at {self.rng.file}:{pos} changed {plan.name} in a way the binlog does not hold as "
                f"whole rows ({reason}), and an archive source has no server to re-read the table from: exclude "
                "the table (source.exclude), or capture it from the server"
            )
        self.out.add(
            plan.database,
            plan.table,
            STATEMENT_OP,
            pos,
            self.next_row,
            commit_ts=commit_ts,
            gtid=self.gtid,
            server_id=sid,
            ddl=f"{event_name}: {reason}",
        )
        self.next_row += 1
        self.stats.add_ddl(STATEMENT_OP)


def read_range(source: SourceConfig, rng: ReadRange) -> Iterator:
    """Decode one file range into Arrow record batches of change-log rows (see the module doc).

    Every partition ends with one ``op='stats'`` side row whose ``ddl`` holds, as JSON, its row
    counts per op (``ops``) and per ``db.table`` (``tables``), the commit time of its newest
    row change (``last_ts``, microseconds) and the ignorable events it did not know
    (``ignored``), so the driver needs no aggregation job.
    """
    yield from _RangeReader(source, rng).batches()
