"""One type mapping (docs/architecture.md, "Types") and one canonical text encoding, used by both paths.

Bronze keeps row images as ``MAP<STRING, STRING>``: column name -> canonical text (or NULL).
Text never fails on a schema change, so bronze keeps capturing through DDL; silver does the
typing with :func:`spark_decode_sql`. Snapshot SELECTs (pymysql values) and binlog rows
(python-mysql-replication values) go through the same :func:`encode_value`, so one source
value always becomes one text and one typed value.

Canonical texts, by kind:

======================  =============================================================
INT / UINT / YEAR       decimal digits (``-12``, ``18446744073709551615``)
DECIMAL                 fixed-point, scale digits kept (``1.50``), never exponent form
FLOAT / DOUBLE          ``repr`` of the IEEE value (FLOAT rounded to float32 first)
DATE                    ``YYYY-MM-DD``; zero/invalid date -> ``0000-00-00`` (NULL in silver)
DATETIME                ``YYYY-MM-DD HH:MM:SS.ffffff`` wall clock as stored
TIMESTAMP               ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, the UTC instant
TIME                    ``[-]HH:MM:SS[.f..]``, hours may exceed 99 (``-838:59:59``)
STRING / ENUM / JSON    the text; ENUM is its label
SET                     labels comma-joined in definition order
BINARY                  base64 of the bytes (BLOB, BINARY, VARBINARY, GEOMETRY)
BIT                     the bits as a signed 64-bit integer (two's complement)
======================  =============================================================
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from binlake.errors import UnsupportedTypeError

ZERO_DATE = "0000-00-00"
ZERO_DATETIME = "0000-00-00 00:00:00"


class Kind(str, enum.Enum):
    INT = "int"
    UINT = "uint"
    DECIMAL = "decimal"
    FLOAT = "float"
    DOUBLE = "double"
    DATE = "date"
    DATETIME = "datetime"
    TIMESTAMP = "timestamp"
    TIME = "time"
    YEAR = "year"
    STRING = "string"
    ENUM = "enum"
    SET = "set"
    JSON = "json"
    BINARY = "binary"
    BIT = "bit"


_INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
_STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BINARY_TYPES = {
    # MySQL 9's VECTOR(n): its n little-endian float32s, as stored (what SELECT returns).
    "vector",
    "binary",
    "varbinary",
    "tinyblob",
    "blob",
    "mediumblob",
    "longblob",
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
}


@dataclass(frozen=True)
class Column:
    """A source column as binlake types it."""

    name: str
    kind: Kind
    bits: int = 0  # integer width in bits
    precision: int = 0  # DECIMAL precision
    scale: int = 0  # DECIMAL scale
    fsp: int = 0  # fractional seconds precision (TIME, DATETIME, TIMESTAMP)
    labels: tuple[str, ...] = ()  # ENUM / SET labels in definition order
    nullable: bool = True
    comment: str = ""
    mysql_type: str = ""  # COLUMN_TYPE as the server reports it, for messages and docs
    # INVISIBLE (MySQL 8.0.23+, MariaDB 10.3+): left out of SELECT *, so a snapshot names it.
    # Not part of the column's identity: the binlog of MariaDB does not say.
    visible: bool = field(default=True, compare=False)

    @property
    def spark_type(self) -> str:
        """The Spark SQL type (DDL form) of this column in silver and gold."""
        k = self.kind
        if k is Kind.INT:
            return {8: "TINYINT", 16: "SMALLINT", 24: "INT", 32: "INT", 64: "BIGINT"}[self.bits]
        if k is Kind.UINT:
            return {8: "SMALLINT", 16: "INT", 24: "INT", 32: "BIGINT", 64: "DECIMAL(20,0)"}[self.bits]
        if k is Kind.DECIMAL:
            return f"DECIMAL({self.precision},{self.scale})" if self.precision <= 38 else "STRING"
        return {
            Kind.FLOAT: "FLOAT",
            Kind.DOUBLE: "DOUBLE",
            Kind.DATE: "DATE",
            Kind.DATETIME: "TIMESTAMP_NTZ",
            Kind.TIMESTAMP: "TIMESTAMP",
            Kind.TIME: "STRING",
            Kind.YEAR: "SMALLINT",
            Kind.STRING: "STRING",
            Kind.ENUM: "STRING",
            Kind.SET: "STRING",
            Kind.JSON: "STRING",
            Kind.BINARY: "BINARY",
            Kind.BIT: "BIGINT",
        }[k]

    def signature(self) -> tuple[str, str]:
        """What identifies this column's typing across paths (names + Spark types)."""
        return (self.name, self.spark_type)


def column_from_information_schema(  # noqa: C901 (one branch per MySQL column type)
    name: str,
    data_type: str,
    column_type: str,
    numeric_precision: int | None = None,
    numeric_scale: int | None = None,
    datetime_precision: int | None = None,
    nullable: bool = True,
    comment: str = "",
    visible: bool = True,
) -> Column:
    """Build a :class:`Column` from one ``information_schema.COLUMNS`` row."""
    dtype = data_type.lower()
    ctype = column_type.lower()
    common: dict[str, Any] = dict(
        name=name, nullable=nullable, comment=comment or "", mysql_type=column_type, visible=visible
    )
    if dtype in _INT_BITS:
        kind = Kind.UINT if "unsigned" in ctype else Kind.INT
        return Column(kind=kind, bits=_INT_BITS[dtype], **common)
    if dtype in ("decimal", "numeric", "dec", "fixed"):
        return Column(
            kind=Kind.DECIMAL, precision=int(numeric_precision or 10), scale=int(numeric_scale or 0), **common
        )
    if dtype == "float":
        return Column(kind=Kind.FLOAT, **common)
    if dtype in ("double", "real", "double precision"):
        return Column(kind=Kind.DOUBLE, **common)
    if dtype == "date":
        return Column(kind=Kind.DATE, **common)
    if dtype == "datetime":
        return Column(kind=Kind.DATETIME, fsp=int(datetime_precision or 0), **common)
    if dtype == "timestamp":
        return Column(kind=Kind.TIMESTAMP, fsp=int(datetime_precision or 0), **common)
    if dtype == "time":
        return Column(kind=Kind.TIME, fsp=int(datetime_precision or 0), **common)
    if dtype == "year":
        return Column(kind=Kind.YEAR, **common)
    if dtype == "enum":
        return Column(kind=Kind.ENUM, labels=parse_labels(column_type), **common)
    if dtype == "set":
        return Column(kind=Kind.SET, labels=parse_labels(column_type), **common)
    if dtype == "json":
        return Column(kind=Kind.JSON, **common)
    if dtype in _STRING_TYPES:
        return Column(kind=Kind.STRING, **common)
    if dtype in _BINARY_TYPES:
        return Column(kind=Kind.BINARY, **common)
    if dtype == "bit":
        return Column(kind=Kind.BIT, bits=int(numeric_precision or 1), **common)
    raise UnsupportedTypeError(
        f"column {name!r} has type {column_type!r}, which binlake does not map: exclude the table or cast the column "
        "in a view"
    )


_LABEL = re.compile(r"'((?:[^']|'')*)'")


def parse_labels(column_type: str) -> tuple[str, ...]:
    """``enum('a','it''s')`` -> ``('a', "it's")``."""
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return tuple(m.group(1).replace("''", "'") for m in _LABEL.finditer(inner))


# ---------------------------------------------------------------------------------------
# Encoding: python value (from pymysql or python-mysql-replication) -> canonical text


def encode_value(col: Column, value: Any) -> str | None:  # noqa: C901 (one branch per MySQL column type)
    """Encode one value. ``None`` stays ``None`` (SQL NULL)."""
    if value is None:
        return None
    k = col.kind
    if k in (Kind.INT, Kind.UINT, Kind.YEAR):
        return str(int(value))
    if k is Kind.DECIMAL:
        d = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
        return format(d, "f")
    if k is Kind.FLOAT:
        return repr(struct.unpack("<f", struct.pack("<f", float(value)))[0])
    if k is Kind.DOUBLE:
        return repr(float(value))
    if k is Kind.DATE:
        if isinstance(value, dt.datetime):
            value = value.date()
        return value.isoformat() if isinstance(value, dt.date) else ZERO_DATE
    if k is Kind.DATETIME:
        # isoformat, not strftime: glibc's %Y drops the zero padding of years before 1000.
        return value.isoformat(sep=" ", timespec="microseconds") if isinstance(value, dt.datetime) else ZERO_DATETIME
    if k is Kind.TIMESTAMP:
        # Callers pass the UTC wall clock: snapshot sessions pin time_zone='+00:00',
        # python-mysql-replication decodes with utcfromtimestamp.
        if not isinstance(value, dt.datetime):
            return ZERO_DATETIME
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds") + "Z"
    if k is Kind.TIME:
        return format_time(value, col.fsp)
    if k in (Kind.STRING, Kind.ENUM, Kind.JSON):
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8", errors="surrogateescape")
        if k is Kind.JSON and not isinstance(value, str):
            return json.dumps(_json_plain(value), ensure_ascii=False)
        return str(value)
    if k is Kind.SET:
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("utf-8")
        members = set(value.split(",")) if isinstance(value, str) else set(value)
        members.discard("")
        ordered = [label for label in col.labels if label in members]
        # Labels unknown to the column definition keep a stable order rather than vanish.
        ordered += sorted(members - set(col.labels))
        return ",".join(ordered)
    if k is Kind.BINARY:
        if isinstance(value, str):
            value = value.encode("utf-8", errors="surrogateescape")
        return base64.b64encode(bytes(value)).decode("ascii")
    if k is Kind.BIT:
        if isinstance(value, str):  # python-mysql-replication: '0101...'
            n = int(value, 2) if value else 0
        elif isinstance(value, (bytes, bytearray)):  # pymysql: big-endian bytes
            n = int.from_bytes(value, "big")
        else:
            n = int(value)
        return str(n - (1 << 64) if n >= 1 << 63 else n)
    raise UnsupportedTypeError(f"no encoding for kind {k}")


def _json_plain(value: Any) -> Any:
    """MySQL binary JSON decodes with bytes keys/values; make it plain JSON data."""
    if isinstance(value, dict):
        return {(k.decode() if isinstance(k, bytes) else k): _json_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def format_time(value: Any, fsp: int = 0) -> str:
    """timedelta (or 'HH:MM:SS' text) -> ``[-]HH:MM:SS[.f]`` with ``fsp`` fraction digits."""
    if isinstance(value, str):
        return value
    if isinstance(value, dt.time):
        value = dt.timedelta(
            hours=value.hour, minutes=value.minute, seconds=value.second, microseconds=value.microsecond
        )
    total_us = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
    sign = "-" if total_us < 0 else ""
    total_us = abs(total_us)
    secs, micros = divmod(total_us, 1_000_000)
    hours, rem = divmod(secs, 3600)
    minutes, seconds = divmod(rem, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    if fsp > 0:
        text += "." + f"{micros:06d}"[:fsp]
    return text


# ---------------------------------------------------------------------------------------
# Decoding in Spark: canonical text -> typed column (silver, verify)


def spark_decode_sql(col: Column, text_expr: str) -> str:
    """A Spark SQL expression turning the canonical text ``text_expr`` into the typed value."""
    t = col.spark_type
    k = col.kind
    if k is Kind.DATE:
        return (
            f"CASE WHEN {text_expr} LIKE '0000-%' OR {text_expr} LIKE '%-00-%' OR {text_expr} LIKE '%-00' "
            f"THEN NULL ELSE CAST({text_expr} AS DATE) END"
        )
    if k in (Kind.DATETIME, Kind.TIMESTAMP):
        return f"CASE WHEN {text_expr} LIKE '0000-%' THEN NULL ELSE CAST({text_expr} AS {t}) END"
    if k is Kind.BINARY:
        return f"unbase64({text_expr})"
    return f"CAST({text_expr} AS {t})" if t != "STRING" else text_expr


def is_zero_date_sql(col: Column, text_expr: str) -> str | None:
    """SQL that is true where a DATE/DATETIME/TIMESTAMP text is a zero date (for counting)."""
    if col.kind in (Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP):
        return f"({text_expr} LIKE '0000-%')"
    return None


# The foreign-key rules through which InnoDB changes child rows inside the parent's statement,
# with no binlog record of the child's change (it refuses SET DEFAULT): silver derives those
# changes (binlake.silver.cascade), so the columns they act through must be kept.
FK_ACTIONS = ("CASCADE", "SET NULL")


@dataclass(frozen=True)
class TableSchema:
    """A captured table's columns and key, as of one schema version."""

    database: str
    table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # primary key, or the configured chunk key
    comment: str = ""
    key_is_primary: bool = True
    foreign_keys: tuple[dict, ...] = field(default_factory=tuple)
    # The digest of the column rule applied to the table (binlake.contract.columns), "" for none.
    column_rules: str = ""

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(self.column(k) for k in self.key)

    def version(self) -> str:
        """A short, stable id of the column names + Spark types + key (same from both paths)."""
        import hashlib

        parts: list = [[c.signature() for c in self.columns], list(self.key)]
        if self.column_rules:  # absent for tables without a rule: their versions stay as they were
            parts.append(self.column_rules)
        sig = json.dumps(parts, separators=(",", ":"))
        return hashlib.sha1(sig.encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(
            {
                "database": self.database,
                "table": self.table,
                "comment": self.comment,
                "key": list(self.key),
                "key_is_primary": self.key_is_primary,
                "columns": [
                    {
                        "name": c.name,
                        "kind": c.kind.value,
                        "bits": c.bits,
                        "precision": c.precision,
                        "scale": c.scale,
                        "fsp": c.fsp,
                        "labels": list(c.labels),
                        "nullable": c.nullable,
                        "comment": c.comment,
                        "mysql_type": c.mysql_type,
                        **({} if c.visible else {"visible": False}),
                    }
                    for c in self.columns
                ],
                "foreign_keys": list(self.foreign_keys),
                **({"column_rules": self.column_rules} if self.column_rules else {}),
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @staticmethod
    def from_json(text: str) -> TableSchema:
        d = json.loads(text)
        cols = tuple(
            Column(
                name=c["name"],
                kind=Kind(c["kind"]),
                bits=c["bits"],
                precision=c["precision"],
                scale=c["scale"],
                fsp=c["fsp"],
                labels=tuple(c["labels"]),
                nullable=c["nullable"],
                comment=c["comment"],
                mysql_type=c["mysql_type"],
                visible=c.get("visible", True),
            )
            for c in d["columns"]
        )
        return TableSchema(
            database=d["database"],
            table=d["table"],
            columns=cols,
            key=tuple(d["key"]),
            comment=d.get("comment", ""),
            key_is_primary=d.get("key_is_primary", True),
            foreign_keys=tuple(d.get("foreign_keys", ())),
            column_rules=d.get("column_rules", ""),
        )
