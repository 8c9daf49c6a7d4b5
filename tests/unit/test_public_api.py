"""The package's public surface: every exported name resolves, and the errors are the ones
the CLI maps to exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

import binlake
from binlake import errors


@pytest.mark.parametrize("name", binlake.__all__)
def test_every_exported_name_resolves(name):
    assert getattr(binlake, name) is not None


def test_every_error_class_is_exported():
    classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.BinlakeError)}
    assert classes <= set(binlake.__all__)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'run_everything'"):
        binlake.run_everything  # noqa: B018


def test_importing_the_package_loads_neither_spark_nor_the_layers():
    code = "import sys, binlake; print(sorted(m for m in sys.modules if m.startswith(('pyspark', 'binlake.'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_type_checkers_see_the_same_names_from_the_same_modules():
    """The TYPE_CHECKING imports (what mypy and editors see) list exactly _EXPORTS."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(binlake.__file__).read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = {a.name: n.module for n in guarded.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert seen == binlake._EXPORTS


def test_the_wheel_brings_what_mysql_8_needs_wherever_it_is_installed():
    """caching_sha2_password without TLS needs cryptography; compressed transactions need zstd.
    The bundle's job tasks install the wheel with its dependencies, so these must be the wheel's."""
    from importlib.metadata import requires

    needs = requires("binlake") or []
    runtime = [r for r in needs if "extra ==" not in r]
    assert any(r.startswith("pymysql[rsa]") for r in runtime), runtime
    assert any(r.startswith("zstandard") for r in runtime), runtime


def test_foreign_key_actions_that_do_not_settle_are_a_schema_change_error():
    """``except binlake.SchemaChangeError`` catches every failure that exits with code 6."""
    from binlake.silver.cascade import CascadeError

    assert CascadeError is binlake.CascadeError
    assert issubclass(CascadeError, binlake.SchemaChangeError)
    assert CascadeError.exit_code == 6


def test_the_readme_lists_every_exit_code():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"exit code that names the failure \((.*?)\)\. Every command", readme, re.S)
    assert listed is not None, "README's exit code list moved: update this test"
    codes = {int(n) for n in re.findall(r"(?:^|,)\s*(\d+)\s", listed.group(1))}
    defined = {v.exit_code for v in vars(errors).values() if isinstance(v, type) and issubclass(v, errors.BinlakeError)}
    assert sorted(defined - {1} - codes) == []  # 1 is the base class's, never raised alone
