"""Great Expectations suites as ``gold.expectations`` names them: GE's own JSON suite files,
read and checked when the config loads, and the expectations gold runs (:class:`Expectation`).
The config keys are declared in :mod:`binlake.config`; this is the suite files' format."""

from __future__ import annotations

import enum
import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from binlake.errors import ConfigError


class Severity(str, enum.Enum):
    WARN = "warn"
    DROP = "drop"
    FAIL = "fail"


@dataclass(frozen=True)
class Expectation:
    """One Great Expectations expectation as gold runs it: GE's own JSON form (``type``,
    ``kwargs``, ``meta``) plus binlake's severity (``meta.severity``) and the name binlake
    reports and quarantines it under (``meta.name``, else one made from the type and kwargs).
    ``where`` says where it was declared, for error messages."""

    type: str
    kwargs: Mapping[str, Any]
    severity: Severity
    name: str
    where: str
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The expectation in GE's suite format, severity and name in its meta."""
        return {
            "type": self.type,
            "kwargs": dict(self.kwargs),
            "meta": {**self.meta, "severity": self.severity.value, "name": self.name},
        }

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns its kwargs name (column, column_A, column_B, column_list)."""
        named = [self.kwargs.get(k) for k in ("column", "column_A", "column_B")]
        named += list(self.kwargs.get("column_list") or ())
        return tuple(c for c in named if isinstance(c, str))


@dataclass(frozen=True)
class SuiteFile:
    """A GE expectation suite file that ``gold.expectations`` applies to matching tables."""

    pattern: str
    path: str
    name: str
    expectations: tuple[Expectation, ...]

    def matches(self, db: str, table: str) -> bool:
        return fnmatch.fnmatchcase(f"{db}.{table}", self.pattern)


SUITE_EXAMPLE = (
    '{"name": "shop_orders", "expectations": [{"type": "expect_column_values_to_not_be_null", '
    '"kwargs": {"column": "id"}}]}'
)
# The keys of GE 1.x's suite JSON (what ExpectationSuite.to_json_dict writes).
SUITE_KEYS = {"name", "id", "expectations", "meta", "notes", "suite_parameters", "data_asset_type"}
EXPECTATION_KEYS = {"type", "kwargs", "meta", "id", "notes", "description", "rendered_content", "severity"}


def _refuse_unknown_keys(mapping: Mapping[str, Any], allowed: set[str], where: str) -> None:
    bad = set(mapping) - allowed
    if bad:
        raise ConfigError(f"unknown key {where}.{sorted(bad)[0]}: allowed keys are {', '.join(sorted(allowed))}")


def read_suite_file(pattern: str, path: str, base_dir: str, where: str) -> SuiteFile:
    """Read and check the suite file ``path`` (relative to ``base_dir``) that ``where`` names."""
    full = Path(path) if Path(path).is_absolute() else Path(base_dir) / path
    try:
        text = full.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{where}: suite file {path} not found (a relative path is read from the config file's directory "
            f"{base_dir}): fix the path"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{where}: suite file {path} cannot be read ({exc.strerror}): check its permissions"
        ) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}): fix the syntax"
        ) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("expectations"), list):
        raise ConfigError(f"{path} is not an expectation suite: write it in GE's format, {SUITE_EXAMPLE}")
    _refuse_unknown_keys(raw, SUITE_KEYS, path)
    expectations = tuple(
        _suite_expectation(item, f"{path} expectations[{i}]") for i, item in enumerate(raw["expectations"])
    )
    names = [e.name for e in expectations]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{path} has two expectations named {twice[0]!r}: give one of them another meta.name")
    return SuiteFile(pattern, path, str(raw.get("name") or Path(path).stem), expectations)


def _suite_expectation(item: Any, where: str) -> Expectation:
    if not isinstance(item, dict):
        example = '{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}'
        raise ConfigError(f"{where} must be an object such as {example}")
    if "expectation_type" in item and "type" not in item:
        raise ConfigError(f'{where} uses "expectation_type" (Great Expectations 0.x): rename it to "type"')
    _refuse_unknown_keys(item, EXPECTATION_KEYS, where)
    kind = item.get("type")
    if not isinstance(kind, str) or not kind.startswith("expect_"):
        raise ConfigError(f'{where} has no expectation "type": name one such as expect_column_values_to_not_be_null')
    kwargs = item.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{where} ({kind}): kwargs must be an object of the expectation's arguments")
    meta = item.get("meta", {})
    if not isinstance(meta, dict):
        raise ConfigError(f"{where} ({kind}): meta must be an object")
    severity = meta.get("severity", Severity.FAIL.value)
    if severity not in [s.value for s in Severity]:
        raise ConfigError(f"{where} ({kind}): meta.severity must be warn, drop or fail, got {severity!r}")
    name = meta.get("name") or expectation_name(kind, kwargs)
    if not isinstance(name, str):
        raise ConfigError(f"{where} ({kind}): meta.name must be a string")
    rest = {k: v for k, v in meta.items() if k not in ("severity", "name")}
    return Expectation(kind, kwargs, Severity(severity), name, where, rest)


def expectation_name(kind: str, kwargs: Mapping[str, Any]) -> str:
    """A readable default name: the type and its arguments, long lists cut short."""

    def short(v: Any) -> str:
        text = json.dumps(v, default=str)
        return text if len(text) <= 40 else text[:37] + "..."

    return f"{kind}({', '.join(f'{k}={short(v)}' for k, v in kwargs.items())})"
