"""Foreign-key referential actions that MySQL/MariaDB apply but never write to the binlog.

InnoDB runs ``ON DELETE CASCADE``, ``ON DELETE SET NULL``, ``ON UPDATE CASCADE`` and
``ON UPDATE SET NULL`` inside the storage engine, so the binlog only has the parent's
change. Where parent and child are both captured, silver applies the action to the child
itself, with the parent's ``_cdc_seq``:

- a child row is touched only if its own ``_cdc_seq`` is older than the parent's change,
  so replays and late batches change nothing (same rule as the main MERGE);
- cascaded deletes are tombstones and propagate to grandchildren (ON DELETE CASCADE chains);
- chains of parent key updates inside one batch (a -> b -> c) are followed round by round.

Not applied (documented in docs/silver.md): SET DEFAULT (InnoDB rejects it), actions caused
by silver-derived tombstones (TRUNCATE, chunk reconciliation), and a cascaded UPDATE of a
child column that grandchildren reference.
"""

from __future__ import annotations

import logging
from collections import defaultdict

log = logging.getLogger("binlake.silver")

_MAX_ROUNDS = 8


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _o(name: str) -> str:
    return _q("o__" + name)


def _n(name: str) -> str:
    return _q("n__" + name)


def _events_from_batch(batch):
    """A table's logged deletes and updates as typed old (o__) and new (n__) values of every column."""
    from binlake.silver.merge import _seq_sql

    dec = batch.decoder
    cols = [c.name for c in batch.schema.columns]
    return batch.changes.where("op IN ('delete', 'update')").selectExpr(
        "op AS kind",
        f"{_seq_sql('file_index', 'pos', '`row`')} AS seq",
        "commit_ts AS ts",
        *[f"{dec.column_sql(c, 'before')} AS {_o(c)}" for c in cols],
        *[f"CASE WHEN op = 'update' THEN {dec.column_sql(c, 'after')} END AS {_n(c)}" for c in cols],
    )


def _latest_per_old(events, parent_cols):
    """One event per old parent value (the newest), so no child row matches two."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    w = Window.partitionBy(*[F.col(_o(c)) for c in parent_cols]).orderBy(F.col("seq").desc())
    return events.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn")


def _version(spark, ref) -> int:
    return int(ref.delta(spark).history(1).select("version").first()[0])


def _metrics(spark, ref, since: int) -> int:
    row = ref.delta(spark).history(1).select("version", "operation", "operationMetrics").first()
    # A MERGE that matched nothing commits nothing: the last commit is someone else's.
    if row["version"] <= since or row["operation"] != "MERGE":
        return 0
    m = row["operationMetrics"] or {}
    return int(m.get("numTargetRowsUpdated", 0) or 0)


def _apply(spark, child, fk, events, action: str, on_update: bool):
    """One MERGE of parent events into the child; returns (rows changed, cascaded-delete events)."""
    from pyspark.sql import functions as F

    from binlake.silver.merge import with_retry

    ccols, pcols = list(fk["columns"]), list(fk["parent_columns"])
    kind = "update" if on_update else "delete"
    ev = events.where(F.col("kind") == kind)
    if on_update:
        changed = " OR ".join(f"NOT ({_o(p)} <=> {_n(p)})" for p in pcols)
        ev = ev.where(changed)
    ev = _latest_per_old(ev.where(" AND ".join(f"{_o(p)} IS NOT NULL" for p in pcols)), pcols)
    if ev.isEmpty():
        return 0, None
    ev = ev.select(*[F.col(_o(p)).alias(f"o{i}") for i, p in enumerate(pcols)],
                   *[F.col(_n(p)).alias(f"n{i}") for i, p in enumerate(pcols)], "seq", "ts")
    on = " AND ".join(f"t.{_q(c)} = e.o{i}" for i, c in enumerate(ccols))
    cond = "t._cdc_seq < e.seq AND NOT t._cdc_deleted"
    assign = {"_cdc_seq": "e.seq", "_cdc_commit_ts": "e.ts"}
    derived = None
    if action == "CASCADE" and not on_update:
        assign.update({"_cdc_deleted": "true", "_cdc_op": "'delete'"})
        # The children about to be tombstoned are deletes for their own children; keep them
        # before the MERGE changes what this join sees.
        target = child.ref.read(spark).alias("t")
        hit = target.join(ev.alias("e"), F.expr(on) & F.expr(cond), "inner")
        derived = hit.select(
            F.lit("delete").alias("kind"), F.col("e.seq").alias("seq"), F.col("e.ts").alias("ts"),
            *[F.col(f"t.{_q(c.name)}").alias("o__" + c.name) for c in child.schema.columns],
            *[F.lit(None).cast(c.spark_type).alias("n__" + c.name) for c in child.schema.columns],
        ).localCheckpoint()
    elif action == "CASCADE":
        assign.update({_q(c): f"e.n{i}" for i, c in enumerate(ccols)})
        assign["_cdc_op"] = "'update'"
    elif action == "SET NULL":
        assign.update({_q(c): "NULL" for c in ccols})
        assign["_cdc_op"] = "'update'"
    else:
        return 0, None

    def run():
        (child.ref.delta(spark).alias("t").merge(ev.alias("e"), on)
         .whenMatchedUpdate(condition=cond, set=assign).execute())

    before = _version(spark, child.ref)
    with_retry(f"FK {fk.get('name')} action into {child.ref}", run)
    return _metrics(spark, child.ref, before), derived


def apply_cascades(spark, batches: dict) -> dict[str, int]:
    """Apply ON DELETE / ON UPDATE actions of every captured parent to its captured children.

    ``batches``: {"db.table": TableBatch} of the tables this run applied. Returns the number
    of child rows changed per child table.
    """
    counts: dict[str, int] = defaultdict(int)
    links = [(name, b, fk) for name, b in batches.items() for fk in b.schema.foreign_keys if fk.get("parent") in batches]
    if not links:
        return dict(counts)
    events = {name: _events_from_batch(b) for name, b in batches.items()}
    for _round in range(_MAX_ROUNDS):
        derived_by_table: dict[str, list] = defaultdict(list)
        changed = 0
        for name, child, fk in links:
            parent_events = events.get(fk["parent"])
            if parent_events is None:
                continue
            for on_update, rule in ((True, fk.get("on_update")), (False, fk.get("on_delete"))):
                action = (rule or "RESTRICT").upper()
                n, derived = _apply(spark, child, fk, parent_events, action, on_update)
                changed += n
                counts[name] += n
                if derived is not None:
                    derived_by_table[name].append(derived)
        if not changed:
            break
        # Next round: this round's logged events again (key-update chains) plus the
        # cascaded deletes (grandchildren).
        nxt = dict(events)
        for name, frames in derived_by_table.items():
            for f in frames:
                nxt[name] = nxt[name].unionByName(f) if name in nxt else f
        events = nxt
    return dict(counts)
