"""Run a scenario end to end: fabric up, workloads, counters, checks, results.json, fabric down.

Tear-down happens on success, on errors and on Ctrl-C / SIGTERM. The run passes only if every check
passed; results.json records why not otherwise.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import time

from testbed import __version__
from testbed.fabric import ovs, sites, topo
from testbed.fabric.links import roce_mtus
from testbed.fabric.machines import machines_from
from testbed.fabric.params import FabricParams, ignored_params
from testbed.fabric.placement import PlacementError, place
from testbed.fabric.network import Network
from testbed.faults import FaultError, outcomes, timing
from testbed.faults.echo import FaultEcho
from testbed.faults.schedule import Schedule, check_target
from testbed.monitor import capture
from testbed.monitor.fidelity import CpuSampler
from testbed.monitor.queues import QueueSampler
from testbed.monitor.timeline import Timeline
from testbed.results import results_schema, runs
from testbed.runtime import pace, progress
from testbed.scenario import host_limits
from testbed.scenario.schema import ScenarioError
from testbed.workloads import REGISTRY, attach_struck, hook

class Interrupted(Exception):
    pass


def fabric_of(scenario: dict) -> topo.Fabric:
    return topo.build_from(FabricParams(**scenario["fabric"]))     # the schema allows the parameters only


def check(scenario: dict, fabric: topo.Fabric) -> None:
    """Checks that need the fabric (raise ScenarioError), done before anything is brought up."""
    for i, spec in enumerate(scenario["workloads"]):
        try:
            REGISTRY[spec["type"]].validate(fabric, spec, scenario)
        except ScenarioError as exc:
            raise ScenarioError(f"workloads.{i}: {exc}") from None
    labels = [spec.get("name", f"{spec['type']}#{i}") for i, spec in enumerate(scenario["workloads"])]
    for i, fault in enumerate(scenario.get("faults", [])):
        try:
            check_target(fabric, fault)
        except FaultError as exc:
            raise ScenarioError(f"faults.{i}: {exc}") from None
        if "workload" in fault and fault["workload"] not in labels:
            raise ScenarioError(f"faults.{i}.workload: no workload named {fault['workload']!r}; "
                                f"workloads are {', '.join(labels)}")
    for i, spec in enumerate(scenario.get("capture", [])):
        try:
            capture.validate(fabric, [spec])
        except capture.CaptureError as exc:
            raise ScenarioError(f"capture.{i}: {exc}") from None
    if scenario.get("machines"):
        try:
            place(fabric, [m["name"] for m in scenario["machines"]])
        except PlacementError as exc:
            raise ScenarioError(f"machines: {exc}") from None


def warnings(scenario: dict, fabric: topo.Fabric) -> list[str]:
    """What will run otherwise than the scenario reads (it still runs): one line each, for the user and the results."""
    out = [f"fabric.{k}: a {fabric.kind} fabric has no use for it; ignored"
           for k in ignored_params(fabric.kind, scenario["fabric"])]
    if not fabric.params.faithful:
        out.append("fabric.ideal_uplinks: the uplinks are unshaped patch ports that never limit; this fabric is not "
                   "faithful (ECMP collisions and oversubscription cost nothing)")
    if pace.warning():
        out.append(pace.warning())
    mode = scenario.get("routing", {}).get("mode", "ecmp")
    if not fabric.params.spines and mode not in ("ecmp", "single"):
        out.append(f"routing.mode: {mode} spreads traffic over spines, and a {fabric.kind} fabric has none "
                   f"(one path between any two NICs): no traffic takes another path")
    for i, spec in enumerate(scenario["workloads"]):
        out += [f"workloads.{i}: {w}" for w in REGISTRY[spec["type"]].warnings(fabric, spec)]
    return out + capture.snaplen_warnings(fabric, scenario.get("capture", []))


def default_out_dir(scenario: dict) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("results", scenario["name"], stamp)


def run(scenario: dict, out_dir: str, echo=print, report: progress.Progress | None = None) -> dict:
    """Run the scenario and write out_dir/results.json; returns the results. A failed or interrupted run
    still tears down and writes its results, with the reason among the checks. What happens is reported to
    `report` (testbed/runtime/progress.py), or else as plain lines to `echo`."""
    report = report or progress.Progress(echo=echo)
    fabric = fabric_of(scenario)
    runs.record(out_dir, scenario)          # scenario.yaml (for --again) and environment.json
    results = _results_skeleton(scenario, fabric)

    def on_term(signum, frame):
        raise Interrupted(f"signal {signum}")
    previous = signal.signal(signal.SIGTERM, on_term)
    net = Network(fabric, routing=results["fabric"]["routing"], failover=results["fabric"]["failover"],
                  hosts=results["fabric"]["host_backend"], host_limits=host_limits(scenario),
                  controller_delay_ms=results["fabric"]["controller_delay_ms"],
                  machines=machines_from(scenario.get("machines", [])),
                  route_groups=any(hook(w["type"], "splits_link_bytes") for w in scenario["workloads"]))
    net.out_dir = out_dir            # the results folder: workloads keep files there (a program's per-rank logs)
    live = _Live(captures=capture.Captures(net, scenario.get("capture", []), out_dir))
    try:
        with progress.active(report):        # workloads report their steps through progress.current()
            _bring_up(net, results, report)
            _run_workloads(net, scenario, results, live, report)
    except Interrupted as exc:
        results["checks"].append({"name": "interrupted", "ok": False, "detail": str(exc)})
        report.error(f"interrupted ({exc}): tearing down")
    except KeyboardInterrupt:
        results["checks"].append({"name": "interrupted", "ok": False, "detail": "Ctrl-C"})
        report.error("interrupted (Ctrl-C): tearing down")
    except Exception as exc:  # a failed run still writes its results and tears down
        results["checks"].append({"name": "error", "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
        report.error(f"{type(exc).__name__}: {exc}", exc)       # the traceback with --debug
    finally:
        report.stage("tear-down")
        live.stop()
        log = os.path.join(net.run_dir, "controller.log")
        if os.path.exists(log):
            shutil.copy(log, os.path.join(out_dir, "controller.log"))    # the run directory goes away
        net.stop()
        signal.signal(signal.SIGTERM, previous)
        results["timings"]["tear_down_s"] = round(net.timings.get("tear_down_s", 0.0), 3)
    report.stage("report")
    _write(results, fabric, live.timeline, out_dir, live.queues)
    report.done(results["ok"])
    return results


class _Live:
    """What watches a live run (captures, the timeline, the queues, the fault schedule); stopped in any case."""

    def __init__(self, captures):
        self.captures, self.timeline, self.queues, self.schedule, self.echo = captures, None, None, None, None

    def stop(self) -> None:
        for part in (self.schedule, self.echo, self.timeline, self.queues, self.captures):
            if part is not None:
                part.stop()


def _results_skeleton(scenario: dict, fabric: topo.Fabric) -> dict:
    routing = scenario.get("routing", {})
    return {"schema_version": results_schema.SCHEMA_VERSION, "scenario": scenario["name"],
            "testbed_version": __version__,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "fabric": fabric.counts() | {"routing": routing.get("mode", "ecmp"), "failover": routing.get("failover", True),
                                         "controller_delay_ms": routing.get("controller_delay_ms", 0),
                                         "datapath": ovs.datapath(), "host_backend": scenario.get("hosts", "netns")}
                      | fabric.params.results_values() | {"roce_mtu": roce_mtus(fabric)},
            "workloads": [], "links": {}, "checks": [], "timings": {}, "warnings": warnings(scenario, fabric)}


def _bring_up(net: Network, results: dict, report) -> None:
    fabric, f = net.fabric, results["fabric"]
    report.stage("bring-up")
    report.note(f"bringing up {fabric.kind}: {fabric.params.servers} servers x {fabric.params.gpus_per_server} GPUs, "
         f"{len(fabric.switches)} switches, routing {f['routing']}, hosts {f['host_backend']}")
    for line in fabric.params.time_scaling() + sites.describe(fabric):
        report.note(line)
    if net.placement:
        report.note(f"spread over {len(net.machines)} machines: " + "; ".join(net.placement.describe(fabric)))
        f["placement"] = net.placement.to_json(fabric)
    net.start()
    results["timings"]["bring_up_s"] = round(net.timings["bring_up_s"], 3)
    f["transport"] = net.rdma["transport"]       # rxe where the kernel has Soft-RoCE
    if "image_s" in net.timings:        # Docker hosts: checking (or rebuilding) the host image, within bring-up
        results["timings"]["image_s"] = round(net.timings["image_s"], 3)
    results["checks"].append({"name": "bring-up", "ok": True,
                              "detail": f"routes installed on {len(fabric.sdn_switches())} switches "
                                        f"in {net.timings['bring_up_s']:.2f} s"})
    waited = net.timings.get("lock_wait_s", 0)
    report.note(f"fabric up in {net.timings['bring_up_s']:.2f} s, transport {f['transport']}"
                + (f" (after {waited:.1f} s waiting for another run's fabric)" if waited >= 1 else ""))


def _run_workloads(net: Network, scenario: dict, results: dict, live: _Live, report) -> None:
    """The workloads in order, with captures, the timeline and the fault schedule running; then what the
    faults did and the bytes every switch port carried."""
    report.stage("captures" if scenario.get("capture") else "counters")
    live.captures.start()
    start = net.counters()
    live.timeline = Timeline(net).start()
    live.queues = QueueSampler.of(net).start()
    live.schedule = schedule = Schedule(net, scenario.get("faults", []))
    schedule.start()
    live.echo = FaultEcho(schedule, net, report).start()
    results["timings"]["workloads_start"] = schedule.t0
    specs = scenario["workloads"]
    for i, spec in enumerate(specs):
        label = spec.get("name", f"{spec['type']}#{i}")
        report.workload_started(i + 1, len(specs), label, REGISTRY[spec["type"]].start_line(spec))
        result = _run_workload(net, spec, label, schedule, results["checks"])
        results["workloads"].append(result)
        live.echo.workload_ended(result)          # what its ranks reported of GPU faults, then its verdict
        report.workload_done(label, result["ok"], result["wall_s"], REGISTRY[spec["type"]].summary(result))
        if result["cpu_bound"]:
            report.warning(f"CPU idle averaged {result['cpu_idle_mean_pct']}%: this result may be CPU-bound, "
                           f"not link-bound")
    schedule.stop()
    live.echo.stop()
    report.stage("results")
    live.timeline.stop()
    live.queues.stop()
    live.queues.ecn = net.ecn_counters()
    live.queues.pfc = net.pfc_stats()
    results["faults"] = schedule.results(net.controller_view().get("port_events", []))
    outcomes.fill(results["faults"], results["workloads"], schedule.t0, net.fabric)
    attach_struck(results["faults"], results["workloads"], schedule.t0, net.fabric)   # the jobs each fault struck
    results["checks"] += outcomes.checks(results["faults"])
    results["checks"] += timing.late_checks(scenario.get("faults", []), results["faults"], results["workloads"])
    end = net.counters()
    results["captures"] = live.captures.stop()
    results["checks"] += [{"name": f"capture {c['point']}", "ok": False, "detail": c["ended_early"]}
                          for c in results["captures"] if "ended_early" in c]
    results["links"] = {p: {k: ovs.growth(start, end, p, k) for k in ("tx_bytes", "rx_bytes")} for p in end}


def _run_workload(net: Network, spec: dict, label: str, schedule, checks: list) -> dict:
    # faults timed from this workload count from its start, or from the moment it names (concurrent: when its
    # jobs start together), when it calls net.start_faults
    net.start_faults = lambda: schedule.workload_started(label)
    if not hook(spec["type"], "times_its_faults"):
        net.start_faults()
    started = time.time()
    t0 = time.monotonic()
    with CpuSampler() as cpu:
        result = REGISTRY[spec["type"]].run(net, spec)
    timed = result.pop("timed_windows", None)       # the guard judges these where the workload names them
    result = {"name": label, **result, "started_s": round(started - schedule.t0, 3),
              "wall_s": round(time.monotonic() - t0, 3), **cpu.report(timed)}
    for check in result.pop("checks"):
        checks.append({**check, "name": f"{label}: {check['name']}"})
    return result


def _write(results: dict, fabric: topo.Fabric, timeline, out_dir: str, queues=None) -> None:
    from testbed.results import report     # matplotlib when there is a report to draw, not at every CLI start
    results["ok"] = all(c["ok"] for c in results["checks"])
    results_schema.relative_times(results)                  # one time base (testbed/results/results_schema.py)
    for c in results.get("captures", []):
        c["file"] = os.path.relpath(c["file"], out_dir)      # the folder can move: paths are relative to it
    results["report"] = [os.path.relpath(p, out_dir)
                         for p in report.write(results, fabric, timeline, out_dir, summary_table(results), queues)]
    # whole or not at all: a run killed while writing leaves the last results.json (or none), never half of one
    path = os.path.join(out_dir, "results.json")
    with open(path + ".part", "w") as f:
        json.dump(results, f, indent=2)
    os.replace(path + ".part", path)


def summary_table(results: dict) -> str:
    """A short human summary: one row per workload, then the checks."""
    rows = [f"{'workload':<22} {'ok':<4} {'wall s':>7} {'idle %':>7}  measurement"]
    tables = []
    for w in results["workloads"]:
        kind = REGISTRY[w["type"]]
        what = kind.summary(w)
        tables += kind.tables(w)
        rows.append(f"{w['name']:<22} {'yes' if w['ok'] else 'NO':<4} {w['wall_s']:>7.2f} "
                    f"{w['cpu_idle_mean_pct'] if w['cpu_idle_mean_pct'] is not None else '-':>7}  {what}")
    rows += [""] + [line for t in tables for line in (t, "")]
    rows += [outcomes.describe(f) for f in results.get("faults", [])]
    if results.get("faults"):
        rows.append("")
    for c in results["checks"]:
        rows.append(f"[{'PASS' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}")
    return "\n".join(rows)
