"""What an ``ALTER TABLE ... ADD COLUMN`` gives the rows the table already holds.

MySQL and MariaDB fill an added column of every existing row with its default; the binlog
carries only the statement. This module reads the column's definition from the statement's
text and works out that value as the canonical text bronze would hold for it
(:func:`binlake.contract.types.encode_value`), or says why binlake cannot know it exactly:

- a literal (``DEFAULT 5``, ``'abc'``, ``1.005``, ``'2024-01-02'``, ``b'101'``, ``TRUE``),
  converted to the column's type as the server does (DECIMAL rounds half away from zero, a
  CHAR loses trailing spaces, a BINARY(n) is padded with zero bytes);
- ``NOT NULL`` without a DEFAULT: the type's implicit default (0, ``''``, the first ENUM
  label, the zero date, which silver holds as NULL like every zero date);
- ``DEFAULT CURRENT_TIMESTAMP`` (``NOW()``) of a TIMESTAMP column, without fractional
  seconds: the statement's time, which the QUERY event's timestamp holds to the second.

Not knowable, so :attr:`Backfill.unknown` says why: an expression (``DEFAULT (expr)``, a
function), ``CURRENT_TIMESTAMP(n>0)`` (the event has no fraction), ``CURRENT_TIMESTAMP`` of a
DATETIME and a TIMESTAMP literal (both depend on the ALTER session's time zone), a TIMESTAMP
NOT NULL without DEFAULT (``explicit_defaults_for_timestamp`` decides), a fraction longer
than the column keeps (MariaDB truncates, MySQL rounds), AUTO_INCREMENT and generated
columns, a string with a backslash or a character set introducer (the session's sql_mode
and character set decide), and any literal the column's type would not take as it is.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from dataclasses import dataclass

from binlake.contract.sql import IDENT_PATTERN, unquote_ident
from binlake.contract.types import ZERO_DATE, ZERO_DATETIME, Column, Kind, encode_value, format_time


@dataclass(frozen=True)
class Backfill:
    """The value existing rows got: ``text`` (canonical, None for NULL) unless ``unknown``
    says why binlake cannot know it exactly."""

    text: str | None = None
    unknown: str | None = None


# A token of SQL text: a quoted string, a backquoted name, a parenthesised group (matched by
# the tokenizer), a number, a word, or one other character.
_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^'\\]|''|\\.)*'|\"(?:[^\"\\]|\"\"|\\.)*\")"
    rf"|(?P<ident>{IDENT_PATTERN})"
    r"|(?P<num>0x[0-9a-fA-F]+|0b[01]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<word>[\w$]+)"
    r"|(?P<other>\S))",
    re.DOTALL,
)
_NOT_COLUMNS = {"INDEX", "KEY", "PRIMARY", "UNIQUE", "CONSTRAINT", "FOREIGN", "FULLTEXT", "SPATIAL", "CHECK"}
_NOT_COLUMNS |= {"PARTITION", "PERIOD", "SYSTEM", "VECTOR"}
_NOW = {"CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP"}


def _tokens(text: str) -> list[str]:
    """Top-level tokens; a parenthesised group is one token, parentheses included."""
    out: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if not m:
            break
        tok, i = m.group().strip(), m.end()
        if tok == "(":
            if depth == 0:
                start = m.end() - 1
            depth += 1
        elif tok == ")" and depth:
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
        elif depth == 0:
            out.append(tok)
    return out


def _clauses(tokens: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok == ",":
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


_ALTER_HEAD = re.compile(r"^\s*ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?", re.IGNORECASE)


def added_definitions(ddl: str | None) -> dict[str, list[str]]:
    """``{column name (lower case): its definition's tokens}`` for each column an ALTER TABLE
    text adds (``ADD [COLUMN] [IF NOT EXISTS] c def``, ``ADD [COLUMN] (c def, ...)``)."""
    out: dict[str, list[str]] = {}
    for statement in (ddl or "").split(";\n"):
        m = _ALTER_HEAD.match(statement)
        if not m:
            continue
        tokens = _tokens(statement[m.end() :])[1:]  # the table's name is one token (or three)
        while len(tokens) >= 2 and tokens[0] == ".":
            tokens = tokens[2:]
        for clause in _clauses(tokens):
            if clause[0].upper() != "ADD" or len(clause) < 2:
                continue
            rest = clause[1:]
            if rest[0].upper() == "COLUMN":
                rest = rest[1:]
            if rest and rest[0].upper() in _NOT_COLUMNS:
                continue
            if len(rest) >= 3 and [t.upper() for t in rest[:3]] == ["IF", "NOT", "EXISTS"]:
                rest = rest[3:]
            inner = [c for c in _clauses(_tokens(rest[0][1:-1]))] if rest and rest[0].startswith("(") else [rest]
            for column in inner:
                if column and column[0].upper() not in _NOT_COLUMNS:
                    out[unquote_ident(column[0]).lower()] = column[1:]
    return out


def backfill(col: Column, definition: list[str] | None, ddl_epoch: int | None) -> Backfill:
    """What rows older than the ALTER hold in the added column ``col`` (its type as binlake
    reads it; ``definition``: its tokens from :func:`added_definitions`, None when the text is
    not known; ``ddl_epoch``: the statement's time, seconds since the epoch)."""
    if definition is None:
        return Backfill(unknown="the ADD COLUMN statement's text is not in the change log")
    words = [t.upper() for t in definition]
    if "AUTO_INCREMENT" in words:
        return Backfill(unknown="an AUTO_INCREMENT column numbers the rows in the server's order")
    if "GENERATED" in words or any(w == "AS" and nxt.startswith("(") for w, nxt in zip(words, definition[1:])):
        return Backfill(unknown="a generated column is computed by the server")
    if "DEFAULT" not in words:
        return _implicit(col, definition)
    value = definition[words.index("DEFAULT") + 1 :]
    if not value:
        return Backfill(unknown="DEFAULT without a value")
    first = value[0]
    if first.upper() == "NULL":
        return Backfill()
    if first.startswith("(") and len(_tokens(first[1:-1])) == 1:
        value = _tokens(first[1:-1]) + value[1:]  # DEFAULT (5) is the literal 5
        first = value[0]
    if first.upper() in _NOW:
        fsp = value[1][1:-1].strip() if len(value) > 1 and value[1].startswith("(") else ""
        return _now(col, int(fsp or 0), ddl_epoch)
    literal = _literal(value)
    if literal is None:
        return Backfill(unknown=f"DEFAULT {' '.join(value[:2])} is an expression the server evaluates")
    try:
        return _convert(col, definition, *literal)
    except (ValueError, ArithmeticError):
        return Backfill(unknown=f"DEFAULT {' '.join(value[:2])} is not a value binlake converts exactly")


def _now(col: Column, fsp: int, ddl_epoch: int | None) -> Backfill:
    if col.kind is not Kind.TIMESTAMP:
        return Backfill(unknown="CURRENT_TIMESTAMP of a DATETIME is the wall clock of the ALTER session's time zone")
    if fsp or ddl_epoch is None:
        return Backfill(unknown="the binlog holds the ALTER's time to the second only")
    return Backfill(encode_value(col, dt.datetime.fromtimestamp(ddl_epoch, dt.timezone.utc)))


def _literal(value: list[str]) -> tuple[str, object] | None:
    """``(kind, value)`` of a literal: ``('str', text)``, ``('num', Decimal text)``,
    ``('bits', (int, its length in bytes))``, ``('bool', int)``; None for anything else."""
    first = value[0]
    if first[0] in "'\"":
        if "\\" in first:
            return None
        return "str", first[1:-1].replace(first[0] * 2, first[0])
    if first in "+-" and len(value) > 1 and re.fullmatch(r"[\d.].*", value[1]):
        return "num", first + value[1]
    if m := re.fullmatch(r"0x([0-9a-fA-F]+)|[xX]'([0-9a-fA-F]*)'", first + (value[1] if first in "xX" else "")):
        digits = m.group(1) or m.group(2) or ""
        return "bits", (int(digits or "0", 16), (len(digits) + 1) // 2)
    if m := re.fullmatch(r"0b([01]+)|[bB]'([01]*)'", first + (value[1] if first in "bB" else "")):
        digits = m.group(1) or m.group(2) or ""
        return "bits", (int(digits or "0", 2), (len(digits) + 7) // 8)
    if re.fullmatch(r"[\d.].*", first):
        return "num", first
    if first.upper() in ("TRUE", "FALSE"):
        return "bool", int(first.upper() == "TRUE")
    return None


def _type_length(definition: list[str]) -> int | None:
    """The (n) right after the type name, if any."""
    if len(definition) > 1 and definition[1].startswith("("):
        inner = definition[1][1:-1].split(",")[0].strip()
        return int(inner) if inner.isdigit() else None
    return None


def _implicit(col: Column, definition: list[str]) -> Backfill:
    """The implicit default of a NOT NULL column without DEFAULT; NULL for a nullable one."""
    if col.nullable:
        return Backfill()
    k = col.kind
    if k is Kind.TIMESTAMP:
        return Backfill(unknown="a TIMESTAMP NOT NULL without DEFAULT gets what explicit_defaults_for_timestamp says")
    if k in (Kind.INT, Kind.UINT, Kind.DECIMAL, Kind.FLOAT, Kind.DOUBLE, Kind.YEAR, Kind.BIT):
        return Backfill(encode_value(col, 0))
    if k is Kind.DATE:
        return Backfill(ZERO_DATE)
    if k is Kind.DATETIME:
        return Backfill(ZERO_DATETIME)
    if k is Kind.TIME:
        return Backfill(format_time(dt.timedelta(0), col.fsp))
    if k is Kind.ENUM:
        return Backfill(col.labels[0] if col.labels else None, None if col.labels else "the ENUM's labels are unknown")
    if k is Kind.BINARY:
        fixed = definition[0].upper() == "BINARY"
        return Backfill(encode_value(col, bytes((_type_length(definition) or 1) if fixed else 0)))
    return Backfill(encode_value(col, ""))


_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?")
_TIME = re.compile(r"(-?)(\d{1,3}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")


def _convert(col: Column, definition: list[str], kind: str, value) -> Backfill:  # noqa: C901 (one branch per kind)
    k = col.kind
    if kind == "bits" and k not in (Kind.BIT, Kind.BINARY):
        kind, value = "num", str(value[0])
    if kind == "bool":
        kind, value = "num", str(value)
    if k in (Kind.INT, Kind.UINT, Kind.YEAR, Kind.BIT):
        number = value[0] if kind == "bits" else decimal.Decimal(value)
        if number != int(number):
            raise ValueError("not an integer")
        n, bits = int(number), col.bits or 64
        lo, hi = (0, (1 << bits) - 1) if k is Kind.UINT else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        if k is Kind.YEAR:
            lo, hi = (0, 0) if n == 0 else (1901, 2155)
        if k is Kind.BIT:
            lo, hi = 0, (1 << 64) - 1
        if not lo <= n <= hi:
            raise ValueError("out of range")
        return Backfill(encode_value(col, n))
    if k is Kind.DECIMAL:
        d = decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-col.scale), decimal.ROUND_HALF_UP)
        if len(d.as_tuple().digits) > col.precision:
            raise ValueError("out of range")
        return Backfill(encode_value(col, d))
    if k in (Kind.FLOAT, Kind.DOUBLE):
        return Backfill(encode_value(col, float(decimal.Decimal(value))))
    if kind == "num" and k is not Kind.BINARY and not re.fullmatch(r"-?\d+", value):
        raise ValueError("a number's text form")
    if k in (Kind.STRING, Kind.JSON):
        text = value
        return Backfill(text.rstrip(" ") if definition[0].upper() == "CHAR" else text)
    if k is Kind.ENUM:
        exact = [label for label in col.labels if label == value]
        folded = [label for label in col.labels if label.lower() == value.lower()]
        if not (exact or len(folded) == 1):
            raise ValueError("not a label")
        return Backfill((exact or folded)[0])
    if k is Kind.SET:
        members = [m for m in value.split(",") if m]
        if any(m not in col.labels for m in members):
            raise ValueError("not a label")
        return Backfill(encode_value(col, ",".join(members)))
    if k is Kind.BINARY:
        raw = value[0].to_bytes(value[1], "big") if kind == "bits" else value.encode()
        if definition[0].upper() == "BINARY":
            raw = raw.ljust(_type_length(definition) or 1, b"\0")
        return Backfill(encode_value(col, raw))
    return _temporal(col, value)


def _temporal(col: Column, text: str) -> Backfill:
    k = col.kind
    if k is Kind.TIME:
        m = _TIME.fullmatch(text)
        if not m or len(m.group(5) or "") > col.fsp:
            raise ValueError("not a TIME binlake reads exactly")
        sign, h, mi, s, frac = m.groups()
        td = dt.timedelta(hours=int(h), minutes=int(mi), seconds=int(s), microseconds=int((frac or "").ljust(6, "0")))
        return Backfill(format_time(-td if sign else td, col.fsp))
    m = _DATETIME.fullmatch(text)
    if not m or (k is Kind.DATE and m.group(4)) or len(m.group(7) or "") > col.fsp:
        raise ValueError("not a date binlake reads exactly")
    if not text.strip("0-: .T"):  # the zero date (silver holds it as NULL)
        return Backfill(ZERO_DATE if k is Kind.DATE else ZERO_DATETIME)
    if k is Kind.TIMESTAMP:
        raise ValueError("a TIMESTAMP literal is read in the ALTER session's time zone")
    year, month, day, hour, minute, second = (int(g) if g else 0 for g in m.groups()[:6])
    micro = int((m.group(7) or "").ljust(6, "0"))
    value = dt.datetime(year, month, day, hour, minute, second, micro)  # a partial zero date raises
    return Backfill(encode_value(col, value.date() if k is Kind.DATE else value))
