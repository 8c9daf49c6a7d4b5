"""Foreign-key actions InnoDB applies without logging them, derived as change records.

InnoDB runs ``ON DELETE CASCADE / SET NULL`` and ``ON UPDATE CASCADE / SET NULL`` inside the
storage engine: the binlog holds only the parent's change. Where parent and child are both
captured, silver derives the child's changes itself and applies them through the same
dedup and "only if newer" MERGE as every logged change:

- A derived change carries the parent change's ``_cdc_seq``. That sequence names one row
  event of the parent table, so inside the child it sorts exactly where the engine applied
  the action: after every child change logged before the parent's, before every one logged
  after it. A later logged change to the moved row wins; the moved row never overwrites a
  newer record or tombstone.
- Its values are the child row's state just before the parent change: the key's latest
  record older than that sequence, among silver as the last completed run left it, this
  batch's records and the changes derived so far.
- A derived change is a parent change in turn: grandchildren follow (chains), and a child
  moved twice in one batch (a parent key updated ``a -> b -> c``) follows both moves. Both
  come from deriving again with what the previous round derived, until a round derives
  exactly what the one before it did.

The base state is what the last *completed* run left (the silver version its progress row
recorded): a run killed after some tables were merged derives the same changes again, so
every table converges whichever of them took the batch before the kill.

Not derived: SET DEFAULT (InnoDB rejects it), and actions of silver-derived tombstones
(TRUNCATE of a parent needs ``FOREIGN_KEY_CHECKS=0``, which skips the cascade in MySQL too;
chunk reconciliation repairs drift, not changes).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from binlake.contract.changelog import DELETE, UPDATE
from binlake.contract.position import seq_literal
from binlake.contract.sql import quote_ident, spark_string
from binlake.contract.types import FK_ACTIONS
from binlake.errors import CascadeError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from binlake.contract.types import TableSchema
    from binlake.spark import SparkLike

log = logging.getLogger("binlake.silver")

ACTIONS = FK_ACTIONS
# Each round settles at least one more step of the longest chain of actions in a batch
# (a parent key updated n times, or n levels of grandchildren).
MAX_ROUNDS = 64
# A round's derived changes of a table are compared on the driver up to this many rows.
FEW_ROWS = 10_000
# Ties on _cdc_seq inside a table: a logged record beats one silver derived for it.
PRIO_DERIVED = 1


def old(name: str) -> str:
    """The column of a change's before value."""
    return "o__" + name


def new(name: str) -> str:
    """The column of a change's after value."""
    return "n__" + name


@dataclass(frozen=True)
class Link:
    """One foreign key whose parent and child are both in the batch."""

    child: str
    parent: str
    name: str
    columns: tuple[str, ...]
    parent_columns: tuple[str, ...]
    on_delete: str
    on_update: str

    @staticmethod
    def of(child: str, fk: dict) -> Link:
        return Link(
            child=child,
            parent=fk["parent"],
            name=fk.get("name") or "",
            columns=tuple(fk["columns"]),
            parent_columns=tuple(fk["parent_columns"]),
            on_delete=(fk.get("on_delete") or "RESTRICT").upper(),
            on_update=(fk.get("on_update") or "RESTRICT").upper(),
        )

    @property
    def acts(self) -> bool:
        return self.on_delete in ACTIONS or self.on_update in ACTIONS


def links_between(schemas: dict) -> list[Link]:
    """The acting foreign keys among ``schemas`` ({"db.t": TableSchema})."""
    links = [
        Link.of(name, fk) for name, s in sorted(schemas.items()) for fk in s.foreign_keys if fk.get("parent") in schemas
    ]
    return [link for link in links if link.acts]


@dataclass
class CascadeTable:
    """What deriving needs of one table of the batch.

    ``records``: this batch's typed records before dedup (the table's columns, ``_cdc_seq``,
    ``_cdc_deleted``, ...). ``changes``: its logged updates and deletes as ``kind, seq, ts``
    plus before (``o__``) and after (``n__``) values of every column, or None when the batch
    has none. ``base()``: silver as the last completed run left it. ``emptied``: sequences of
    its TRUNCATE-like records, from which every older row is gone.
    """

    schema: TableSchema
    records: DataFrame
    changes: DataFrame | None
    base: Callable[[], DataFrame]
    emptied: tuple[tuple[int, int, int], ...] = ()


def derive(spark: SparkLike, tables: dict[str, CascadeTable]) -> dict[str, DataFrame]:
    """The derived changes per child table, as ``kind, seq, ts, o__*, n__*`` DataFrames.

    Costs nothing (no Spark job) when no acting foreign key has a parent with logged updates
    or deletes in this batch.
    """
    links = links_between({name: t.schema for name, t in tables.items()})
    parents = {link.parent for link in links}
    if not any(tables[p].changes is not None for p in parents):
        return {}
    bases: dict[str, DataFrame] = {}
    try:
        return _settle(tables, links, bases)
    finally:
        for base in bases.values():
            base.unpersist()


def _settle(tables: dict[str, CascadeTable], links: list[Link], bases: dict[str, DataFrame]) -> dict[str, DataFrame]:
    """Derive round after round until a round derives what the one before it did."""
    from pyspark import StorageLevel

    derived: dict[str, DataFrame] = {}
    rounds: dict[str, _Round] = {}
    for round_no in range(1, MAX_ROUNDS + 1):
        frames: dict[str, list] = defaultdict(list)
        for link in links:
            events = _events(link, tables[link.parent].changes, derived.get(link.parent))
            if events is None:
                continue
            child = tables[link.child]
            if link.child not in bases:
                # Each round joins it twice per link: read it once, only the columns used.
                bases[link.child] = (
                    child.base().selectExpr(*_state_columns(child)).persist(StorageLevel.MEMORY_AND_DISK)
                )
            state = _state_records(child, bases[link.child], derived.get(link.child))
            frames[link.child].append(_derive_link(link, child, events, state))
        nxt = {}
        for name, fs in frames.items():
            df = _one_change_per_row(fs, tables[name].schema).localCheckpoint()
            rows = _rows_if_few(df)
            if rows is None or rows:
                nxt[name] = _Round(df, rows)
        if _same(nxt, rounds):
            log.info("foreign-key actions settled after %d round(s)", round_no)
            return {name: r.df for name, r in nxt.items()}
        rounds = nxt
        derived = {name: r.df for name, r in nxt.items()}
    raise CascadeError(
        f"foreign-key actions of this batch did not settle in {MAX_ROUNDS} rounds (a chain of more than "
        f"{MAX_ROUNDS} cascaded steps); raise binlake.silver.cascade.MAX_ROUNDS and run binlake silver again"
    )


def derived_records(changes, schema):
    """Derived changes as silver records: the row after the change, and a tombstone for the
    key it left (a cascaded delete, or a cascaded update of key columns)."""
    cols = [c.name for c in schema.columns]
    moved = " OR ".join(f"NOT ({quote_ident(old(k))} <=> {quote_ident(new(k))})" for k in schema.key)
    meta = ["seq AS _cdc_seq", "ts AS _cdc_commit_ts", f"{PRIO_DERIVED} AS _prio", "0 AS _zero_dates"]
    after = changes.where(f"kind = '{UPDATE}'").selectExpr(
        *[f"{quote_ident(new(c))} AS {quote_ident(c)}" for c in cols],
        *meta,
        f"'{UPDATE}' AS _cdc_op",
        "false AS _cdc_deleted",
    )
    gone = changes.where(f"kind = '{DELETE}' OR ({moved})").selectExpr(
        *[f"{quote_ident(old(c))} AS {quote_ident(c)}" for c in cols],
        *meta,
        f"'{DELETE}' AS _cdc_op",
        "true AS _cdc_deleted",
    )
    return after.unionByName(gone)


# ---------------------------------------------------------------------------------------


def _events(link: Link, logged, derived):
    """The parent's changes this link acts on: kind, seq, ts, p<i> (old), q<i> (new) per
    referenced column."""
    frames = [f for f in (logged, derived) if f is not None]
    if not frames:
        return None
    pcols = link.parent_columns
    cols = [
        "kind",
        "seq",
        "ts",
        *[f"{quote_ident(old(p))} AS p{i}" for i, p in enumerate(pcols)],
        *[f"{quote_ident(new(p))} AS q{i}" for i, p in enumerate(pcols)],
    ]
    events = frames[0].selectExpr(*cols)
    for f in frames[1:]:
        events = events.unionByName(f.selectExpr(*cols))
    kinds = []
    if link.on_delete in ACTIONS:
        kinds.append(f"kind = '{DELETE}'")
    if link.on_update in ACTIONS:
        changed = " OR ".join(f"NOT (p{i} <=> q{i})" for i in range(len(pcols)))
        kinds.append(f"(kind = '{UPDATE}' AND ({changed}))")
    present = " AND ".join(f"p{i} IS NOT NULL" for i in range(len(pcols)))
    return events.where(f"({' OR '.join(kinds)}) AND {present}")


def _state_records(child: CascadeTable, base, derived):
    """Every record of the child known to this derivation: columns, _cdc_seq, _cdc_deleted."""
    cols = _state_columns(child)
    out = base.selectExpr(*cols).unionByName(child.records.selectExpr(*cols))
    if derived is not None:
        out = out.unionByName(derived_records(derived, child.schema).selectExpr(*cols))
    return out


def _state_columns(child: CascadeTable) -> list[str]:
    return [quote_ident(c.name) for c in child.schema.columns] + ["_cdc_seq", "_cdc_deleted"]


def _derive_link(link: Link, child: CascadeTable, events, state):
    """One round of one foreign key: the child changes its parent's changes cause."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    schema = child.schema
    cols = [c.name for c in schema.columns]
    n = len(link.columns)
    refs = [f"p{i}" for i in range(n)]
    # Candidates: (parent change, child key) where a record of the key referenced the old
    # parent values before the change.
    matches = " AND ".join(f"r.{quote_ident(c)} = e.p{i}" for i, c in enumerate(link.columns))
    cand = (
        state.alias("r")
        .join(events.alias("e"), F.expr(f"{matches} AND r._cdc_seq < e.seq"))
        .select("e.*", *[F.col(f"r.{quote_ident(k)}").alias(f"k__{k}") for k in schema.key])
        .dropDuplicates(["seq", *refs, *[f"k__{k}" for k in schema.key]])
    )
    # The key's state just before the parent change: its latest record older than it.
    same_key = " AND ".join(f"r.{quote_ident(k)} <=> c.{quote_ident('k__' + k)}" for k in schema.key)
    joined = cand.alias("c").join(state.alias("r"), F.expr(f"{same_key} AND r._cdc_seq < c.seq"))
    w = Window.partitionBy(
        "c.seq", *[f"c.{r}" for r in refs], *[f"c.{quote_ident('k__' + k)}" for k in schema.key]
    ).orderBy(F.col("r._cdc_seq").desc())
    latest = joined.withColumn("_rn", F.row_number().over(w)).where("_rn = 1")
    alive = "NOT r._cdc_deleted"
    if child.emptied:
        seqs = ", ".join(seq_literal(s) for s in child.emptied)
        alive += f" AND NOT exists(array({seqs}), t -> r._cdc_seq < t AND t < c.seq)"
    still = " AND ".join(f"r.{quote_ident(c)} = c.p{i}" for i, c in enumerate(link.columns))
    hit = latest.where(f"{alive} AND {still}")

    deletes = f"c.kind = '{DELETE}'"
    kind = f"CASE WHEN {deletes} THEN '{DELETE}' ELSE '{UPDATE}' END" if link.on_delete == "CASCADE" else f"'{UPDATE}'"
    fk_pos = {c: i for i, c in enumerate(link.columns)}

    def after(c: str) -> str:
        typ = schema.column(c).spark_type
        if c not in fk_pos:
            value = f"r.{quote_ident(c)}"
        elif link.on_update == "CASCADE":
            value = f"CASE WHEN {deletes} THEN NULL ELSE CAST(c.q{fk_pos[c]} AS {typ}) END"
        else:
            value = f"CAST(NULL AS {typ})"
        if link.on_delete == "CASCADE":
            return f"CASE WHEN {deletes} THEN CAST(NULL AS {typ}) ELSE {value} END"
        return value

    return hit.selectExpr(
        f"{kind} AS kind",
        "c.seq AS seq",
        "c.ts AS ts",
        *[f"r.{quote_ident(c)} AS {quote_ident(old(c))}" for c in cols],
        *[f"{after(c)} AS {quote_ident(new(c))}" for c in cols],
        f"{spark_string(link.name)} AS _link",
    )


def _one_change_per_row(frames, schema):
    """One derived change per child row and parent change. Two foreign keys can reach one
    row from one parent change only through deletes (InnoDB refuses to update a table twice
    in one cascade); the delete wins."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    df = frames[0]
    for f in frames[1:]:
        df = df.unionByName(f)
    w = Window.partitionBy("seq", *[F.col(quote_ident(old(k))) for k in schema.key]).orderBy(
        F.col("kind").asc(), F.col("_link").asc()
    )  # 'delete' < 'update'
    return df.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn", "_link")


@dataclass(frozen=True)
class _Round:
    """One child's changes derived in one round, with its rows when there are few."""

    df: DataFrame
    rows: Counter | None


def _rows_if_few(df) -> Counter | None:
    """The round's rows as a multiset when there are at most ``FEW_ROWS`` (the usual case: a
    batch moves a few child rows), else None. One job on the checkpointed rows replaces the
    emptiness check, two counts and a set difference per table and round."""
    rows = df.limit(FEW_ROWS + 1).collect()
    if len(rows) > FEW_ROWS:
        return None
    return Counter(tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in rows)


def _same(a: dict[str, _Round], b: dict[str, _Round]) -> bool:
    if a.keys() != b.keys():
        return False
    for name, mine in a.items():
        other = b[name]
        if mine.rows is not None and other.rows is not None:
            if mine.rows != other.rows:
                return False
        elif mine.df.count() != other.df.count() or not mine.df.exceptAll(other.df).isEmpty():
            return False
    return True
