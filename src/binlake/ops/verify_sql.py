"""The canonical "verify text" of a row and its hash, in MySQL/MariaDB SQL over the source
columns and in Spark SQL over silver's typed columns (:mod:`binlake.ops.verify`).

Both engines must give byte-identical text for identical values, so that the row hash and
the per-chunk sum of it can be computed by the server on one side and by Spark on the
other. Each kind's text is defined once (:func:`text_sql`), over an :class:`Engine` that
spells its pieces for MySQL or for Spark. Per kind (silver types: docs/architecture.md,
"Types", :attr:`binlake.contract.types.Column.spark_type`):

======================  =============================================================
INT / UINT / YEAR       decimal digits of the value (never a ``ZEROFILL`` display's padding)
BIT                     the signed 64-bit integer silver holds (two's complement)
DECIMAL                 fixed-point with every scale digit (``1.50``), no ``ZEROFILL``
                        padding; > 38 digits: as stored
FLOAT / DOUBLE          the exact IEEE value as ``[-]MpE``: the 53-bit integer significand
                        ``M`` (``2^52 <= M < 2^53``) and the exponent ``E`` with value
                        ``M * 2^(E-52)``; ``0`` for zero. Powers of two scale exactly in
                        both engines, so no decimal rendering has to agree. FLOAT is
                        compared through its exact DOUBLE widening
DATE                    ``YYYY-MM-DD``; a zero year, month or day is NULL (as in silver)
DATETIME                ``YYYY-MM-DD HH:MM:SS.ffffff``, zero dates NULL
TIMESTAMP               the same, the UTC wall clock (MySQL session ``time_zone`` ``+00:00``)
TIME                    the text silver holds (``-838:59:59``, ``-00:00:01.250000``)
STRING / ENUM / SET     the UTF-8 text (MySQL: ``CONVERT(... USING utf8mb4)``); SET as its
/ JSON                  comma-joined labels, JSON as the server prints it
BINARY                  upper-case hex (BLOB, BINARY, VARBINARY, GEOMETRY)
======================  =============================================================

A column contributes ``N`` when NULL, else ``<byte length>:<text>``. The NULL marker keeps
``(NULL, '1')`` and ``('1', NULL)`` apart and the length keeps ``'a,b'`` splits apart.

The row is hashed in parts (:func:`hash_parts`) of at most :data:`HASH_PART_COLUMNS`
columns: part ``j`` (from 1) is the text ``j,<key columns>,<its columns>``, joined with
``,``, and hashes to the first 15 hex digits of its UTF-8 text's MD5, as an integer; the row
hash is the sum of its parts' hashes. The number and the key in every part make the parts
of all rows one set in which no part can stand in for another: since silver holds one row
per key, equal sums mean equal rows, as one hash of the whole row would. Parts keep Spark's
generated code small: each part's hash compiles into a method of its own (its own ``SUM``),
where one hash of a wide row outgrew the JVM's 64 KB method limit (docs/silver.md,
"Verify").

Chunk assignment on the source side compares keys the way
:func:`binlake.silver.ranges.key_range_predicate` compares silver's typed keys: numbers and
dates by value, everything silver holds as STRING or BINARY by bytes (``CAST(... AS
BINARY)`` against a ``_binary`` parameter), never by the column's collation.

Every identifier goes through :func:`binlake.source.mysql.quote_ident`; bound values are
parameters (pymysql ``%s``, so literal ``%`` is written ``%%``).
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from binlake.contract.sql import Sql, qualified, quote_ident, sql, sql_list
from binlake.contract.types import Column, Kind, TableSchema

# ---------------------------------------------------------------------------------------
# Column texts: one definition per kind, spelled for each engine


@dataclass(frozen=True)
class Engine:
    """How one engine spells the pieces the verify texts and hashes are made of."""

    name: str
    text: str  # the CAST target for text
    length: str  # the byte length of a text
    date: str  # date_format pattern of YYYY-MM-DD
    datetime: str  # date_format pattern of YYYY-MM-DD HH:MM:SS.ffffff
    hash_type: str  # the CAST target of a part's hash (15 hex digits as an integer)

    @property
    def is_mysql(self) -> bool:
        return self.name == "mysql"

    def number_type(self, col: Column) -> str:
        """The CAST target that holds ``col``'s number as a value. On MySQL this is what drops
        a ``ZEROFILL`` column's display padding (``CAST(int_z AS CHAR)`` is ``'007'``); in
        Spark the typed silver column already is the value."""
        if not self.is_mysql:
            return col.spark_type
        if col.kind is Kind.DECIMAL:
            return f"DECIMAL({col.precision},{col.scale})"
        return "UNSIGNED" if col.kind in (Kind.UINT, Kind.YEAR) else "SIGNED"

    def integer(self, x: str) -> str:
        """``x`` (integral) as a 64-bit integer, so no engine prints it in a floating-point format."""
        return f"CAST({x} AS {'SIGNED' if self.is_mysql else 'BIGINT'})"

    def utf8(self, x: str) -> str:
        return f"CONVERT({x} USING utf8mb4)" if self.is_mysql else f"CAST({x} AS STRING)"

    def utf8_bytes(self, text: str) -> str:
        return f"CONVERT({text} USING utf8mb4)" if self.is_mysql else f"CAST({text} AS BINARY)"

    def calendar(self, x: str, pattern: str) -> str:
        formatted = f"DATE_FORMAT({x}, {pattern})"
        if not self.is_mysql:
            return formatted  # silver holds zero dates as NULL
        return f"CASE WHEN YEAR({x}) = 0 OR MONTH({x}) = 0 OR DAYOFMONTH({x}) = 0 THEN NULL ELSE {formatted} END"

    def instant(self, x: str) -> str:
        """A TIMESTAMP as its UTC wall clock, ``YYYY-MM-DD HH:MM:SS.ffffff``."""
        if self.is_mysql:  # connect() reads in time_zone '+00:00'
            return self.calendar(x, self.datetime)
        # By arithmetic on the instant: date_format would render in the session time zone.
        us = f"unix_micros({x})"
        day = 86_400_000_000
        r = f"pmod({us}, {day})"

        def two(expr: str) -> str:
            return f"lpad(CAST({expr} AS STRING), 2, '0')"

        return (
            f"concat(date_format(date_from_unix_date(CAST(({us} - {r}) div {day} AS INT)), 'yyyy-MM-dd'), ' ', "
            f"{two(f'{r} div 3600000000')}, ':', {two(f'({r} div 60000000) % 60')}, ':', "
            f"{two(f'({r} div 1000000) % 60')}, '.', lpad(CAST({r} % 1000000 AS STRING), 6, '0'))"
        )


# The MySQL texts run with pymysql parameters, so a literal % is written %%.
MYSQL = Engine(
    "mysql",
    text="CHAR",
    length="LENGTH",
    date="'%%Y-%%m-%%d'",
    datetime="'%%Y-%%m-%%d %%H:%%i:%%s.%%f'",
    hash_type="UNSIGNED",
)
# Spark sums the part hashes as exact decimals.
SPARK = Engine(
    "spark",
    text="STRING",
    length="octet_length",
    date="'yyyy-MM-dd'",
    datetime="'yyyy-MM-dd HH:mm:ss.SSSSSS'",
    hash_type="DECIMAL(38,0)",
)


def _float_text(x: str, e: Engine) -> str:
    """``[-]MpE`` of the double ``x`` (an SQL expression), see the module docstring.

    ``E0 = FLOOR(LOG2(|x|))`` may be one off near powers of two; scaling ``|x|`` by
    ``2^(52-E0)`` (in two halves, so no factor overflows) is exact, and one doubling or
    halving (``corr``) brings the significand into ``[2^52, 2^53)``. Zero has no logarithm
    (``LOG2(0)`` is NULL in both engines): its text comes from the COALESCE.

    No sub-expression repeats inside a CASE branch: Spark computes an expression that every
    row evaluates once, in a method of its own, but copies what a branch holds into every
    place that uses it.
    """
    a = f"ABS({x})"
    e0 = f"FLOOR(LOG2({a}))"
    k = f"(52 - {e0})"
    y = f"({a} * POW(2, {k} DIV 2) * POW(2, {k} - {k} DIV 2))"
    corr = f"(CASE WHEN {y} >= POW(2, 53) THEN -1 WHEN {y} < POW(2, 52) THEN 1 ELSE 0 END)"
    m = f"({y} * POW(2, {corr}))"
    sign = f"CASE WHEN {x} < 0 THEN '-' ELSE '' END"
    # MySQL's FLOOR of a DOUBLE is a DOUBLE: both numbers go through an integer type.
    text = f"CONCAT({sign}, CAST({e.integer(m)} AS {e.text}), 'p', CAST({e.integer(f'{e0} - {corr}')} AS {e.text}))"
    return f"COALESCE({text}, CASE WHEN {x} = 0 THEN '0' END)"


def text_sql(col: Column, x: str, e: Engine) -> str:
    """``col``'s verify text in engine ``e``, over the expression ``x``: on MySQL the source
    column, in Spark silver's column cast to :attr:`Column.spark_type`. NULL where silver has
    NULL (SQL NULL, zero dates)."""
    k = col.kind
    if k in (Kind.INT, Kind.UINT, Kind.YEAR, Kind.BIT, Kind.DECIMAL):
        return f"CAST(CAST({x} AS {e.number_type(col)}) AS {e.text})"
    if k in (Kind.FLOAT, Kind.DOUBLE):
        return _float_text(f"CAST({x} AS DOUBLE)", e)
    if k is Kind.DATE:
        return e.calendar(x, e.date)
    if k is Kind.DATETIME:
        return e.calendar(x, e.datetime)
    if k is Kind.TIMESTAMP:
        return e.instant(x)
    if k is Kind.TIME:
        return f"CAST({x} AS {e.text})"
    if k in (Kind.STRING, Kind.ENUM, Kind.SET, Kind.JSON):
        return e.utf8(x)
    if k is Kind.BINARY:
        return f"HEX({x})"
    raise ValueError(f"no verify text for kind {k}")


def mysql_text_sql(col: Column) -> str:
    """The MySQL/MariaDB expression for ``col``'s verify text."""
    return text_sql(col, quote_ident(col.name), MYSQL)


def spark_text_sql(col: Column, v: str) -> str:
    """The Spark SQL expression for the verify text of silver's typed column ``v``."""
    return text_sql(col, v, SPARK)


# ---------------------------------------------------------------------------------------
# Row hashes, in parts

# Columns per part, the key's included. A part of 16 compiles to about 4.5 KB of JVM
# bytecode (docs/silver.md, "Verify"), under the 8,000 bytes up to which HotSpot compiles
# a method at all.
HASH_PART_COLUMNS = 16


def hash_parts(schema: TableSchema) -> list[tuple[Column, ...]]:
    """The row's parts: each the key columns and the next non-key columns in table order,
    :data:`HASH_PART_COLUMNS` columns in all (at least one non-key column when there is one)."""
    key = schema.key_columns
    rest = [c for c in schema.columns if c.name not in schema.key]
    size = max(1, HASH_PART_COLUMNS - len(key))
    return [key + tuple(rest[i : i + size]) for i in range(0, len(rest), size)] or [key]


def _column_part(col: Column, x: str, e: Engine) -> str:
    """``<byte length>:<text>``, ``N`` for NULL. The text is used twice, both times on every
    row, so Spark computes it once."""
    t = text_sql(col, x, e)
    return f"COALESCE(CONCAT(CAST({e.length}({t}) AS {e.text}), ':', {t}), 'N')"


def part_hash_sql(number: int, columns: Sequence[Column], exprs: Sequence[str], e: Engine) -> str:
    """Part ``number``'s hash in engine ``e``, ``exprs`` the expressions of its ``columns``."""
    text = f"CONCAT_WS(',', '{int(number)}', {', '.join(_column_part(c, x, e) for c, x in zip(columns, exprs))})"
    return f"CAST(CONV(SUBSTRING(MD5({e.utf8_bytes(text)}), 1, 15), 16, 10) AS {e.hash_type})"


def mysql_part_hashes_sql(schema: TableSchema) -> list[str]:
    """The part hashes of a source row, BIGINT UNSIGNED expressions."""
    return [
        part_hash_sql(j, part, [quote_ident(c.name) for c in part], MYSQL)
        for j, part in enumerate(hash_parts(schema), 1)
    ]


def spark_part_hashes_sql(schema: TableSchema, aliases: Sequence[str]) -> list[str]:
    """The part hashes of a silver row as ``DECIMAL(38,0)``, over its typed columns named
    ``aliases`` (in ``schema.columns`` order)."""
    alias = {c.name: a for c, a in zip(schema.columns, aliases)}
    return [
        part_hash_sql(j, part, [alias[c.name] for c in part], SPARK) for j, part in enumerate(hash_parts(schema), 1)
    ]


# ---------------------------------------------------------------------------------------
# Chunk assignment on the source, ordered as silver's typed keys are


def _key_operand(col: Column) -> tuple[str, str, Callable[[str], Any], Callable[[str], Any]]:
    """(column expression, placeholder, bound text -> parameter, bound text -> Python sort key)."""
    c = quote_ident(col.name)
    k = col.kind

    def as_bytes(t: str) -> bytes:
        return t.encode("utf-8")

    if k in (Kind.INT, Kind.UINT, Kind.YEAR):
        return c, "%s", int, int
    if k is Kind.BIT:
        return f"CAST({c} + 0 AS SIGNED)", "%s", int, int
    if k is Kind.DECIMAL and col.spark_type != "STRING":
        return c, "%s", Decimal, Decimal
    if k in (Kind.FLOAT, Kind.DOUBLE):
        return f"CAST({c} AS DOUBLE)", "%s", float, float
    if k is Kind.DATE:
        return c, "CAST(%s AS DATE)", str, str
    if k is Kind.DATETIME:
        return c, "CAST(%s AS DATETIME(6))", str, str
    if k is Kind.TIMESTAMP:

        def utc(t: str) -> str:
            return t.replace("T", " ").rstrip("Z")

        return c, "CAST(%s AS DATETIME(6))", utc, utc
    if k is Kind.BINARY:
        return c, "%s", base64.b64decode, base64.b64decode
    # Everything silver holds as STRING (and DECIMAL wider than 38 digits): by UTF-8 bytes.
    return f"CAST({mysql_text_sql(col)} AS BINARY)", "%s", as_bytes, as_bytes


def _bound(schema: TableSchema, bound) -> list[str] | None:
    if bound is None:
        return None
    values = json.loads(bound) if isinstance(bound, str) else list(bound)
    return [str(v) for v in values]


def _at_least(schema: TableSchema, texts: list[str], params: list) -> str:
    """``key >= bound`` lexicographically over the bound's prefix (as key_range_predicate)."""
    ops = [_key_operand(c) for c in schema.key_columns[: len(texts)]]

    def lex(i: int) -> str:
        expr, ph, conv, _ = ops[i]
        if i == len(texts) - 1:
            params.append(conv(texts[i]))
            return f"{expr} >= {ph}"
        params.append(conv(texts[i]))
        gt = f"{expr} > {ph}"
        params.append(conv(texts[i]))
        return f"({gt} OR ({expr} = {ph} AND ({lex(i + 1)})))"

    return lex(0)


def _sorted_contiguous(schema: TableSchema, chunks: Sequence[tuple[int, Any, Any]]) -> bool:
    """True when the chunks tile the key space in the order silver compares keys, so a
    binary search over the bounds assigns exactly as the first-match CASE does."""
    if not chunks or chunks[0][1] is not None or chunks[-1][2] is not None:
        return False
    keys = [_key_operand(c)[3] for c in schema.key_columns]
    previous = None
    for (_, _, end), (_, start, _) in itertools.pairwise(chunks):
        e, s = _bound(schema, end), _bound(schema, start)
        if e is None or e != s or len(e) != len(keys):
            return False
        try:
            sort_key = tuple(f(t) for f, t in zip(keys, e))
        except (ValueError, ArithmeticError):
            return False
        if previous is not None and not previous < sort_key:
            return False
        previous = sort_key
    return True


def chunk_of_sql(schema: TableSchema, chunks: Sequence[tuple[int, Any, Any]]) -> tuple[str, list]:
    """SQL (and its parameters) for the id of the chunk whose ``[start, end)`` holds the
    row's key, ``-1`` for none (a NULL key). A binary search over the bounds when they are
    sorted as silver orders keys; otherwise the first matching chunk, as Spark's CASE."""
    params: list = []
    if not chunks:
        return "-1", params
    null_key = " OR ".join(f"{quote_ident(c.name)} IS NULL" for c in schema.key_columns)
    if _sorted_contiguous(schema, chunks):

        def search(lo: int, hi: int) -> str:
            if lo == hi:
                return str(int(chunks[lo][0]))
            mid = (lo + hi + 1) // 2
            bound = _bound(schema, chunks[mid][1])
            assert bound is not None, "sorted contiguous chunks after the first start at a key"
            cond = _at_least(schema, bound, params)
            return f"CASE WHEN {cond} THEN {search(mid, hi)} ELSE {search(lo, mid - 1)} END"

        body = search(0, len(chunks) - 1)
    else:
        whens = []
        for chunk_id, start, end in chunks:
            conds = []
            if (s := _bound(schema, start)) is not None:
                conds.append(_at_least(schema, s, params))
            if (e := _bound(schema, end)) is not None:
                conds.append(f"NOT ({_at_least(schema, e, params)})")
            whens.append(f"WHEN {' AND '.join(conds) or 'TRUE'} THEN {int(chunk_id)}")
        body = f"CASE {' '.join(whens)} ELSE -1 END"
    return f"CASE WHEN {null_key} THEN -1 ELSE {body} END", params


def chunk_stats_sql(schema: TableSchema, chunks: Sequence[tuple[int, Any, Any]]) -> tuple[str, list]:
    """One scan of the table: per chunk id ``g``, the row count ``n`` and checksum ``h``."""
    chunk, params = chunk_of_sql(schema, chunks)
    hashes = sql_list((Sql(f"SUM({h})") for h in mysql_part_hashes_sql(schema)), " + ")
    statement = sql(
        "SELECT {chunk} AS g, COUNT(*) AS n, {hashes} AS h FROM {t} GROUP BY 1",
        chunk=Sql(chunk),
        hashes=hashes,
        t=qualified(schema.database, schema.table),
    )
    return statement, params


__all__ = [
    "HASH_PART_COLUMNS",
    "MYSQL",
    "SPARK",
    "Engine",
    "chunk_of_sql",
    "chunk_stats_sql",
    "hash_parts",
    "mysql_part_hashes_sql",
    "mysql_text_sql",
    "part_hash_sql",
    "spark_part_hashes_sql",
    "spark_text_sql",
    "text_sql",
]
