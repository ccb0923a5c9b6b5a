"""What a fault did to a user's program (a `program` job) running when it struck, as its user sees it: the
program workload's `struck` hook, which fills in the fault's `jobs` (testbed/faults/jobs.py words them).

A library reacts to a fault in its own way: a cut that ECMP routes around stalls TCP until a retransmission
and the job goes on; a cut with no way around, or a dead peer, makes it abort, raise after its own timeout,
or wait for ever. Per fault and job running at that moment: how the job ended (completed and its checks
passed, failed on its own, hung until its timeout), its exit codes, what the library said first and how long
after the fault, and the stall the fault caused in the job's traffic (the silence of the job's NICs that began
with the fault, program_traffic.py) and when traffic resumed. All times are seconds from the workloads'
start, as every fault time.
"""
from __future__ import annotations

SILENCE_WITHIN_S = 0.5      # a fault's stall begins at most this long after it (packets in flight still arrive)


def exits(w: dict) -> list:
    return [w["mpirun"]["exit"]] if w.get("launcher") == "mpirun" else [r.get("exit") for r in w["ranks"]]


def stall(w: dict, at_rel: float) -> dict:
    """The job's silence that began with the fault (at_rel: seconds from the job's start), if any."""
    cut = [s for s in w.get("silences") or [] if at_rel - 0.05 <= s[0] <= at_rel + SILENCE_WITHIN_S
           or s[0] <= at_rel <= s[0] + s[1]]
    if not cut:
        return {"stall_s": None}
    start, length, resumed = max(cut, key=lambda s: s[1])
    base = w["started_s"]
    return {"stall_s": length, "stall_from_s": round(base + start, 3),
            "resumed_s": round(base + start + length, 3) if resumed else None}


def struck(w: dict, fault_at: float, t0: float) -> dict:
    """The job's view of a fault that struck while it ran (fault_at: seconds from the workloads' start)."""
    codes = exits(w)
    ended = "hung" if None in codes else "completed" if all(c == 0 for c in codes) else "failed"
    job_at = w["started_at"] - t0                          # the job's launch, on the workloads' base
    out = {"workload": w["name"], "launcher": w.get("launcher"), "ended": ended, "exits": codes,
           "ok": w.get("ok"), "ended_s": round(job_at + w["seconds"], 3),
           "error_after_s": None, "reaction": w.get("reaction")}
    first = w.get("first_error_at")
    if first is not None and first - t0 >= fault_at - 0.01:
        out["error_after_s"] = round(first - t0 - fault_at, 3)
    out.update(stall({**w, "started_s": job_at}, fault_at - job_at))
    out["longest_silence_s"] = w.get("longest_silence_s")
    return out
