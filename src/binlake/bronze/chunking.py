"""Chunk planning for the snapshot: pure functions, no I/O.

A chunk is a key range ``[start, end)`` over the table's key columns (the primary key, or
the configured ``source.chunk_keys``). ``start``/``end`` are tuples of canonical texts
(:func:`binlake.contract.types.encode_value`), one per key column; ``None`` is unbounded. In
Delta they are stored as JSON arrays (:func:`key_to_json`).

Two ways to cut a table, both keeping every chunk at most ``chunk_size`` rows *at plan time*:

- :func:`plan_arithmetic`: a dense single integer key is cut every ``chunk_size`` values. A
  unique integer key holds at most ``chunk_size`` rows in ``chunk_size`` consecutive values,
  so this is bounded whatever the density; it is only chosen when dense enough that few
  chunks come out empty (:func:`choose_arithmetic`).
- :func:`plan_by_boundaries`: everything else (sparse or skewed integers, strings, UUIDs,
  DATETIME, composite keys) walks the key index: the next boundary is the key
  ``chunk_size`` rows after the current start (:func:`boundary_query`), so MySQL does the
  ordering and comparing, in the column's own collation, and memory stays flat.

Every range predicate runs in MySQL (:func:`range_condition`), in the expanded
``(a > ?) OR (a = ? AND b >= ?)`` form that lets the optimizer use the key index; values are
parameters, converted back from canonical text by :func:`param_value` so that integer keys
near 2**64 never pass through a DOUBLE.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from binlake.contract.sql import Sql, qualified, quote_ident, sql, sql_list
from binlake.contract.types import Column, Kind

Key = tuple  # tuple[str, ...]: canonical texts, one per key column

# Above this many arithmetic chunks per expected non-empty chunk, the key is too sparse.
_SPARSITY_LIMIT = 2
# A hard cap, whatever the estimate says: the plan is one row per chunk in Delta.
_MAX_ARITHMETIC_CHUNKS = 200_000


@dataclass(frozen=True)
class Chunk:
    """One planned chunk: ``[start, end)``; ``None`` bounds are unbounded."""

    chunk_id: int
    start: Key | None
    end: Key | None

    def __post_init__(self) -> None:
        if self.chunk_id < 0:
            raise ValueError(f"chunk_id must be >= 0, got {self.chunk_id}")

    @property
    def start_json(self) -> str | None:
        return key_to_json(self.start)

    @property
    def end_json(self) -> str | None:
        return key_to_json(self.end)


def key_to_json(key: Sequence[str] | None) -> str | None:
    """``("1", "a")`` -> ``'["1","a"]'``; ``None`` stays ``None`` (unbounded)."""
    if key is None:
        return None
    return json.dumps([str(v) for v in key], separators=(",", ":"), ensure_ascii=False)


def key_from_json(text: str | None) -> Key | None:
    if text is None:
        return None
    values = json.loads(text)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"chunk bound {text!r} is not a JSON array of strings")
    return tuple(values)


def _check_chunk_size(chunk_size: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")


# ---------------------------------------------------------------------------------------
# Arithmetic splitting (dense single integer keys)


def is_integer_key(key_columns: Sequence[Column]) -> bool:
    return len(key_columns) == 1 and key_columns[0].kind in (Kind.INT, Kind.UINT, Kind.YEAR)


def choose_arithmetic(lo: int, hi: int, estimated_rows: int, chunk_size: int) -> bool:
    """True when cutting ``[lo, hi]`` every ``chunk_size`` values yields few empty chunks.

    ``estimated_rows`` is the server's estimate (information_schema.TABLES.TABLE_ROWS). A
    wrong estimate only costs efficiency, never correctness: both strategies bound chunks.
    """
    _check_chunk_size(chunk_size)
    if hi < lo:
        raise ValueError(f"key range is empty: lo={lo} > hi={hi}")
    n_arith = (hi - lo) // chunk_size + 1
    n_needed = max(1, math.ceil(max(estimated_rows, 0) / chunk_size))
    return n_arith <= _SPARSITY_LIMIT * n_needed + 1 and n_arith <= _MAX_ARITHMETIC_CHUNKS


def plan_arithmetic(lo: int, hi: int, chunk_size: int) -> list[Chunk]:
    """Cut ``[lo, hi]`` every ``chunk_size`` values; the first chunk is open below and the
    last open above, so keys inserted outside ``[lo, hi]`` after planning are still read."""
    _check_chunk_size(chunk_size)
    if hi < lo:
        raise ValueError(f"key range is empty: lo={lo} > hi={hi}")
    cuts = list(range(lo + chunk_size, hi + 1, chunk_size))
    return chunks_from_boundaries([(str(c),) for c in cuts])


def chunks_from_boundaries(boundaries: Sequence[Key]) -> list[Chunk]:
    """Strictly increasing boundaries ``b1 < ... < bn`` -> ``(-inf,b1), [b1,b2), ..., [bn,+inf)``."""
    bounds: list[Key | None] = [None, *boundaries, None]
    return [Chunk(i, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


# ---------------------------------------------------------------------------------------
# Boundary walking (everything else)


def plan_by_boundaries(next_boundary: Callable[[Key | None], Key | None], max_chunks: int = 10_000_000) -> list[Chunk]:
    """Walk the key index: ``next_boundary(start)`` returns the key ``chunk_size`` rows after
    ``start`` (inclusive; ``None`` = from the first row), or ``None`` when fewer rows remain.

    In production ``next_boundary`` runs :func:`boundary_query`; tests pass a pure function.
    """
    boundaries: list[Key] = []
    start: Key | None = None
    while True:
        nxt = next_boundary(start)
        if nxt is None:
            break
        nxt = tuple(nxt)
        if start is not None and nxt == start:
            # The server returned the start itself: the key is not unique, or the bound
            # text does not round-trip. Stopping here keeps the plan a partition.
            raise ValueError(f"boundary query returned its own start {list(start)}: the chunk key is not unique")
        boundaries.append(nxt)
        if len(boundaries) >= max_chunks:
            raise ValueError(f"more than {max_chunks} chunks planned: raise snapshot.chunk_size")
        start = nxt
    return chunks_from_boundaries(boundaries)


def boundary_query(
    db: str, table: str, key_columns: Sequence[Column], start: Key | None, chunk_size: int
) -> tuple[str, list]:
    """SQL + params for the key ``chunk_size`` rows after ``start`` (inclusive), in index order."""
    _check_chunk_size(chunk_size)
    cols = sql_list(quote_ident(c.name) for c in key_columns)
    where, params = range_condition(key_columns, start, None)
    where_sql = sql(" WHERE {w}", w=Sql(where)) if where != "1=1" else Sql("")
    statement = sql(
        "SELECT {cols} FROM {t}{where} ORDER BY {cols} LIMIT 1 OFFSET {n}",
        cols=cols,
        t=qualified(db, table),
        where=where_sql,
        n=int(chunk_size),
    )
    return statement, params


def min_max_query(db: str, table: str, key_column: Column) -> str:
    return sql("SELECT MIN({c}) AS lo, MAX({c}) AS hi FROM {t}", c=quote_ident(key_column.name), t=qualified(db, table))


# ---------------------------------------------------------------------------------------
# Range predicates


@dataclass(frozen=True)
class Term:
    """``column[index] <op> bound[index]`` inside one disjunct of an expanded tuple comparison."""

    index: int
    op: str  # one of = > >= < <=


def tuple_compare_terms(n: int, op: str) -> list[list[Term]]:
    """Expand ``(k1..kn) op (v1..vn)`` into OR-of-ANDs MySQL can run on an index.

    ``>=``: ``(k1 > v1) OR (k1 = v1 AND k2 > v2) OR ... OR (k1 = v1 AND ... AND kn >= vn)``.
    """
    if n < 1:
        raise ValueError("a key needs at least one column")
    if op not in (">=", "<"):
        raise ValueError(f"op must be '>=' or '<', got {op!r}")
    strict = ">" if op == ">=" else "<"
    out = []
    for i in range(n):
        last = i == n - 1
        out.append([Term(j, "=") for j in range(i)] + [Term(i, op if last else strict)])
    return out


def range_condition(key_columns: Sequence[Column], start: Key | None, end: Key | None) -> tuple[str, list]:
    """SQL for ``start <= key < end`` (``1=1`` if both unbounded) and its parameters."""
    parts: list[str] = []
    params: list[Any] = []
    for bound, op in ((start, ">="), (end, "<")):
        if bound is None:
            continue
        if len(bound) != len(key_columns):
            raise ValueError(f"chunk bound {list(bound)} has {len(bound)} values for {len(key_columns)} key columns")
        disjuncts = []
        for conj in tuple_compare_terms(len(key_columns), op):
            texts = []
            for t in conj:
                col = key_columns[t.index]
                texts.append(f"{quote_ident(col.name)} {t.op} %s")
                params.append(param_value(col, bound[t.index]))
            disjuncts.append("(" + " AND ".join(texts) + ")")
        parts.append("(" + " OR ".join(disjuncts) + ")")
    return (" AND ".join(parts) if parts else "1=1"), params


def param_value(col: Column, text: str) -> Any:
    """A canonical text back to the Python value pymysql sends so MySQL compares natively.

    Integers go as Python ints (pymysql writes them as literals), so BIGINT UNSIGNED near
    2**64 is compared exactly instead of as a DOUBLE, which a quoted string would cause.
    """
    k = col.kind
    if k in (Kind.INT, Kind.UINT, Kind.YEAR, Kind.BIT):
        return int(text)
    if k is Kind.DECIMAL:
        return decimal.Decimal(text)
    if k in (Kind.FLOAT, Kind.DOUBLE):
        return float(text)
    if k is Kind.TIMESTAMP:
        # Sessions run with time_zone '+00:00', so the UTC wall clock is the instant.
        if text.endswith("Z"):
            return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").strftime("%Y-%m-%d %H:%M:%S.%f")
        return text
    if k is Kind.BINARY:
        return base64.b64decode(text)
    if k is Kind.ENUM and text in col.labels:
        # ORDER BY sorts an ENUM by its index; compare by index too, not by label text.
        return col.labels.index(text) + 1
    if k is Kind.SET and col.labels:
        members = set(text.split(",")) - {""}
        if members <= set(col.labels):
            return sum(1 << i for i, label in enumerate(col.labels) if label in members)
    # STRING, JSON, DATE, DATETIME, TIME: MySQL parses the text in the
    # column's own type and collation (a parameter is coercible, the column wins).
    return text
