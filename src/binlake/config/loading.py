"""Reading ``binlake.yml``: YAML, ``${ENV}`` references, validation into :class:`~binlake.config.model.Config`
with one-line errors; and the configuration reference rendered from the same declarations."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from binlake.config.model import Config
from binlake.config.vocabulary import Hint, one_line, render_reference, unknown_key
from binlake.errors import ConfigError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@functools.cache
def _adapter() -> TypeAdapter[Config]:
    return TypeAdapter(Config)


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Config:
    """Read and check ``binlake.yml``. Raises :class:`ConfigError` with the fix."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} not found: pass --config PATH to an existing binlake.yml") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(p)!r} cannot be read ({exc.strerror}): check its permissions") from None
    return load_config_text(text, environ=environ, base_dir=str(p.resolve().parent), origin=str(p))


def _sections() -> str:
    """Config's top-level sections in declaration order, the required ones first: read from
    the declaration, so a section added there is named here too."""
    fields = Config.__pydantic_fields__  # type: ignore[attr-defined]
    keys = [n for n, f in fields.items() if not any(isinstance(m, Hint) and m.not_a_key for m in f.metadata)]
    required = [n for n in keys if fields[n].is_required()]
    optional = [n for n in keys if n not in required]
    return f"{', '.join(required)} (and optionally {', '.join(optional)})"


def load_config_text(
    text: str,
    environ: Mapping[str, str] | None = None,
    base_dir: str = ".",
    origin: str = "<config>",
) -> Config:
    env = os.environ if environ is None else environ
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{origin} is not valid YAML{where}: fix the syntax") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin} must be a YAML mapping with the sections {_sections()}")
    raw = {k: _expand(v, str(k), env) for k, v in raw.items()}
    if "base_dir" in raw:
        raise ConfigError(unknown_key("", "base_dir", Config, origin))
    try:
        return _adapter().validate_python({**raw, "base_dir": base_dir}, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(one_line(exc, Config, "", raw, origin)) from None


def _expand(value: Any, key: str, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in env:
                raise ConfigError(
                    f"{key} references ${{{name}}} but the environment variable {name} is not set: export it"
                )
            return env[name]

        return _ENV_REF.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, key, env) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, f"{key}.{k}", env) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------
# The configuration reference (docs/configuration.md)


def reference() -> str:
    """The configuration reference as Markdown: one row per key of binlake.yml."""
    return render_reference(Config)
