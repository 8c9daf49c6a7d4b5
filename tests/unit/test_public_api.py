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
