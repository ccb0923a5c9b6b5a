"""The workload hooks the runner, the results and the fault outcomes ask instead of comparing type names: their
defaults, and no type name branched on outside testbed/workloads/ (each type's part lives in its module)."""
import os

from testbed import workloads
from testbed.workloads import REGISTRY, attach_struck, hook
from tests import compared_names


def test_a_type_without_a_hook_gets_the_default():
    assert hook("connectivity", "headline")({"name": "c", "type": "connectivity"}) == "c"
    assert hook("no-such-type", "headline")({"type": "no-such-type"}) == "no-such-type"
    assert hook(None, "comparable")({}) == {} and hook("program", "report_table")([{}]) is None
    w = {"per_flow": [{"gap_at": 1.0}]}
    hook("churn", "relative_times")(w, 0.0)
    assert w == {"per_flow": [{"gap_at": 1.0}]}


def test_every_type_describes_its_record_and_a_fault_gets_only_the_views_of_the_types_that_have_one():
    assert all(isinstance(kind.RESULT_SCHEMA, dict) and kind.RESULT_SCHEMA for kind in REGISTRY.values())
    flows = {"name": "t", "type": "traffic", "started_s": 0.0, "wall_s": 10.0, "per_flow": []}
    fault = {"kind": "link-down", "target": "rail0-spine0", "at_s": 5.0}
    attach_struck([fault], [flows], 1000.0)
    assert "jobs" not in fault and hook("traffic", "struck")(flows, 5.0, 1000.0) is None


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


def test_the_finder_sees_a_type_name_compared_matched_or_keying_a_table(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f(w, t):\n"
                   "    if w['type'] == 'traffic' or t in ('program', 'x'):\n"
                   "        return {'collective': 1, 'offload': 2}\n"
                   "    match t:\n"
                   "        case 'churn':\n"
                   "            return {'traffic': w}\n")      # one key: a record's field may be named so
    assert [hit.rsplit(" ", 1)[1] for hit in compared_names.uses(str(src), REGISTRY)] == \
        ["'traffic'", "'program'", "'collective'", "'offload'", "'churn'"]


def test_no_workload_type_is_compared_outside_the_workloads_package():
    found = compared_names.outside(REGISTRY, os.path.join("testbed", "workloads"))
    assert not found, f"workload types branched on outside {workloads.__name__} (make it a hook there): {found}"
