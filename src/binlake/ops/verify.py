"""``binlake verify [--repair] [--table db.t]``: source and silver compared chunk by chunk.

Per table, the key space is cut into chunks as the snapshot cuts it
(:func:`binlake.bronze.snapshot.plan_table`). Per chunk, both sides compute the row count and
an order-independent checksum: the sum, as an exact DECIMAL, of each row's hash (the sum of
its parts' hashes, :func:`binlake.ops.verify_sql.hash_parts`: the first 15 hex digits of the
MD5 of the part's canonical "verify text", as an integer). Each type's text is defined once
(:func:`binlake.ops.verify_sql.text_sql`) and spelled in MySQL/MariaDB SQL over the source
columns and in Spark SQL over silver's typed columns, byte-identical for identical values
(FLOAT/DOUBLE included: they are compared through their exact IEEE significand and
exponent, not a decimal rendering).

- the source side is one aggregate query run by the server (``SELECT chunk, COUNT(*),
  SUM(hash) ... GROUP BY chunk``): only one small row per chunk comes back, read in a
  consistent snapshot whose binlog position is the read's low and high watermark;
- silver's live rows (``_cdc_deleted = false``) are hashed by Spark, and assigned to chunks
  with :func:`binlake.silver.ranges.key_range_predicate`. The server assigns with the same
  order: numbers and dates by value, strings (and everything silver holds as STRING or
  BINARY) by bytes, never by the column's collation, so a key that the collation orders
  differently still lands in the same chunk on both sides.

A comparison is only meaningful once silver has applied the binlog past the moment the
source was read: verify compares only after silver's applied position (``system/silver_progress``)
has reached the read's high watermark, running capture and silver first if it has
not. Rows changed after the source was read can still differ legitimately; a table with
mismatching chunks and bronze changes after the read's low watermark is verified once
more, and a chunk that differs again while the table keeps changing is reported as
"changing" (still a mismatch: re-run when the table is quieter).

``repair=True`` re-snapshots only the mismatching chunks
(:func:`binlake.bronze.snapshot.resnapshot_chunks`; snapshot-made rows in those chunks first
yield their tie with a re-read at the same binlog position, see :func:`_yield_snapshot_ties`),
applies them with
:func:`binlake.silver.run.run_silver` (newer-sequence-wins MERGE plus chunk
reconciliation, which also removes rows the source no longer has) and verifies those tables
again. :class:`~binlake.errors.VerifyMismatch` is raised when mismatches remain.

Example::

    >>> result = run_verify(spark, config)          # doctest: +SKIP
    >>> print(result.summary())                     # doctest: +SKIP
    verify: 1 table(s), 3 chunk(s), 1,200 source rows: source and silver agree
      shop.orders: 3 chunk(s), 1,200 rows, ok
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING

from binlake.bronze.capture import run_capture
from binlake.bronze.capture_state import current_epoch
from binlake.bronze.snapshot import plan_table, resnapshot_chunks
from binlake.config import Config, require_config
from binlake.console import QUIET, Console
from binlake.contract.changelog import DATA_OPS, EMPTYING_OPS
from binlake.contract.position import DERIVED_ROW, SNAPSHOT_ROW, seq_sql
from binlake.contract.sql import quote_ident
from binlake.contract.tables import Lakehouse
from binlake.contract.types import TableSchema
from binlake.errors import ConfigError, NotReadyError, VerifyMismatch
from binlake.ops.verify_sql import chunk_stats_sql, hash_parts, spark_part_hashes_sql
from binlake.silver import schema_evolution as se
from binlake.silver.batch import Decoder
from binlake.silver.ranges import key_range_predicate, key_range_sql
from binlake.silver.run import run_silver
from binlake.source.catalog import table_arguments, table_schema
from binlake.source.mysql import connect, consistent_read, server_id

if TYPE_CHECKING:
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.verify")


@dataclass(frozen=True)
class ChunkCheck:
    """One chunk's comparison. ``status``: ok, mismatch, or changing (differs while the
    table kept changing during verify)."""

    chunk_id: int
    start_key: str | None
    end_key: str | None
    source_rows: int
    silver_rows: int
    source_checksum: Decimal
    silver_checksum: Decimal
    status: str = "ok"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        bounds = f"[{self.start_key or '-inf'}, {self.end_key or '+inf'})"
        if self.source_rows != self.silver_rows:
            diff = f"source {self.source_rows} row(s), silver {self.silver_rows}"
        else:
            diff = f"{self.source_rows} row(s) on both sides, checksums differ"
        note = " (the table kept changing during verify)" if self.status == "changing" else ""
        return f"chunk {self.chunk_id} {bounds}: {diff}{note}"


@dataclass
class TableCheck:
    db: str
    table: str
    chunks: list[ChunkCheck] = field(default_factory=list)
    rechecked: bool = False
    repaired_chunks: int = 0
    # Where the source read began (its low watermark, set by _verify_table): a recheck looks for
    # changes after it. Not an argument, not in repr or comparisons.
    _lw_min: tuple[int, int] = field(init=False, repr=False, compare=False)

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def mismatches(self) -> list[ChunkCheck]:
        return [c for c in self.chunks if not c.ok]

    @property
    def source_rows(self) -> int:
        return sum(c.source_rows for c in self.chunks)


@dataclass
class VerifyResult:
    tables: list[TableCheck] = field(default_factory=list)
    # Chunks found differing before --repair re-read them (empty without --repair).
    repaired: list[tuple[str, ChunkCheck]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def mismatches(self) -> list[tuple[str, ChunkCheck]]:
        return [(t.name, c) for t in self.tables for c in t.mismatches]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def summary(self) -> str:
        n_chunks = sum(len(t.chunks) for t in self.tables)
        rows = sum(t.source_rows for t in self.tables)
        verdict = "source and silver agree" if self.ok else f"{len(self.mismatches)} chunk(s) differ"
        lines = [
            f"verify: {len(self.tables)} table(s), {n_chunks} chunk(s), {rows:,} source rows in "
            f"{self.seconds:,.1f}s: {verdict}"
        ]
        for t in self.tables:
            state = "ok" if not t.mismatches else f"{len(t.mismatches)} chunk(s) differ"
            extra = f", repaired {t.repaired_chunks} chunk(s)" if t.repaired_chunks else ""
            lines.append(f"  {t.name}: {len(t.chunks)} chunk(s), {t.source_rows:,} rows, {state}{extra}")
            for c in t.mismatches:
                lines.append(f"    {c.describe()}")
        if self.repaired:
            lines.append(
                f"repair: re-read {len(self.repaired)} chunk(s) and verified again: "
                + ("clean" if self.ok else "still differing")
            )
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Public entry point


def run_verify(
    spark: SparkLike,
    config: Config,
    repair: bool = False,
    tables: Sequence[str] | None = None,
    console: Console = QUIET,
) -> VerifyResult:
    """Compare source and silver chunk by chunk; with ``repair``, re-read differing chunks.

    ``tables``: ``"db.table"`` names (default: every captured table; blank names, as an empty
    notebook widget split on commas gives, are ignored). Raises
    :class:`VerifyMismatch` (its ``result`` attribute holds the :class:`VerifyResult`) when
    chunks still differ at the end.
    """
    require_config(config)
    if tables is not None and (isinstance(tables, str) or not all(isinstance(t, str) for t in tables)):
        raise TypeError('tables must be a list of "db.table" strings or None')
    tables = [t.strip() for t in tables if t.strip()] if tables is not None else None
    started = time.monotonic()
    lh = Lakehouse(config)
    targets = _targets(config, tables or ())
    if not tables:
        # A hashed key cannot be compared with the source's (comparable_columns): such tables
        # are left out of a verify of every table, and refused when named.
        with connect(config.source) as conn:
            hashed_keys = [
                f"{db}.{t}"
                for db, t in targets
                if (rule := config.source.column_rule(db, t)) is not None
                and set(rule.mask) & set(table_schema(conn, config.source, db, t).key)
            ]
        if hashed_keys:
            log.warning("verify: %s left out: a key column is masked (source.columns)", ", ".join(hashed_keys))
        targets = [(db, t) for db, t in targets if f"{db}.{t}" not in hashed_keys]

    result = VerifyResult(tables=_verify_tables(spark, config, lh, targets, console))
    if repair and result.mismatches:
        by_table: dict[str, TableCheck] = {t.name: t for t in result.tables if t.mismatches}
        for name, t in by_table.items():
            ranges = [(c.start_key, c.end_key) for c in t.mismatches]
            log.info("verify --repair: re-reading %d chunk(s) of %s", len(ranges), name)
            _yield_snapshot_ties(spark, config, lh, t.db, t.table, ranges)
            resnapshot_chunks(spark, config, t.db, t.table, ranges, console=console)
            result.repaired += [(name, c) for c in t.mismatches]
        run_silver(spark, config)
        again = {
            t.name: t for t in _verify_tables(spark, config, lh, [(t.db, t.table) for t in by_table.values()], console)
        }
        for i, t in enumerate(result.tables):
            if t.name in again:
                again[t.name].repaired_chunks = len(t.mismatches)
                result.tables[i] = again[t.name]
    result.seconds = time.monotonic() - started
    if result.mismatches:
        shown = "; ".join(f"{name} {c.describe()}" for name, c in result.mismatches[:5])
        more = f"; and {len(result.mismatches) - 5} more" if len(result.mismatches) > 5 else ""
        fix = (
            "re-run when the tables are quieter, then binlake verify --repair"
            if repair
            else "run binlake verify --repair to re-read only these chunks"
        )
        raise VerifyMismatch(
            f"verify: {len(result.mismatches)} chunk(s) differ between source and silver: {shown}{more}: {fix}",
            result=result,
        )
    return result


def _targets(config: Config, names: Sequence[str]) -> list[tuple[str, str]]:
    with connect(config.source) as conn:
        return table_arguments(conn, config.source, names)


def _yield_snapshot_ties(
    spark: SparkLike, config: Config, lh: Lakehouse, db: str, table: str, ranges: list[tuple[str | None, str | None]]
) -> None:
    """Let the repair snapshot win against snapshot-made rows at the same position.

    Silver updates a row only for a strictly greater ``_cdc_seq``. On a source whose binlog
    has not moved since the last snapshot, the repair snapshot reads at the same low
    watermark, so its rows tie with what they must replace, ``(lw, -1)``, and would change
    nothing. Snapshot rows and the tombstones chunk reconciliation made carry row index -1;
    moving those, inside the chunks to repair, to -2 only breaks exactly that tie: two
    snapshots at one binlog position read the same source state, so the newer read is the
    one to keep, and everything that was ordered before or after (lw, -1) stays so (binlog
    rows have index >= 0).
    """
    if not ranges:
        return
    with connect(config.source) as conn:
        schema = table_schema(conn, config.source, db, table)
    in_ranges = " OR ".join(key_range_sql(schema, start, end) for start, end in ranges)
    demoted = seq_sql("_cdc_seq.file_index", "_cdc_seq.pos", str(DERIVED_ROW))
    lh.silver(db, table).delta(spark).update(f"_cdc_seq.row = {SNAPSHOT_ROW} AND ({in_ranges})", {"_cdc_seq": demoted})


# ---------------------------------------------------------------------------------------
# One pass over a list of tables


def _verify_tables(
    spark: SparkLike, config: Config, lh: Lakehouse, targets: list[tuple[str, str]], console: Console
) -> list[TableCheck]:

    out = []
    with console.bar("verify", total=len(targets), unit="tables") as bar:
        for db, table in targets:
            ref = lh.silver(db, table)
            if not ref.exists(spark):
                raise NotReadyError(
                    f"silver table {db}.{table} does not exist at {ref}: run binlake snapshot, "
                    "binlake capture and binlake silver first"
                )
            with connect(config.source) as conn:
                schema = table_schema(conn, config.source, db, table)
                chunks = [
                    (c.chunk_id, c.start_json, c.end_json) for c in plan_table(conn, schema, config.snapshot.chunk_size)
                ]
            schema = comparable_columns(config, schema)
            check = _verify_table(spark, config, lh, schema, chunks)
            if _changed_chunks(spark, lh, schema, check._lw_min, check.mismatches):
                # A differing chunk that changed after the source read may just be newer in
                # silver than in the read: read and compare the table once more.
                log.info("verify: %s changed while it was read; checking it once more", schema.name)
                second = _verify_table(spark, config, lh, schema, chunks)
                second.rechecked = True
                busy = _changed_chunks(spark, lh, schema, second._lw_min, second.mismatches)
                second.chunks = [_with_status(c, "changing") if c.chunk_id in busy else c for c in second.chunks]
                check = second
            out.append(check)
            bar.advance(1, items=check.source_rows)
    return out


def comparable_columns(config: Config, schema: TableSchema) -> TableSchema:
    """The columns verify can compare: a column rule's dropped and masked columns are left
    out (silver holds no source value to compare them with); a masked key cannot be
    compared, so such a table is refused."""
    rule = config.source.column_rule(schema.database, schema.table)
    if rule is None:
        return schema
    masked_key = [k for k in schema.key if k in rule.mask]
    if masked_key:
        raise ConfigError(
            f"verify cannot compare {schema.name}: its key column {', '.join(masked_key)} is masked by "
            f"source.columns[{rule.pattern!r}]; leave it out with --table"
        )
    return replace(schema, columns=tuple(c for c in schema.columns if rule.keeps(c.name) and c.name not in rule.mask))


def _with_status(c: ChunkCheck, status: str) -> ChunkCheck:

    return replace(c, status=status)


def _verify_table(
    spark: SparkLike,
    config: Config,
    lh: Lakehouse,
    schema: TableSchema,
    chunks: list[tuple[int, str | None, str | None]],
) -> TableCheck:
    source_stats, lw_min, hw_max = _source_side(spark, config, lh, schema, chunks)
    _catch_up(spark, config, lh, schema, hw_max)
    silver_stats = _silver_side(spark, lh, schema, chunks)
    check = TableCheck(schema.database, schema.table)
    for chunk_id, start, end in chunks:
        s_rows, s_sum = source_stats.get(chunk_id, (0, Decimal(0)))
        t_rows, t_sum = silver_stats.get(chunk_id, (0, Decimal(0)))
        status = "ok" if (s_rows, s_sum) == (t_rows, t_sum) else "mismatch"
        check.chunks.append(ChunkCheck(chunk_id, start, end, s_rows, t_rows, s_sum, t_sum, status))
    check._lw_min = lw_min
    return check


# ---------------------------------------------------------------------------------------
# The two sides, hashed the same way


def _typed_columns(schema: TableSchema) -> list[str]:
    """Aliases ``_v0, _v1, ...`` for the typed columns: names never meet SQL text."""
    return [f"_v{i}" for i in range(len(schema.columns))]


def _key_schema(schema: TableSchema) -> TableSchema:
    """The schema as seen on the aliased frame, so range predicates use the aliases."""

    alias = {c.name: f"_v{i}" for i, c in enumerate(schema.columns)}
    return replace(
        schema,
        columns=tuple(replace(c, name=alias[c.name]) for c in schema.columns),
        key=tuple(alias[k] for k in schema.key),
    )


def _chunk_of(schema: TableSchema, chunks: list[tuple[int, str | None, str | None]]):
    """A Column: the id of the chunk whose range holds the row's typed key (-1: none)."""
    from pyspark.sql import functions as F

    keyed = _key_schema(schema)
    expr = None
    for chunk_id, start, end in chunks:
        pred = key_range_predicate(keyed, start, end)
        expr = F.when(pred, F.lit(chunk_id)) if expr is None else expr.when(pred, F.lit(chunk_id))
    return expr.otherwise(F.lit(-1)) if expr is not None else F.lit(-1)


def _source_side(spark: SparkLike, config: Config, lh: Lakehouse, schema: TableSchema, chunks):
    """Per chunk (rows, checksum) computed by the source server in one aggregate scan, and
    the binlog positions just before and just after it (the read's low and high watermark).

    The statement runs in one consistent snapshot bounded by those positions
    (:class:`binlake.source.mysql.consistent_read`; on MariaDB both are the exact position
    the snapshot sees).
    """

    sql, params = chunk_stats_sql(schema, chunks)
    with connect(config.source) as conn:  # connect() pins time_zone '+00:00': TIMESTAMP texts are UTC
        epoch = current_epoch(spark, lh, server_id(conn))
        with consistent_read(conn) as read, conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            rows = cur.fetchall()
        lw, hw = read.low.in_epoch(epoch), read.high.in_epoch(epoch)
    stats = {int(g): (int(n), Decimal(h or 0)) for g, n, h in rows}
    if -1 in stats:
        # Cannot happen with a plan that covers the whole key space; never hide it if it does.
        raise AssertionError(f"{stats[-1][0]} source row(s) of {schema.name} fell outside every chunk")
    return stats, lw.key(), hw.key()


def _silver_side(spark: SparkLike, lh: Lakehouse, schema: TableSchema, chunks) -> dict[int, tuple[int, Decimal]]:
    rows = _silver_stats_frame(spark, lh, schema, chunks).collect()
    parts = range(1, len(hash_parts(schema)) + 1)
    return {int(r["g"]): (int(r["n"]), sum((Decimal(r[f"h{j}"] or 0) for j in parts), Decimal(0))) for r in rows}


def _silver_stats_frame(spark: SparkLike, lh: Lakehouse, schema: TableSchema, chunks):
    """Per chunk ``g`` of silver's live rows: the row count ``n`` and one sum ``h<j>`` per
    hash part (:func:`binlake.ops.verify_sql.hash_parts`), whose total is the checksum."""
    from pyspark.sql import functions as F

    silver = lh.silver(schema.database, schema.table).read(spark)
    missing = [c.name for c in schema.columns if c.name not in silver.columns]
    if missing:
        raise NotReadyError(
            f"silver table {schema.name} lacks column(s) {', '.join(missing)} that the source has: "
            "run binlake capture and binlake silver, then verify again"
        )
    typed = silver.where(~F.col("_cdc_deleted")).select(
        *[
            F.col(quote_ident(c.name)).cast(c.spark_type).alias(v)
            for c, v in zip(schema.columns, _typed_columns(schema))
        ]
    )
    # One SUM per part: Spark compiles each aggregate's update into a method of its own. A
    # part hash is never NULL (MD5 is hex); saying so lets SUM evaluate it once, not twice.
    sums = [
        F.sum(F.coalesce(F.expr(h), F.lit(0).cast("DECIMAL(38,0)"))).alias(f"h{j}")
        for j, h in enumerate(spark_part_hashes_sql(schema, _typed_columns(schema)), 1)
    ]
    return typed.groupBy(_chunk_of(schema, chunks).alias("g")).agg(F.count(F.lit(1)).alias("n"), *sums)


# ---------------------------------------------------------------------------------------
# Catching up, and telling concurrent change from drift


def _applied(spark: SparkLike, lh: Lakehouse, schema: TableSchema) -> tuple[int, int] | None:
    from pyspark.sql import functions as F

    if not lh.silver_progress.exists(spark):
        return None
    rows = (
        lh.silver_progress.read(spark)
        .where((F.col("db") == schema.database) & (F.col("table") == schema.table))
        .collect()
    )
    if not rows or rows[0]["applied_file_index"] is None:
        return None
    return int(rows[0]["applied_file_index"]), int(rows[0]["applied_pos"])


def _catch_up(spark: SparkLike, config: Config, lh: Lakehouse, schema: TableSchema, hw: tuple[int, int]) -> None:
    """Silver must have applied the binlog at least up to ``hw`` before it is compared."""
    applied = _applied(spark, lh, schema)
    if applied is not None and applied >= hw:
        return
    log.info(
        "verify: silver of %s is at %s, the source was read up to %s; capturing and applying first",
        schema.name,
        applied,
        hw,
    )
    run_capture(spark, config)
    run_silver(spark, config)
    applied = _applied(spark, lh, schema)
    if applied is None or applied < hw:
        raise NotReadyError(
            f"silver of {schema.name} has applied the binlog up to {applied or 'nothing'} but the source was read "
            f"up to {hw}, even after capture and silver ran: check binlake status, then verify again"
        )


def _changed_chunks(
    spark: SparkLike, lh: Lakehouse, schema: TableSchema, lw: tuple[int, int], chunks: list[ChunkCheck]
) -> set[int]:
    """Ids of ``chunks`` that bronze recorded a change in after ``lw`` (by before or after
    image, so a key moved by an UPDATE touches both chunks; a TRUNCATE touches all)."""
    from pyspark.sql import functions as F

    if not chunks:
        return set()
    fi, pos = lw
    after = (F.col("file_index") > fi) | ((F.col("file_index") == fi) & (F.col("pos") > pos))
    changes = lh.changelog.read(spark).where(
        (F.col("db") == schema.database)
        & (F.col("table") == schema.table)
        & after
        & F.col("op").isin(*DATA_OPS, *EMPTYING_OPS)
    )
    if changes.where(F.col("op").isin(*EMPTYING_OPS)).limit(1).count():
        return {c.chunk_id for c in chunks}
    # Images decode as silver decodes them: under the schema version each was written with.
    history = se.load_history(spark, lh, schema.database, schema.table)
    decoder = Decoder(schema, se.name_maps(history, schema))
    keyed = _key_schema(schema)
    index = {c.name: i for i, c in enumerate(schema.columns)}
    before, after = (
        changes.select(
            *[F.expr(decoder.column_sql(c.name, image)).alias(f"_v{index[c.name]}") for c in schema.key_columns]
        )
        for image in ("before", "after")
    )
    images = before.unionByName(after)
    flags = [
        F.max(F.when(key_range_predicate(keyed, c.start_key, c.end_key), 1).otherwise(0)).alias(f"c{c.chunk_id}")
        for c in chunks
    ]
    row = images.agg(*flags).collect()[0]
    return {c.chunk_id for c in chunks if row[f"c{c.chunk_id}"]}


__all__ = ["ChunkCheck", "TableCheck", "VerifyResult", "run_verify"]
