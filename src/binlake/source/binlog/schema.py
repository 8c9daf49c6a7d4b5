"""The table a TABLE_MAP describes, in binlake's types: a :class:`~binlake.contract.types.TableSchema`
whose version equals the one the snapshot computes from ``information_schema`` for the same
columns (names need ``binlog_row_metadata=FULL``)."""

from __future__ import annotations

from typing import Any

from binlake.contract.types import Column, Kind, TableSchema
from binlake.errors import UnsupportedTypeError
from binlake.source.binlog import table_map as tm
from binlake.source.binlog.table_map import ColumnDef, TableMap


def column_from_binlog(col: ColumnDef) -> Column:  # noqa: C901 (one branch per MySQL column type)
    """A :class:`Column` from a TABLE_MAP column (FULL row metadata: it needs the name).

    Gives the same :meth:`Column.signature` as ``column_from_information_schema`` for the
    same column: the Spark type depends only on kind, integer width, signedness and
    DECIMAL precision/scale, all of which the metadata carries.
    """
    t = col.type
    if col.name is None:
        raise UnsupportedTypeError(f"column {col.index} has no name (binlog_row_metadata=MINIMAL)")
    common: dict[str, Any] = dict(name=col.name, nullable=col.nullable, mysql_type=col.type_name)
    if t in _INT_BITS:
        return Column(kind=Kind.UINT if col.unsigned else Kind.INT, bits=_INT_BITS[t], **common)
    if t == tm.NEWDECIMAL:
        return Column(kind=Kind.DECIMAL, precision=col.precision, scale=col.decimals, **common)
    if t == tm.FLOAT:
        return Column(kind=Kind.FLOAT, **common)
    if t == tm.DOUBLE:
        return Column(kind=Kind.DOUBLE, **common)
    if t in (tm.DATE, tm.NEWDATE):
        return Column(kind=Kind.DATE, **common)
    if t in (tm.DATETIME, tm.DATETIME2):
        return Column(kind=Kind.DATETIME, fsp=col.fsp, **common)
    if t in (tm.TIMESTAMP, tm.TIMESTAMP2):
        return Column(kind=Kind.TIMESTAMP, fsp=col.fsp, **common)
    if t in (tm.TIME, tm.TIME2):
        return Column(kind=Kind.TIME, fsp=col.fsp, **common)
    if t == tm.YEAR:
        return Column(kind=Kind.YEAR, **common)
    if t == tm.ENUM:
        return Column(kind=Kind.ENUM, labels=col.labels or (), **common)
    if t == tm.SET:
        return Column(kind=Kind.SET, labels=col.labels or (), **common)
    if t == tm.JSON:
        return Column(kind=Kind.JSON, **common)
    if t == tm.BIT:
        return Column(kind=Kind.BIT, bits=col.bits, **common)
    if t in (tm.GEOMETRY, tm.VECTOR):
        # GEOMETRY as stored (SRID + WKB); VECTOR(n) as its n little-endian float32s.
        return Column(kind=Kind.BINARY, **common)
    if t in (tm.VARCHAR, tm.VAR_STRING, tm.STRING, tm.BLOB):
        return Column(kind=Kind.BINARY if col.binary else Kind.STRING, **common)
    raise UnsupportedTypeError(f"column {col.name!r} has binlog type {col.type_name}, which binlake does not map")


_INT_BITS = {tm.TINY: 8, tm.SHORT: 16, tm.INT24: 24, tm.LONG: 32, tm.LONGLONG: 64}


def schema_from_table_map(table: TableMap) -> TableSchema:
    """The table schema a TABLE_MAP event describes (names need binlog_row_metadata=FULL)."""
    cols = tuple(column_from_binlog(c) for c in table.columns)
    key = tuple(cols[i].name for i in table.primary_key)
    return TableSchema(database=table.schema, table=table.table, columns=cols, key=key)
