"""What the faults of a run did, as results: each kind's outcome from the workloads (when the traffic a link
fault cut resumed, when a GPU fault was detected, by what, and when the job had re-formed), the program jobs
each fault struck, a failed check for a fault that did not happen as asked, and each fault's summary line.
testbed/faults/schedule.py injects them and records when.
"""
from __future__ import annotations

from testbed.faults import REGISTRY, program_jobs


def fill(records: list[dict], workloads: list[dict], t0: float, fabric) -> None:
    """Each injected fault's outcome, then the program jobs it struck (seconds after the workloads started)."""
    of_kinds(records, workloads, t0, fabric)
    program_jobs.attach(records, workloads, t0)


def of_kinds(records: list[dict], workloads: list[dict], t0: float, fabric) -> None:
    """Each injected fault's outcome as its kind reads it from the workloads (no program jobs: a live view of one
    workload, or a job that is the whole run, has none to attach)."""
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
    """The fault's line in the run's summary: what its kind says of it, then the program jobs it struck."""
    return REGISTRY[record["kind"]].describe(record) + program_jobs.describe(record)
