"""What is captured: the tables matching the config, with their columns and keys."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pymysql

from binlake.config import SourceConfig
from binlake.contract.sql import qualified
from binlake.contract.tables import name_clashes
from binlake.contract.types import TableSchema, column_from_information_schema
from binlake.errors import ConfigError, TableNameClash
from binlake.source.mysql import query

_SYSTEM_DBS = ("mysql", "information_schema", "performance_schema", "sys")


def matching_tables(conn: pymysql.connections.Connection, source: SourceConfig) -> list[tuple[str, str]]:
    """(database, table) pairs matching the include/exclude patterns, base tables only."""
    rows = query(
        conn,
        "SELECT TABLE_SCHEMA AS db, TABLE_NAME AS t FROM information_schema.TABLES "
        "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN %s ORDER BY 1, 2",
        (_SYSTEM_DBS,),
    )
    return [(r["db"], r["t"]) for r in rows if source.captures(r["db"], r["t"])]


def captured_tables(conn: pymysql.connections.Connection, source: SourceConfig) -> list[tuple[str, str]]:
    """The tables binlake captures: :func:`matching_tables`, refused with
    :class:`~binlake.errors.TableNameClash` when two of them would share a lakehouse table
    (:func:`binlake.contract.tables.name_clashes`) before anything is written for them."""
    tables = matching_tables(conn, source)
    clashes = name_clashes(tables)
    if clashes:
        raise TableNameClash(clashes[0] + (f" (and {len(clashes) - 1} more clash(es))" if len(clashes) > 1 else ""))
    return tables


def table_arguments(
    conn: pymysql.connections.Connection, source: SourceConfig, names: Sequence[str]
) -> list[tuple[str, str]]:
    """The ``--table db.t`` arguments of a command as (database, table) pairs, each checked
    to be a captured table; all captured tables when ``names`` is empty."""
    wanted: list[tuple[str, str]] = []
    for name in names:
        db, dot, table = name.partition(".")
        if not dot or not db or not table or "." in table:
            raise ConfigError(f"--table {name!r} is not db.table: write it like shop.orders")
        if (db, table) not in wanted:
            wanted.append((db, table))
    captured = captured_tables(conn, source)
    for db, table in wanted:
        if (db, table) not in captured:
            raise ConfigError(
                f"--table {db}.{table} is not a captured table: it must exist and match source.tables "
                "(and no source.exclude pattern)"
            )
    return wanted or captured


def primary_key(conn: pymysql.connections.Connection, database: str, table: str) -> tuple[str, ...]:
    rows = query(
        conn,
        "SELECT COLUMN_NAME AS c FROM information_schema.KEY_COLUMN_USAGE "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    return tuple(r["c"] for r in rows)


def foreign_keys(conn: pymysql.connections.Connection, database: str, table: str) -> tuple[dict, ...]:
    """Foreign keys of ``table`` (as the child): columns, parent, and the ON DELETE/UPDATE rules."""
    rows = query(
        conn,
        "SELECT k.CONSTRAINT_NAME AS name, k.COLUMN_NAME AS col, k.REFERENCED_TABLE_SCHEMA AS pdb, "
        "k.REFERENCED_TABLE_NAME AS ptable, k.REFERENCED_COLUMN_NAME AS pcol, "
        "r.DELETE_RULE AS on_delete, r.UPDATE_RULE AS on_update "
        "FROM information_schema.KEY_COLUMN_USAGE k LEFT JOIN information_schema.REFERENTIAL_CONSTRAINTS r "
        "ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME "
        "AND r.TABLE_NAME = k.TABLE_NAME "
        "WHERE k.TABLE_SCHEMA = %s AND k.TABLE_NAME = %s AND k.REFERENCED_TABLE_NAME IS NOT NULL "
        "ORDER BY k.CONSTRAINT_NAME, k.ORDINAL_POSITION",
        (database, table),
    )
    fks: dict[str, dict] = {}
    for r in rows:
        fk = fks.setdefault(
            r["name"],
            {
                "name": r["name"],
                "columns": [],
                "parent": f"{r['pdb']}.{r['ptable']}",
                "parent_columns": [],
                "on_delete": r["on_delete"],
                "on_update": r["on_update"],
            },
        )
        fk["columns"].append(r["col"])
        fk["parent_columns"].append(r["pcol"])
    if any(fk["on_delete"] is None for fk in fks.values()):
        # MariaDB hides REFERENTIAL_CONSTRAINTS from a user holding only SELECT; the rules
        # are still in SHOW CREATE TABLE, which SELECT is enough for.
        rules = _foreign_key_rules(conn, database, table)
        for fk in fks.values():
            if fk["on_delete"] is None:
                fk["on_delete"], fk["on_update"] = rules.get(fk["name"], ("RESTRICT", "RESTRICT"))
    return tuple(fks.values())


_FK_CLAUSE = re.compile(r"CONSTRAINT `((?:[^`]|``)+)` FOREIGN KEY .*?REFERENCES .*?\)(?P<rules>[^\n]*)")
_FK_RULE = re.compile(r"ON (DELETE|UPDATE) (CASCADE|SET NULL|SET DEFAULT|NO ACTION|RESTRICT)")


def _foreign_key_rules(conn: pymysql.connections.Connection, database: str, table: str) -> dict[str, tuple[str, str]]:
    """{constraint name: (ON DELETE rule, ON UPDATE rule)} parsed from SHOW CREATE TABLE."""
    ddl = query(conn, f"SHOW CREATE TABLE {qualified(database, table)}")[0]["Create Table"]
    out = {}
    for m in _FK_CLAUSE.finditer(ddl):
        found = dict(_FK_RULE.findall(m.group("rules")))
        # An omitted rule is RESTRICT, as information_schema reports it.
        out[m.group(1).replace("``", "`")] = (found.get("DELETE", "RESTRICT"), found.get("UPDATE", "RESTRICT"))
    return out


def table_schema(conn: pymysql.connections.Connection, source: SourceConfig, database: str, table: str) -> TableSchema:
    """The table's current schema. The key is the primary key, else the configured chunk key
    (empty if neither exists: preflight reports that)."""
    cols = query(
        conn,
        "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, "
        "IS_NULLABLE, COLUMN_COMMENT, EXTRA FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    columns = tuple(
        column_from_information_schema(
            name=c["COLUMN_NAME"],
            data_type=c["DATA_TYPE"],
            column_type=c["COLUMN_TYPE"],
            numeric_precision=c["NUMERIC_PRECISION"],
            numeric_scale=c["NUMERIC_SCALE"],
            datetime_precision=c["DATETIME_PRECISION"],
            nullable=c["IS_NULLABLE"] == "YES",
            comment=c["COLUMN_COMMENT"],
            # MySQL: "INVISIBLE", MySQL's generated invisible primary key "auto_increment INVISIBLE"
            visible="INVISIBLE" not in str(c["EXTRA"] or "").upper(),
        )
        for c in cols
    )
    comment_rows = query(
        conn,
        "SELECT TABLE_COMMENT AS c FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (database, table),
    )
    pk = primary_key(conn, database, table)
    key, is_primary = (pk, True) if pk else (tuple(source.chunk_keys.get(f"{database}.{table}", ())), False)
    return TableSchema(
        database=database,
        table=table,
        columns=columns,
        key=key,
        comment=comment_rows[0]["c"] if comment_rows else "",
        key_is_primary=is_primary,
        foreign_keys=foreign_keys(conn, database, table),
    )
