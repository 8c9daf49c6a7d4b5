"""Changes the binlog holds only in part: completed exactly where they can be, stopped loudly
where they cannot.

A writer session may override the server's binlog settings (docs/capture.md, "What the binlog
does not hold as rows"): with ``binlog_row_image=MINIMAL`` or ``NOBLOB`` a row event carries
only some columns, with ``binlog_format=STATEMENT`` or ``MIXED`` a change is logged as SQL text
(capture also keeps a ROWS event it cannot name the columns of as a statement row). Capture
keeps what the binlog says (:data:`~binlake.contract.changelog.CHANGELOG_SCHEMA`): a row image
holds the columns the event carried, a missing column was not logged (not NULL), and SQL text
becomes a ``statement`` row. For a table whose batch holds either, silver:

- **completes a partial image** from the row's previous state, in ``_cdc_seq`` order per key
  (:func:`fold`): a column keeps the value of the latest record that carried it, so partial
  updates of one key in one batch chain, and the first one starts from silver's row as the last
  completed run left it. An UPDATE's column missing from the after image is unchanged, so its
  before image's value serves where it has one; an UPDATE is keyed by its before image when the
  after image lacks the key (MINIMAL logs only the columns the statement set). A DELETE becomes
  a tombstone keeping the row's last values.
- **stops the table** (:class:`~binlake.errors.IncompleteChangeError`) for what it cannot apply
  exactly: statement-format DML (which rows it changed is not in the binlog), an INSERT without
  some columns (their DEFAULTs are not in the binlog), an UPDATE that changes the key without
  every column (the row's other columns would have to move keys), an UPDATE of a row with no
  live earlier state to complete it from, and what depends on one of those. A record that a
  later complete record of the same key supersedes (a snapshot row, silver's own newer row, a
  full image) cannot change silver and is left out instead (counted in the log): a snapshot
  read while such sessions write must not stop the table it loads.
- **recovers from a re-snapshot**: once a snapshot of the table whose chunks cover its whole key
  space has a first low watermark after every such record, the change log's records up to that
  watermark are dropped (the snapshot has the rows as they were there) and the snapshot's chunks
  are reconciled again after the MERGE, which also tombstones a key that a record applied in an
  earlier run brought back after the snapshot had left it out.

Nothing here writes; :func:`complete` runs only for a batch whose news count partial images or
statements, so a batch of full images costs what it always did.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from binlake.contract.changelog import DELETE, INSERT, UPDATE
from binlake.contract.position import SNAPSHOT_ROW, seq_literal
from binlake.contract.sql import quote_ident, spark_string
from binlake.contract.types import TableSchema
from binlake.errors import IncompleteChangeError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from binlake.spark import SparkLike

log = logging.getLogger("binlake.silver")

# Why a record cannot be applied exactly (Problem.kind).
STATEMENT, PARTIAL_INSERT, KEY_MOVE, NO_PREVIOUS, UNKEYED = "statement", "insert", "key", "previous", "unkeyed"

# Ties on _cdc_seq inside the fold: silver's own row first (a replayed record with its sequence
# is the same change), then derived records, then logged ones (as silver.batch ranks them).
_PRIO_BASE = 0
_RECORD_META = ("_cdc_seq", "_cdc_op", "_cdc_deleted", "_cdc_commit_ts", "_prio", "_zero_dates")
# A statement row capture wrote for a ROWS event it could not decode into named columns:
# ``<event name>: <reason and fix>`` (binlake.bronze.binlog_source).
_ROWS_EVENT = re.compile(r"^[A-Z_]*ROWS_EVENT(_V\d)?: ")


@dataclass(frozen=True)
class Problem:
    """A record silver cannot apply exactly: its kind, where it is and what it lacks."""

    kind: str
    seq: tuple[int, int, int]
    binlog_file: str | None = None
    op: str | None = None  # insert, update or delete; None for a statement
    detail: str = ""  # the statement's text, or the key of the row
    missing: tuple[str, ...] = ()  # the columns its image did not carry

    @property
    def where(self) -> str:
        if self.binlog_file:
            return f"binlog position {self.binlog_file}:{self.seq[1]}"
        return f"binlog position (file index {self.seq[0]}, pos {self.seq[1]})"

    def describe(self) -> str:
        cols = ", ".join(self.missing)
        image = "(a writer session with binlog_row_image=MINIMAL or NOBLOB)"
        if self.kind == STATEMENT:
            text = " ".join((self.detail or "").split())
            if _ROWS_EVENT.match(text):  # capture's account of a ROWS event, with its reason and fix
                return f"the binlog holds a change of it at {self.where} that capture could not keep as rows: {text}"
            text = text if len(text) <= 120 else text[:117] + "..."
            return (
                f"the binlog logged a change that may touch it as SQL text, not rows, at {self.where}: {text!r} "
                "(a writer session with binlog_format=STATEMENT or MIXED), so which rows it changed is not known"
            )
        if self.kind == PARTIAL_INSERT:
            return (
                f"an INSERT of row ({self.detail}) at {self.where} was logged without columns {cols} {image}, "  # noqa: S608 - a message, not SQL
                "and the DEFAULT values they got are not in the binlog"
            )
        if self.kind == KEY_MOVE:
            return (
                f"an UPDATE at {self.where} moved a row to key ({self.detail}) and was logged without columns "
                f"{cols} {image}, which silver cannot carry over from the old key"
            )
        if self.kind == UNKEYED:
            article = "an" if self.op in (INSERT, UPDATE) else "a"
            return f"{article} {(self.op or 'change').upper()} at {self.where} was logged without its key columns"
        return (
            f"an UPDATE of row ({self.detail}) at {self.where} was logged without columns {cols} {image}, "
            "and silver has no live earlier state of that row to complete it from"
        )


@dataclass(frozen=True)
class Cover:
    """A complete snapshot of the whole table, read after every problem: ``floor`` is its first
    low watermark ``(file_index, pos)``, ``chunks`` its manifest rows."""

    snapshot_id: str
    floor: tuple[int, int]
    chunks: tuple = ()


@dataclass
class Completion:
    """What :func:`complete` leaves of a batch: the change-log rows after any re-snapshot's
    watermark (``changes``), and the typed records and logged updates and deletes when it
    completed partial images (``records``, ``cascade``; else None: decode ``changes`` as
    usual); ``rereconcile``: chunks of the covering snapshot to reconcile again."""

    changes: DataFrame
    records: DataFrame | None = None
    cascade: DataFrame | None = None
    rereconcile: list = field(default_factory=list)
    dropped: int = 0


# ---------------------------------------------------------------------------------------
# Pure decisions


def covers_key_space(chunks) -> bool:
    """Whether a snapshot's committed chunks cover every key: their ``[start, end)`` ranges
    chain from unbounded to unbounded. A ``verify --repair`` snapshot of some ranges does not;
    neither does a snapshot still missing a chunk."""
    starts = {c["start_key"] for c in chunks}
    ends = {c["end_key"] for c in chunks}
    return None in starts and None in ends and starts - {None} == ends - {None}


def snapshot_floors(manifest) -> dict[str, tuple[tuple[int, int], bool]]:
    """Per snapshot of one table's manifest rows: its first low watermark and whether its
    committed chunks cover the key space."""
    return {
        sid: (min((int(c["lw_file_index"]), int(c["lw_pos"])) for c in chunks), covers_key_space(chunks))
        for sid, chunks in _by_snapshot(manifest).items()
    }


def find_cover(problems: list[Problem], manifest, plan=()) -> tuple[Cover | None, str | None]:
    """The snapshot that recovers ``problems`` (``manifest``: the table's manifest rows), or
    None and, when there is one, the id of a snapshot read after them whose plan (``plan``: the
    table's plan rows) covers the table but which is not complete yet.

    A snapshot covers a record when its first low watermark is at or after the record's
    position: its reads saw the table after the record's event had ended (row and statement
    events end before their transaction's boundary, where watermarks are read). Of those that
    cover every problem, the earliest: the fewest records are dropped for it."""
    last = max(p.seq[:2] for p in problems)
    planned = {sid for sid, chunks in _by_snapshot(plan).items() if covers_key_space(chunks)}
    complete, pending = [], []
    for sid, (floor, whole) in sorted(snapshot_floors(manifest).items()):
        if floor >= last and whole:
            complete.append((floor, sid))
        elif floor >= last and sid in planned:
            pending.append((floor, sid))
    if not complete:
        return None, min(pending)[1] if pending else None
    floor, sid = min(complete)
    return Cover(sid, floor, tuple(c for c in manifest if c["snapshot_id"] == sid)), None


def _by_snapshot(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(r["snapshot_id"], []).append(r)
    return out


def stop_error(name: str, problem: Problem, pending: str | None = None) -> IncompleteChangeError:
    """The table's stop: what happened and how to recover, in one line."""
    if pending is not None:
        fix = f"finish its re-snapshot {pending}, read after it, with: binlake snapshot"
    else:
        fix = f"recover with: binlake snapshot --table {name}"
    return IncompleteChangeError(
        f"silver stopped {name}: {problem.describe()}; the other tables go on; {fix} "
        "(which privilege keeps sessions from overriding the binlog settings: "
        "docs/capture.md#what-the-binlog-does-not-hold-as-rows)"
    )


def statement_problems(news) -> list[Problem]:
    """The first and last statement-format change a table's news name (the rest lie between)."""
    out = []
    for found in (news.first_statement, news.last_statement):
        if found is not None:
            out.append(Problem(STATEMENT, found["seq"], found.get("binlog_file"), detail=found.get("ddl") or ""))
    return out


def _seq(p: Problem) -> tuple[int, int, int]:
    return p.seq


def after_cut(problems: list[Problem], cut: tuple[int, int] | None) -> list[Problem]:
    return [p for p in problems if cut is None or p.seq[:2] > cut]


# ---------------------------------------------------------------------------------------
# Spark: the fold


def complete(
    spark: SparkLike,
    lh,
    schema: TableSchema,
    decoder,
    changes,
    snapshots,
    news,
    base: Callable[[], DataFrame],
    emptied: tuple,
    truncated: tuple | None,
    new_chunks: list[dict],
) -> Completion:
    """Complete the batch's partial images and check its statements, or raise the table's
    :class:`~binlake.errors.IncompleteChangeError`.

    ``changes``: the table's new change-log rows (inserts, updates, deletes); ``snapshots``: its
    new snapshot records, decoded (or None); ``news``: what the aggregate found
    (:class:`~binlake.silver.batch.TableNews`); ``base()``: silver as the last completed run left
    it; ``emptied``: TRUNCATE-like sequences bounding the batch; ``truncated``: everything older
    is gone; ``new_chunks``: the batch's manifest rows."""

    name = schema.name
    statements = statement_problems(news)

    def check(cut: tuple[int, int] | None):
        """The change-log rows after ``cut``, their fold (or None) and what stays inexact."""
        kept = changes
        if cut is not None:
            kept = changes.where(f"file_index > {cut[0]} OR (file_index = {cut[0]} AND pos > {cut[1]})")
        if not news.partial:
            return kept, None, None, after_cut(statements, cut), 0
        logged = log_rows(schema, decoder, kept)
        folded = fold(logged, snapshots, schema, base, emptied, truncated, cut).localCheckpoint()
        problems, superseded = found_problems(folded, schema)
        return kept, logged, folded, sorted(after_cut(statements, cut) + problems, key=_seq), superseded

    kept, logged, folded, offending, superseded = check(None)
    cover = None
    if offending:
        cover, pending = find_cover(offending, *table_snapshots(spark, lh, schema))
        if cover is None:
            raise stop_error(name, offending[0], pending)
        log.warning(
            "%s: changes silver cannot apply exactly (%s, up to %s) are covered by snapshot %s: the change log "
            "up to its first low watermark %s is left to it",
            name,
            offending[0].where,
            offending[-1].where,
            cover.snapshot_id,
            cover.floor,
        )
        kept, logged, folded, newer, superseded = check(cover.floor)
        if newer:
            raise stop_error(name, newer[0])
    done = Completion(changes=kept, dropped=superseded)
    if cover is not None:
        seen = {(c["snapshot_id"], c["chunk_id"], c["attempt_id"]) for c in new_chunks}
        done.rereconcile = [c for c in cover.chunks if (c["snapshot_id"], c["chunk_id"], c["attempt_id"]) not in seen]
    if folded is not None:
        if done.dropped:
            log.info(
                "%s: %d change(s) logged without some columns are superseded by a later complete image of the "
                "same row and left out",
                name,
                done.dropped,
            )
        done.records = folded_records(folded, schema)
        if snapshots is not None:  # the snapshot rows of keys no change-log record names
            done.records = done.records.unionByName(
                snapshots.join(touched_keys(logged, schema), list(schema.key), "left_anti")
            )
        done.cascade = folded_changes(folded, schema) if news.updates_deletes else None
    return done


def table_snapshots(spark: SparkLike, lh, schema: TableSchema) -> tuple[list[dict], list[dict]]:
    """The table's manifest rows and plan rows (read only for a table with a problem)."""
    from pyspark.sql import functions as F

    mine = (F.col("db") == schema.database) & (F.col("table") == schema.table)
    manifest = [r.asDict() for r in lh.snapshot_chunks.read(spark).where(mine).collect()]
    plan = [
        r.asDict()
        for r in lh.snapshot_plan.read(spark).where(mine).select("snapshot_id", "start_key", "end_key").collect()
    ]
    return manifest, plan


def _h(i: int) -> str:
    """The fold's flag: record carries column i."""
    return f"__h{i}"


def _b(i: int) -> str:
    """The before image's value of column i (logged updates and deletes)."""
    return f"__b{i}"


def _hb(i: int) -> str:
    return f"__hb{i}"


def _s(i: int) -> str:
    """Column i's value after the record: the latest value carried, as a struct (NULL: none)."""
    return f"__s{i}"


def log_rows(schema: TableSchema, decoder, changes):
    """Change-log rows as fold rows: per column its value and whether the image carried it."""
    cols = [c.name for c in schema.columns]
    idx = {c: i for i, c in enumerate(cols)}
    typed = changes.selectExpr(
        "op",
        "file_index",
        "pos",
        "`row`",
        "binlog_file",
        "commit_ts",
        f"CASE WHEN op = '{DELETE}' THEN 0 ELSE {decoder.zero_dates_sql('after')} END AS __zero",
        *[f"{decoder.column_sql(c, 'after')} AS __a{i}" for i, c in enumerate(cols)],
        *[f"{decoder.carried_sql(c, 'after')} AS __ha{i}" for i, c in enumerate(cols)],
        *[f"{decoder.column_sql(c, 'before')} AS {_b(i)}" for i, c in enumerate(cols)],
        *[f"{decoder.carried_sql(c, 'before')} AS {_hb(i)}" for i, c in enumerate(cols)],
    )
    n = range(len(cols))
    keys = [idx[k] for k in schema.key]
    all_a = " AND ".join(f"__ha{i}" for i in n)
    # What the record says of column i: an UPDATE's column missing from the after image is
    # unchanged, so its before image's value (where it has one) is the value after it too.
    value = {
        i: f"CASE op WHEN '{INSERT}' THEN __a{i} WHEN '{DELETE}' THEN {_b(i)} "
        f"ELSE CASE WHEN __ha{i} THEN __a{i} ELSE {_b(i)} END END"
        for i in n
    }
    has = {
        i: f"CASE op WHEN '{INSERT}' THEN __ha{i} WHEN '{DELETE}' THEN {_hb(i)} ELSE __ha{i} OR {_hb(i)} END" for i in n
    }
    moves = " OR ".join(f"(__ha{k} AND {_hb(k)} AND NOT (__a{k} <=> {_b(k)}))" for k in keys)
    unkeyed = " OR ".join(f"NOT ({has[k]})" for k in keys)
    problem = (
        f"CASE WHEN {unkeyed} THEN '{UNKEYED}' "
        f"WHEN op = '{INSERT}' AND NOT ({all_a}) THEN '{PARTIAL_INSERT}' "
        f"WHEN op = '{UPDATE}' AND ({moves}) AND NOT ({all_a}) THEN '{KEY_MOVE}' END"
    )
    missing = ", ".join(f"CASE WHEN NOT ({has[i]}) THEN {spark_string(c)} END" for i, c in enumerate(cols))
    seq = "named_struct('file_index', file_index, 'pos', pos, 'row', `row`)"
    common = [
        f"{seq} AS _cdc_seq",
        "commit_ts AS _cdc_commit_ts",
        "'batch' AS __src",
        "binlog_file AS __file",
    ]
    rows = typed.selectExpr(
        *[f"{value[i]} AS {quote_ident(c)}" for i, c in enumerate(cols)],
        *[f"{has[i]} AS {_h(i)}" for i in n],
        *[f"{_b(i)}" for i in n],
        *[f"{_hb(i)}" for i in n],
        *common,
        "op AS _cdc_op",
        f"op = '{DELETE}' AS _cdc_deleted",
        "2 AS _prio",
        "__zero AS _zero_dates",
        "op AS __kind",
        " AND ".join(f"({has[i]})" for i in n) + " AS __full",
        f"{problem} AS __problem",
        f"filter(array({missing}), x -> x IS NOT NULL) AS __missing",
    )
    # A full UPDATE that changes the key also ends the old key (as silver.batch does it): a
    # tombstone of the before image's key, completed from that key's own earlier state.
    all_b = " AND ".join(_hb(i) for i in n)
    moved = typed.where(f"op = '{UPDATE}' AND ({moves}) AND {all_a}").selectExpr(
        *[f"{_b(i)} AS {quote_ident(c)}" for i, c in enumerate(cols)],
        *[f"{_hb(i)} AS {_h(i)}" for i in n],
        *[f"CAST(NULL AS {schema.column(c).spark_type}) AS {_b(i)}" for i, c in enumerate(cols)],
        *[f"false AS {_hb(i)}" for i in n],
        *common,
        f"'{DELETE}' AS _cdc_op",
        "true AS _cdc_deleted",
        "1 AS _prio",
        "0 AS _zero_dates",
        "CAST(NULL AS STRING) AS __kind",
        f"{all_b} AS __full",
        "CAST(NULL AS STRING) AS __problem",
        "CAST(array() AS ARRAY<STRING>) AS __missing",
    )
    return rows.unionByName(moved)


def complete_rows(records, schema: TableSchema, src: str):
    """Records with every column known (snapshot rows, silver's own rows) as fold rows."""
    cols = [c.name for c in schema.columns]
    return records.selectExpr(
        *[quote_ident(c) for c in cols],
        *[f"true AS {_h(i)}" for i in range(len(cols))],
        *[f"CAST(NULL AS {schema.column(c).spark_type}) AS {_b(i)}" for i, c in enumerate(cols)],
        *[f"false AS {_hb(i)}" for i in range(len(cols))],
        *_RECORD_META,
        f"'{src}' AS __src",
        "CAST(NULL AS STRING) AS __kind",
        "CAST(NULL AS STRING) AS __file",
        "true AS __full",
        "CAST(NULL AS STRING) AS __problem",
        "CAST(array() AS ARRAY<STRING>) AS __missing",
    )


def touched_keys(logged, schema: TableSchema):
    """The keys the change log's records name: only these need folding."""
    return logged.select(*[quote_ident(k) for k in schema.key]).distinct()


def fold(logged, snapshots, schema: TableSchema, base, emptied: tuple, truncated, cut=None):
    """The fold rows of the keys ``logged`` (:func:`log_rows`) names, with what each record
    leaves of every column (``__s<i>``: a struct, NULL when no record up to it carried the
    column) and of the row before it (``__p<i>``), ``__problem`` (what cannot be completed
    exactly) and ``__superseded`` (a later complete record of the key makes it moot).

    The fold sees the key's silver row as the last completed run left it (``base()``), from
    ``cut``'s watermark on (older rows are the covering snapshot's to replace), and the batch's
    snapshot rows of the key (``snapshots``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    cols = [c.name for c in schema.columns]
    keys = list(schema.key)
    touched = touched_keys(logged, schema)
    silver = base().selectExpr(*[quote_ident(c) for c in cols], "_cdc_seq", "_cdc_op", "_cdc_deleted", "_cdc_commit_ts")
    if cut is not None:  # what is older than the covering snapshot is no state to start from
        silver = silver.where(F.col("_cdc_seq") >= F.expr(seq_literal((*cut, SNAPSHOT_ROW))))
        snapshots = (
            None
            if snapshots is None
            else snapshots.where(F.col("_cdc_seq") >= F.expr(seq_literal((*cut, SNAPSHOT_ROW))))
        )
    silver = silver.join(touched, keys, "left_semi").selectExpr("*", f"{_PRIO_BASE} AS _prio", "0 AS _zero_dates")
    rows = logged.unionByName(complete_rows(silver, schema, "base"))
    if snapshots is not None:
        rows = rows.unionByName(complete_rows(snapshots.join(touched, keys, "left_semi"), schema, "batch"))

    w = Window.partitionBy(*[F.col(quote_ident(k)) for k in keys]).orderBy("_cdc_seq", "_prio")
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    earlier = w.rowsBetween(Window.unboundedPreceding, -1)
    later = w.rowsBetween(1, Window.unboundedFollowing)
    n = range(len(cols))
    # A column's value after a record: the latest value carried by it or an earlier record;
    # a struct, so that a carried NULL is a value and only "not carried" is skipped.
    rows = rows.select(
        "*",
        *[
            F.last(F.when(F.col(_h(i)), F.struct(F.col(quote_ident(c)).alias("v"))), ignorenulls=True)
            .over(upto)
            .alias(_s(i))
            for i, c in enumerate(cols)
        ],
        F.lag("_cdc_seq").over(w).alias("__prev_seq"),
        F.lag("_cdc_deleted").over(w).alias("__prev_deleted"),
        F.last(F.when(F.col("__full"), F.col("_cdc_seq")), ignorenulls=True).over(earlier).alias("__last_full"),
        F.max(F.col("__full").cast("int")).over(later).alias("__later_full"),
    )
    # A partial UPDATE needs the row alive just before it (no delete and no TRUNCATE since the
    # record before it) and every column it lacks known from earlier records ...
    between = "false"
    if emptied:
        between = f"exists(array({', '.join(seq_literal(t) for t in emptied)}), t -> __prev_seq < t AND t < _cdc_seq)"
    alive = f"__prev_seq IS NOT NULL AND NOT __prev_deleted AND NOT ({between})"
    known = " AND ".join(f"{_s(i)} IS NOT NULL" for i in n)
    needs = "(__kind = 'update' AND NOT __full)"
    rows = rows.select(
        *[c for c in rows.columns if c != "__problem"],
        *[F.lag(_s(i)).over(w).alias(_p(i)) for i in n],
        F.expr(f"coalesce(__problem, CASE WHEN {needs} AND NOT ({alive} AND {known}) THEN '{NO_PREVIOUS}' END)").alias(
            "__problem"
        ),
    )
    # ... and none of the records it builds on (those since the last complete one) to be a
    # problem itself: a chain of partial updates is exact only from an exact start.
    chained = (
        f"coalesce(__problem, CASE WHEN {needs} AND __problem_before > "
        f"coalesce(__last_full, {seq_literal((-1, -1, -2))}) THEN '{NO_PREVIOUS}' END)"
    )
    rows = rows.withColumn(
        "__problem_before",
        F.last(F.when(F.col("__problem").isNotNull(), F.col("_cdc_seq")), ignorenulls=True).over(earlier),
    ).withColumn("__problem", F.expr(chained))
    # A later complete record of the key (silver's newer row, a snapshot row, a full image), or
    # a TRUNCATE after it, decides the row whatever this record held: it cannot change silver.
    older = "false" if truncated is None else f"_cdc_seq < {seq_literal(truncated)}"
    superseded = f"__problem IS NOT NULL AND __problem <> '{UNKEYED}' AND (coalesce(__later_full, 0) = 1 OR {older})"
    return rows.withColumn("__superseded", F.expr(superseded)).where("__src = 'batch'")


def _p(i: int) -> str:
    """Column i's value just before the record (the previous record's ``__s<i>``)."""
    return f"__p{i}"


def found_problems(folded, schema: TableSchema) -> tuple[list[Problem], int]:
    """The first and the last record of the fold that cannot be applied exactly, and how many
    problems are superseded (one job on the checkpointed fold)."""
    from pyspark.sql import functions as F

    key = ", ".join(
        f"concat({spark_string(k + '=')}, coalesce(CAST({quote_ident(k)} AS STRING), 'NULL'))" for k in schema.key
    )
    what = F.struct(
        F.col("_cdc_seq"),
        F.col("__file"),
        F.col("__kind"),
        F.col("__problem"),
        F.col("__missing"),
        F.expr(f"concat_ws(', ', {key})").alias("__key"),
    )
    inexact = F.when(F.col("__problem").isNotNull() & ~F.col("__superseded"), what)
    r = folded.agg(
        F.min(inexact).alias("first"),
        F.max(inexact).alias("last"),
        F.count_if(F.col("__problem").isNotNull() & F.col("__superseded")).alias("superseded"),
    ).first()
    out = []
    for found in (r["first"], r["last"]):
        if found is not None:
            seq = found["_cdc_seq"]
            out.append(
                Problem(
                    found["__problem"],
                    (seq["file_index"], seq["pos"], seq["row"]),
                    found["__file"],
                    found["__kind"],
                    found["__key"],
                    tuple(found["__missing"] or ()),
                )
            )
    return out, int(r["superseded"] or 0)


def folded_records(folded, schema: TableSchema):
    """The fold's records as silver records (:func:`binlake.silver.batch.batch_records`):
    every column completed; the superseded problems left out."""
    return folded.where("NOT (__problem IS NOT NULL AND __superseded)").selectExpr(
        *[f"{_s(i)}.v AS {quote_ident(c.name)}" for i, c in enumerate(schema.columns)], *_RECORD_META
    )


def folded_changes(folded, schema: TableSchema):
    """The fold's logged updates and deletes with before (``o__``) and after (``n__``) values of
    every column (:func:`binlake.silver.batch.logged_changes`), what foreign-key actions start
    from: the before image's value where it has one, else the row's state before the change."""
    from binlake.silver.cascade import new, old

    befores = {i: f"CASE WHEN {_hb(i)} THEN {_b(i)} ELSE {_p(i)}.v END" for i in range(len(schema.columns))}
    return folded.where(f"__kind IN ('{UPDATE}', '{DELETE}')").selectExpr(
        "__kind AS kind",
        "_cdc_seq AS seq",
        "_cdc_commit_ts AS ts",
        *[f"{befores[i]} AS {quote_ident(old(c.name))}" for i, c in enumerate(schema.columns)],
        *[
            f"CASE WHEN __kind = '{UPDATE}' THEN coalesce({_s(i)}, named_struct('v', {befores[i]})).v END "
            f"AS {quote_ident(new(c.name))}"
            for i, c in enumerate(schema.columns)
        ],
    )
