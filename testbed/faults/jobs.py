"""The jobs a fault struck, in its summary line: how each took it, from the fault record's `jobs` (testbed/faults/
record.py), which the workloads that were running fill in (their type's `struck` hook: program jobs,
testbed/workloads/program_faults.py; `struck_jobs`: the jobs of a concurrent workload, concurrent_faults.py). All times are seconds from the workloads' start, as every fault time.
"""
from __future__ import annotations


def describe(fault: dict) -> str:
    """The jobs' part of a fault's summary line ('' if no job ran when it struck)."""
    return "".join("; " + (describe_job_of_several(j) if "job" in j else describe_job(j, fault["at_s"]))
                   for j in fault.get("jobs", []))


def describe_job(j: dict, at: float) -> str:
    parts = [f"job {j['workload']}"]       # then what it did, in order
    if j["stall_s"] is not None:
        parts.append(f"its traffic stalled {j['stall_s']:.2f} s from {j['stall_from_s']} s"
                     + (f", resumed at {j['resumed_s']} s" if j["resumed_s"] is not None else " to its end"))
    elif j["ended"] == "completed":
        parts.append("no stall in its traffic" + (f" (its longest silence {j['longest_silence_s']:.2f} s)"
                                                  if j.get("longest_silence_s") is not None else ""))
    if j["ended"] == "completed":
        parts.append(f"completed at {j['ended_s']} s, every rank exited 0"
                     + (", its checks passed" if j["ok"] else ", but a check failed"))
    elif j["ended"] == "hung":
        parts.append(f"hung: still running at its timeout, killed at {j['ended_s']} s "
                     f"(+{j['ended_s'] - at:.2f} s)")
    else:
        parts.append(f"failed {j['error_after_s']:.2f} s after the fault" if j["error_after_s"] is not None
                     else "failed")
        parts.append(f"exit codes {', '.join(str(c) for c in j['exits'])}")
        if j["reaction"]:
            parts.append(j["reaction"])
    return f"{parts[0]}: " + ", ".join(parts[1:])


def describe_job_of_several(j: dict) -> str:
    """A job of a concurrent workload: whether the fault hit it, how it took it, its time against alone."""
    parts = [f"hit ({j['why']})" if j["hit"] else "not hit"]
    if j["detected_s"] is not None:
        parts.append(f"detected at {j['detected_s']} s" + (f" by {j['detected_by']}" if j["detected_by"] else ""))
    if j["recovered_s"] is not None:
        parts.append(f"re-formed ({j['recovery']}) at {j['recovered_s']} s, {j['lost_steps']} step(s) lost")
    if j["resumed_s"] is not None:
        parts.append(f"its traffic resumed at {j['resumed_s']} s ({j.get('flows_cut')} flows cut)")
    parts.append(j["ended"] + ({True: ", exact", False: ", NOT exact"}.get(j["exact"], "")))
    if j["slowdown"] is not None and j["part"] == "together":
        parts.append(f"slowdown x{j['slowdown']:.2f} ({j['seconds_alone']:.3f} s alone)")
    return f"job {j['workload']}/{j['job']} ({j['part']}): " + ", ".join(parts)
