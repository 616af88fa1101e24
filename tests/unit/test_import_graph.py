"""The house's floors, read from the source: no two mtkit modules import each other (directly or
round a loop), and no package imports one that depends on it. Every import counts, at module
level or inside a function (a lazy import only moves the loop to run time), except those under
`if TYPE_CHECKING:` (annotations only) and the lazy ones of mtkit/__init__.py and run.py,
which are the lazy doors the layout keeps (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "mtkit"
LAZY_DOORS = {"mtkit", "mtkit.run"}  # whose function-level imports are not counted


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The mtkit modules `name` imports (a `from pkg import mod` names the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    wanted: set[str] = set()

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if not top and name in LAZY_DOORS and isinstance(child, ast.Import | ast.ImportFrom):
                continue
            if isinstance(child, ast.Import):
                wanted.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    kept = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*kept, *([child.module] if child.module else [])])
                for a in child.names:
                    wanted.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
            visit(child, top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))

    visit(ast.parse(path.read_text(encoding="utf-8")), True)
    out = set()
    for target in wanted:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target.startswith("mtkit") and target != name:
            out.add(target)
    return out


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while (w := stack.pop()) != v:
                part.append(w)
            if part:
                found.append(sorted([v, *part]))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else module


def test_no_module_imports_one_that_imports_it() -> None:
    assert _loops(_graph()) == []


def test_no_package_imports_one_that_depends_on_it() -> None:
    packages: dict[str, set[str]] = {}
    for a, targets in _graph().items():
        for b in targets:
            if _package(a) != _package(b):
                packages.setdefault(_package(a), set()).add(_package(b))
    assert _loops(packages) == []


def test_the_graph_sees_lazy_imports_and_loops() -> None:
    """The reader catches what the two tests above refuse: a function-level import, and a
    loop of three."""
    graph = _graph()
    assert "mtkit.export.ct2_translate" in graph["mtkit.api.model"]  # imported in a function
    assert _loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
