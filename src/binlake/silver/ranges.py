"""Chunk key ranges ``[start, end)`` as Spark predicates over typed silver key columns.

A snapshot chunk's bounds are JSON arrays of canonical texts, one per key column (see
:mod:`binlake.contract.types`); ``NULL`` means unbounded on that side. Composite keys compare
lexicographically, as MySQL orders a composite primary key::

    >>> pred = key_range_predicate(schema, '[10, "a"]', '[20]')   # doctest: +SKIP
    >>> silver_df.where(pred)                                      # doctest: +SKIP

Comparisons are between typed Spark values (the same decoding silver uses), so numbers,
dates and decimals order exactly as in MySQL. Strings compare by Spark's binary (UTF-8
code point) order; a key column with a case- or accent-insensitive MySQL collation can
order differently from the source. :func:`key_range_predicate` stays binary (what verify
needs to assign rows deterministically); silver's chunk reconciliation uses
:func:`reconcile_range_predicate`, which is stricter for strings (see docs/silver.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from binlake.contract.sql import quote_ident, spark_string
from binlake.contract.types import Column as SourceColumn
from binlake.contract.types import Kind, TableSchema, spark_decode_sql


def _bound_texts(schema: TableSchema, bound, which: str) -> list[str | None] | None:
    if bound is None:
        return None
    if isinstance(bound, str):
        try:
            values = json.loads(bound)
        except ValueError:
            raise ValueError(f"{which} must be a JSON array of canonical key texts or None, got {bound!r}") from None
    else:
        values = bound
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{which} must be a JSON array of canonical key texts or None, got {bound!r}")
    if not 1 <= len(values) <= len(schema.key):
        raise ValueError(
            f"{which} has {len(values)} values but {schema.name} has {len(schema.key)} key column(s) {list(schema.key)}"
        )
    return [None if v is None else str(v) for v in values]


def _typed_literal(col: SourceColumn, text: str | None) -> str:
    if text is None:
        return "NULL"
    return f"({spark_decode_sql(col, spark_string(text))})"


def _lex(cols: Sequence[str], bounds: Sequence[str], strict_op: str, inclusive: bool) -> str:
    """Lexicographic ``cols <op> bounds`` over a bound prefix: (a > x) or (a = x and (b > y ...))."""
    col, rest_cols = cols[0], cols[1:]
    bound, rest_bounds = bounds[0], bounds[1:]
    strict = f"({col} {strict_op} {bound})"
    if not rest_bounds:
        # A prefix bound: equal on all given columns counts as "inside" for start, "outside" for end.
        return f"({strict} OR ({col} = {bound}))" if inclusive else strict
    return f"({strict} OR (({col} = {bound}) AND {_lex(rest_cols, rest_bounds, strict_op, inclusive)}))"


def _range(schema: TableSchema, start_key, end_key, transform: Callable | None = None) -> str:
    if not isinstance(schema, TableSchema):
        raise TypeError(f"schema must be a binlake.contract.types.TableSchema, got {type(schema).__name__}")
    if not schema.key:
        raise ValueError(f"{schema.name} has no key columns: ranges need a primary key or a configured chunk key")
    start = _bound_texts(schema, start_key, "start_key")
    end = _bound_texts(schema, end_key, "end_key")
    key_cols = schema.key_columns
    tf = transform or (lambda c, _col: c)

    def sides(bounds: Sequence[str | None]):
        cols = [tf(quote_ident(c.name), c) for c in key_cols[: len(bounds)]]
        lits = [tf(_typed_literal(c, t), c) for c, t in zip(key_cols, bounds)]
        return cols, lits

    pred = "TRUE"
    if start is not None:
        cols, lits = sides(start)
        pred = f"{pred} AND {_lex(cols, lits, '>', inclusive=True)}"
    if end is not None:
        cols, lits = sides(end)
        pred = f"{pred} AND {_lex(cols, lits, '<', inclusive=False)}"
    return f"({pred})"


def key_range_sql(schema: TableSchema, start_key, end_key) -> str:
    """The row's typed key lies in ``[start_key, end_key)``, as Spark SQL text.

    ``start_key``/``end_key``: a JSON array text of canonical key texts (as in
    bronze ``snapshot_chunks``), a list of such texts, or ``None`` for unbounded.
    A bound may give fewer values than there are key columns (a prefix bound).
    """
    return _range(schema, start_key, end_key)


def key_range_predicate(schema: TableSchema, start_key, end_key):
    """:func:`key_range_sql` as a boolean Column."""
    from pyspark.sql import functions as F

    return F.expr(key_range_sql(schema, start_key, end_key))


_STRING_KINDS = (Kind.STRING, Kind.ENUM, Kind.SET)


def _string_fold(fold: str) -> Callable:
    """A ``_range`` transform applying Spark's ``lower``/``upper`` to string-like key columns."""
    return lambda c, col: f"{fold}({c})" if col.kind in _STRING_KINDS else c


def reconcile_range_sql(schema: TableSchema, start_key, end_key) -> str:
    """The range as silver trusts it for tombstoning, as Spark SQL text: inside by binary
    order, by lower-cased and by upper-cased order. Case-insensitive collations order letters
    against ``_``, ``[``, ``^`` like one of the folded orders (``utf8mb4_general_ci`` weighs by
    upper case, so ``'a' < '_'``, where binary and lower case put ``'_'`` first); a key all
    three place inside is rarely outside in MySQL. Silver does not depend on it for a whole
    snapshot (see :func:`binlake.silver.merge.reconcile_chunks`); for a partial re-snapshot a
    stricter test only means a missed delete near a bound stays for ``verify`` to find."""
    if not any(c.kind in _STRING_KINDS for c in schema.key_columns):
        return _range(schema, start_key, end_key)
    parts = [_range(schema, start_key, end_key)]
    parts += [_range(schema, start_key, end_key, transform=_string_fold(fold)) for fold in ("lower", "upper")]
    return "(" + " AND ".join(parts) + ")"


def reconcile_range_predicate(schema: TableSchema, start_key, end_key):
    """:func:`reconcile_range_sql` as a boolean Column."""
    from pyspark.sql import functions as F

    return F.expr(reconcile_range_sql(schema, start_key, end_key))
