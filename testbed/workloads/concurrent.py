"""Workload `concurrent`: several jobs on one fabric at once, each a workload of an existing type on its own
GPUs (its `placement:`, testbed/workloads/concurrent_placement.py), and how much they slow each other down.

Each job first runs alone (`alone: true`, the default), one after the other, then all start together (one
thread each). A job's figure is its measured time (a collective: the sum over its sizes of the mean iteration
time its ranks measured; traffic: its slowest flow's transfer time; a training iteration: its mean measured
iteration; a program: its completion time, start-up included; an offload job: FastFlow's epoch at its
measured training rate, its profiling left out); its slowdown is together / alone. An offload job's placement
is its trainer's GPU, and its tf.data.service CPU hosts (`cpu_hosts`) are its own too. Each job is its own
launch: its own ranks, store (rendezvous) directory, results and host logs (RESULTS/jobs/NAME/hosts/). Counters a job's own result reads from the switches (fabric_bytes,
uplink_bytes) are the whole fabric's: while the jobs run together they include the other jobs' bytes.

Faults: a fault timed from this workload (`workload: NAME`) counts from the moment its jobs start together. What
it did to each job is testbed/workloads/concurrent_faults.py's; the jobs' recoveries are also the workload's own
(`recoveries`, `first_error_at`), from which the fault's record reads when it was detected and recovered.
"""
from __future__ import annotations

import os
import threading
import time

from testbed.runtime import progress
from testbed.scenario.schema import NAME, ScenarioError
from testbed.schema_words import BOOL, INT, NUM, STR, arr, at, d, dur, nullable, obj
from testbed.workloads import collective, concurrent_bytes, concurrent_placement, offload, program, traffic, training
from testbed.workloads.concurrent_faults import spares_suffice, struck_jobs  # noqa: F401 (what a fault did to each job)

# Faults timed from this workload count from the moment its jobs start together (the runner leaves it the call).
times_its_faults = True
# Its bytes by job on every link, under ECMP and spraying too: a group per multi-path route (controllers/fabric_app.py).
splits_link_bytes = True

# The types a job may be: their own SCHEMA plus name and placement.
JOB_TYPES = {"collective": collective, "traffic": traffic, "training_iteration": training, "program": program,
             "offload": offload}


def _job_schema(kind) -> dict:
    schema = kind.SCHEMA
    return {**schema, "required": sorted({*schema["required"], "name", "placement"}),
            "properties": {**schema["properties"],
                           "name": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$",
                                    "description": "The job's name in the results (and its host logs' folder)."},
                           "placement": concurrent_placement.SCHEMA}}


SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type", "jobs"],
    "description": "Several jobs at once, each a workload (collective, traffic, training_iteration, program, "
                   "offload) on its own GPUs (an offload job: its trainer's GPU and its own CPU hosts); each also runs "
                   "alone first, and the results give every job's slowdown.",
    "properties": {
        "type": {"const": "concurrent", "description": "Jobs running at the same time."}, "name": NAME,
        "jobs": {"type": "array", "minItems": 1,
                 "description": "The jobs: each a workload item of type " + ", ".join(JOB_TYPES)
                                + " with a `name` and a `placement`.",
                 "items": {"type": "object", "required": ["type"],
                           "properties": {"type": {"enum": list(JOB_TYPES), "description": "The job's workload type."}},
                           "allOf": [{"if": {"required": ["type"], "properties": {"type": {"const": t}}}, "then": _job_schema(k)}
                                     for t, k in JOB_TYPES.items()]}},
        "alone": {"type": "boolean", "default": True,
                  "description": "Run each job alone first (one after the other), for its slowdown."},
        "allow_overlap": {"type": "boolean", "default": False,
                          "description": "Let jobs share GPUs (refused otherwise). Two collective or training "
                                         "jobs still may not: a GPU's NIC serves one RoCE job."},
    },
}

JOB = obj({
    "job": d(STR, "The job's name."), "type": STR, "ok": BOOL,
    "hosts": arr(STR, "Its GPU hosts."),
    "cpu_hosts": arr(STR, "An offload job's CPU hosts (its tf.data.service)."),
    "seconds_alone": d(nullable(NUM), "Seconds (a duration): its measured time alone (null: not run alone, or "
                                      "failed)."),
    "seconds_together": d(nullable(NUM), "Seconds (a duration): its measured time with the other jobs."),
    "slowdown": d(nullable(NUM), "seconds_together / seconds_alone."),
    "alone": d({"type": ["object", "null"]}, "Its workload result alone (its type's record)."),
    "together": d({"type": "object"}, "Its workload result with the other jobs (its type's record)."),
    "alone_at": at("when its alone run started (null: not run alone)."),
    "alone_wall_s": d(nullable(NUM), "Seconds (a duration): its alone run's wall-clock time."),
    "together_at": at("when the jobs started together."),
    "together_wall_s": dur("from then until this job ended."),
}, ["job", "type", "ok", "hosts", "seconds_alone", "seconds_together", "slowdown", "together"])

# Its keys in results.json's workload record (the runner adds the common ones).
BY_JOB = {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": INT}}
RESULT_SCHEMA = {
    "jobs": arr(JOB, "Per job, in scenario order."),
    "max_slowdown": d(nullable(NUM), "The largest job slowdown."),
    "switch_bytes_by_job": d(BY_JOB, "While the jobs ran together: SWITCH -> job (or other) -> bytes it forwarded "
                                     "to that job's GPUs (its routes' OpenFlow counters)."),
    "link_bytes_by_job": d(BY_JOB, "SWITCH:PORT -> job -> bytes it sent (single-path routes' counters, and the "
                                   "buckets of the group each multi-path route has of its own)."),
    "uplink_bytes_by_job": d(BY_JOB, "The spine uplinks of link_bytes_by_job, as SENDER>RECEIVER."),
    "job_bytes_deviation": d(NUM, "The largest |bytes by job - port counter| / port counter over the switches "
                                  "(received) and split links (sent)."),
    "rerouted": d(INT, "Port changes (link faults) the controller rerouted around while the jobs ran together: the "
                       "routes it replaced took their counters along, so the bytes by job miss what they forwarded "
                       "and are not checked against the port counters."),
    "recoveries": arr({"type": "object"}, "Every job's re-formed epochs (its collective's `recoveries`, alone and "
                                          "together), each with `job` and `part`: what GPU faults read."),
}


def validate(fabric, spec: dict, scenario: dict | None = None) -> None:
    names = [j["name"] for j in spec["jobs"]]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ScenarioError(f"jobs: a job name is used twice ({', '.join(twice)})")
    for i, job in enumerate(spec["jobs"]):
        if job["type"] == "program" and "hosts" in job:
            raise ScenarioError(f"jobs.{i} ({job['name']}): a program job runs on its placement; drop its hosts")
    placed = concurrent_placement.place_jobs(fabric, spec["jobs"], spec.get("allow_overlap", False))
    served: dict[str, str] = {}
    for job in spec["jobs"]:
        for h in job_cpu_hosts(fabric, job):
            if h in served:
                raise ScenarioError(f"jobs {served[h]!r} and {job['name']!r} both run tf.data.service on {h}: a CPU "
                                    f"host serves one offload job (give each its own cpu_hosts)")
            served[h] = job["name"]
    for i, (job, hosts) in enumerate(zip(spec["jobs"], placed)):
        try:
            if job["type"] == "offload":
                _offload_placement(job, hosts)
            JOB_TYPES[job["type"]].validate(concurrent_placement.JobFabric(fabric, hosts), _bare(job), scenario or {})
        except ScenarioError as exc:
            raise ScenarioError(f"jobs.{i} ({job['name']}): {exc}") from None
    roce = {}
    for job, hosts in zip(spec["jobs"], placed):
        if job["type"] in ("collective", "training_iteration") or \
                (job["type"] == "traffic" and job.get("protocol") == "roce"):      # their ranks speak RoCE
            for h in hosts:
                if h in roce:
                    raise ScenarioError(f"jobs {roce[h]!r} and {job['name']!r} both run RoCE ranks on {h}: a "
                                        f"GPU's NIC serves one RoCE job")
                roce[h] = job["name"]
    spares_suffice(fabric, spec, placed, (scenario or {}).get("faults", []))


def _offload_placement(job: dict, hosts: list[str]) -> None:
    """An offload job's placement is its trainer's GPU: one GPU, the trainer's if it names one."""
    if len(hosts) != 1:
        raise ScenarioError(f"an offload job's placement is its trainer's one GPU, but it selects {len(hosts)} "
                            f"({', '.join(hosts)})")
    if job.get("trainer", hosts[0]) != hosts[0]:
        raise ScenarioError(f"trainer {job['trainer']!r} is not the GPU of its placement ({hosts[0]})")


def job_cpu_hosts(fabric, job: dict) -> list[str]:
    """The CPU hosts a job holds: an offload job's tf.data.service hosts (all of the fabric's by default)."""
    if job["type"] != "offload":
        return []
    return list(job.get("cpu_hosts") or offload.cpu_hosts(fabric))


def _bare(job: dict) -> dict:
    """The job as its type's workload spec (without its placement)."""
    return {k: v for k, v in job.items() if k != "placement"}


def warnings(fabric, spec: dict) -> list[str]:
    out = []
    placed = concurrent_placement.place_jobs(fabric, spec["jobs"], spec.get("allow_overlap", False))
    for job, hosts in zip(spec["jobs"], placed):
        out += [f"job {job['name']}: {w}" for w in
                JOB_TYPES[job["type"]].warnings(concurrent_placement.JobFabric(fabric, hosts), _bare(job))]
    return out


def measured_seconds(result: dict) -> float | None:
    """A job's figure: a collective's mean iteration times summed over its sizes; traffic's slowest flow; ..."""
    if not result.get("ok"):
        return None
    if result["type"] == "collective":
        return sum(r["seconds"] for r in result["rows"]) if result.get("rows") else None
    if result["type"] == "training_iteration":
        return result.get("measured", {}).get("iteration")          # the mean iteration
    if result["type"] == "program":
        return result.get("seconds")                                   # the job's completion time
    if result["type"] == "offload":        # FastFlow's epoch at its measured training rate, per pipeline, summed
        rates = [p["steps_per_s"]["median"] for p in result.get("policies", []) if p["policy"] == "fastflow"]
        return sum(result["epoch_steps"] / r for r in rates) if rates and all(rates) else None
    seconds = [f["seconds"] for f in result.get("per_flow", []) if f.get("seconds") is not None]
    return max(seconds) if seconds else None


def run(net, spec: dict) -> dict:
    fabric = net.fabric
    placed = concurrent_placement.place_jobs(fabric, spec["jobs"], spec.get("allow_overlap", False))
    jobs = list(zip(spec["jobs"], placed))
    report = progress.current()
    alone = {}
    if spec.get("alone", True):
        for job, hosts in jobs:
            report.note(f"job {job['name']} alone on {', '.join(hosts)}")
            alone[job["name"]] = _timed(net, job, hosts)
    report.note(f"{len(jobs)} jobs together")
    flows, ports, changes = [net.flow_bytes()], [net.counters()], _port_changes(net)
    together = _together(net, jobs)
    ports.append(_settled(net))
    flows.append(net.flow_bytes())
    rerouted = _port_changes(net) - changes
    attributed = concurrent_bytes.attribute(fabric, {job["name"]: hosts + job_cpu_hosts(fabric, job)
                                                     for job, hosts in jobs}, flows, ports,
                                            net.multicast_group_hosts())
    records, checks = [], []
    for job, hosts in jobs:
        (a, a_at, a_wall), (t, t_at, t_wall) = alone.get(job["name"], (None, None, None)), together[job["name"]]
        sa, st = (measured_seconds(a) if a else None), measured_seconds(t)
        records.append({"job": job["name"], "type": job["type"], "ok": t["ok"] and (a is None or a["ok"]),
                        "hosts": hosts, **({"cpu_hosts": cpus} if (cpus := job_cpu_hosts(fabric, job)) else {}),
                        "seconds_alone": _round(sa), "seconds_together": _round(st),
                        "slowdown": round(st / sa, 4) if sa and st else None, "alone": a, "together": t,
                        "alone_at": a_at, "alone_wall_s": a_wall, "together_at": t_at, "together_wall_s": t_wall})
        for when, result in (("alone", a), ("together", t)):
            for c in (result or {}).get("checks", []):
                checks.append({**c, "name": f"{job['name']} {when}: {c['name']}"})
    if not rerouted:
        checks.append(concurrent_bytes.check(attributed))
    slowdowns = [r["slowdown"] for r in records if r["slowdown"] is not None]
    return {"type": "concurrent", "ok": all(c["ok"] for c in checks) and all(r["ok"] for r in records),
            "jobs": records, "max_slowdown": max(slowdowns) if slowdowns else None,
            "switch_bytes_by_job": attributed["switches"], "link_bytes_by_job": attributed["links"],
            "uplink_bytes_by_job": concurrent_bytes.uplinks_by_job(fabric, attributed),
            "job_bytes_deviation": attributed["max_deviation"],
            "rerouted": rerouted, "checks": checks,
            **_recoveries(records)}


def _recoveries(records: list[dict]) -> dict:
    """Every job's re-formed epochs and first error, as the workload's own: what GPU faults read (testbed/faults/
    recovered.py, returns.py), each epoch naming its job and part."""
    epochs = [{**r, "job": j["job"], "part": part} for j in records for part in ("alone", "together")
              for r in (j[part] or {}).get("recoveries", [])]
    errors = [e for j in records for part in ("alone", "together") if (e := (j[part] or {}).get("first_error_at"))]
    return {"recoveries": epochs, "first_error_at": min(errors) if errors else None}


def _port_changes(net) -> int:
    """How many port changes the controller has reacted to so far (each may replace routes, and a replaced route's
    counters go with it: the bytes by job then miss what it forwarded)."""
    return len(net.controller_view().get("port_events", []))


def _round(x: float | None) -> float | None:
    return round(x, 6) if x is not None else None


def _run_job(net, job: dict, hosts: list[str]) -> dict:
    """One job's workload on its hosts; an error is its failed result (the other jobs go on)."""
    kind = JOB_TYPES[job["type"]]
    try:
        result = kind.run(concurrent_placement.JobNet(net, hosts, job["name"]), _bare(job))
    except Exception as exc:  # one job's failure is its result, not the other jobs'
        result = {"type": job["type"], "ok": False,
                  "checks": [{"name": "completed", "ok": False, "detail": f"{type(exc).__name__}: {exc}"}]}
    result.pop("per_rank", None)
    result.pop("timed_windows", None)       # the concurrent workload's guard judges it whole
    return result


def _timed(net, job: dict, hosts: list[str]) -> tuple[dict, float, float]:
    """One job's result, when it started (Unix time) and how long it ran."""
    started, t0 = time.time(), time.monotonic()
    result = _run_job(net, job, hosts)
    return result, round(started, 4), round(time.monotonic() - t0, 4)


def _settled(net, limit_s: float = 5.0) -> dict:
    """The port counters once they stop moving (what the shaped links still held when the last rank ended has
    arrived, and the flow counters have caught up): the moment to read both for the bytes by job."""
    now, deadline = net.counters(), time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        previous, now = now, net.counters()
        if all(previous.get(p, {}).get("rx_bytes") == c["rx_bytes"] for p, c in now.items()):
            break
    return now


def _together(net, jobs: list) -> dict[str, tuple[dict, float, float]]:
    """Every job at once, one thread each, started at the same moment: the moment the faults timed from this
    workload count from (the runner's net.start_faults)."""
    out: dict[str, tuple[dict, float, float]] = {}
    start = threading.Barrier(len(jobs), action=getattr(net, "start_faults", None))

    def one(job, hosts):
        start.wait()
        out[job["name"]] = _timed(net, job, hosts)

    threads = [threading.Thread(target=one, args=j, name=f"tb-job-{j[0]['name']}", daemon=True) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def summary(w: dict) -> str:
    parts = [f"{j['job']} x{j['slowdown']:.2f}" if j["slowdown"] is not None else f"{j['job']} -"
             for j in w["jobs"]]
    return f"{len(w['jobs'])} jobs, slowdown " + ", ".join(parts)


def tables(w: dict) -> list[str]:
    return ["\n".join(slowdown_table(w))]


def slowdown_table(w: dict) -> list[str]:
    rows = [f"{'job':<16} {'type':<11} {'GPUs':>4} {'alone s':>9} {'together s':>11} {'slowdown':>9}  ok"]
    for j in w["jobs"]:
        def num(x, spec):
            return format(x, spec) if x is not None else "-"
        rows.append(f"{j['job']:<16} {j['type']:<11} {len(j['hosts']):>4} {num(j['seconds_alone'], '9.3f'):>9} "
                    f"{num(j['seconds_together'], '11.3f'):>11} {num(j['slowdown'], '9.2f'):>9}  "
                    f"{'yes' if j['ok'] else 'NO'}")
    return rows


def start_line(spec: dict) -> str:
    return f"concurrent {len(spec.get('jobs', []))} jobs"


def headline(w: dict) -> str:
    return f"{w['name']} max slowdown {w['max_slowdown']}" if w.get("max_slowdown") is not None else w["name"]


def comparable(w: dict) -> dict[tuple, dict]:
    return {(w["name"], "concurrent", j["job"]): {"slowdown": j["slowdown"], "seconds together": j["seconds_together"]}
            for j in w.get("jobs", [])}


def relative_times(w: dict, t0: float | None) -> None:
    """The traffic jobs' flow silences on the run's time base, as for a traffic workload."""
    for j in w.get("jobs", []):
        for result in (j.get("alone"), j.get("together")):
            if result and result.get("type") == "traffic":
                traffic.relative_times(result, t0)


def report_section(workloads: list[dict]) -> list[str]:
    out = ["## Concurrent jobs", "",
           "Each job's measured time alone and with the other jobs of its workload; slowdown = together / alone.",
           ""]
    for w in workloads:
        out += [f"### {w['name']}", "", "| job | type | GPUs | alone s | together s | slowdown | ok |",
                "|---|---|---|---|---|---|---|"]
        for j in w["jobs"]:
            def num(x):
                return f"{x:.3f}" if x is not None else "-"
            out.append(f"| {j['job']} | {j['type']} | {', '.join(j['hosts'])} | {num(j['seconds_alone'])} | "
                       f"{num(j['seconds_together'])} | {num(j['slowdown'])} | {'yes' if j['ok'] else 'NO'} |")
        out.append("")
        uplinks = w.get("uplink_bytes_by_job") or {}
        names = [j["job"] for j in w["jobs"]]
        if uplinks:
            out += ["Spine uplinks while the jobs ran together, bytes by job (the routes' and their groups' "
                    "OpenFlow counters):", "", "| uplink | " + " | ".join(names) + " |",
                    "|---|" + "---|" * len(names)]
            out += [f"| {link} | " + " | ".join(str(by.get(n, 0)) for n in names) + " |"
                    for link, by in sorted(uplinks.items())]
            out.append("")
        if w.get("rerouted"):
            out += [f"The controller rerouted around {w['rerouted']} port change(s) while the jobs ran: the routes "
                    f"it replaced took their counters along, so these bytes miss what they forwarded (not checked "
                    f"against the port counters; largest difference {w['job_bytes_deviation']:.1%}).", ""]
    return out


def report_table(workloads: list[dict]) -> dict | None:
    """report.html's table: every job's time alone and together."""
    def num(x, digits=3):
        return f"{x:.{digits}f}" if x is not None else "-"
    rows = [(w["name"], [w["name"], j["job"], j["type"], str(len(j["hosts"])), num(j["seconds_alone"]),
                         num(j["seconds_together"]), num(j["slowdown"], 2), "yes" if j["ok"] else "NO"])
            for w in workloads for j in w.get("jobs", [])]
    return {"title": "Concurrent jobs: slowdown together against alone", "left": 3, "rows": rows,
            "headers": ["workload", "job", "type", "GPUs", "alone s", "together s", "slowdown", "ok"]}


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    written = []
    for w in workloads:
        path = os.path.join(plots_dir, f"job_links_{w['name']}.png")
        if plot_job_links(w, path):
            written.append(path)
    return written


def plot_job_links(w: dict, path: str) -> bool:
    """A heatmap of the bytes each spine uplink (each split link where there are no uplinks) sent for each job
    while the jobs ran together: where the jobs met."""
    by_link = w.get("link_bytes_by_job") or {}
    names = [j["job"] for j in w.get("jobs", [])]
    if not by_link or not names:
        return False
    uplinks = w.get("uplink_bytes_by_job") or {}
    table = uplinks or by_link             # the uplinks where there are (a rail-only fabric has none)
    rows = sorted(table)
    values = [[table[r].get(n, 0) for n in names] for r in rows]
    import numpy as np
    from testbed.figures import plt     # matplotlib only when there is a report to draw
    kb = np.array(values, dtype=float) / 1e3
    fig, ax = plt.subplots(figsize=(2.2 + 1.1 * len(names), 1.5 + 0.3 * len(rows)))
    im = ax.imshow(np.ma.masked_equal(kb, 0), cmap="viridis", vmin=0, aspect="auto")
    ax.set_xticks(range(len(names)), names, rotation=30, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    for (a, b), v in np.ndenumerate(kb):
        if v:
            ax.text(b, a, f"{v:.0f}", ha="center", va="center", fontsize=6,
                    color="black" if v > 0.6 * kb.max() else "white")
    fig.colorbar(im, ax=ax, label="kB")
    ax.set_title(f"{w['name']}: bytes by job per {'spine uplink' if uplinks else 'link'}, together", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
