"""The lakehouse's layout version, and the migration that brings a lakehouse an earlier binlake
laid out up to date.

Where the tables live and which columns and properties they have changed over binlake's
versions. Instead of each reader and writer coping with every earlier shape, each change is a
numbered step in :data:`STEPS`, and the lakehouse records the number of the last step applied:
its *layout version*, the table property ``binlake.layout_version`` of the system table
``leases``. Every command that writes checks it once per process (one look at a table's
properties) and, when it is behind, runs the missing steps once, holding every layer's lease
so no other writer runs meanwhile (:func:`ensure_current_layout`; ``binlake migrate`` runs just
that). Read-only commands refuse an old layout with :class:`~binlake.errors.LayoutOutdatedError`
instead of writing (:func:`require_current_layout`).

Each step is idempotent and recorded as soon as it is done, so a migration killed anywhere is
finished by the next command. A lakehouse no earlier binlake wrote starts at the current
version and runs no step.

Layout 0 is every lakehouse written before layouts were numbered. The steps to layout 4:

1. binlake's own tables move out of the gold and silver schemas into the system schema:
   ``gold/_publish_log``, ``_check_results``, ``_metrics`` and ``_quarantine/<db>/<table>``
   and ``silver/_progress`` become ``system/publish_log``, ``check_results``, ``metrics``,
   ``quarantine/<db>/<table>`` and ``silver_progress`` (Unity Catalog:
   ``<catalog>.<system_schema>.<name>``), each with its current columns and properties. What
   earlier binlake versions added in place on every run is part of the move: the publish log's
   change data feed and its ``silver_rows`` and ``publish_group`` columns, the progress
   table's ``silver_version``, ``stopped`` and ``history_version`` columns (NULL in rows
   written before them, which their readers take as "not recorded"). Each table is copied in
   one commit and the old one dropped after it: the rows, and so the publish history that
   :func:`binlake.gold.publish_log.gold_as_of` reads, are unchanged (the gold tables it time
   travels in do not move).
2. ``bronze/snapshot_rows`` gets the properties that make writing it cheaper
   (:data:`~binlake.contract.schemas.SNAPSHOT_ROWS_PROPERTIES`, or the unpartitioned set
   for a table from before the partitions, which Delta cannot repartition in place).
3. Locally, the system files (the continuous mode's state) move from ``<path>/_system`` to
   ``<path>/system/files``.
4. ``bronze/snapshot_chunks`` gets the columns ``row_format`` and ``zero_dates``: new snapshots
   write their rows typed, one table per snapshot (``bronze/snapshots/<db>/<table>/<id>``),
   and say so in their manifest rows. Rows already in ``bronze/snapshot_rows`` stay there, in
   map form: their manifest rows get ``row_format`` NULL, which is what silver reads them by,
   so nothing is rewritten (maintenance removes them once a newer snapshot supersedes them).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from binlake.contract.leases import LAYERS, LAYOUT_PROPERTY, Holder, ensure_leases_table, holding
from binlake.contract.schemas import (
    CHECK_RESULTS_SCHEMA,
    METRICS_COMMENT,
    METRICS_SCHEMA,
    PROGRESS_COMMENT,
    PROGRESS_SCHEMA,
    PUBLISH_LOG_COMMENT,
    PUBLISH_LOG_PROPERTIES,
    PUBLISH_LOG_SCHEMA,
    SNAPSHOT_ROWS_LAYOUT,
    SNAPSHOT_ROWS_PROPERTIES,
    UNPARTITIONED_SNAPSHOT_ROWS_PROPERTIES,
)
from binlake.contract.sql import Sql, quote_ident, spark_string, sql, sql_list
from binlake.contract.tables import Lakehouse, TableRef
from binlake.contract.write_errors import with_retry
from binlake.errors import LayoutOutdatedError, LayoutTooNewError

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.layout")

CHECK_RESULTS_COMMENT = "binlake: Great Expectations' validation result per table per publish attempt"
MOVED_FROM = "binlake.moved_from"
"""Set on a system table by the commit that copied it from its layout 0 place: a move killed
after the copy only drops the old table when it runs again."""


class _Table(NamedTuple):
    schema: str
    properties: dict[str, str]
    comment: str


# The system tables with a fixed schema, by their Lakehouse property name.
_SYSTEM_TABLES = {
    "silver_progress": _Table(PROGRESS_SCHEMA, {}, PROGRESS_COMMENT),
    "publish_log": _Table(PUBLISH_LOG_SCHEMA, PUBLISH_LOG_PROPERTIES, PUBLISH_LOG_COMMENT),
    "check_results": _Table(CHECK_RESULTS_SCHEMA, {}, CHECK_RESULTS_COMMENT),
    "metrics": _Table(METRICS_SCHEMA, {}, METRICS_COMMENT),
}


# ---------------------------------------------------------------------------------------
# The steps


def _move_system_tables(spark: SparkLike, lh: Lakehouse) -> None:
    for name, spec in _SYSTEM_TABLES.items():
        _move(spark, lh.layout_0_table(name), getattr(lh, name), spec)
    for old, new in lh.layout_0_quarantine(spark):
        _move(spark, old, new, None)


def _snapshot_rows_properties(spark: SparkLike, lh: Lakehouse) -> None:
    missing = _missing_snapshot_rows_properties(spark, lh)
    if missing:
        props = ", ".join(f"{spark_string(k)} = {spark_string(v)}" for k, v in missing.items())
        statement = f"ALTER TABLE {lh.snapshot_rows.sql} SET TBLPROPERTIES ({props})"
        with_retry("snapshot_rows properties", lambda: spark.sql(statement))


def _missing_snapshot_rows_properties(spark: SparkLike, lh: Lakehouse) -> dict[str, str]:
    ref = lh.snapshot_rows
    if not ref.exists(spark):
        return {}
    current = ref.properties(spark)
    wanted = SNAPSHOT_ROWS_PROPERTIES if SNAPSHOT_ROWS_LAYOUT in current else UNPARTITIONED_SNAPSHOT_ROWS_PROPERTIES
    return {k: v for k, v in wanted.items() if current.get(k) != v}


def _manifest_row_format(spark: SparkLike, lh: Lakehouse) -> None:
    ref = lh.snapshot_chunks
    if not ref.exists(spark):
        return
    have = {f.name for f in ref.read(spark).schema.fields}
    missing = [(c, t) for c, t in (("row_format", "STRING"), ("zero_dates", "BIGINT")) if c not in have]
    if missing:
        columns = ", ".join(f"{quote_ident(c)} {t}" for c, t in missing)
        statement = f"ALTER TABLE {ref.sql} ADD COLUMNS ({columns})"
        with_retry("snapshot_chunks row_format", lambda: spark.sql(statement))


def _move_system_files(spark: SparkLike, lh: Lakehouse) -> None:
    old = lh.layout_0_files
    if old is None or not Path(old).is_dir():
        return
    new = Path(lh.system_path)
    new.parent.mkdir(parents=True, exist_ok=True)
    if not new.exists():
        os.replace(old, new)
        return
    for entry in Path(old).iterdir():  # a kill left some of it moved
        if not (new / entry.name).exists():
            os.replace(entry, new / entry.name)
    shutil.rmtree(old)


@dataclass(frozen=True)
class Step:
    number: int
    what: str
    run: Callable[..., None]


STEPS = (
    Step(1, "moved binlake's own tables from the gold and silver schemas to the system schema", _move_system_tables),
    Step(2, "set bronze snapshot_rows' write properties", _snapshot_rows_properties),
    Step(3, "moved the local system files to system/files", _move_system_files),
    Step(4, "added row_format and zero_dates to bronze snapshot_chunks (typed snapshot rows)", _manifest_row_format),
)
LAYOUT_VERSION = len(STEPS)
"""The layout this binlake reads and writes."""


# ---------------------------------------------------------------------------------------
# Checking and migrating

# Lakehouses (by their leases table) this process found at LAYOUT_VERSION.
_current: set[str] = set()


def forget_checked_layouts() -> None:
    """Make the next check read the layout version again (a process that found a lakehouse
    current does not look again; tests that rebuild lakehouses under it do)."""
    _current.clear()


def layout_version(spark: SparkLike, lh: Lakehouse) -> int | None:
    """The lakehouse's layout version; None when no binlake table of a command exists yet (a
    new lakehouse, which starts at :data:`LAYOUT_VERSION`)."""
    if lh.leases.exists(spark):
        return int(lh.leases.properties(spark).get(LAYOUT_PROPERTY, "0"))
    return 0 if _written_by_layout_0(spark, lh) else None


def _written_by_layout_0(spark: SparkLike, lh: Lakehouse) -> bool:
    """Whether an earlier binlake wrote here: a system table at its old place, or a
    snapshot_rows table without the properties this binlake creates it with (a lakehouse an
    earlier binlake only ever snapshotted). Asked once, when the leases table is created."""
    return any(ref.exists(spark) for ref in lh.layout_0_markers()) or bool(_missing_snapshot_rows_properties(spark, lh))


def _refuse_newer(lh: Lakehouse, version: int) -> None:
    if version > LAYOUT_VERSION:
        raise LayoutTooNewError(
            f"the lakehouse ({lh.leases}) has layout {version}, written by a newer binlake; this one knows layouts "
            f"up to {LAYOUT_VERSION}: run the binlake version that wrote it (or a newer one)"
        )


def require_current_layout(spark: SparkLike, lh: Lakehouse) -> None:
    """For commands that only read: refuse a lakehouse an earlier binlake laid out (they would
    look for its tables in the wrong places) with the command that moves it."""
    key = str(lh.leases)
    if key in _current:
        return
    version = layout_version(spark, lh)
    if version is None:
        return
    _refuse_newer(lh, version)
    if version < LAYOUT_VERSION:
        raise LayoutOutdatedError(
            f"the lakehouse has layout {version}, from an earlier binlake (this one uses layout {LAYOUT_VERSION}: "
            "binlake's own tables live in the system schema): run `binlake migrate` once (any command that writes "
            "does it too), then this command"
        )
    _current.add(key)


def ensure_current_layout(spark: SparkLike, lh: Lakehouse, holder: Holder) -> list[Step]:
    """For commands that write: bring the lakehouse to :data:`LAYOUT_VERSION`, running the
    missing steps under every layer's lease; returns the steps run (none, nearly always).
    Raises :class:`~binlake.errors.LeaseHeldError` when another process writes a layer
    meanwhile: the migration waits for no one, and runs at the next command."""
    key = str(lh.leases)
    if key in _current:
        return []
    if not lh.leases.exists(spark):
        ensure_leases_table(spark, lh, 0 if _written_by_layout_0(spark, lh) else LAYOUT_VERSION)
    version = _stamped(spark, lh)
    _refuse_newer(lh, version)
    ran: list[Step] = []
    if version < LAYOUT_VERSION:
        with holding(spark, lh, LAYERS, replace(holder, command="migrate")):
            for step in STEPS[_stamped(spark, lh) :]:  # another process may have migrated meanwhile
                log.info("layout %d: %s", step.number, step.what)
                step.run(spark, lh)
                _stamp(spark, lh, step.number)
                ran.append(step)
    _current.add(key)
    return ran


def _stamped(spark: SparkLike, lh: Lakehouse) -> int:
    return int(lh.leases.properties(spark).get(LAYOUT_PROPERTY, "0"))


def _stamp(spark: SparkLike, lh: Lakehouse, version: int) -> None:
    statement = f"ALTER TABLE {lh.leases.sql} SET TBLPROPERTIES ('{LAYOUT_PROPERTY}' = '{int(version)}')"
    with_retry("layout version", lambda: spark.sql(statement))


# ---------------------------------------------------------------------------------------
# Moving one table


def _move(spark: SparkLike, old: TableRef, new: TableRef, spec: _Table | None) -> None:
    """Copy ``old`` to ``new`` in one commit (with ``spec``'s columns, properties and comment;
    ``spec`` None keeps ``old``'s columns), then drop ``old``."""
    if not old.exists(spark):
        return
    origin = str(old)
    properties = {**(spec.properties if spec else {}), MOVED_FROM: origin}
    tbl = ", ".join(f"{spark_string(k)} = {spark_string(v)}" for k, v in properties.items())
    comment = f" COMMENT {spark_string(spec.comment)}" if spec else ""
    if not new.exists(spark):
        columns = _columns(spec.schema) if spec else _table_columns(spark, old)
        select = _select(spark, old, columns)
        statement = f"CREATE TABLE {new.sql} USING DELTA{comment} TBLPROPERTIES ({tbl}) AS {select}"
        with_retry(f"copy {old} to {new}", lambda: spark.sql(statement))
        log.info("moved %s to %s", old, new)
    elif new.properties(spark).get(MOVED_FROM) != origin:
        # Rows at the new place that the move did not write: a process that skipped the
        # migration (binlake's layer functions called directly) wrote them. Keep both.
        columns = _table_columns(spark, new)
        names = {c for c, _ in columns}
        columns += [(c, t) for c, t in _table_columns(spark, old) if c not in names]
        both = f"{_select(spark, new, columns)} UNION ALL {_select(spark, old, columns)}"
        statement = f"CREATE OR REPLACE TABLE {new.sql} USING DELTA{comment} TBLPROPERTIES ({tbl}) AS {both}"
        with_retry(f"merge {old} into {new}", lambda: spark.sql(statement))
        log.info("merged %s into %s", old, new)
    old.drop(spark)
    if old.path:
        _remove_empty_parents(Path(old.path))


def _select(spark: SparkLike, ref: TableRef, columns: list[tuple[str, str]]) -> str:
    """``SELECT`` of ``columns`` (name, type) from ``ref``: the ones it lacks as NULL."""
    have = {c for c, _ in _table_columns(spark, ref)}
    # The types are binlake's own table schemas (SQL type names).
    exprs = [Sql(f"CAST({quote_ident(c) if c in have else 'NULL'} AS {t}) AS {quote_ident(c)}") for c, t in columns]
    return sql("SELECT {columns} FROM {t}", columns=sql_list(exprs), t=ref.sql)


def _table_columns(spark: SparkLike, ref: TableRef) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in ref.read(spark).schema.fields]


def _columns(schema_ddl: str) -> list[tuple[str, str]]:
    """``[(name, type)]`` of a ``"a STRING, `b` BIGINT"`` schema (commas inside types kept)."""
    parts, depth, current = [], 0, ""
    for ch in schema_ddl:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [(name.strip("`"), typ.strip()) for name, _, typ in (p.strip().partition(" ") for p in parts)]


def _remove_empty_parents(path: Path) -> None:
    """Remove the directories a moved quarantine table leaves empty (``gold/_quarantine/<db>``)."""
    for parent in (path.parent, path.parent.parent):
        if "_quarantine" not in parent.parts:
            return
        try:
            parent.rmdir()
        except OSError:  # not empty: other tables are still there
            return
