"""A fault's record in results.json (the `faults` items, and churn's seeded `events`): its JSON Schema. The
schedule writes the times, each kind's outcome the rest (testbed/faults/outcomes.py), and the workloads it
struck while they ran their view of it (`jobs`: their type's `struck` hook, testbed/workloads/__init__.py).
"""
from __future__ import annotations

from testbed.schema_words import BOOL, INT, NUM, STR, arr, d, dur, nullable, obj, rel

RECORD = obj({
    "kind": d(STR, "The fault's kind (link-down, link-flap, switch-down, gpu-crash, ...)."),
    "target": d(STR, "What it struck: a link, switch, GPU host or server."),
    "at_s": rel("when it was injected (null: never)."),
    "detected_s": rel("when the controller saw the port change, or (GPU faults) the first peer noticed."),
    "computed_s": rel("when the controller had computed new routes."),
    "installed_s": rel("when every switch it changed had acknowledged the new rules."),
    "recovered_s": rel("routed around (link faults) or the communicator re-formed (GPU faults)."),
    "resumed_s": rel("when the last flow the fault cut was heard again (receivers' view)."),
    "flows_cut": d(INT, "Flows that fell silent across the fault."),
    "sites_apart": d(arr(arr(STR)), "Link faults on a fabric of sites: the groups of sites left without a WAN path "
                                    "between them (absent: every site still reaches every other)."),
    "restored_s": rel("when the fault was undone."),
    "first_success_s": rel("when the first collective after the recovery had completed on every member."),
    "lost_steps": d(nullable(INT), "Started steps run again after the recovery."),
    "processes": d(INT, "GPU faults: rank processes signalled (0: it hit none)."),
    "waited_s": dur("a GPU fault timed from a workload: how long it waited, past its `at`, for a rank to start on "
                    "its target."),
    "detected_by": d(nullable(STR), "What noticed a GPU fault first (heartbeat, transport, watchdog ...)."),
    "recovery": d(nullable(STR), "The recovery policy that acted (abort, shrink, spare, migrate)."),
    "replaced_by": d(nullable({"type": "object", "additionalProperties": STR}), "Failed host -> the spare that "
                                                                               "took its rank."),
    "jobs": arr(obj({"workload": STR, "ended": d({"enum": ["completed", "failed", "hung"]}, "How the job ended."),
                     "exits": d(arr({"type": ["integer", "null"]}), "Exit codes (mpirun's, or each rank's)."),
                     "ended_s": rel("when the job ended."),
                     "error_after_s": dur("from the fault to the library's first error (null: none)."),
                     "stall_s": dur("the silence of the job's traffic that began with the fault (null: none)."),
                     "stall_from_s": rel("when that silence began."),
                     "resumed_s": rel("when the job's traffic resumed (null: never)."),
                     "flows_cut": d(nullable(INT), "A concurrent workload's traffic job: its flows that fell silent "
                                                   "across the fault (null: a job that measures no flows)."),
                     "longest_silence_s": dur("the job's longest silence over its run."),
                     "job": d(STR, "A concurrent workload's job (testbed/workloads/concurrent_faults.py)."),
                     "part": d({"enum": ["alone", "together"]}, "The part of the concurrent workload it struck."),
                     "hit": d(BOOL, "Whether it hit the job: one of its GPUs, or a link its bytes crossed or its "
                                    "flows fell silent across."),
                     "why": d(nullable(STR), "How it hit the job."),
                     "exact": d(nullable(BOOL), "A collective job's every size equal to numpy's on every rank."),
                     "detected_s": rel("when the job's ranks noticed it."),
                     "recovered_s": rel("when the job's communicator had re-formed."),
                     "first_success_s": rel("when the job's first collective after re-forming had completed."),
                     "slowdown": d(nullable(NUM), "The job's time together over its time alone.")},
                    ["workload", "ended"], closed=False),
                "The jobs running when it struck, how each took it (their type's `struck` hook: program jobs, "
                "testbed/workloads/program_faults.py; the jobs of a concurrent workload: concurrent_faults.py)."),
}, ["kind", "target", "at_s", "detected_s", "recovered_s", "restored_s"])
