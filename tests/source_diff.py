"""The check every end-to-end test ends with: a lakehouse table equals its source table,
value for value.

The source is read with the exact select expressions
(:func:`binlake.source.mysql.exact_value_sql`; the text protocol prints FLOAT with 6 digits),
encoded with :func:`binlake.contract.types.encode_value` and typed in Spark with
:func:`binlake.contract.types.spark_decode_sql`, the path silver types bronze texts with, so
the two sides can only differ where the data differs. Read the source while it is quiet
(after the last run), or the comparison races the writers.

    >>> diffs = diff_with_source(spark, config)                  # doctest: +SKIP
    >>> assert all(d.ok for d in diffs), "\\n".join(d.describe() for d in diffs)  # doctest: +SKIP

Used by tests/spark/test_randomized_end_to_end.py and the chaos driver (tests/chaos/driver.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field


@dataclass
class TableDiff:
    """One table: source rows, and lakehouse rows missing, extra (or with a doubled key) and different."""

    name: str
    source_rows: int
    missing: int = 0
    extra: int = 0
    different: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.missing == self.extra == self.different == 0

    def describe(self) -> str:
        head = (
            f"{self.name}: {self.source_rows} source rows, {self.missing} missing, "
            f"{self.extra} extra, {self.different} different"
        )
        return "\n".join([head, *("    " + e for e in self.examples)])


def diff_with_source(spark, config, layer: str = "gold", examples: int = 3) -> list[TableDiff]:
    """Every captured source table against its ``layer`` table (gold, or silver's live rows)."""
    from binlake.source.catalog import captured_tables
    from binlake.source.mysql import connect

    with connect(config.source) as conn:
        return [
            diff_table(spark, config, conn, db, table, layer, examples)
            for db, table in captured_tables(conn, config.source)
        ]


def assert_layers_equal_source(spark, config, layers: tuple[str, ...] = ("silver", "gold")) -> None:
    """Fail, naming the layer and each differing table, unless every layer equals the source."""
    for layer in layers:
        diffs = diff_with_source(spark, config, layer=layer)
        assert all(d.ok for d in diffs), f"{layer}:\n" + "\n".join(d.describe() for d in diffs)


def diff_table(spark, config, conn, db: str, table: str, layer: str = "gold", examples: int = 3) -> TableDiff:
    from pyspark.sql import functions as F

    from binlake.contract.sql import qualified
    from binlake.contract.tables import Lakehouse
    from binlake.contract.types import encode_value, spark_decode_sql
    from binlake.source.catalog import table_schema
    from binlake.source.mysql import exact_value_sql, stream

    if layer not in ("gold", "silver"):
        raise ValueError(f"layer must be 'gold' or 'silver', got {layer!r}")
    schema = table_schema(conn, config.source, db, table)
    cols = schema.columns
    names = [c.name for c in cols]
    key = list(schema.key)
    select = ", ".join(exact_value_sql(c) for c in cols)
    texts = [
        tuple(encode_value(c, v) for c, v in zip(cols, values))
        for values in stream(conn, f"SELECT {select} FROM {qualified(db, table)}")
    ]
    raw = spark.createDataFrame(texts, ", ".join(f"_t{i} STRING" for i in range(len(cols))))
    src = raw.selectExpr(*[f"{spark_decode_sql(c, f'_t{i}')} AS `{c.name}`" for i, c in enumerate(cols)])
    diff = TableDiff(f"{db}.{table}", len(texts))

    lh = Lakehouse(config)
    ref = lh.gold(db, table) if layer == "gold" else lh.silver(db, table)
    if not ref.exists(spark):
        diff.missing = len(texts)
        diff.examples.append(f"no {layer} table at {ref}")
        return diff
    lake = ref.read(spark)
    if layer == "silver":
        lake = lake.where("NOT _cdc_deleted")
    lake = lake.select(*[F.col(f"`{n}`") for n in names])
    # Both sides are small in tests: compared in Python after one read of each, rather than
    # in a handful of Spark joins per table that each read both sides again.
    source_rows = [_hashable(tuple(r)) for r in src.collect()]
    lake_rows = [_hashable(tuple(r)) for r in lake.collect()]
    at = [names.index(k) for k in key]

    def key_of(row: tuple) -> tuple:
        return tuple(row[i] for i in at)

    def show(row: tuple) -> str:
        return ", ".join(f"{n}={v!r}" for n, v in zip(names, row))

    lake_by_key = defaultdict(list)
    for row in lake_rows:
        lake_by_key[key_of(row)].append(row)
    source_keys = {key_of(row) for row in source_rows}
    missing = [row for row in source_rows if key_of(row) not in lake_by_key]
    extra = [row for row in lake_rows if key_of(row) not in source_keys]
    doubled = {k: len(rows) for k, rows in lake_by_key.items() if len(rows) > 1}
    # A source row is different when no lake row equals it (as a multiset, like EXCEPT ALL)
    # and its key is in the lake.
    unmatched = Counter(lake_rows)
    changed = []
    for row in source_rows:
        if unmatched[row]:
            unmatched[row] -= 1
        elif key_of(row) in lake_by_key:
            changed.append(row)
    diff.missing, diff.different = len(missing), len(changed)
    diff.extra = len(extra) + sum(n - 1 for n in doubled.values())

    diff.examples += [f"missing: {show(r)}" for r in missing[:examples]]
    diff.examples += [f"extra: {show(r)}" for r in extra[:examples]]
    diff.examples += [f"key {list(k)} in {layer} {n} times" for k, n in list(doubled.items())[:examples]]
    for s in changed[:examples]:
        for g in lake_by_key[key_of(s)]:
            cells = [f"{n}: source {a!r}, {layer} {b!r}" for n, a, b in zip(names, s, g) if a != b]
            diff.examples.append(f"different at key {list(key_of(s))}: " + "; ".join(cells))
    return diff


def _hashable(value):
    """``value`` as Spark returned it, with its lists, maps, structs and binaries made hashable
    so that rows can be counted; equal where Spark's comparison finds them equal."""
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        return frozenset((_hashable(k), _hashable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value
