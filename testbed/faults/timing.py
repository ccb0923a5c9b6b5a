"""When a fault happened, against the workload it was timed for: a fault that fell after its workload ended
hit nothing the scenario measures, and the run must not pass as if it had been tested.

A fault that was never injected at all, or that hit no process, is failed by outcomes.checks; this adds the
fault that was injected, but late: timed from a workload (`workload: NAME`) and due after that workload
had ended (it then hits whatever runs next, or nothing).
"""
from __future__ import annotations


def late_checks(scenario_faults: list[dict], records: list[dict], workloads: list[dict]) -> list[dict]:
    """Failed checks for faults injected after the end of the workload they were timed from; records are the
    faults' outcomes in scenario order (seconds after the workloads started), workloads the runner's results."""
    ended = {w["name"]: (w["started_s"], w["started_s"] + w["wall_s"]) for w in workloads}
    out = []
    for i, (fault, rec) in enumerate(zip(scenario_faults, records)):
        name = fault.get("workload")
        if name not in ended or rec.get("at_s") is None:
            continue
        start, end = ended[name]
        if rec["at_s"] > end:
            out.append({"name": f"faults.{i} {fault['kind']} {fault['target']}", "ok": False,
                        "detail": f"injected at {rec['at_s']:.2f} s ({fault['at']:g} s after {name} started), "
                                  f"after {name} had ended at {end:.2f} s: {name} never saw it"})
    return out
