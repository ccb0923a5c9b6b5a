"""What the faults of a run did, as results: a failed check for a fault that did not happen as asked, when
the traffic a link fault cut resumed (the receivers' view), and when a GPU fault was detected, by what, and
when the job had re-formed. testbed/runtime/faults.py injects them and records when.
"""
from __future__ import annotations

from testbed.runtime.faults import GPU_FAULTS, RETURNS, gpu_hosts


def checks(records: list[dict]) -> list[dict]:
    """Failed checks for faults that did not happen as the scenario asked (the figures would mislead)."""
    out = []
    for i, f in enumerate(records):
        name = f"faults.{i} {f['kind']} {f['target']}"
        if f["at_s"] is None:
            out.append({"name": name, "ok": False, "detail": "never injected: its time came after the workloads "
                                                             "(or the workload it is timed from) had ended"})
        elif f.get("processes") == 0 and f["kind"] in RETURNS:
            out.append({"name": name, "ok": False, "detail": "no running job (recovery other than abort) had "
                                                             "this GPU to take back"})
        elif f.get("processes") == 0:
            out.append({"name": name, "ok": False, "detail": "hit no process: no rank ran on the target when it "
                                                             "was injected"})
    return out


CUT_SILENCE_WITHIN_S = 0.25


def traffic_outcomes(records: list[dict], workloads: list[dict], t0: float) -> None:
    """Link faults: when traffic resumed, from the receivers' view. Each UDP flow lists its silences (over 1.5
    packet times). A flow was cut by a fault if one of its silences ended after the fault and began at most
    CUT_SILENCE_WITHIN_S after it: the packets already past the cut (in downstream queues) still arrive, so
    the silence begins a little later than the cut (measured: 3 ms; more on a loaded machine). Its longest
    such silence is the cut's; the fault's traffic resumed when the last cut flow got a packet again (seconds
    after the workloads started; None if no flow was silent across it: nothing the receivers could see)."""
    flows = [f.get("silences") or [] for w in workloads if w.get("type") == "traffic" for f in w.get("per_flow", [])]
    for fault in records:
        if fault["kind"] in GPU_FAULTS or fault["at_s"] is None:
            continue
        at = t0 + fault["at_s"]
        ends = []
        for silences in flows:
            cut = [(length, start + length) for start, length in silences
                   if start <= at + CUT_SILENCE_WITHIN_S and start + length >= at]
            if cut:
                ends.append(max(cut)[1])
        fault["resumed_s"] = round(max(ends) - t0, 4) if ends else None
        fault["flows_cut"] = len(ends)


def gpu_outcomes(records: list[dict], workloads: list[dict], t0: float, fabric) -> None:
    """Fill in the GPU faults' outcomes from the workloads (seconds after the workloads started):
    detected when the first peer noticed the failure, recovered when the communicator had re-formed
    (every member of the new epoch in), first success when the first collective after that completed on
    every member, and the started steps that were lost (run again); `recovery` names the policy."""
    recoveries = [r for w in workloads for r in w.get("recoveries", [])]
    errors_at = [w["first_error_at"] for w in workloads if w.get("first_error_at")]

    def rel(t):
        return round(t - t0, 4) if t else None
    for fault in records:
        if fault["kind"] in RETURNS and fault["at_s"] is not None:
            rejoined(fault, recoveries, t0)
            continue
        if fault["kind"] not in GPU_FAULTS or fault["at_s"] is None:
            continue
        at, hosts = t0 + fault["at_s"], set(gpu_hosts(fabric, fault["kind"], fault["target"]))
        mine = [r for r in recoveries if r.get("detected_at") and r["detected_at"] >= at - 0.01
                and hosts & set(r.get("failed") or hosts)]
        if mine:
            r = min(mine, key=lambda r: r["detected_at"])
            fault.update(detected_s=rel(r["detected_at"]), detected_by=r.get("detected_by"),
                         recovered_s=rel(r["reformed_at"]),
                         first_success_s=rel(r["first_success_at"]), lost_steps=r["lost_steps"],
                         recovery=r["policy"], replaced_by=r.get("replaced") or None)
        else:           # abort (or nothing noticed it): detection only
            seen = [t for t in errors_at if t >= at - 0.01]
            fault.update(detected_s=rel(min(seen)) if seen else None, recovery="abort" if seen else None)


def rejoined(fault: dict, recoveries: list[dict], t0: float) -> None:
    """A GPU that came back: admitted (the leader's plan) at detected_s, in the grown communicator at
    recovered_s, its first collective in it done at first_success_s (None: never taken back)."""
    at = t0 + fault["at_s"]
    mine = [r for r in recoveries if fault["target"] in (r.get("joined") or []) and (r.get("decided_at") or 0) >= at]
    r = min(mine, key=lambda r: r["decided_at"]) if mine else {}

    def rel(t):
        return round(t - t0, 4) if t else None
    fault.update(detected_s=rel(r.get("decided_at")), recovered_s=rel(r.get("reformed_at")),
                 first_success_s=rel(r.get("first_success_at")), lost_steps=r.get("lost_steps"),
                 recovery="rejoin" if r else None, detected_by=None)


def describe_gpu_outcome(f: dict) -> str:
    """One line for the summary: when the peers noticed, when the job had re-formed, the first success."""
    def since(t):
        return f"{t} s (+{t - f['at_s']:.2f} s)" if t is not None and f["at_s"] is not None else "never"
    if f["kind"] in RETURNS:
        return (f"fault {f['kind']} {f['target']}: at {f['at_s']} s, " + (
            f"admitted at {since(f['detected_s'])}, in the grown communicator at {since(f['recovered_s'])}, first "
            f"collective with it done at {since(f['first_success_s'])}" if f.get("recovery") else "never rejoined"))
    line = f"fault {f['kind']} {f['target']}: at {f['at_s']} s, detected at {since(f['detected_s'])}" + \
        (f" by {f['detected_by']}" if f.get("detected_by") else "")
    if f.get("recovery") in (None, "abort"):
        return line + (", job aborted" if f.get("recovery") else "")
    how = f["recovery"] + (f" by {', '.join(f['replaced_by'].values())}" if f.get("replaced_by") else "")
    return (line + f", re-formed ({how}) at {since(f['recovered_s'])}, first collective after it done at "
            f"{since(f['first_success_s'])}, {f['lost_steps']} step(s) lost")

