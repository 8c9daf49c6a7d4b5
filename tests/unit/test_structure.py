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


MAX_FUNCTION_LINES = 80

# Functions allowed over MAX_FUNCTION_LINES: declarative tables, read top to bottom as one
# list, that splitting would only scatter.
LONG_DECLARATIVE_TABLES = {
    "binlake.cli.build_parser": "the argparse table of every command and its options",
    "binlake.deploy.dashboard.dashboard": "the Lakeview dashboard document, one entry per widget",
}


def function_lengths(source: str, module: str) -> dict[str, tuple[int, int]]:
    """Qualified name -> (first line, length in lines, docstring included) of every function
    and method in the module's source, nested ones included."""
    out: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                out[name] = (child.lineno, child.end_lineno - child.lineno + 1)
                visit(child, name)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)

    visit(ast.parse(source), module)
    return out


def long_functions() -> dict[str, str]:
    """Every function over MAX_FUNCTION_LINES: qualified name -> where and how long."""
    return {
        name: f"{path.relative_to(ROOT)}:{line}: {name} is {length} lines"
        for path in sorted(SRC.rglob("*.py"))
        for name, (line, length) in function_lengths(path.read_text(), module_name(path)).items()
        if length > MAX_FUNCTION_LINES
    }


def test_no_function_is_longer_than_80_lines_but_the_declarative_tables():
    assert [where for name, where in long_functions().items() if name not in LONG_DECLARATIVE_TABLES] == []


def test_every_allowed_long_function_still_exists_and_is_still_long():
    long = long_functions()
    assert [name for name in LONG_DECLARATIVE_TABLES if name not in long] == []


def test_function_lengths_count_methods_nested_functions_and_docstrings():
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))  # def, docstring, 80, def g, pass
    source = f'class C:\n    def f(self):\n        """Doc."""\n{body}        def g():\n            pass\n'
    assert function_lengths(source, "m") == {"m.C.f": (2, 84), "m.C.f.g": (84, 2)}


def test_no_two_test_files_share_a_name():
    # The test folders are not packages: pytest imports each file by its basename, and a second
    # file of the same name is refused at collection ("import file mismatch"), so its tests
    # would not run in a whole-suite run.
    files = [p for p in (ROOT / "tests").rglob("test_*.py") if "data" not in p.parts]
    seen: dict[str, list[str]] = {}
    for p in files:
        seen.setdefault(p.name, []).append(str(p.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
