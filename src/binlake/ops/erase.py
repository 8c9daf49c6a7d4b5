"""``binlake erase --table db.t --key col=value ...``: remove one key's rows from every layer,
for "right to be forgotten" requests.

Why the order, and what makes it safe:

1. The source must no longer hold the key: delete it there first. Otherwise the next change
   or re-snapshot would bring it back. Refused (:class:`ErasureRefused`) while it does.
2. Silver must have applied that delete (its row for the key is a tombstone, or there is
   none), and no snapshot of the table may be in flight or unapplied: a late snapshot row of
   the key would find no tombstone left to lose to and come back to life.
3. One Delta DELETE per table, each retried against a concurrent writer: the bronze change
   log (every record whose before or after image holds the key, the source's delete
   included), the bronze snapshot rows, silver, gold and gold's quarantine, and the
   history tables (silver's versions and events, gold's versions).
4. Delta keeps the files of older versions for time travel: the result names, per table, the
   first version without the rows; the versions before it still hold them until VACUUM
   removes them after ``maintenance.vacuum_retention_hours`` (``binlake maintain``). The
   source's binlog holds them until the server purges it.

Key values are compared as the key columns' types (``CAST('5' AS BIGINT)``), in bronze
through the same decoding silver applies to the row images.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from binlake.bronze.tables import (
    changelog_deletable,
    latest_schema,
    restore_append_only,
)
from binlake.config import Config, require_config
from binlake.contract.columns import masked_text
from binlake.contract.schemas import SNAPSHOT_VERSION_PROPERTY
from binlake.contract.sql import Sql, qualified, quote_ident, spark_string, sql, sql_list
from binlake.contract.tables import Lakehouse, TableRef, delete_where
from binlake.contract.types import TableSchema, spark_decode_sql
from binlake.errors import ConfigError, ErasureRefused
from binlake.gold.readiness import silver_progress, snapshot_blockers
from binlake.silver import schema_evolution as se
from binlake.source.mysql import connect, query

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.erase")


@dataclass
class ErasedTable:
    table: str  # the lakehouse table, as binlake names it (bronze/changelog, silver/shop/orders, ...)
    rows: int
    first_clean_version: int | None  # the first version without the rows (None: nothing removed)


@dataclass
class EraseResult:
    table: str
    key: dict[str, str]
    erased: list[ErasedTable] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(e.rows for e in self.erased)

    def summary(self) -> str:
        key = ", ".join(f"{k}={v}" for k, v in self.key.items())
        lines = [f"erase: {self.rows} row(s) of {self.table} ({key}) removed in {self.seconds:.1f}s"]
        for e in self.erased:
            if e.rows:
                lines.append(
                    f"  {e.table}: {e.rows} row(s); versions before {e.first_clean_version} still hold them "
                    "until VACUUM (binlake maintain, after maintenance.vacuum_retention_hours)"
                )
        if not self.rows:
            lines.append("  nothing held this key")
        return "\n".join(lines)


def parse_key(schema: TableSchema, pairs: Sequence[str]) -> dict[str, str]:
    """``["id=5", ...]`` as {key column: value}, every key column once, nothing else."""
    key: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--key {pair!r} is not column=value: write it like --key id=42")
        if name not in schema.key:
            raise ConfigError(
                f"--key {name} is not a key column of {schema.name}: its key is ({', '.join(schema.key)})"
            )
        if name in key:
            raise ConfigError(f"--key {name} is given twice: give each key column once")
        key[name] = value
    missing = [k for k in schema.key if k not in key]
    if missing:
        raise ConfigError(
            f"--key misses {', '.join(missing)}: {schema.name}'s key is ({', '.join(schema.key)}); "
            "give every key column, e.g. " + " ".join(f"--key {k}=..." for k in schema.key)
        )
    return key


def run_erase(spark: SparkLike, config: Config, table: str, key_pairs: Sequence[str]) -> EraseResult:
    """Remove the rows of one key of ``table`` (``db.table``) from every layer; see the module doc."""
    require_config(config)
    started = time.monotonic()
    db, dot, name = table.partition(".")
    if not dot or not db or not name:
        raise ConfigError(f"--table {table!r} is not db.table: write it like shop.customers")
    lh = Lakehouse(config)
    schema = latest_schema(spark, lh, db, name) if lh.schema_history.exists(spark) else None
    if schema is None:
        raise ConfigError(f"--table {table} has never been captured: binlake knows no schema for it")
    key = parse_key(schema, key_pairs)
    _check_gone_at_source(config, schema, key)
    # The lakehouse holds a masked key column's hash: match that (mask_key rules only).
    rule = config.source.column_rule(db, name)
    if rule is not None and any(c in rule.mask for c in key):
        salt = config.source.salt_for(rule)
        key = {c: _masked_key(rule.mask[c], salt, v) if c in rule.mask else v for c, v in key.items()}
    _check_silver_applied_the_delete(spark, config, lh, schema, key)

    result = EraseResult(table=schema.name, key=key)
    restore_append_only(spark, lh)
    bronze = _bronze_image_predicate(schema, key)
    if lh.changelog.exists(spark):
        on_table = f"db = {spark_string(db)} AND `table` = {spark_string(name)}"
        condition = f"{on_table} AND ({bronze('before')} OR {bronze('after')})"
        with changelog_deletable(spark, lh):
            result.erased.append(_erase(spark, lh.changelog, "bronze/changelog", condition))
    if lh.snapshot_rows.exists(spark):
        condition = (
            f"db = {spark_string(db)} AND `table` = {spark_string(name)} AND `row` IS NOT NULL AND {bronze('`row`')}"
        )
        result.erased.append(_erase(spark, lh.snapshot_rows, "bronze/snapshot_rows", condition))
    for snapshot_id, ref in lh.snapshot_tables(spark, db, name).items():
        condition = _snapshot_table_predicate(spark, lh, ref, schema, key)
        if condition is not None:
            result.erased.append(_erase(spark, ref, f"bronze/snapshots/{db}/{name}/{snapshot_id}", condition))
    typed = _typed_predicate(schema, key)
    for label, ref in (
        (f"silver/{db}/{name}", lh.silver(db, name)),
        (f"gold/{db}/{name}", lh.gold(db, name)),
        (f"system/quarantine/{db}/{name}", lh.quarantine(db, name)),
        # SCD type 2 history (docs/history.md): every version, and the records it is derived from.
        (f"silver/{db}/{name}__history", lh.silver_history(db, name)),
        (f"silver/{db}/{name}__history_events", lh.silver_history_events(db, name)),
        (f"gold/{db}/{name}__history", lh.gold_history(db, name)),
    ):
        if ref.exists(spark):
            result.erased.append(_erase(spark, ref, label, typed))
    result.seconds = time.monotonic() - started
    log.info("%s", result.summary())
    return result


def _erase(spark: SparkLike, ref: TableRef, label: str, condition: str) -> ErasedTable:
    rows = delete_where(spark, ref, condition, f"erase from {label}")
    return ErasedTable(label, rows, ref.latest_version(spark) if rows else None)


def _masked_key(how: str, salt: str, value: str) -> str:
    masked = masked_text(how, salt, value)
    assert masked is not None, "a key column is hashed, never nulled (ColumnRule refuses null)"
    return masked


def _typed_literal(schema: TableSchema, column: str, value: str) -> str:
    return f"CAST({spark_string(value)} AS {schema.column(column).spark_type})"


def _typed_predicate(schema: TableSchema, key: Mapping[str, str]) -> str:
    return " AND ".join(f"{quote_ident(c)} = {_typed_literal(schema, c, v)}" for c, v in key.items())


def _snapshot_table_predicate(
    spark: SparkLike, lh: Lakehouse, ref: TableRef, schema: TableSchema, key: Mapping[str, str]
):
    """The SQL that matches the key in a typed snapshot table, whose columns are those of the
    schema version it was read with (a key column renamed since is found under its old name);
    None when that version lacks a key column (no row of it can hold the key)."""
    types = {f.name: f.dataType.simpleString() for f in ref.read(spark).schema.fields}
    names = {c: c for c in key}
    if any(c not in types for c in key):
        version = ref.properties(spark).get(SNAPSHOT_VERSION_PROPERTY)
        maps = se.name_maps(se.load_history(spark, lh, schema.database, schema.table), schema)
        renamed = maps.get(version, {}) if version is not None else {}
        if any(renamed.get(c) not in types for c in key):
            return None
        names = {c: renamed[c] for c in key}
    return " AND ".join(
        f"{quote_ident(names[c])} = CAST({spark_string(v)} AS {types[names[c]]})" for c, v in key.items()
    )


def _bronze_image_predicate(schema: TableSchema, key: Mapping[str, str]):
    """A function of a row-image column (``before``, ``after``, ```row```) to the SQL that
    matches the key in it, decoded as silver decodes it."""

    def matches(image: str) -> str:
        return (
            "("
            + " AND ".join(
                f"{spark_decode_sql(schema.column(c), f'{image}[{spark_string(c)}]')} = {_typed_literal(schema, c, v)}"
                for c, v in key.items()
            )
            + ")"
        )

    return matches


def _check_gone_at_source(config: Config, schema: TableSchema, key: Mapping[str, str]) -> None:
    where = sql_list((Sql(f"{quote_ident(c)} = %s") for c in key), " AND ")
    statement = sql("SELECT 1 AS x FROM {t} WHERE {w} LIMIT 1", t=qualified(schema.database, schema.table), w=where)
    with connect(config.source) as conn:
        present = query(conn, statement, tuple(key.values()))
    if present:
        raise ErasureRefused(
            f"{schema.name} still has this key on the source: delete it there first (binlake would "
            "capture or snapshot it again), then run binlake run and erase"
        )


def _check_silver_applied_the_delete(
    spark: SparkLike, config: Config, lh: Lakehouse, schema: TableSchema, key: Mapping[str, str]
) -> None:
    ref = lh.silver(schema.database, schema.table)
    if (
        ref.exists(spark)
        and ref.read(spark).where(_typed_predicate(schema, key)).where("NOT _cdc_deleted").limit(1).count()
    ):
        raise ErasureRefused(
            f"silver still has this key of {schema.name} live: the source's delete is not applied "
            "yet; run binlake run (or capture and silver), then erase"
        )
    states = [s for s in silver_progress(spark, config, lh) if s.name == schema.name]
    if states:
        blockers = snapshot_blockers(spark, lh, states, states[0].position)
        if blockers:
            raise ErasureRefused(
                f"a snapshot of {schema.name} is in flight or not applied ({'; '.join(blockers[schema.name])}): "
                "finish it with binlake run, then erase"
            )
