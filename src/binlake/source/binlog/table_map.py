"""TABLE_MAP events: the columns of a table as the ROWS events after them are written.

A TABLE_MAP gives each column's binlog type and the type's metadata (lengths, precision,
fractional seconds); with ``binlog_row_metadata=FULL`` its optional metadata adds the names,
signedness, character sets, ENUM/SET labels, the primary key, column visibility (MySQL
8.0.23+) and VECTOR dimensions (MySQL 9.0+). MINIMAL metadata has signedness and character
sets only: no names and no key.

Layout (MySQL ``libbinlogevents`` ``Table_map_event``; MariaDB is the same): post-header
table id (6 bytes) and flags (2); then the database and table names (length byte, bytes,
NUL), the column count (packed integer), one type byte per column, the metadata block
(packed length, then per column as many bytes as its type needs), the NULL-ability bitmap
and the optional metadata as type-length-value fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from binlake.errors import TableMapError
from binlake.source.binlog.wire import Reader

# Column types as the binlog writes them (MySQL's enum_field_types).
DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = range(10)
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2, TYPED_ARRAY = range(10, 21)
VECTOR, JSON, NEWDECIMAL, ENUM, SET = 242, 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = 249, 250, 251, 252, 253, 254, 255

TYPE_NAMES = {
    DECIMAL: "decimal",
    TINY: "tiny",
    SHORT: "short",
    LONG: "long",
    FLOAT: "float",
    DOUBLE: "double",
    NULL: "null",
    TIMESTAMP: "timestamp",
    LONGLONG: "longlong",
    INT24: "int24",
    DATE: "date",
    TIME: "time",
    DATETIME: "datetime",
    YEAR: "year",
    NEWDATE: "newdate",
    VARCHAR: "varchar",
    BIT: "bit",
    TIMESTAMP2: "timestamp2",
    DATETIME2: "datetime2",
    TIME2: "time2",
    VECTOR: "vector",
    JSON: "json",
    NEWDECIMAL: "newdecimal",
    ENUM: "enum",
    SET: "set",
    TINY_BLOB: "tiny_blob",
    MEDIUM_BLOB: "medium_blob",
    LONG_BLOB: "long_blob",
    BLOB: "blob",
    VAR_STRING: "var_string",
    STRING: "string",
    GEOMETRY: "geometry",
}

# Bytes of type metadata per column type; types not listed have none.
_META_BYTES = {
    FLOAT: 1,
    DOUBLE: 1,
    BLOB: 1,
    GEOMETRY: 1,
    JSON: 1,
    VECTOR: 1,
    TIMESTAMP2: 1,
    DATETIME2: 1,
    TIME2: 1,
    VARCHAR: 2,
    VAR_STRING: 2,
    BIT: 2,
    NEWDECIMAL: 2,
    STRING: 2,
}
_NUMERIC = frozenset({TINY, SHORT, INT24, LONG, LONGLONG, DECIMAL, NEWDECIMAL, FLOAT, DOUBLE, YEAR})
# MySQL 9 counts VECTOR (binary) among them: its DEFAULT_CHARSET indexes say so.
_CHARACTER = frozenset({STRING, VAR_STRING, VARCHAR, BLOB, VECTOR})

# Optional metadata field types (MySQL's Table_map_event::Optional_metadata_field_type).
(
    SIGNEDNESS,
    DEFAULT_CHARSET,
    COLUMN_CHARSET,
    COLUMN_NAME,
    SET_STR_VALUE,
    ENUM_STR_VALUE,
    GEOMETRY_TYPE,
    SIMPLE_PRIMARY_KEY,
    PRIMARY_KEY_WITH_PREFIX,
    ENUM_AND_SET_DEFAULT_CHARSET,
    ENUM_AND_SET_COLUMN_CHARSET,
    COLUMN_VISIBILITY,
    VECTOR_DIMENSIONALITY,
) = range(1, 14)

BINARY_COLLATION = 63


@dataclass
class ColumnDef:
    """One column of a TABLE_MAP: its binlog type and what decoding its values needs.

    ``type`` is the real type: a STRING column whose metadata says ENUM or SET has that type.
    """

    index: int
    type: int
    nullable: bool = True
    name: str | None = None  # None under binlog_row_metadata=MINIMAL
    unsigned: bool = False
    collation: int | None = None  # the column's collation id (character, ENUM and SET columns)
    max_length: int = 0  # CHAR/VARCHAR/BINARY/VARBINARY: bytes
    length_size: int = 0  # BLOB/TEXT/JSON/GEOMETRY/VECTOR: bytes of the length prefix
    pack_size: int = 0  # ENUM/SET: bytes of the stored value; FLOAT/DOUBLE: 4/8
    precision: int = 0  # NEWDECIMAL
    decimals: int = 0  # NEWDECIMAL scale
    fsp: int = 0  # TIME2/DATETIME2/TIMESTAMP2 fractional seconds precision
    bits: int = 0  # BIT(n)
    labels: tuple[str, ...] | None = None  # ENUM/SET labels, in definition order
    visible: bool = True
    dimensions: int | None = None  # VECTOR(n)

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type, str(self.type))

    @property
    def binary(self) -> bool:
        """True for the binary collation (BINARY, VARBINARY, BLOB: bytes, not text)."""
        return self.collation == BINARY_COLLATION


@dataclass
class TableMap:
    table_id: int
    schema: str
    table: str
    columns: list[ColumnDef]
    primary_key: tuple[int, ...] = ()  # column indexes; empty under MINIMAL metadata
    has_names: bool = False  # binlog_row_metadata=FULL
    mariadb: bool = False  # written by MariaDB (collation ids, GEOMETRY's character set)
    json_columns: tuple[int, ...] = field(default=())  # indexes of JSON columns (partial updates)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


def parse_table_map(r: Reader, table_id_size: int, mariadb: bool) -> TableMap:
    """The TABLE_MAP whose post-header starts at ``r`` (checksum already cut off)."""
    table_id = r.uint(table_id_size)
    r.skip(2)  # flags
    schema = r.bytes(r.u8()).decode("utf-8", "surrogateescape")
    r.skip(1)
    table = r.bytes(r.u8()).decode("utf-8", "surrogateescape")
    r.skip(1)
    try:
        count = r.packed()
        types = r.bytes(count)
        meta = Reader(r.bytes(r.packed()))
        columns = [_column(i, t, meta) for i, t in enumerate(types)]
        if meta.left():
            raise TableMapError(f"{meta.left()} bytes of column metadata left over")
        nulls = r.bytes((count + 7) // 8)
        for c in columns:
            c.nullable = bool(nulls[c.index // 8] >> (c.index % 8) & 1)
        tm = TableMap(table_id, schema, table, columns, mariadb=mariadb)
        _apply_optional_metadata(tm, r.rest(), mariadb)
    except (ValueError, IndexError) as exc:
        raise TableMapError(f"TABLE_MAP of {schema}.{table}: {exc}", table_id, schema, table) from exc
    tm.json_columns = tuple(c.index for c in columns if c.type == JSON)
    return tm


def _column(index: int, type_: int, meta: Reader) -> ColumnDef:
    c = ColumnDef(index, type_)
    n = _META_BYTES.get(type_, 0)
    if type_ in (TYPED_ARRAY, DECIMAL, NEWDATE, ENUM, SET, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB):
        # Not written by any server binlake reads (TYPED_ARRAY: multi-valued index internals;
        # DECIMAL: pre-5.0 decimals); ENUM/SET/TINY_BLOB.. arrive as STRING/BLOB.
        raise TableMapError(f"column {index} has binlog type {c.type_name}, which binlake does not decode")
    if type_ not in TYPE_NAMES:
        raise TableMapError(f"column {index} has binlog type {type_}, which binlake does not know")
    if n == 0:
        return c
    raw = meta.bytes(n)
    if type_ in (FLOAT, DOUBLE):
        c.pack_size = raw[0]
    elif type_ in (BLOB, GEOMETRY, JSON, VECTOR):
        c.length_size = raw[0]
    elif type_ in (TIMESTAMP2, DATETIME2, TIME2):
        c.fsp = raw[0]
    elif type_ in (VARCHAR, VAR_STRING):
        c.max_length = raw[0] | raw[1] << 8
    elif type_ == BIT:
        c.bits = raw[1] * 8 + raw[0]
    elif type_ == NEWDECIMAL:
        c.precision, c.decimals = raw[0], raw[1]
    elif type_ == STRING:
        real, low = raw[0], raw[1]
        if real in (ENUM, SET):
            c.type = real
            c.pack_size = low
        else:
            # The length's two high bits live in the first byte, inverted (MySQL's
            # Field_string::save_field_metadata, for CHAR(n) of more than 255 bytes).
            c.max_length = (((real << 4) & 0x300) ^ 0x300) + low
    return c


def _apply_optional_metadata(tm: TableMap, data: bytes, mariadb: bool) -> None:  # noqa: C901 (one branch per field)
    cols = tm.columns
    numeric = [c for c in cols if c.type in _NUMERIC]
    # go-mysql and rust_mysql_common agree: ENUM/SET (by real type) are not "character"
    # columns; MariaDB counts GEOMETRY as one (its GEOMETRY is a BLOB underneath).
    character = [c for c in cols if c.type in _CHARACTER or (mariadb and c.type == GEOMETRY)]
    enum_set = [c for c in cols if c.type in (ENUM, SET)]
    r = Reader(data)
    while r.left():
        kind = r.u8()
        value = Reader(r.bytes(r.packed()))
        if kind == SIGNEDNESS:
            bits = value.rest()
            for i, c in enumerate(numeric):
                c.unsigned = bool(bits[i // 8] & (0x80 >> (i % 8)))  # most significant bit first
        elif kind in (DEFAULT_CHARSET, ENUM_AND_SET_DEFAULT_CHARSET):
            targets = character if kind == DEFAULT_CHARSET else enum_set
            default = value.packed()
            for c in targets:
                c.collation = default
            while value.left():
                i, collation = value.packed(), value.packed()
                targets[i].collation = collation
        elif kind in (COLUMN_CHARSET, ENUM_AND_SET_COLUMN_CHARSET):
            for c in character if kind == COLUMN_CHARSET else enum_set:
                c.collation = value.packed()
        elif kind == COLUMN_NAME:
            for c in cols:
                c.name = value.bytes(value.packed()).decode("utf-8", "surrogateescape")
            tm.has_names = True
        elif kind in (SET_STR_VALUE, ENUM_STR_VALUE):
            for c in (c for c in cols if c.type == (SET if kind == SET_STR_VALUE else ENUM)):
                c.labels = tuple(
                    value.bytes(value.packed()).decode("utf-8", "surrogateescape") for _ in range(value.packed())
                )
        elif kind == SIMPLE_PRIMARY_KEY:
            keys = []
            while value.left():
                keys.append(value.packed())
            tm.primary_key = tuple(keys)
        elif kind == PRIMARY_KEY_WITH_PREFIX:
            keys = []
            while value.left():
                keys.append(value.packed())
                value.packed()  # prefix length: the key is the whole column either way
            tm.primary_key = tuple(keys)
        elif kind == COLUMN_VISIBILITY:
            bits = value.rest()
            for c in cols:
                c.visible = bool(bits[c.index // 8] & (0x80 >> (c.index % 8)))
        elif kind == VECTOR_DIMENSIONALITY:
            for c in (c for c in cols if c.type == VECTOR):
                c.dimensions = value.packed()
        # GEOMETRY_TYPE (point, polygon, ...) does not change how a value is stored;
        # unknown fields are skipped: the format lets readers ignore what they do not know.
