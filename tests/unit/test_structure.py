"""The package's structure, as docs/architecture.md draws it: no import cycles (not even
through imports inside functions), and no private name used outside the module that defines
it. That layers import downward only is an import-linter contract (pyproject.toml,
[tool.importlinter]; `make lint`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def binlake_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) of every binlake import in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "binlake":
            for alias in node.names:
                # `from binlake.silver import merge` imports the module binlake.silver.merge.
                sub = f"{node.module}.{alias.name}"
                target = (
                    sub
                    if (SRC / Path(*sub.split("."))).with_suffix(".py").exists()
                    or (SRC / Path(*sub.split("."))).is_dir()
                    else node.module
                )
                out.append((node.lineno, target, [] if target == sub else [alias.name]))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "binlake"]
    return out


def source_modules() -> dict[str, Path]:
    return {module_name(p): p for p in SRC.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        for _, target, _ in binlake_imports(path):
            if target in modules and target != m:
                graph[m].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_another_that_imports_it_back():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("tree", ["src", "tests", "benchmarks", "notebooks"])
def test_no_private_name_is_imported_from_another_module(tree):
    wrong = []
    for path in sorted((ROOT / tree).rglob("*.py")):
        for line, target, names in binlake_imports(path):
            leaf = target.split(".")[-1]
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if leaf.startswith("_") and not leaf.startswith("__"):
                private.append(target)
            if private:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {', '.join(private)} from {target}")
    assert wrong == []


def test_the_checks_above_see_a_cycle_when_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
