"""Imports point down only: core <- components <- front door (+ apps), and no import circle.

The core is every module of `convqa` outside `convqa.front`; the components are `retrievers`,
`readers` and `phrase_index`; the front door is `convqa.front` and `apps`. The modules are read
with `ast`, not imported, so the test is cheap and sees imports that never ran.

Function-local imports count like top-level ones, for the layers and for the circles: a lazy
import still makes one module depend on the other, and a circle through one only waits for the
first call. Imports under `if TYPE_CHECKING:` are left out (they never run). Names resolved at
run time from strings (the registries' built-in module lists) are not imports and are not seen.

An import edge goes to the most specific module the statement names (`from a.b import c` is an
edge to `a.b.c` when that is a module, else to `a.b`); parent packages are not added, so the
usual "package `__init__` re-exports its modules" is not read as a circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("convqa", "retrievers", "readers", "phrase_index", "apps")
COMPONENTS = ("retrievers", "readers", "phrase_index")
FRONT = ("convqa.front", "apps")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """Every import statement, top-level or nested, except those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(name: str, path: Path, modules: dict[str, Path],
             packages: tuple[str, ...] = PACKAGES) -> dict[str, int]:
    """The modules of ours that `name` imports, with a line number each."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: dict[str, int] = {}
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
        else:
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            named = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                     for alias in node.names]
        for target in named:
            if target.split(".")[0] in packages and target != name:
                found.setdefault(target, node.lineno)
    return found


def _graph() -> tuple[dict[str, Path], dict[str, dict[str, int]]]:
    modules = _modules()
    return modules, {name: _targets(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> str:
    if module.startswith(tuple(f"{front}." for front in FRONT)) or module in FRONT:
        return "front"
    if module.split(".")[0] in COMPONENTS:
        return "component"
    return "core"


def test_the_packages_are_found():
    modules = _modules()
    assert {"convqa.types", "convqa.front.cli.main", "retrievers.bm25", "apps.demo"} <= set(modules)


def test_imports_point_down_only():
    modules, graph = _graph()
    allowed = {"core": {"core"}, "component": {"core", "component"},
               "front": {"core", "component", "front"}}
    wrong = [f"{modules[name].relative_to(ROOT)}:{line}: {_layer(name)} {name} imports "
             f"{_layer(target)} {target}"
             for name, targets in graph.items() for target, line in targets.items()
             if _layer(target) not in allowed[_layer(name)]]
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle():
    _, graph = _graph()
    cycles = _cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}, [["a", "b", "c"]]),
    ({"a": {"b": 1}, "b": {"c": 1}, "c": {}}, []),
    ({"a": {"b": 1}, "b": {"a": 1}, "c": {"d": 1}, "d": {"c": 1}}, [["a", "b"], ["c", "d"]]),
])
def test_circles_are_found(graph, expected):
    assert sorted(_cycles(graph)) == expected


def test_relative_and_local_imports_are_edges(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import x\n")
    source = package / "b.py"
    source.write_text("import typing\nif typing.TYPE_CHECKING:\n    from convqa import io\n"
                      "def f():\n    from . import a\n    from convqa.front import cli\n")
    modules = {"pkg": package / "__init__.py", "pkg.a": package / "a.py", "pkg.b": source,
               "convqa.front.cli": source}
    packages = PACKAGES + ("pkg",)
    assert _targets("pkg.b", source, modules, packages) == {"pkg.a": 5, "convqa.front.cli": 6}
    assert _targets("pkg", package / "__init__.py", modules, packages) == {"pkg.a": 1}
