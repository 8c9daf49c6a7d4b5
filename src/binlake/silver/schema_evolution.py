"""Silver table creation and schema evolution driven by bronze ``schema_history``.

Silver tables are created with column mapping mode ``name`` (so RENAME and DROP COLUMN are
metadata-only), type widening (so INT -> BIGINT is metadata-only), deletion vectors, change
data feed and liquid clustering on the key. Each silver table records the source schema
version it matches in the table property ``binlake.schema_version``; evolution walks the
schema history from that version to the latest, one DDL step at a time.

Compatible steps (applied in place): ADD COLUMN (with FIRST/AFTER position), DROP COLUMN,
RENAME COLUMN / CHANGE old new, widening MODIFY (integer widths, integer -> DECIMAL or
DOUBLE, FLOAT -> DOUBLE, DECIMAL precision/scale growth), type changes between types that
share a Spark type (VARCHAR(10) -> VARCHAR(50)), and comment changes.

Incompatible steps (key change, narrowing, any other type change) raise
:class:`~binlake.errors.SchemaChangeError` for that table only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from binlake.contract.ddl import column_renames
from binlake.contract.memo import once_per_version
from binlake.contract.schemas import SILVER_METADATA_COLUMNS
from binlake.contract.sql import quote_ident, spark_string
from binlake.contract.tables import TableRef
from binlake.contract.types import Column, TableSchema
from binlake.errors import SchemaChangeError

if TYPE_CHECKING:
    from binlake.spark import SparkLike

SCHEMA_VERSION_PROPERTY = "binlake.schema_version"
TRUNCATED_SEQ_PROPERTY = "binlake.truncated_seq"

SILVER_TABLE_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
    "delta.columnMapping.mode": "name",
    "delta.enableTypeWidening": "true",
    # MERGE rewrites only the files holding matched keys; small target files keep that cheap.
    "delta.autoOptimize.optimizeWrite": "true",
}

TYPE_FEATURES = {"timestamp_ntz": "timestampNtz"}
"""The Delta table feature a column of each Spark type needs. Delta enables it by itself
when a table is created with such a column, but refuses to add one to an existing table that
lacks the feature (``DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT``): an ALTER TABLE ADD COLUMN,
a widening to the type, an overwrite or a CREATE OR REPLACE with a new schema. A table created
without a DATETIME column lacks ``timestampNtz``, so every schema change enables first what its
new columns need (:func:`enable_features`)."""


def features_needed(spark_types) -> list[str]:
    """The table features columns of these Spark types need (``TIMESTAMP_NTZ``, or a struct
    holding one, needs ``timestampNtz``)."""
    squeezed = [t.lower().replace(" ", "") for t in spark_types]
    return sorted({feature for name, feature in TYPE_FEATURES.items() for t in squeezed if name in t})


def enable_features(spark: SparkLike, ref: TableRef, spark_types) -> list[str]:
    """Enable on the existing table ``ref`` the features that columns of ``spark_types`` need
    and it lacks, in one commit; returns those it enabled. Costs nothing for types that need
    none, and one look at the table's properties otherwise."""
    needed = features_needed(spark_types)
    if not needed:
        return []
    props = ref.properties(spark)
    missing = [f for f in needed if props.get(f"delta.feature.{f}") not in ("supported", "enabled")]
    if missing:
        assignments = ", ".join(f"{spark_string(f'delta.feature.{f}')} = 'supported'" for f in missing)
        spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({assignments})")
    return missing


@dataclass(frozen=True)
class HistoryEntry:
    """One row of bronze schema_history for a table."""

    schema: TableSchema
    version: str
    file_index: int
    pos: int
    ddl: str | None

    @property
    def seq(self) -> tuple[int, int, int]:
        return (self.file_index or 0, self.pos or 0, -1)


def load_histories(spark: SparkLike, lh) -> dict[tuple[str, str], list[HistoryEntry]]:
    """Every table's schema versions in binlog order, from one read of schema_history (a few
    rows per table; once per version of it in a process)."""

    def compute(version: int) -> dict[tuple[str, str], list[HistoryEntry]]:
        rows = (
            lh.schema_history.read_version(spark, version)
            .select("db", "table", "schema_version", "file_index", "pos", "ddl", "schema_json", "recorded_at")
            .collect()
        )
        by_table: dict[tuple[str, str], list] = {}
        for r in rows:
            by_table.setdefault((r["db"], r["table"]), []).append(r)
        out = {}
        for key, entries in by_table.items():
            entries.sort(
                key=lambda r: (
                    r["file_index"] is not None,
                    r["file_index"] or 0,
                    r["pos"] is not None,
                    r["pos"] or 0,
                    r["recorded_at"],
                )
            )
            out[key] = [
                HistoryEntry(
                    TableSchema.from_json(r["schema_json"]), r["schema_version"], r["file_index"], r["pos"], r["ddl"]
                )
                for r in entries
            ]
        return out

    return {
        key: list(entries) for key, entries in once_per_version(spark, lh.schema_history, "histories", compute).items()
    }


def load_history(spark: SparkLike, lh, db: str, table: str, histories: dict | None = None) -> list[HistoryEntry]:
    """The table's schema versions in binlog order, with the DDL texts renames need
    (``histories``: what :func:`load_histories` returned, to save reading it again)."""
    entries = (histories if histories is not None else load_histories(spark, lh)).get((db, table), [])
    return _with_ddl_texts(spark, lh, db, table, entries)


def _with_ddl_texts(spark: SparkLike, lh, db: str, table: str, entries: list[HistoryEntry]) -> list[HistoryEntry]:
    """Attach the change log's DDL statements to the versions they produced.

    A version is recorded where it is first seen (a TABLE_MAP, or a snapshot's plan), not at
    its DDL, so the statement text lives in the change log's ``op='ddl'`` rows between the
    previous version and this one. Only a RENAME tells a renamed column from a dropped one
    plus an added one, and getting that wrong would empty the column; so only steps that
    both lose and gain column names pay for the lookup.
    """
    from dataclasses import replace

    from pyspark.sql import functions as F

    gaps = [
        i
        for i in range(1, len(entries))
        if entries[i].ddl is None
        and {c.name for c in entries[i - 1].schema.columns} - {c.name for c in entries[i].schema.columns}
        and {c.name for c in entries[i].schema.columns} - {c.name for c in entries[i - 1].schema.columns}
    ]
    if not gaps or not lh.changelog.exists(spark):
        return entries
    lo = min((entries[i - 1].file_index or 0, entries[i - 1].pos or 0) for i in gaps)
    hi = max((entries[i].file_index or 0, entries[i].pos or 0) for i in gaps)
    after_lo = (F.col("file_index") > lo[0]) | ((F.col("file_index") == lo[0]) & (F.col("pos") > lo[1]))
    upto_hi = (F.col("file_index") < hi[0]) | ((F.col("file_index") == hi[0]) & (F.col("pos") <= hi[1]))
    statements = sorted(
        ((r["file_index"], r["pos"], r["row"]), r["ddl"])
        for r in lh.changelog.read(spark)
        .where((F.col("db") == db) & (F.col("table") == table) & (F.col("op") == "ddl") & after_lo & upto_hi)
        .select("file_index", "pos", "row", "ddl")
        .collect()
    )
    out = list(entries)
    for i in gaps:
        prev, cur = out[i - 1].seq[:2], out[i].seq[:2]
        texts = [text for (fi, pos, _), text in statements if prev < (fi, pos) <= cur and text]
        if texts:
            out[i] = replace(out[i], ddl=";\n".join(texts))
    return out


# ---------------------------------------------------------------------------------------
# DDL steps


@dataclass(frozen=True)
class Step:
    """What one schema version change does to silver."""

    renames: tuple[tuple[str, str], ...]
    drops: tuple[str, ...]
    adds: tuple[tuple[Column, str | None], ...]  # (column, after-name or None for FIRST)
    retypes: tuple[Column, ...]
    recomments: tuple[Column, ...]
    problem: str | None = None  # why the step is incompatible

    @property
    def empty(self) -> bool:
        return not (self.renames or self.drops or self.adds or self.retypes or self.recomments)


_INT_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
_INT_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}
_DEC = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def widening(old: str, new: str) -> bool:
    """True if Delta type widening turns Spark type ``old`` into ``new`` without loss."""
    old, new = old.lower().replace(" ", ""), new.lower().replace(" ", "")
    if old == new:
        return True
    if old in _INT_RANK and new in _INT_RANK:
        return _INT_RANK[new] > _INT_RANK[old]
    if old == "float" and new == "double":
        return True
    if old in ("tinyint", "smallint", "int") and new == "double":
        return True
    m_new = _DEC.fullmatch(new)
    if old in _INT_DIGITS and m_new:
        p, s = int(m_new.group(1)), int(m_new.group(2))
        return p - s >= _INT_DIGITS[old]
    m_old = _DEC.fullmatch(old)
    if m_old and m_new:
        p1, s1, p2, s2 = map(int, (*m_old.groups(), *m_new.groups()))
        return s2 >= s1 and p2 - s2 >= p1 - s1
    return False


def diff(prev: TableSchema, nxt: TableSchema, ddl: str | None) -> Step:
    """The silver changes that take ``prev`` to ``nxt``."""
    prev_names = [c.name for c in prev.columns]
    next_names = [c.name for c in nxt.columns]
    renames = tuple(
        (a, b) for a, b in column_renames(ddl) if a in prev_names and b in next_names and a not in next_names
    )
    renamed_from = {b: a for a, b in renames}
    renamed_to = {a: b for a, b in renames}
    drops = tuple(n for n in prev_names if n not in next_names and n not in renamed_to)
    adds = []
    for i, c in enumerate(nxt.columns):
        if c.name not in prev_names and c.name not in renamed_from:
            adds.append((c, next_names[i - 1] if i else None))
    retypes, recomments, problem = [], [], None
    for c in nxt.columns:
        old_name = renamed_from.get(c.name, c.name)
        if old_name not in prev_names:
            continue
        old = prev.column(old_name)
        if old.spark_type != c.spark_type:
            if widening(old.spark_type, c.spark_type):
                retypes.append(c)
            else:
                problem = problem or (
                    f"column {c.name} changes type {old.mysql_type or old.spark_type} -> "
                    f"{c.mysql_type or c.spark_type} "
                    f"({old.spark_type} -> {c.spark_type} is not a widening)"
                )
        if old.comment != c.comment:
            recomments.append(c)
    mapped_key = tuple(renamed_to.get(k, k) for k in prev.key)
    if mapped_key != tuple(nxt.key):
        problem = f"the key changes from ({', '.join(prev.key)}) to ({', '.join(nxt.key)})"
    if prev.column_rules != nxt.column_rules:
        problem = RULES_CHANGED
    return Step(renames, drops, tuple(adds), tuple(retypes), tuple(recomments), problem)


# ---------------------------------------------------------------------------------------
# Column-name mapping for decoding old row images


def name_maps(history: list[HistoryEntry], target: TableSchema) -> dict[str, dict[str, str]]:
    """{schema_version: {target column: column name in row images of that version}}.

    Row images are keyed by the column names valid when they were written; a rename later
    in the history means the old image's value belongs in the renamed target column.
    """
    out: dict[str, dict[str, str]] = {}
    for i, entry in enumerate(history):
        current = {c.name: c.name for c in entry.schema.columns}  # name in this version -> name now
        prev = entry.schema
        for later in history[i + 1 :]:
            step = diff(prev, later.schema, later.ddl)
            ren = dict(step.renames)
            current = {orig: ren.get(now, now) for orig, now in current.items() if now not in step.drops}
            prev = later.schema
        # The last occurrence of a version wins: it is the one closest to the target.
        out[entry.version] = {now: orig for orig, now in current.items()}
    out.setdefault(target.version(), {c.name: c.name for c in target.columns})
    return out


# ---------------------------------------------------------------------------------------
# Silver DDL


def _column_ddl(c: Column) -> str:
    return f"{quote_ident(c.name)} {c.spark_type}" + (f" COMMENT {spark_string(c.comment)}" if c.comment else "")


def create_silver_table(
    spark: SparkLike,
    ref: TableRef,
    schema: TableSchema,
    replace: bool = False,
    metadata: tuple = SILVER_METADATA_COLUMNS,
    properties: dict | None = None,
) -> bool:
    """Create the silver table for ``schema`` if missing (or replace it); True if created.
    ``metadata``: the ``(name, type, comment)`` columns after the source's (a history table's
    differ from silver's); ``properties``: more table properties to create it with.

    Liquid clustering on the key is tried first; key types Delta cannot cluster by (e.g.
    BINARY has no min/max statistics) fall back to an unclustered table.
    """
    if not replace and ref.exists(spark):
        return False
    cols = [_column_ddl(c) for c in schema.columns]
    cols += [f"{name} {typ} COMMENT {spark_string(comment)}" for name, typ, comment in metadata]
    props = {**SILVER_TABLE_PROPERTIES, SCHEMA_VERSION_PROPERTY: schema.version(), **(properties or {})}
    tbl = ", ".join(f"{spark_string(k)} = {spark_string(v)}" for k, v in props.items())
    comment = f" COMMENT {spark_string(schema.comment)}" if schema.comment else ""
    cluster = f"CLUSTER BY ({', '.join(quote_ident(k) for k in schema.key)})"
    if replace and ref.exists(spark):
        # Delta keeps a replaced table's features: the new schema's must be there first.
        enable_features(spark, ref, [c.spark_type for c in schema.columns] + [typ for _, typ, _ in metadata])
        if ref.path:
            _replace_at_path(spark, ref, cols, cluster, tbl, schema.comment)
            return True
    verb = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
    head = f"{verb} {ref.sql} ({', '.join(cols)}) USING DELTA"
    try:
        spark.sql(f"{head} {cluster}{comment} TBLPROPERTIES ({tbl})")
    except Exception as exc:  # Delta's clustering limits vary by type and version
        if not _clustering_refused(exc):
            raise
        spark.sql(f"{head}{comment} TBLPROPERTIES ({tbl})")
    return True


def _clustering_refused(exc: Exception) -> bool:
    return "CLUSTER" in str(exc).upper() or "STATS" in str(exc).upper()


def _replace_at_path(spark: SparkLike, ref: TableRef, cols: list[str], cluster: str, tbl: str, comment: str) -> None:
    """Replace a path table's schema and rows (Delta refuses CREATE OR REPLACE with another
    schema at a path). An overwrite keeps the version history going: gold tells a rebuilt
    table by that overwrite, where a new directory would restart the versions and could
    land on the very version gold last published."""
    empty = spark.createDataFrame([], ", ".join(cols))
    # Delta blocks an overwrite of a table with a change feed once a column was dropped or
    # renamed; the feed is off for that one commit (gold rebuilds over it in any case) and
    # on again with the properties below.
    set_table_property(spark, ref, "delta.enableChangeDataFeed", "false")
    ref.save(empty.write.format("delta").mode("overwrite").option("overwriteSchema", "true"))
    try:
        spark.sql(f"ALTER TABLE {ref.sql} {cluster}")
    except Exception as exc:  # as in create_silver_table
        if not _clustering_refused(exc):
            raise
    spark.sql(f"ALTER TABLE {ref.sql} UNSET TBLPROPERTIES IF EXISTS ({spark_string(TRUNCATED_SEQ_PROPERTY)})")
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({tbl}, 'comment' = {spark_string(comment)})")


def table_property(spark: SparkLike, ref: TableRef, key: str) -> str | None:
    rows = spark.sql(f"SHOW TBLPROPERTIES {ref.sql}").collect()
    for r in rows:
        if r["key"] == key:
            return r["value"]
    return None


def set_table_property(spark: SparkLike, ref: TableRef, key: str, value: str) -> None:
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({spark_string(key)} = {spark_string(value)})")


def set_table_properties(spark: SparkLike, ref: TableRef, values: dict[str, str]) -> None:
    """Set several table properties in one commit."""
    assignments = ", ".join(f"{spark_string(k)} = {spark_string(v)}" for k, v in values.items())
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({assignments})")


def _silver_fields(spark: SparkLike, ref: TableRef) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in ref.read(spark).schema.fields}


def _apply_step(spark: SparkLike, ref: TableRef, step: Step) -> None:
    # Every ALTER checks the live schema first, so a run killed halfway through a step
    # simply finishes it on the next run.
    enable_features(spark, ref, [c.spark_type for c, _ in step.adds] + [c.spark_type for c in step.retypes])
    for old, new in step.renames:
        fields = _silver_fields(spark, ref)
        if old in fields and new not in fields:
            spark.sql(f"ALTER TABLE {ref.sql} RENAME COLUMN {quote_ident(old)} TO {quote_ident(new)}")
    for name in step.drops:
        if name in _silver_fields(spark, ref):
            spark.sql(f"ALTER TABLE {ref.sql} DROP COLUMN {quote_ident(name)}")
    for col, after in step.adds:
        if col.name in _silver_fields(spark, ref):
            continue
        position = f" AFTER {quote_ident(after)}" if after else " FIRST"
        spark.sql(f"ALTER TABLE {ref.sql} ADD COLUMN {_column_ddl(col)}{position}")
    for col in step.retypes:
        if _silver_fields(spark, ref).get(col.name, "").replace(" ", "") != col.spark_type.lower().replace(" ", ""):
            spark.sql(f"ALTER TABLE {ref.sql} ALTER COLUMN {quote_ident(col.name)} TYPE {col.spark_type}")
    for col in step.recomments:
        spark.sql(f"ALTER TABLE {ref.sql} ALTER COLUMN {quote_ident(col.name)} COMMENT {spark_string(col.comment)}")


RULES_CHANGED = (
    "its column rules (source.columns, or the mask salt) changed since its rows were read, and rows "
    "read under the old and the new rules must not mix"
)


def rules_changed_error(name: str) -> SchemaChangeError:
    return SchemaChangeError(
        f"silver stopped {name}: {RULES_CHANGED}; the other tables go on; recover with: binlake snapshot --table {name}"
    )


def incompatible_error(schema: TableSchema, entry: HistoryEntry, problem: str) -> SchemaChangeError:
    if problem == RULES_CHANGED:
        return rules_changed_error(schema.name)
    ddl = " ".join((entry.ddl or "(schema recorded without DDL text)").split())
    return SchemaChangeError(
        f"silver cannot apply the schema change of {schema.name} at binlog position "
        f"({entry.file_index}, {entry.pos}): {ddl!r}: {problem}; the table is stopped, other tables go on; "
        f"recover with: binlake snapshot --table {schema.name}"
    )


def pending_steps(history: list[HistoryEntry], silver_version: str | None) -> list[tuple[HistoryEntry, Step]]:
    """The (entry, step) pairs after the last history entry silver matches."""
    start = None
    for i, e in enumerate(history):
        if e.version == silver_version:
            start = i
    if start is None:
        return []
    out = []
    prev = history[start]
    for e in history[start + 1 :]:
        step = diff(prev.schema, e.schema, e.ddl)
        if not step.empty or step.problem:
            out.append((e, step))
        prev = e
    return out


def evolve(
    spark: SparkLike,
    ref: TableRef,
    history: list[HistoryEntry],
    check: Callable[[HistoryEntry], None] | None = None,
    applied: Callable[[HistoryEntry], None] | None = None,
    properties: dict[str, str] | None = None,
) -> list[str]:
    """Bring an existing silver table to the latest schema; returns the DDL texts applied.

    Raises SchemaChangeError at the first incompatible step, before altering anything.
    ``check(entry)`` may refuse a pending step the same way; ``applied(entry)`` runs after
    each step is applied (an added column's backfill); ``properties`` are set with the
    schema version, in the same commit.
    """
    target = history[-1]
    current = table_property(spark, ref, SCHEMA_VERSION_PROPERTY)
    if current == target.version:
        return []
    steps = pending_steps(history, current)
    if current is not None and not steps and not any(e.version == current for e in history):
        # Silver was built from a schema bronze no longer records: compare columns directly.
        fields = _silver_fields(spark, ref)
        known = [c for c in target.schema.columns if c.name in fields]
        pseudo = TableSchema(target.schema.database, target.schema.table, tuple(known), target.schema.key)
        steps = [(target, diff(pseudo, target.schema, None))]
    for entry, step in steps:
        if step.problem:
            raise incompatible_error(target.schema, entry, step.problem)
        if check is not None:
            check(entry)
    for entry, step in steps:
        _apply_step(spark, ref, step)
        if applied is not None:
            applied(entry)
    set_table_properties(spark, ref, {**(properties or {}), SCHEMA_VERSION_PROPERTY: target.version})
    return [e.ddl or "" for e, _ in steps]
