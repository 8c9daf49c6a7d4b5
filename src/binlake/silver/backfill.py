"""The value an added column has in rows older than its ADD COLUMN: the DEFAULT MySQL and
MariaDB wrote into every existing row, which the binlog does not carry.

Each step of the schema history that adds columns gets, per added column, what
:func:`binlake.contract.added_columns.backfill` reads from the statement's text (in the change
log, between the step's previous version and its own), and the statement's position as a
boundary: a row whose last change sorts below it is older than the ADD and holds the default.
Silver applies it in two places, both at the DDL's position:

- rows already in silver: one ``UPDATE ... WHERE _cdc_seq < boundary`` when the step is
  applied (:func:`update_older_rows`); a row changed after the DDL has a greater sequence and
  keeps its logged value;
- records of this and later batches written under a version without the column (a row
  image logged before the DDL, a snapshot chunk read before it): decoded with the default
  instead of NULL (:func:`defaults_of`), so a row changed only before the DDL gets it, and one
  changed again after it keeps the later record.

What a step resolved is kept in the silver table's property ``binlake.backfill`` (set with
its schema version), so the change log is read once per ADD, not once per run.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from binlake import faults
from binlake.contract.added_columns import added_definitions, backfill
from binlake.contract.position import DERIVED_ROW, seq_literal
from binlake.contract.sql import Sql, quote_ident, spark_string, sql
from binlake.contract.tables import TableRef
from binlake.contract.types import TableSchema, spark_decode_sql
from binlake.errors import DefaultBackfillError
from binlake.silver import schema_evolution as se

if TYPE_CHECKING:
    from binlake.spark import SparkLike

BACKFILL_PROPERTY = "binlake.backfill"


@dataclass(frozen=True)
class Added:
    """One added column: its name in the step's version, the value older rows hold
    (canonical text, None for NULL) unless ``unknown`` says why binlake cannot know it, and the
    DDL's position (rows with a smaller ``_cdc_seq`` are older than the ADD); ``rows``: how
    many silver rows the backfill gave the value, once it ran (``binlake status`` shows it)."""

    column: str
    text: str | None
    unknown: str | None
    boundary: tuple[int, int, int]
    rows: int | None = None


def step_key(entry: se.HistoryEntry) -> str:
    """Names one step of the history (a version can recur: drop a column and add it again)."""
    return f"{entry.version}@{entry.file_index or 0}:{entry.pos or 0}"


def adding_steps(history: list[se.HistoryEntry]) -> list[tuple[se.HistoryEntry, se.HistoryEntry, list[str]]]:
    """``(previous, entry, added column names)`` of each history step that adds columns."""
    out = []
    for prev, entry in itertools.pairwise(history):
        adds = [c.name for c, _ in se.diff(prev.schema, entry.schema, entry.ddl).adds]
        if adds:
            out.append((prev, entry, adds))
    return out


def cached(props: dict[str, str]) -> dict[str, list[Added]]:
    """What the silver table's property holds, by :func:`step_key`."""
    raw = json.loads(props.get(BACKFILL_PROPERTY) or "{}")
    return {
        k: [Added(a["column"], a["text"], a["unknown"], tuple(a["boundary"]), a.get("rows")) for a in v]
        for k, v in raw.items()
    }


def property_value(resolved: dict[str, list[Added]]) -> str:
    return json.dumps({k: [asdict(a) for a in v] for k, v in sorted(resolved.items())}, sort_keys=True)


def resolve(
    spark: SparkLike, lh, db: str, table: str, history: list, known: dict[str, list[Added]]
) -> dict[str, list[Added]]:
    """Every adding step's columns: ``known`` ones as they are, the others read from their
    statements (one range read of the change log's DDL rows for all of them)."""
    missing = [(p, e, adds) for p, e, adds in adding_steps(history) if step_key(e) not in known]
    if not missing:
        return dict(known)
    statements = _statements(spark, lh, db, table, [(p, e) for p, e, _ in missing if e.ddl is None])
    out = dict(known)
    for prev, entry, adds in missing:
        found: list[tuple[tuple[int, int, int], str, int | None]]
        if entry.ddl is not None:  # recorded with the version (no change-log row of its own)
            found = [((entry.file_index or 0, entry.pos or 0, 0), entry.ddl, None)]
        else:
            found = [s for s in statements if prev.seq[:2] < s[0][:2] <= entry.seq[:2]]
        out[step_key(entry)] = [_added(entry.schema, name, found, entry) for name in adds]
    return out


def _added(schema: TableSchema, name: str, statements: list, entry: se.HistoryEntry) -> Added:
    """The column ``name`` as the last of ``statements`` (``(seq, text, epoch)`` in binlog
    order) that adds it defines it."""
    for seq, text, epoch in reversed(statements):
        definition = added_definitions(text).get(name.lower())
        if definition is not None:
            got = backfill(schema.column(name), definition, epoch)
            return Added(name, got.text, got.unknown, (seq[0], seq[1], DERIVED_ROW))
    got = backfill(schema.column(name), None, None)
    return Added(name, got.text, got.unknown, (entry.file_index or 0, entry.pos or 0, DERIVED_ROW))


def _statements(
    spark: SparkLike, lh, db: str, table: str, gaps: list
) -> list[tuple[tuple[int, int, int], str, int | None]]:
    """The table's DDL statements in the change log within the gaps' positions, in binlog
    order, as ``(seq, text, statement time in epoch seconds)``."""
    from pyspark.sql import functions as F

    if not gaps or not lh.changelog.exists(spark):
        return []
    lo = min(p.seq[:2] for p, _ in gaps)
    hi = max(e.seq[:2] for _, e in gaps)
    after_lo = (F.col("file_index") > lo[0]) | ((F.col("file_index") == lo[0]) & (F.col("pos") > lo[1]))
    upto_hi = (F.col("file_index") < hi[0]) | ((F.col("file_index") == hi[0]) & (F.col("pos") <= hi[1]))
    rows = (
        lh.changelog.read(spark)
        .where((F.col("db") == db) & (F.col("table") == table) & (F.col("op") == "ddl") & after_lo & upto_hi)
        .selectExpr("file_index", "pos", "`row`", "ddl", "CAST(unix_timestamp(commit_ts) AS BIGINT) AS epoch")
        .collect()
    )
    return sorted(((r["file_index"], r["pos"], r["row"]), r["ddl"], r["epoch"]) for r in rows if r["ddl"])


def defaults_of(history: list, resolved: dict[str, list[Added]], target: TableSchema) -> dict[str, str]:
    """``{target column: canonical text}``: what a record written under a version without the
    column holds in it (the default of the column's last ADD; NULL ones are left out)."""
    maps = se.name_maps(history, target)
    out: dict[str, str] = {}
    for _, entry, _ in adding_steps(history):
        mapping = maps.get(entry.version, {})
        added = {a.column: a for a in resolved.get(step_key(entry), [])}
        for now, then in mapping.items():
            if then in added:
                a = added[then]
                if a.text is not None and a.unknown is None:
                    out[now] = a.text
                else:
                    out.pop(now, None)
    return out


def check(entry: se.HistoryEntry, resolved: dict[str, list[Added]], name: str) -> None:
    """Raise :class:`DefaultBackfillError` if the step ``entry`` adds a column whose value in
    older rows binlake cannot know."""
    for a in resolved.get(step_key(entry), []):
        if a.unknown:
            raise unknown_error(name, a, entry)


def unknown_error(name: str, a: Added, entry: se.HistoryEntry) -> DefaultBackfillError:
    ddl = " ".join((entry.ddl or "ADD COLUMN").split())
    return DefaultBackfillError(
        f"silver cannot backfill column {a.column} of {name}, added at binlog position "
        f"({a.boundary[0]}, {a.boundary[1]}){': ' + repr(ddl) if entry.ddl else ''}: {a.unknown}; the table is "
        f"stopped, other tables go on; recover with: binlake snapshot --table {name}"
    )


def with_rows(resolved: dict[str, list[Added]], entry: se.HistoryEntry, rows: dict[str, int]) -> dict:
    """``resolved`` with the step's columns carrying the rows their backfill updated."""
    key = step_key(entry)
    done = [replace(a, rows=rows[a.column]) if a.column in rows else a for a in resolved.get(key, [])]
    return {**resolved, key: done} if key in resolved else resolved


def report(props: dict[str, str]) -> list[dict]:
    """What a silver table's backfills gave its older rows, for ``binlake status``: column,
    value (canonical text, None for NULL), the ADD's binlog position (file index, pos) and
    rows updated (None: not run yet, or the table was filled after the ADD)."""
    return [
        {"column": a.column, "value": a.text, "position": list(a.boundary[:2]), "rows": a.rows}
        for _, added in sorted(cached(props).items())
        for a in added
        if a.unknown is None and a.text is not None
    ]


def update_older_rows(
    spark: SparkLike, ref: TableRef, schema: TableSchema, entry, resolved: dict[str, list[Added]]
) -> dict:
    """Give silver's live rows older than the step's ADD their added columns' values; returns
    ``{column: rows updated}``. Running it again changes nothing (the same rows, the same
    value), so a run killed after it simply runs it again."""
    out = {}
    for a in resolved.get(step_key(entry), []):
        if a.text is None or a.unknown or a.column not in {c.name for c in schema.columns}:
            continue
        value = spark_decode_sql(schema.column(a.column), spark_string(a.text))
        statement = sql(
            "UPDATE {t} SET {column} = {value} WHERE NOT _cdc_deleted AND _cdc_seq < {boundary}",
            t=ref.sql,
            column=quote_ident(a.column),
            value=Sql(value),
            boundary=Sql(seq_literal(a.boundary)),
        )
        metrics = spark.sql(statement).collect()
        out[a.column] = int(metrics[0]["num_affected_rows"] or 0) if metrics else 0
        faults.point("silver.after_backfill")
    return out
