"""What a statement's text says, as far as binlake needs it: which tables a DDL statement
changes and how (capture records it in bronze's ``op``), which columns it renames (silver
moves the old images' values to the new name), and which tables a statement-format DML
statement writes (its rows are not in the binlog).

One identifier grammar serves both: a backquoted name (with ```` `` ```` inside) or a bare one.
"""

from __future__ import annotations

import re

from binlake.contract.changelog import DDL_OP, DROP_OP, RENAMED_INTO_OP, TRUNCATE_OP
from binlake.contract.sql import IDENT_PATTERN, unquote_ident

_NAME = rf"(?:{IDENT_PATTERN}|[\w$]+)"
_QUALIFIED = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_DDL_TABLE = re.compile(
    r"^(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?P<temporary>TEMPORARY\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?"
    r"|(?P<alter>ALTER)\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE(?:\s+IF\s+EXISTS)?"
    r"|(?P<drop>DROP)\s+(?P<drop_temporary>TEMPORARY\s+)?TABLE(?:\s+IF\s+EXISTS)?"
    r"|(?P<rename>RENAME)\s+TABLES?"
    r"|(?P<truncate>TRUNCATE)(?:\s+TABLE)?)"
    rf"\s+(?P<name>{_QUALIFIED})",
    re.IGNORECASE,
)
_COMMENT = re.compile(r"^\s*(?:/\*.*?\*/\s*|#[^\n]*\n\s*|--[^\n]*\n\s*)*", re.DOTALL)
# A comment anywhere between the words (gh-ost writes ``rename /* gh-ost */ table ...``), with the
# quoted texts it must not be looked for in; ``/*! ... */`` and ``/*M! ... */`` are executed, not comments.
_INLINE_COMMENT = re.compile(
    r"(`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\")|/\*(?!M?!).*?\*/", re.DOTALL
)
_MORE_NAMES = re.compile(rf"\s*,\s*(?P<name>{_QUALIFIED})")
_RENAME_PAIR = re.compile(
    rf"\s*(?P<old>{_QUALIFIED})\s+(?:WAIT\s+\d+\s+|NOWAIT\s+)?TO\s+(?P<new>{_QUALIFIED})\s*,?", re.IGNORECASE
)
# ALTER TABLE a ... RENAME [TO|AS] b; not RENAME COLUMN/INDEX/KEY, which keep the table.
_ALTER_RENAME = re.compile(
    rf"\bRENAME\s+(?:TO\s+|AS\s+)?(?!(?:COLUMN|INDEX|KEY)\b)(?P<new>{_QUALIFIED})", re.IGNORECASE
)
# A column name in an ALTER TABLE's column clauses.
_COLUMN = rf"({IDENT_PATTERN}|[^\s`,();]+)"
_RENAME_COLUMN = re.compile(r"\bRENAME\s+COLUMN\s+" + _COLUMN + r"\s+TO\s+" + _COLUMN, re.IGNORECASE)
_CHANGE_COLUMN = re.compile(r"\bCHANGE\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?" + _COLUMN + r"\s+" + _COLUMN, re.IGNORECASE)


def _qualified(text: str, default_db: str | None) -> tuple[str | None, str]:
    parts = re.findall(_NAME, text)
    if len(parts) == 2:
        return unquote_ident(parts[0]), unquote_ident(parts[1])
    return default_db, unquote_ident(parts[0])


def ddl_effects(query: str, default_db: str | None) -> list[tuple[str | None, str | None, str]]:
    """``(db, table, op)`` for each table a DDL statement changes, ``op`` one of the DDL ops of
    :mod:`binlake.contract.lakehouse`; ``[(default_db, None, 'ddl')]`` when it names no
    table (CREATE DATABASE ...).

    Multi-table forms (``DROP TABLE a, b``, ``RENAME TABLE a TO b, c TO d`` as gh-ost and
    pt-online-schema-change swap tables) give one entry per table; temporary tables give none.
    """
    text = _INLINE_COMMENT.sub(lambda m: m.group(1) or " ", _COMMENT.sub("", query, count=1))
    m = _DDL_TABLE.match(text)
    if not m:
        return [(default_db, None, DDL_OP)]
    if m.group("temporary") or m.group("drop_temporary"):
        return []
    first = _qualified(m.group("name"), default_db)
    if m.group("truncate"):
        return [(*first, TRUNCATE_OP)]
    if m.group("drop"):
        names, rest = [first], text[m.end() :]
        while more := _MORE_NAMES.match(rest):
            names.append(_qualified(more.group("name"), default_db))
            rest = rest[more.end() :]
        return [(db, t, DROP_OP) for db, t in names]
    if m.group("rename"):
        out: list[tuple[str | None, str | None, str]] = []
        rest = text[m.start("name") :]
        while pair := _RENAME_PAIR.match(rest):
            out += [
                (*_qualified(pair.group("old"), default_db), DROP_OP),
                (*_qualified(pair.group("new"), default_db), RENAMED_INTO_OP),
            ]
            rest = rest[pair.end() :]
        return out or [(*first, DDL_OP)]
    if m.group("alter") and (renamed := _ALTER_RENAME.search(text, m.end())):
        return [(*first, DDL_OP), (*first, DROP_OP), (*_qualified(renamed.group("new"), first[0]), RENAMED_INTO_OP)]
    return [(*first, DDL_OP)]


def creates_table(query: str) -> bool:
    """True for a CREATE TABLE statement (not a temporary table)."""
    m = _DDL_TABLE.match(_INLINE_COMMENT.sub(lambda m: m.group(1) or " ", _COMMENT.sub("", query, count=1)))
    return m is not None and not any(m.group(g) for g in ("temporary", "alter", "drop", "rename", "truncate"))


def column_renames(ddl: str | None) -> list[tuple[str, str]]:
    """(old, new) column renames stated in an ALTER TABLE text."""
    if not ddl:
        return []
    out = [(unquote_ident(a), unquote_ident(b)) for a, b in _RENAME_COLUMN.findall(ddl)]
    out += [
        (unquote_ident(a), unquote_ident(b))
        for a, b in _CHANGE_COLUMN.findall(ddl)
        if unquote_ident(a) != unquote_ident(b)
    ]
    return out


# Statement-format DML: the statements that write rows. A session with binlog_format=STATEMENT
# (or MIXED, for statements it deems safe) logs them as text instead of row events.
_DML = re.compile(r"^(?:INSERT|REPLACE|UPDATE|DELETE|LOAD\s+(?:DATA|XML))\b", re.IGNORECASE)
_INSERT_TARGET = re.compile(
    r"^(?:INSERT|REPLACE)(?:\s+(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE))*(?:\s+INTO)?"
    rf"\s+(?P<name>{_QUALIFIED})",
    re.IGNORECASE,
)
_LOAD_TARGET = re.compile(rf"\bINTO\s+TABLE\s+(?P<name>{_QUALIFIED})", re.IGNORECASE)
_SINGLE_DELETE = re.compile(
    rf"^DELETE(?:\s+(?:LOW_PRIORITY|QUICK|IGNORE))*\s+FROM\s+(?P<name>{_QUALIFIED})"
    r"\s*(?:$|;|\b(?:WHERE|ORDER|LIMIT|PARTITION|RETURNING)\b)",
    re.IGNORECASE,
)
_SINGLE_UPDATE = re.compile(
    rf"^UPDATE(?:\s+(?:LOW_PRIORITY|IGNORE))*\s+(?P<name>{_QUALIFIED})(?:\s+(?:AS\s+)?{_NAME})?\s+SET\b",
    re.IGNORECASE,
)
_CREATE_SELECT = re.compile(r"\bSELECT\b", re.IGNORECASE)


def statement_targets(query: str, default_db: str | None) -> list[tuple[str | None, str | None]] | None:
    """The tables a statement-format DML statement writes, as ``(db, table)``; ``table`` is
    None when the text does not say exactly (multi-table UPDATE or DELETE, a CTE): then any
    table of ``db`` may have changed. None when the statement is not DML.

    ``CREATE TABLE ... SELECT`` counts too: logged as a statement it carries the new table's
    rows as a query, not as row events.
    """
    text = _COMMENT.sub("", query, count=1).strip()
    if _DML.match(text):
        for pattern in (_INSERT_TARGET, _SINGLE_UPDATE, _SINGLE_DELETE):
            if m := pattern.match(text):
                return [_qualified(m.group("name"), default_db)]
        if text[:4].upper() == "LOAD" and (m := _LOAD_TARGET.search(text)):
            return [_qualified(m.group("name"), default_db)]
        return _any_database(text, default_db)
    if re.match(r"^WITH\b", text, re.IGNORECASE) and re.search(r"\b(?:UPDATE|DELETE)\b", text, re.IGNORECASE):
        return _any_database(text, default_db)
    m = _DDL_TABLE.match(text)
    if m and text[: m.start("name")].upper().startswith("CREATE") and _CREATE_SELECT.search(text, m.end()):
        if m.group("temporary"):
            return []
        return [_qualified(m.group("name"), default_db)]
    return None


_QUALIFIER = re.compile(rf"({_NAME})\s*\.\s*{_NAME}")


def _any_database(text: str, default_db: str | None) -> list[tuple[str | None, str | None]]:
    """Every database the statement may write in: the default one and any name that
    qualifies another (a table's database, or an alias, which names no database)."""
    dbs = dict.fromkeys([default_db, *(unquote_ident(q) for q in _QUALIFIER.findall(text))])
    return [(db, None) for db in dbs]
