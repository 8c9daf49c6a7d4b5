"""Quoting for the SQL binlake writes, to MySQL and to Spark.

Every SQL string binlake builds quotes identifiers with :func:`quote_ident` (backticks mean
the same in MySQL and Spark SQL) and values with the literal function of the dialect that
reads them; no name or value is ever pasted unquoted. Each of them returns :data:`Sql`, and
:func:`sql` fills a statement's template with ``Sql`` parts (or integers) only, so mypy
refuses a name or value that nobody quoted where the statement is built (ruff's S608 asks
for this function wherever a statement would otherwise be an f-string).
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import NewType

# Text that is SQL already: a quoted name, a literal, or a fragment binlake generated;
# ``Sql(text)`` at a call site says that ``text`` is such a fragment. A NewType, so at run
# time it is a plain str: APIs such as DeltaTable's ``set=`` accept only exact ``str`` keys.
Sql = NewType("Sql", str)


def sql(template: str, /, **parts: Sql | int) -> Sql:
    """``template`` with each ``{name}`` replaced by ``parts[name]``, which must be :class:`Sql`
    or an ``int``: ``sql("SELECT * FROM {t} LIMIT {n}", t=qualified(db, table), n=10)``."""
    for _, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        if spec or conversion:
            raise ValueError(f"SQL template field {{{field}}} takes no format spec or conversion")
        if field not in parts:
            raise KeyError(f"SQL template field {{{field}}} has no part")
    for name, part in parts.items():
        if isinstance(part, bool) or not isinstance(part, (str, int)):
            raise TypeError(
                f"SQL part {name} must be quoted (quote_ident, qualified, spark_string, mysql_string, "
                f"spark_literal), generated SQL wrapped in Sql(), or an int; got {type(part).__name__}"
            )
    return Sql(template.format(**{k: v if isinstance(v, str) else str(int(v)) for k, v in parts.items()}))


def sql_list(parts: Iterable[Sql], separator: str = ", ") -> Sql:
    """Quoted names or literals joined by ``separator`` (a column list, an ``IN (...)`` list)."""
    items = list(parts)
    for part in items:
        if not isinstance(part, str):
            raise TypeError(f"SQL list item {part!r} must be quoted SQL text, got {type(part).__name__}")
    return Sql(separator.join(items))


# An identifier in DDL text: backquoted (with `` inside) or bare.
IDENT_PATTERN = r"`(?:[^`]|``)+`"


def quote_ident(name: str) -> Sql:
    """```a`b``` -> ```` `a``b` ````."""
    if not isinstance(name, str) or name == "":
        raise ValueError("identifier must be a non-empty string")
    return Sql("`" + name.replace("`", "``") + "`")


def unquote_ident(text: str) -> str:
    """The name a (possibly backquoted) identifier in SQL text stands for."""
    text = text.strip()
    return text[1:-1].replace("``", "`") if text.startswith("`") and text.endswith("`") and len(text) > 1 else text


def qualified(database: str, table: str) -> Sql:
    """```db`.`table``` for MySQL."""
    return Sql(f"{quote_ident(database)}.{quote_ident(table)}")


def spark_string(text: str) -> Sql:
    """A Spark SQL string literal (Spark reads backslash escapes)."""
    return Sql("'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'")


def mysql_string(text: str) -> Sql:
    """A MySQL string literal under the server's default sql_mode (quotes doubled, backslashes escaped)."""
    return Sql("'" + text.replace("\\", "\\\\").replace("'", "''") + "'")


def spark_literal(value, spark_type: str) -> Sql:
    """A Spark SQL literal of ``spark_type`` (``BIGINT``, ``DECIMAL(10,2)``, ``DATE``, ...) for a
    value as Spark returns it to Python (``collect()``): what ``F.lit(value).cast(spark_type)``
    means, as text, so the expression can also travel as SQL (a Delta command on a Spark
    Connect session takes conditions only as text).

    A naive ``datetime`` of a ``TIMESTAMP`` is local time, as PySpark hands it out and takes
    it back; of a ``TIMESTAMP_NTZ``, the wall clock as stored."""
    return Sql(_spark_literal(value, spark_type))


def _spark_literal(value, spark_type: str) -> str:
    import calendar
    import datetime as dt
    import math
    import time
    from decimal import Decimal

    typ = spark_type.strip().upper()
    if value is None:
        return f"CAST(NULL AS {spark_type})"
    if isinstance(value, bool):
        return f"CAST({'TRUE' if value else 'FALSE'} AS {spark_type})"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"CAST(X'{bytes(value).hex()}' AS {spark_type})"
    if isinstance(value, dt.datetime):
        if typ == "TIMESTAMP_NTZ":
            return f"TIMESTAMP_NTZ '{value.replace(tzinfo=None).isoformat(sep=' ')}'"
        seconds = calendar.timegm(value.utctimetuple()) if value.tzinfo else int(time.mktime(value.timetuple()))
        return f"CAST(timestamp_micros({seconds * 1_000_000 + value.microsecond}) AS {spark_type})"
    if isinstance(value, dt.date):
        return f"CAST(DATE '{value.isoformat()}' AS {spark_type})"
    if isinstance(value, float):
        if math.isnan(value):
            text = "NaN"
        elif math.isinf(value):
            text = "Infinity" if value > 0 else "-Infinity"
        else:
            text = repr(value)
        return f"CAST('{text}' AS {spark_type})"
    if isinstance(value, Decimal):
        return f"CAST('{format(value, 'f')}' AS {spark_type})"
    if isinstance(value, int):
        return f"CAST({value}BD AS {spark_type})" if abs(value) >= 2**63 else f"CAST({value}L AS {spark_type})"
    if isinstance(value, str):
        return f"CAST({spark_string(value)} AS {spark_type})"
    raise TypeError(f"no Spark SQL literal for a {type(value).__name__} value of type {spark_type}")
