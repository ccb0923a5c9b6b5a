"""The workload hooks results/ asks instead of comparing type names: their defaults, and no type name compared
in results/ (each type's part lives in its module)."""
import ast
import os

from testbed import workloads
from testbed.workloads import REGISTRY, hook
from tests.paths import ROOT


def test_a_type_without_a_hook_gets_the_default():
    assert hook("connectivity", "headline")({"name": "c", "type": "connectivity"}) == "c"
    assert hook("no-such-type", "headline")({"type": "no-such-type"}) == "no-such-type"
    assert hook(None, "comparable")({}) == {} and hook("program", "report_table")([{}]) is None
    w = {"per_flow": [{"gap_at": 1.0}]}
    hook("churn", "relative_times")(w, 0.0)
    assert w == {"per_flow": [{"gap_at": 1.0}]}


def test_traffic_and_collective_answer_their_hooks():
    t = {"name": "t", "type": "traffic", "mbps_mean": 2.5, "flow_bytes": 10, "max_gap_s": None,
         "per_flow": [{"gap_at": 101.5, "silences": [[102.0, 0.25]]}]}
    assert hook("traffic", "headline")(t) == "t 2.50 Mbit/s"
    hook("traffic", "relative_times")(t, 100.0)
    assert t["per_flow"] == [{"gap_start_s": 1.5, "silences": [[2.0, 0.25]]}]
    c = {"name": "c", "type": "collective", "rows": [{"op": "allreduce", "algo": "ring", "ranks": 4, "bytes": 1 << 20,
                                                      "seconds": 1.5, "busbw_MBps": 1.0, "bound_busbw_MBps": 1.1,
                                                      "bus_ratio": 0.91, "correct": True}]}
    assert hook("collective", "headline")(c) == "c 0.91"
    assert list(hook("collective", "comparable")(c)) == [("c", "allreduce/ring", 1 << 20)]
    table = hook("collective", "report_table")([c])
    assert table["rows"] == [("c", ["c", "allreduce/ring", "4", "1 MiB", "1.500", "1.000", "1.100", "0.91", "yes"])]
    assert len(table["headers"]) == len(table["rows"][0][1])


def test_results_compare_no_workload_type():
    found = []
    results = os.path.join(ROOT, "testbed", "results")
    for name in sorted(os.listdir(results)):
        if name.endswith(".py"):
            path = os.path.join(results, name)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            found += [f"testbed/results/{name}:{node.lineno}" for node in ast.walk(tree)
                      if isinstance(node, ast.Compare) for operand in [node.left, *node.comparators]
                      if isinstance(operand, ast.Constant) and operand.value in REGISTRY]
    assert not found, f"workload types compared in results/ (make it a hook in {workloads.__name__}): {found}"
