"""Quoting for the SQL binlake writes, to MySQL and to Spark.

Every SQL string binlake builds quotes identifiers with :func:`quote_ident` (backticks mean
the same in MySQL and Spark SQL) and values with the literal function of the dialect that
reads them; no name or value is ever pasted unquoted.
"""

from __future__ import annotations

# An identifier in DDL text: backquoted (with `` inside) or bare.
IDENT_PATTERN = r"`(?:[^`]|``)+`"


def quote_ident(name: str) -> str:
    """```a`b``` -> ```` `a``b` ````."""
    if not isinstance(name, str) or name == "":
        raise ValueError("identifier must be a non-empty string")
    return "`" + name.replace("`", "``") + "`"


def unquote_ident(text: str) -> str:
    """The name a (possibly backquoted) identifier in SQL text stands for."""
    text = text.strip()
    return text[1:-1].replace("``", "`") if text.startswith("`") and text.endswith("`") and len(text) > 1 else text


def qualified(database: str, table: str) -> str:
    """```db`.`table``` for MySQL."""
    return f"{quote_ident(database)}.{quote_ident(table)}"


def spark_string(text: str) -> str:
    """A Spark SQL string literal (Spark reads backslash escapes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def mysql_string(text: str) -> str:
    """A MySQL string literal under the server's default sql_mode (quotes doubled, backslashes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
