"""How :mod:`binlake.config` declares binlake.yml's keys, and what reads the declarations.

A key is a field of a frozen pydantic dataclass made by :func:`declared`: its type, default and
description are its whole declaration. A :class:`Hint` beside a field says the fix where the
generic wording would not do. :func:`one_line` is the one error formatter: it turns pydantic's
ValidationError into binlake's one-line ConfigError naming the key (``gold.checks.shop.t[0]``,
``source.columns['shop.*']``) and the fix. :func:`render_reference` renders the configuration
reference (docs/configuration.md) from the same declarations.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union

from pydantic import BeforeValidator, ConfigDict, Strict, ValidationError, model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError
from typing_extensions import dataclass_transform

from binlake.config.secrets import Secret
from binlake.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Hint:
    """What a field's one-line error says where the generic wording would not do (Annotated
    metadata). ``invalid``: after the key, for a value of the wrong shape (also inside its lists
    and maps); ``bad``: after the key, for a value outside its bounds (``{input}`` is the value);
    ``missing``: the whole message for a key that is not set (``{where}`` is the key, ``{entry}``
    the entry it belongs to); ``not_a_key``: the field is no key of its own (the pattern a rule is
    written under, the config file's directory); ``shown``: the key's type in the reference where
    the YAML is not written as the field is typed."""

    invalid: str | None = None
    bad: str | None = None
    missing: str | None = None
    not_a_key: bool = False
    shown: str | None = None


def text_or_number(value: Any) -> Any:
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _digits(value: Any) -> Any:
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


# A whole number: YAML's 3 or "3" (an environment variable), never true or 3.5.
Whole = Annotated[int, BeforeValidator(_digits), Strict()]
# Text: a number written unquoted is text too (a numeric password or host name).
Text = Annotated[str, BeforeValidator(text_or_number)]
Flag = Annotated[bool, Strict()]
Patterns = Annotated[
    tuple[str, ...], BeforeValidator(_one_or_many), Hint(invalid='must be a list of strings, e.g. ["shop.*"]')
]
ColumnNames = Annotated[tuple[str, ...], Hint(invalid="must be a list of column names")]
OneOrMoreColumns = Annotated[
    tuple[str, ...], BeforeValidator(_one_or_many), Hint(invalid="must be a list of column names")
]

SECTION = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


# Tells type checkers that a declared class is a frozen dataclass: its fields are its
# constructor's keywords.
@dataclass_transform(frozen_default=True)
def declared(where: str, kw_only: bool = False):
    """A frozen pydantic dataclass of a config section at ``where``: unknown keys refused, a key
    set to null taken as not set (its default), and direct construction raising the same one-line
    ConfigError as loading."""

    def wrap(cls: type) -> type:
        # Before the class's own before-validators (pydantic runs those last-defined first).
        cls._nulls = model_validator(mode="before")(drop_nulls)  # type: ignore[attr-defined]
        cls = dataclass(frozen=True, config=SECTION, kw_only=kw_only)(cls)
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            try:
                init(self, *args, **kwargs)
            except ValidationError as exc:
                raise ConfigError(one_line(exc, cls, where, None)) from None

        cls.__init__ = __init__  # type: ignore[method-assign]
        return cls

    return wrap


def refuse(message: str) -> PydanticCustomError:
    """A check's own message; ``{where}`` in it becomes the key the check failed at."""
    return PydanticCustomError("binlake", "{message}", {"message": message})


def drop_nulls(cls: type, value: Any) -> Any:
    """A key set to null (``port:``) means its default, as if it were not there."""
    return {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value


# ---------------------------------------------------------------------------------------
# The one error formatter: pydantic's errors as binlake's one-line messages


def _unwrap(tp: Any) -> tuple[Any, list[Hint]]:
    """The type under Annotated and Optional, and the hints on the way."""
    hints: list[Hint] = []
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            hints += [m for m in tp.__metadata__ if isinstance(m, Hint)]
            tp = typing.get_args(tp)[0]
        elif origin in (Union, types.UnionType) and type(None) in typing.get_args(tp):
            rest = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return tp, hints
            tp = rest[0]
        else:
            return tp, hints


def _keys(cls: type) -> list[str]:
    """The YAML keys of a section (its fields' names or aliases)."""
    return sorted(
        f.alias or name
        for name, f in cls.__pydantic_fields__.items()  # type: ignore[attr-defined]
        if not any(isinstance(m, Hint) and m.not_a_key for m in f.metadata)
    )


def unknown_key(parent: tuple[str, ...] | str, key: Any, cls: type, origin: str) -> str:
    if parent in ((), ""):
        return f"unknown top-level key {key!r} in {origin}: allowed are {', '.join(_keys(cls))}"
    return f"unknown key {parent}.{key}: allowed keys are {', '.join(_keys(cls))}"


def _walk(loc: tuple[Any, ...], root: type, prefix: str, raw: Any):
    """Follow an error's ``loc`` through the declarations: the key as binlake names it
    (``gold.checks.shop.t[0]``, ``source.columns['shop.*']``), the type there, and the hints
    in effect with the key each belongs to (hints do not reach into a nested section)."""
    where, tp, node = prefix, root, raw
    hints: list[tuple[str, Hint]] = []
    for part in loc:
        base, found = _unwrap(tp)
        hints += [(where, h) for h in found]
        origin = typing.get_origin(base)
        if hasattr(base, "__pydantic_fields__") and isinstance(part, str):
            fields = base.__pydantic_fields__
            name = next((n for n, f in fields.items() if part in (n, f.alias)), None)
            if name is None:
                return where, base, hints
            f = fields[name]
            hints = [(f"{where}.{part}".lstrip("."), h) for h in f.metadata if isinstance(h, Hint)]
            where, tp = f"{where}.{part}".lstrip("."), f.annotation
            node = node.get(part) if isinstance(node, dict) else None
        elif origin in (tuple, list) and isinstance(part, int):
            args = [a for a in typing.get_args(base) if a is not Ellipsis]
            if isinstance(node, dict) and part < len(node):
                key = list(node)[part]
                where, node = f"{where}[{key!r}]", node[key]
            else:
                where = f"{where}[{part}]"
                node = node[part] if isinstance(node, list) and part < len(node) else None
            tp = args[min(part, len(args) - 1)] if args else Any
        elif origin in (dict, Mapping, typing.get_origin(Mapping[str, str])):
            where, tp = f"{where}.{part}", typing.get_args(base)[1]
            node = node.get(part) if isinstance(node, dict) else None
        else:
            # A part pydantic adds (a union member, "[key]" of a dict key): the value's own.
            continue
    base, found = _unwrap(tp)
    hints += [(where, h) for h in found]
    return where, base, hints


_BOUNDS = {
    "greater_than_equal",
    "less_than_equal",
    "greater_than",
    "less_than",
    "too_short",
    "too_long",
    "string_too_short",
    "string_too_long",
}


def one_line(exc: ValidationError, root: type, prefix: str, raw: Any, origin: str = "<config>") -> str:
    """The first of pydantic's errors (unknown keys before all others, as a reader fixes them)
    as one line naming the key and the fix."""
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] in ("unexpected_keyword_argument", "extra_forbidden")]
    err = (unknown or errors)[0]
    loc = tuple(err["loc"])
    kind, value = err["type"], err.get("input")
    if unknown:
        parent, cls, _ = _walk(loc[:-1], root, prefix, raw)
        return unknown_key(parent, loc[-1], cls, origin)
    where, tp, hints = _walk(loc, root, prefix, raw)
    if kind == "binlake":
        return err["ctx"]["message"].replace("{where}", where)
    if kind == "missing" and not isinstance(loc[-1], int):  # an item missing from a list: its shape is wrong
        if not prefix and len(loc) == 1:
            return f"{origin} has no {loc[0]!r} section: add it (see README, Configuration)"
        said = [h.missing for w, h in hints if h.missing and w == where]
        if said:
            return said[-1].replace("{where}", where).replace("{entry}", where.rsplit(".", 1)[0])
        return f"{where} is missing: add it (see README, Configuration)"
    if kind in _BOUNDS:
        bad = [h for w, h in hints if h.bad and w == where]
        if bad:
            return f"{where} {bad[-1].bad.replace('{input}', str(value))}"
    invalid = [(w, h) for w, h in hints if h.invalid]
    if invalid and kind not in _BOUNDS | {"enum"}:
        w, h = invalid[-1]
        return f"{w} {h.invalid}"
    return _type_message(where, kind, value, err.get("ctx") or {}, tp) or f"{where}: {err['msg']}"


def _type_message(where: str, kind: str, value: Any, ctx: dict, tp: Any) -> str | None:
    """The fix-it line for a value of the wrong type or out of bounds, or None."""
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{where} must be a whole number, got {value!r}"
    if kind in ("bool_type", "bool_parsing"):
        return f"{where} must be true or false, got {value!r}"
    if kind == "string_type":
        return f"{where} must be a string, got {type(value).__name__}"
    if kind == "enum" and isinstance(tp, type) and issubclass(tp, enum.Enum):
        return f"{where} is {value!r}: use one of {', '.join(e.value for e in tp)}"
    if kind in ("dataclass_type", "dict_type", "model_type"):
        return f"{where} must be a mapping of keys, got {type(value).__name__}"
    if kind in ("greater_than_equal", "greater_than"):
        return f"{where} must be at least {ctx.get('ge', ctx.get('gt'))}, got {value}"
    if kind in ("less_than_equal", "less_than"):
        return f"{where} must be at most {ctx.get('le', ctx.get('lt'))}, got {value}"
    return None


# ---------------------------------------------------------------------------------------
# The configuration reference, from the declarations


def _type_name(tp: Any) -> str:
    base, _ = _unwrap(tp)
    origin = typing.get_origin(base)
    if base is int:
        return "integer"
    if base is bool:
        return "true/false"
    if base in (str, Secret):
        return "text" if base is str else "secret"
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return " \\| ".join(e.value for e in base)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(base) if a is not Ellipsis]
        inner = _unwrap(args[0])[0] if args else Any
        if dataclasses.is_dataclass(inner):
            return "list of entries"
        return "[min, max]" if Ellipsis not in typing.get_args(base) else "list"
    if origin in (dict, Mapping, typing.get_origin(Mapping[str, str])):
        return "mapping"
    if dataclasses.is_dataclass(base):
        return "mapping"
    return "any"


def _default(f: Any) -> str:
    if f.default_factory is not None:
        value = f.default_factory()
        if dataclasses.is_dataclass(value) or isinstance(value, Secret):
            return ""
    elif f.is_required():
        return "required"
    else:
        value = f.default
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or value in ((), {}):
        return ""
    return f"`{json.dumps(value) if not isinstance(value, str) else value}`"


def _rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, f in cls.__pydantic_fields__.items():  # type: ignore[attr-defined]
        if any(isinstance(m, Hint) and m.not_a_key for m in f.metadata):
            continue
        key = f"{prefix}.{f.alias or name}".lstrip(".")
        base, _ = _unwrap(f.annotation)
        if isinstance(base, type) and dataclasses.is_dataclass(base) and prefix == "":
            rows += _rows(base, key)
            continue
        shown = [m.shown for m in f.metadata if isinstance(m, Hint) and m.shown]
        rows.append((key, shown[-1] if shown else _type_name(f.annotation), _default(f), f.description or ""))
        inner = base
        if typing.get_origin(base) in (tuple, list):
            args = [a for a in typing.get_args(base) if a is not Ellipsis]
            inner = _unwrap(args[0])[0] if args else None
        elif typing.get_origin(base) in (dict, Mapping, typing.get_origin(Mapping[str, str])):
            inner = _unwrap(typing.get_args(base)[1])[0]
            if typing.get_origin(inner) in (tuple, list):
                inner = _unwrap(typing.get_args(inner)[0])[0]
        if hasattr(inner, "__pydantic_fields__"):
            sub = f"{key}[]" if inner is not base else key
            rows += _rows(inner, sub)
    return rows


def render_reference(root: type) -> str:
    """The configuration reference as Markdown: one row per key of the declarations under ``root``."""
    lines = [
        "# Configuration reference",
        "",
        "Every key of `binlake.yml`, generated from its declaration in `src/binlake/config.py`",
        "(`python -m binlake.config > docs/configuration.md`; a unit test checks the two agree).",
        "`[]` marks the keys of each entry of a list or mapping.",
        "",
        "| Key | Type | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for key, kind, default, text in _rows(root, ""):
        text = text.replace("|", "\\|")
        lines.append(f"| `{key}` | {kind} | {default} | {text} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# Names and positions as the keys write them

# db.table: MySQL names may hold inner spaces ("my db"), never a dot; leading or trailing
# whitespace is almost always a typo, so it is refused.
_NAME_PART = r"[^.\s](?:[^.]*[^.\s])?"
TABLE_PATTERN = re.compile(rf"^{_NAME_PART}\.{_NAME_PART}$")
BINLOG_POSITION = re.compile(r"^(?P<file>[^:\s]+\.\d+):(?P<pos>\d+)$")
GROUP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
PATTERN_FIX = 'write it as "db.table", "db.*" or "db.prefix_*"'


def check_table_patterns(patterns: Sequence[str], key: str) -> None:
    for pattern in patterns:
        if not TABLE_PATTERN.match(pattern):
            raise ConfigError(f"{key} entry {pattern!r} is not a db.table pattern: {PATTERN_FIX}")
