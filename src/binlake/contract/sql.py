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


def spark_literal(value, spark_type: str) -> str:
    """A Spark SQL literal of ``spark_type`` (``BIGINT``, ``DECIMAL(10,2)``, ``DATE``, ...) for a
    value as Spark returns it to Python (``collect()``): what ``F.lit(value).cast(spark_type)``
    means, as text, so the expression can also travel as SQL (a Delta command on a Spark
    Connect session takes conditions only as text).

    A naive ``datetime`` of a ``TIMESTAMP`` is local time, as PySpark hands it out and takes
    it back; of a ``TIMESTAMP_NTZ``, the wall clock as stored."""
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
