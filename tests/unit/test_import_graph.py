"""The import graph: no cycles among the modules of `hosts`, `controllers` or `testbed`, and `hosts` (what runs
inside an emulated host) never imports `testbed`.

Imports are read from the source with ast, wherever they stand (a function-level import is still part of a
cycle: it only hides it until the call), except under `if TYPE_CHECKING:`.
"""
import ast
import os

import pytest

import hosts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(hosts.__file__)))     # the repository


def modules(package: str) -> dict[str, str]:
    """Dotted module name -> source path, for every module of a top-level package."""
    out = {}
    for root, dirs, files in os.walk(os.path.join(ROOT, package)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, f), ROOT)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = os.path.join(root, f)
    return out


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(name: str, path: str, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (at `path`) imports."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out = set()
    for mod in found:
        while mod and mod not in known:          # `import a.b.c` of a name inside a module: that module
            mod = mod.rpartition(".")[0]
        if mod and mod != name:
            out.add(mod)
    return out


def graph(*packages: str) -> dict[str, set[str]]:
    mods = {}
    for p in packages:
        mods.update(modules(p))
    return {name: imported(name, path, set(mods)) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            connect(v)
    return out


def test_cycle_finder_finds_a_function_level_cycle(tmp_path):
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", ["hosts", "controllers", "testbed"])
def test_no_import_cycle(package):
    found = cycles(graph(package))
    assert not found, f"import cycles in {package}: " + "; ".join(" <-> ".join(c) for c in found)


def test_hosts_never_imports_testbed():
    mods = {}
    for p in ("hosts", "testbed", "controllers"):
        mods.update(modules(p))
    bad = {name: sorted(m for m in imported(name, path, set(mods)) if not m.startswith("hosts"))
           for name, path in mods.items() if name.split(".")[0] == "hosts"}
    assert not {k: v for k, v in bad.items() if v}
