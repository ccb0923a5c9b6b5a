"""Workloads: what a scenario runs on the fabric, one module per `type`, all with the same interface.

    SCHEMA                             its part of the scenario schema (JSON schema of a `workloads:` item)
    RESULT_SCHEMA                      its keys in results.json's workload record (JSON schema properties)
    validate(fabric, spec, scenario)   raise ScenarioError for what cannot run, before anything is brought up
    warnings(fabric, spec) -> [str]    what will run otherwise than the spec reads (it still runs)
    run(net, spec) -> dict             run it on the fabric; the result carries "ok" and "checks"
    summary(result) -> str            one line of the run's summary table
    tables(result) -> [str]           nccl-tests-style tables printed under the summary (may be none)
    start_line(spec) -> str           what it is in a few words, for the line that announces its start
    report_section(results) -> [str]  its section of summary.md, for all its workloads in a run (may be none)
    report_plots(results, dir) -> [str]   the plots it draws into the run's plots/ folder; returns their paths

and, where the type has something to say (`hook` falls back to the defaults below otherwise):

    headline(result) -> str          its best figure, in `testbed runs`' one line per run
    comparable(result) -> {key: {figure: value}}   what `testbed runs compare` sets side by side
    report_table(results) -> dict|None  its table in report.html: title, headers, left, rows [(workload, cells)]
    relative_times(result, t0)       put the Unix times its agents report on the run's time base (t0 or None)
    struck(result, at_s, t0) -> dict|None   its view of a fault that struck while it ran, for the fault's `jobs`
                                     (testbed/faults/record.py; at_s: seconds from the workloads' start)
    struck_jobs(result, fault, t0, fabric) -> [dict]   the same for a type that runs several jobs: one view per
                                     job running when the fault struck (default: struck's, if any)
    times_its_faults                 True: faults timed from it count from when it calls net.start_faults
                                     (concurrent: when its jobs start together), not from its start
    splits_link_bytes                True: it reads every link's bytes by destination, so the controller gives
                                     every multi-path route a group of its own (it costs bring-up time)

What the fault kinds read from a result, whatever its type: `first_error_at` and `recoveries` (GPU faults,
testbed/faults/recovered.py), `per_flow[].silences` (link faults: when the traffic they cut resumed,
testbed/faults/links.py).

REGISTRY maps each `type` to its module: adding a workload type is one module, its tests and one line here;
testbed/scenario/loader.py assembles the scenario schema from the modules' SCHEMA, and
testbed/results/results_schema.py results.json's from their RESULT_SCHEMA.
"""
from __future__ import annotations

from typing import Protocol

from testbed.workloads import (churn, collective, concurrent, connectivity, diloco, offload, program, traffic, training,
                               wan_transfer)


class Workload(Protocol):
    SCHEMA: dict
    RESULT_SCHEMA: dict

    def validate(self, fabric, spec: dict, scenario: dict) -> None: ...
    def warnings(self, fabric, spec: dict) -> list[str]: ...
    def run(self, net, spec: dict) -> dict: ...
    def summary(self, result: dict) -> str: ...
    def tables(self, result: dict) -> list[str]: ...
    def start_line(self, spec: dict) -> str: ...
    def report_section(self, results: list[dict]) -> list[str]: ...
    def report_plots(self, results: list[dict], plots_dir: str) -> list[str]: ...


class _Defaults:
    """The optional hooks of a type that has nothing to add."""

    @staticmethod
    def headline(result: dict) -> str:
        return result.get("name", result.get("type", "?"))

    @staticmethod
    def comparable(result: dict) -> dict[tuple, dict]:
        return {}

    @staticmethod
    def report_table(results: list[dict]) -> dict | None:
        return None

    @staticmethod
    def relative_times(result: dict, t0: float | None) -> None:
        pass

    @staticmethod
    def struck(result: dict, at_s: float, t0: float) -> dict | None:
        return None

    @staticmethod
    def struck_jobs(result: dict, fault: dict, t0: float, fabric) -> list[dict]:
        job = hook(result.get("type"), "struck")(result, fault["at_s"], t0)
        return [job] if job is not None else []

    times_its_faults = False
    splits_link_bytes = False


REGISTRY: dict[str, Workload] = {"connectivity": connectivity, "traffic": traffic, "collective": collective,
                                 "offload": offload, "training_iteration": training, "program": program,
                                 "churn": churn, "concurrent": concurrent, "diloco": diloco,
                                 "wan_transfer": wan_transfer}


def hook(type_name: str | None, name: str):
    """A type's optional hook `name`, or the default (also for a type this testbed does not know: an old run)."""
    mine = getattr(REGISTRY.get(type_name), name, None)
    return mine if mine is not None else getattr(_Defaults, name)


def attach_struck(faults: list[dict], results: list[dict], t0: float, fabric=None) -> None:
    """Add `jobs` to every fault that struck while workloads ran: each job's view of it (its type's `struck_jobs`,
    by default its `struck`)."""
    for fault in faults:
        if fault.get("at_s") is None:
            continue
        jobs = [job for w in results if w["started_s"] <= fault["at_s"] <= w["started_s"] + w["wall_s"]
                for job in hook(w.get("type"), "struck_jobs")(w, fault, t0, fabric)]
        if jobs:
            fault["jobs"] = jobs
