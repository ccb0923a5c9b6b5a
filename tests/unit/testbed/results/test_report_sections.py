"""The run report asks each workload type for its own part (testbed.workloads: start_line, report_section,
report_plots): summary.md's sections and the plots come from the types a run has, in the registry's order."""
import copy
import json
import os

from testbed.fabric.topo import build
from testbed.results import report
from testbed.workloads import REGISTRY, Workload, training
from tests.paths import ROOT
from tests.unit.testbed.workloads.test_training_iteration import PLAN, analyse, run_ranks_in_process

HOOKS = [name for name, value in vars(Workload).items() if callable(value) and not name.startswith("_")]


def sample() -> dict:
    with open(os.path.join(ROOT, "tests", "data", "results", "sample.json")) as f:
        return json.load(f)                     # a real run: connectivity, traffic and a collective


def a_training_result(name: str) -> dict:
    fabric = build("rail-only", 4, 2, nic_mbps=5)
    spec = {**PLAN, "micro_batches": 2, "scale": 0.0001}
    plan, s = training.make_plan(fabric, spec), training.settings(spec)
    hosts, outs = run_ranks_in_process(fabric, plan, s)
    result, _ = analyse(plan, s, fabric, hosts, outs)
    return {**result, "name": name, "type": "training_iteration"}


def test_every_workload_type_has_every_hook_of_the_interface():
    assert {"validate", "run", "summary", "start_line", "report_section", "report_plots"} <= set(HOOKS)
    for name, kind in REGISTRY.items():
        for hook in HOOKS:
            assert callable(getattr(kind, hook, None)), (name, hook)


def test_each_workload_announces_itself_in_a_few_words():
    said = {t: REGISTRY[t].start_line(spec) for t, spec in [
        ("connectivity", {"type": "connectivity"}),
        ("traffic", {"type": "traffic", "pattern": "permutation", "protocol": "udp"}),
        ("collective", {"type": "collective", "op": "allreduce", "algo": "ring"}),
        ("offload", {"type": "offload"}), ("training_iteration", {"type": "training_iteration"}),
        ("program", {"type": "program", "command": "true"}), ("churn", {"type": "churn", "op": "allreduce"})]}
    assert said == {"connectivity": "connectivity", "traffic": "traffic permutation udp",
                    "collective": "collective allreduce/ring", "offload": "offload",
                    "training_iteration": "training_iteration", "program": "program", "churn": "churn allreduce"}
    assert REGISTRY["traffic"].start_line({"type": "traffic", "pattern": "pairs"}) == "traffic pairs"


def test_summary_holds_each_types_section_once_in_the_registrys_order():
    results = sample()
    second = copy.deepcopy(next(w for w in results["workloads"] if w["type"] == "collective"))
    second["name"], second["rows"][0]["op"] = "ag", "allgather"
    results["workloads"] = [a_training_result("p1t2d4")] + results["workloads"] + [second]
    md = report.summary_markdown(results, "table")
    assert md.count("## Collectives: measured against the analytical model") == 1
    section = md[md.index("## Collectives"):md.index("## Training iteration p1t2d4")]
    assert "| allreduce |" in section and "| allgather |" in section      # both collective workloads' rows
    assert md.index("## Collectives") < md.index("## Training iteration") < md.index("## Summary")
    assert "Bubble ratio (p-1)/(p-1+m)" in md
    # a run without those types has neither section
    plain = report.summary_markdown({**results, "workloads": [w for w in results["workloads"]
                                                              if w["type"] == "traffic"]}, "table")
    assert "## Collectives" not in plain and "## Training iteration" not in plain


def test_the_types_draw_their_plots_into_the_runs_folder(tmp_path):
    results = sample()
    results["workloads"].append(a_training_result("p1t2d4"))
    fabric = build("rail-optimized", 2, 2, spines=2)
    written = report.write(results, fabric, None, str(tmp_path), "table")
    plots = tmp_path / "plots"
    for name in ("collectives.png", "traffic_matrix_p1t2d4.png"):
        assert str(plots / name) in written and (plots / name).read_bytes()[:4] == b"\x89PNG"
    assert written.index(str(plots / "collectives.png")) < written.index(str(plots / "traffic_matrix_p1t2d4.png"))
    assert (tmp_path / "summary.md").exists() and (tmp_path / "report.html").exists()
