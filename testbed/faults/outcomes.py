"""What the faults of a run did, as results: each kind's outcome from the workloads (when the traffic a link
fault cut resumed, when a GPU fault was detected, by what, and when the job had re-formed), a failed check for
a fault that did not happen as asked, and each fault's summary line.
testbed/faults/schedule.py injects them and records when.
"""
from __future__ import annotations

from testbed.faults import REGISTRY, jobs


def fill(records: list[dict], workloads: list[dict], t0: float, fabric) -> None:
    """Each injected fault's outcome as its kind reads it from the workloads (seconds after the workloads started).
    The jobs it struck are the workloads' to add (testbed/workloads/__init__.py attach_struck)."""
    for record in records:
        if record["at_s"] is not None:
            REGISTRY[record["kind"]].outcome(record, workloads, t0, fabric)


def checks(records: list[dict]) -> list[dict]:
    """Failed checks for faults that did not happen as the scenario asked (the figures would mislead)."""
    out = []
    for i, f in enumerate(records):
        name = f"faults.{i} {f['kind']} {f['target']}"
        if f["at_s"] is None:
            out.append({"name": name, "ok": False, "detail": "never injected: its time came after the workloads "
                                                             "(or the workload it is timed from) had ended"})
        elif f.get("processes") == 0:
            out.append({"name": name, "ok": False, "detail": REGISTRY[f["kind"]].missed})
    return out


def describe(record: dict) -> str:
    """The fault's line in the run's summary: what its kind says of it, then the jobs it struck."""
    return REGISTRY[record["kind"]].describe(record) + jobs.describe(record)
