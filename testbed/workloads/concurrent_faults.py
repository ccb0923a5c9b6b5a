"""What a fault did to each job of a `concurrent` workload: its `struck_jobs` hook, which fills in the fault's
`jobs` (testbed/faults/record.py; testbed/faults/jobs.py words them, describe_job_of_several).

A fault timed from a concurrent workload (`workload: NAME`) counts from the moment its jobs start together.
For every job running when it struck (together: all of them; in the alone part: the one running alone), the
entry says whether the fault hit the job and how it took it:
  - hit: a GPU fault struck one of the job's GPUs (or an offload job's CPU hosts); a link fault cut a link the
    job's bytes crossed while the jobs ran together (bytes by job, testbed/workloads/concurrent_bytes.py), or one
    of the job's flows fell silent across it;
  - its own recoveries after the fault (detected, by what, re-formed, first collective after it, steps lost,
    the policy): a job the fault did not hit has none, and its ranks, heartbeats and store are its own;
  - whether it completed, whether its results were exact (a collective's every size equal to numpy's on every
    rank), and its measured time against its time alone.
All times are seconds from the workloads' start, as every fault time.

`spares_suffice` refuses, before anything is brought up, faults that would need more spares than the jobs can
share: a spare one job's recovery takes is not offered to another (testbed/fabric/spares.py).
"""
from __future__ import annotations

from testbed.faults import REGISTRY, FaultError
from testbed.faults.links import resumed
from testbed.faults.recovered import rel
from testbed.scenario.schema import ScenarioError

EARLY_S = 0.01          # a job's record of a detection may carry a time a little before the signal's


def struck_jobs(w: dict, fault: dict, t0: float, fabric) -> list[dict]:
    """The jobs of concurrent workload result `w` running when `fault` struck, and how each took it."""
    at = t0 + fault["at_s"]
    out = []
    for j in w.get("jobs", []):
        for part in ("alone", "together"):
            start, wall = j.get(f"{part}_at"), j.get(f"{part}_wall_s")
            if start is not None and start - EARLY_S <= at <= start + wall and j.get(part):
                out.append(job_view(w, j, part, fault, t0, fabric))
    return out


def job_view(w: dict, j: dict, part: str, fault: dict, t0: float, fabric) -> dict:
    result, at = j[part], t0 + fault["at_s"]
    hit_links, hit_hosts = REGISTRY[fault["kind"]].hit(fabric, fault)
    why = []
    if hit_hosts & set(j["hosts"]):
        why.append(f"its GPU {', '.join(sorted(hit_hosts & set(j['hosts'])))}")
    if hit_hosts & set(j.get("cpu_hosts", [])):                 # an offload job's tf.data.service hosts
        why.append(f"its CPU host {', '.join(sorted(hit_hosts & set(j['cpu_hosts'])))}")
    crossed = _crossed(w, j["job"], hit_links) if part == "together" else 0
    if crossed:
        why.append(f"its bytes crossed {', '.join(sorted(_names(hit_links)))} ({crossed} B while together)")
    flows = [f.get("silences") or [] for f in result.get("per_flow", [])]
    back, cut = resumed(flows, at)
    if cut:
        why.append(f"{cut} of its flows fell silent across it")
    mine = [r for r in result.get("recoveries", []) if r.get("detected_at") and r["detected_at"] >= at - EARLY_S]
    r = min(mine, key=lambda r: r["detected_at"]) if mine else {}
    first_error = result.get("first_error_at")
    rows = result.get("rows") or []
    failed = any(c["name"] == "completed" and not c["ok"] for c in result.get("checks", []))
    return {
        "workload": w["name"], "job": j["job"], "part": part, "hit": bool(why), "why": "; ".join(why) or None,
        "ended": "failed" if failed else "completed", "ok": result.get("ok"),
        "exact": all(x["correct"] for x in rows) and bool(rows) if result.get("type") == "collective" else None,
        "detected_s": rel(r.get("detected_at"), t0) if r else
        (rel(first_error, t0) if first_error and first_error >= at - EARLY_S else None),
        "detected_by": r.get("detected_by"), "recovered_s": rel(r.get("reformed_at"), t0),
        "first_success_s": rel(r.get("first_success_at"), t0), "lost_steps": r.get("lost_steps"),
        "recovery": r.get("policy") or ("abort" if failed and first_error else None),
        "resumed_s": round(back - t0, 4) if back is not None else None,
        "flows_cut": cut if result.get("per_flow") else None,
        "retransmits": sum(x.get("retransmits", 0) for x in rows) if rows else None,
        "seconds_alone": j["seconds_alone"], "seconds_together": j["seconds_together"], "slowdown": j["slowdown"]}


def _names(links) -> set[str]:
    return {f"{l.a}-{l.b}" for l in links}


def _crossed(w: dict, job: str, links) -> int:
    """The job's bytes, while the jobs ran together, on the ports of these links (either way)."""
    ports = {f"{node}:{port}" for l in links for node, port in ((l.a, l.a_port), (l.b, l.b_port))
             if port is not None}
    return sum(by.get(job, 0) for port, by in (w.get("link_bytes_by_job") or {}).items() if port in ports)


def spares_suffice(fabric, spec: dict, placed: list[list[str]], faults: list[dict]) -> None:
    """The jobs share the fabric's spares, and a spare one job's recovery takes stays that job's until it ends
    (testbed/fabric/spares.py). So the GPU faults timed from this workload, which strike while its jobs run
    together, may not need more spares than there are: on each server, one spare GPU per GPU they fail in jobs
    with recovery `spare`; one spare server per job and server they strike in jobs with recovery `migrate`."""
    policy = {h: (job["name"], job.get("recovery", "abort")) for job, hosts in zip(spec["jobs"], placed)
              for h in hosts}
    struck: set[str] = set()
    for f in faults:
        kind = REGISTRY.get(f.get("kind"))
        if spec.get("name") is None or f.get("workload") != spec["name"] or not kind or not kind.by_job \
                or all(up for _, up in kind.steps(f)):          # a GPU that comes back takes no spare
            continue
        try:
            struck |= kind.hit(fabric, f)[1]
        except FaultError:
            continue                                            # a bad target: the faults' own check says so
    spare_gpus: dict[int, list[str]] = {}
    migrating: set[tuple[str, int]] = set()
    for h in sorted(struck & set(policy)):
        job, recovery = policy[h]
        if recovery == "spare":
            spare_gpus.setdefault(fabric.hosts[h].server, []).append(f"{h} ({job})")
        elif recovery == "migrate":
            migrating.add((job, fabric.hosts[h].server))
    have = fabric.params.spares_per_server
    for server, failed in sorted(spare_gpus.items()):
        if len(failed) > have:
            raise ScenarioError(f"its faults fail {len(failed)} GPUs of server {server} in jobs with recovery spare "
                                f"({', '.join(failed)}) but the server has {have} spare GPU(s), and a spare one job "
                                f"takes is not offered to another: set fabric.spares_per_server: {len(failed)}, or "
                                f"recovery shrink")
    if len(migrating) > fabric.params.spare_servers:
        names = ", ".join(f"{job} on server {s}" for job, s in sorted(migrating))
        raise ScenarioError(f"its faults make {len(migrating)} jobs' servers migrate ({names}) but the fabric has "
                            f"{fabric.params.spare_servers} spare server(s), and a spare server one job takes is "
                            f"not offered to another: set fabric.spare_servers: {len(migrating)}, or recovery shrink")
