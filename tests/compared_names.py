"""Where code branches on a name that only its own package should know (a workload type, a fault kind, a fabric
kind): the name compared (==, !=, in, not in; alone or in a tuple, list or set), matched (`case "name":`) or
two of them keys of one dict (a per-name table), found with ast in the source of the packages given."""
import ast
import os

from tests.paths import ROOT


def _constants(node) -> list:
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def uses(path: str, names) -> list[str]:
    """FILE:LINE name, for every place the module at `path` branches on one of `names`."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            values = [v for operand in [node.left, *node.comparators] for v in _constants(operand)]
        elif isinstance(node, ast.MatchValue):
            values = _constants(node.value)
        elif isinstance(node, ast.Dict):         # one such key may be a record's field ("traffic": its bytes)
            values = [v for k in node.keys if k is not None for v in _constants(k) if v in names]
            values = values if len(values) > 1 else []
        else:
            continue
        found += [f"{os.path.relpath(path, ROOT)}:{node.lineno} {v!r}" for v in values if v in names]
    return found


def outside(names, own: str, packages=("testbed", "controllers")) -> list[str]:
    """Every use of `names` in the packages' modules outside the package `own` (a path from the repository)."""
    found = []
    for package in packages:
        for d, dirs, files in os.walk(os.path.join(ROOT, package)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            rel = os.path.relpath(d, ROOT)
            if rel == own or rel.startswith(own + os.sep):
                continue
            found += [hit for f in sorted(files) if f.endswith(".py") for hit in uses(os.path.join(d, f), names)]
    return found
