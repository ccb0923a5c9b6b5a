"""The import graph: no cycles among the modules of `hosts`, `controllers` or `testbed`, `hosts` (what runs
inside an emulated host) never imports `testbed`, and testbed's layers read downward only (LAYERS).

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


# testbed's layers, top first: a module may import its own layer and the layers below it, never one above.
# A module belongs to the layer of the longest prefix that names it; a new package needs its line here.
LAYERS = [
    ("entry", ["testbed.cli", "testbed.clean"]),       # the commands
    ("papers", ["testbed.papers"]),                    # a seed paper's claims: runs and their report
    ("runner", ["testbed.runner"]),                    # orchestration: bring-up, workloads, faults, results
    ("results", ["testbed.results"]),                  # results.json, reports, runs: they read everything below
    ("scenario", ["testbed.scenario"]),                # the scenario file, its schema from every workload's
    ("workloads", ["testbed.workloads"]),              # what runs on the fabric, one module per type
    ("runtime", ["testbed.runtime"]),                  # processes in the hosts, the job manager
    ("faults", ["testbed.faults"]),                    # the fault kinds: what they cut and stop, their outcomes
    ("monitor", ["testbed.monitor"]),                  # captures, counters over time, CPU headroom
    ("planning", ["testbed.planning"]),                # full-scale counts and predictions
    ("fabric", ["testbed.fabric"]),                    # the emulated network: model, kinds, links, backends
    ("model", ["testbed.model"]),                      # the analytical bounds
    ("base", ["testbed", "testbed.figures", "testbed.scenario.schema",    # constants, matplotlib, vocabulary
              "testbed.schema_words"]),
]


def layer_of(module: str, layers=LAYERS) -> int | None:
    """The index in `layers` of the module's layer (0: the top), or None when no layer names it."""
    best, found = -1, None
    for i, (_, prefixes) in enumerate(layers):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    return found


def upward(g: dict[str, set[str]], layers=LAYERS) -> list[str]:
    """Every import of a module from a layer above its own, one line each."""
    out = []
    for mod in sorted(g):
        mine = layer_of(mod, layers)
        for dep in sorted(g[mod]):
            theirs = layer_of(dep, layers)
            if mine is not None and theirs is not None and theirs < mine:
                out.append(f"{mod} (layer {layers[mine][0]}) imports {dep} (layer {layers[theirs][0]}, above it)")
    return out


def test_layer_checker_finds_an_upward_import():
    layers = [("top", ["t.top"]), ("low", ["t.low"]), ("base", ["t", "t.low.vocab"])]
    g = {"t.top.a": {"t.low.b", "t.low.vocab"}, "t.low.b": {"t.top.a"}, "t.low.vocab": {"t"}, "t": set()}
    assert upward(g, layers) == ["t.low.b (layer low) imports t.top.a (layer top, above it)"]
    assert layer_of("t.low.vocab", layers) == 2 and layer_of("t.lowly", layers) == 2 and layer_of("u", layers) is None


def test_every_testbed_module_has_a_layer():
    missing = sorted(m for m in modules("testbed") if layer_of(m) is None)
    assert not missing, f"modules in no layer of {__name__}.LAYERS (add their package there): {missing}"


def test_testbed_layers_read_downward():
    found = upward(graph("testbed"))
    order = " > ".join(name for name, _ in LAYERS)
    assert not found, f"imports that read upward (layers, top first: {order}):\n  " + "\n  ".join(found)
