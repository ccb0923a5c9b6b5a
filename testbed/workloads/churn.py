"""Workload `churn`: one AllReduce job with a shared state runs for `duration_s` while GPUs fail and come back
at seeded random times (churn_plan.py): crashes, hangs, stalls and NIC cuts, each followed by the GPU's
return (gpu-restart, nic-up). The job shrinks on each failure and grows again when the GPU is back, its
state copied to it from a live peer (hosts/recovery/shared_state.py), as PCCL's churn tests do.

Reports the steps completed, the steps lost (started, then run again after a failure), the time spent in
recovery (from a failure to the first step completed after the job re-formed without it) and in growing, and
divergence: every rank's state after every step, bit for bit, against numpy's and the other ranks' (must be
none).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time

from testbed.faults import outcomes, record
from testbed.faults.schedule import Schedule
from testbed.runtime import exits, recovery
from testbed.runtime.launch import run_on_hosts
from testbed.scenario.schema import NAME, SIZE, ScenarioError, parse_size
from testbed.schema_words import INT, arr, d, dur, nullable
from testbed.workloads import churn_plan, collective, collective_fabric, rank_setup, state_parity

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type", "duration_s"],
    "description": "An AllReduce job with a shared state running for a duration while GPUs fail and come back at "
                   "seeded random times; reports steps completed and lost, time in recovery, and divergence.",
    "properties": {
        "type": {"const": "churn", "description": "Churn: failures and returns while a job runs."}, "name": NAME,
        "duration_s": {"type": "number", "minimum": 20, "maximum": 7200, "description": "How long the job runs."},
        "seed": {"type": "integer", "minimum": 0, "default": 1,
                 "description": "The fault schedule's seed: the same seed, the same faults at the same times."},
        "size": {**SIZE, "default": "64KiB", "description": "The AllReduce's (and the state's) size."},
        "algo": {"enum": ["ring", "rhd"], "default": "ring", "description": "The AllReduce algorithm."},
        "kinds": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": churn_plan.KINDS},
                  "default": churn_plan.KINDS, "description": "The failures drawn from; each GPU comes back after "
                  "(gpu-restart, or nic-up after nic-down)."},
        "interval_s": {"type": "number", "minimum": 1, "maximum": 3600, "default": 10,
                       "description": "Mean seconds between failures (after gap_s)."},
        "down_s": {"type": "array", "items": {"type": "number", "minimum": 0.5, "maximum": 600}, "minItems": 2,
                   "maxItems": 2, "default": [3, 8], "description": "A failed GPU is back after [min, max] seconds."},
        "max_down": {"type": "integer", "minimum": 1, "default": 1, "description": "GPUs out at once, at most."},
        "gap_s": {"type": "number", "minimum": 1, "maximum": 600, "default": 4,
                  "description": "Seconds between any two events at least (a re-formation ends before the next)."},
        "timeout_s": {"type": "number", "minimum": 1, "maximum": 3600, "default": 20,
                      "description": "Seconds a rank waits on its peers before a step fails."},
    },
}

# Its keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {
    "duration_s": dur("how long the job ran."), "seed": INT, "ranks": INT, "final_world": d(INT, "Ranks at the end."),
    "steps_completed": INT, "steps_lost": d(INT, "Started steps run again after failures."),
    "recovery_s": dur("summed over failures: from the fault to the first step completed after the job re-formed."),
    "rejoin_s": dur("summed over rejoins: from the admission to the first step completed with the newcomers."),
    "failures": INT, "rejoins": INT,
    "divergence": d(nullable({"type": "object"}), "State parity: divergent step states and mismatched copies."),
    "epochs": arr(collective.RECOVERY, "One record per re-formed epoch (policy rejoin: a growth)."),
    "events": arr(record.RECORD, "The seeded faults and their outcomes."),
}


def quiet_s(spec: dict) -> float:
    """The end of the run with no event: the last GPU to come back has rejoined before the job stops."""
    return 2 * spec.get("gap_s", 4) + 2


def _collective(spec: dict) -> dict:
    return {"op": "allreduce", "algo": spec.get("algo", "ring"), "sizes": [spec.get("size", "64KiB")],
            "recovery": "shrink", "state": True, "timeout_s": spec.get("timeout_s", 20), "iterations": 1,
            "warmup": 0}


def schedule(fabric, spec: dict) -> list[dict]:
    down = spec.get("down_s", [3, 8])
    return churn_plan.plan(spec.get("seed", 1), spec["duration_s"], [h.name for h in collective_fabric.ranks(fabric)],
                           spec.get("kinds", churn_plan.KINDS), spec.get("interval_s", 10), (down[0], down[1]),
                           spec.get("max_down", 1), spec.get("gap_s", 4), quiet_s(spec))


def validate(fabric, spec: dict, scenario: dict | None = None) -> None:
    world = len(collective_fabric.ranks(fabric))
    if world < spec.get("max_down", 1) + 2:
        raise ScenarioError(f"churn with max_down {spec.get('max_down', 1)} needs at least "
                            f"{spec.get('max_down', 1) + 2} GPUs; the fabric has {world}")
    down = spec.get("down_s", [3, 8])
    if down[0] > down[1]:
        raise ScenarioError(f"churn down_s [{down[0]}, {down[1]}]: the minimum exceeds the maximum")
    gap = spec.get("gap_s", 4)
    if spec["duration_s"] < quiet_s(spec) + gap + down[0] + gap * spec.get("max_down", 1):   # not one fault fits
        raise ScenarioError(f"churn duration_s {spec['duration_s']} leaves no time for a fault (the last "
                            f"{quiet_s(spec):g} s are quiet)")
    collective.validate(fabric, _collective(spec))


def warnings(fabric, spec: dict) -> list[str]:
    return [] if schedule(fabric, spec) else ["churn: the schedule has no fault (duration too short for the interval)"]


def run(net, spec: dict) -> dict:
    fabric = net.fabric
    validate(fabric, spec)
    hosts = collective_fabric.ranks(fabric)
    peers = rank_setup.peers(hosts)
    store = os.path.join(net.run_dir, "store", f"churn-{time.monotonic_ns()}")
    os.makedirs(store)
    size = parse_size(spec.get("size", "64KiB"))
    base = dataclasses.replace(collective._base_spec(net, _collective(spec), peers, store, size),
                               until=time.time() + spec["duration_s"])
    commands = collective.rank_commands(store, base, hosts)
    budget = spec["duration_s"] + spec.get("timeout_s", 20) + 60
    manager = recovery.JobManager(net, base, store, [p.entry() for p in peers], budget).start()
    plan = Schedule(net, schedule(fabric, spec))
    plan.start()
    try:
        out, failed = run_on_hosts(net, commands, timeout=budget, partial=True, on_exit=exits.reporter(store))
        # Every first rank may have failed by now and come back as a rank the manager started: the job, and
        # its faults, go on until it ends.
        while time.time() < base.until and manager.running():
            time.sleep(0.2)
    finally:
        plan.stop()
        manager.stop()
        out.update(manager.outputs)
        failed += manager.errors
        shutil.rmtree(store, ignore_errors=True)
    return report(spec, len(hosts), out, failed, manager, plan, fabric)


def report(spec: dict, world: int, out: dict, failed: list[str], manager, plan, fabric) -> dict:
    """The run's figures and checks from the ranks' outputs and the faults' log."""
    failed = [e for e in failed if e.split(":", 1)[0] not in manager.fenced] + \
        [o["error"] for o in out.values() if "error" in o and o.get("host") not in manager.fenced]
    done = [o for o in out.values() if "steps" in o]
    epochs = collective.recovery_records(out.values(), "shrink", manager)
    events = plan.results([])
    outcomes.fill(events, [{"recoveries": epochs}], plan.t0, fabric)
    failures = [r for r in epochs if r["policy"] != "rejoin"]
    parity = state_parity.check(done, done[0]["count"]) if done else None
    result = {
        "type": "churn", "duration_s": spec["duration_s"], "seed": spec.get("seed", 1), "ranks": world,
        "final_world": done[0]["world"] if done else 0,
        "steps_completed": max((o["steps"] for o in done), default=0),
        "steps_lost": sum(r["lost_steps"] or 0 for r in failures),
        "recovery_s": round(sum(e["first_success_s"] - e["at_s"] for e in events if e["kind"] in churn_plan.RETURN
                                and e.get("first_success_s") is not None), 3),
        "rejoin_s": round(sum(r["first_success_at"] - r["decided_at"] for r in epochs
                              if r["policy"] == "rejoin" and r["first_success_at"] and r["decided_at"]), 3),
        "failures": len(failures), "rejoins": sum(len(r["joined"] or []) for r in epochs if r["joined"]),
        "divergence": parity, "epochs": epochs, "events": events}
    result["checks"] = checks(result, failed, done, events)
    result["ok"] = all(c["ok"] for c in result["checks"])
    return result


def checks(result: dict, failed: list[str], done: list[dict], events: list[dict]) -> list[dict]:
    parity = result["divergence"] or {}
    missed = [f"{e['kind']} {e['target']} at {e['at_s']} s" for e in events
              if e["at_s"] is None or e.get("recovered_s") is None]
    return [
        {"name": "completed", "ok": not failed and bool(done) and len(done) == result["final_world"],
         "detail": "; ".join(failed[:3]) or f"{len(done)} ranks finished after {result['steps_completed']} steps"},
        {"name": "divergence", "ok": bool(parity) and parity["ranks"] == len(done) and not parity["divergent"]
         and not parity["sync_mismatches"],
         "detail": f"{parity.get('divergent')} divergent step states, {parity.get('sync_mismatches')} mismatched "
                   f"copies over {parity.get('steps')} steps and {parity.get('ranks')} ranks (numpy's state)"},
        {"name": "recovered", "ok": not missed and bool(events),
         "detail": "every failure recovered and every GPU rejoined" if not missed else
                   f"{len(missed)} of {len(events)} faults without recovery: {', '.join(missed[:3])}"},
    ]


def summary(w: dict) -> str:
    parity = w.get("divergence") or {}
    return (f"{w['steps_completed']} steps in {w['duration_s']:g} s, {w['failures']} failures, {w['rejoins']} "
            f"rejoins, {w['steps_lost']} steps lost, {w['recovery_s']:.1f} s in recovery, "
            f"{w['rejoin_s']:.1f} s growing, divergence {parity.get('divergent', '?')}")


def tables(w: dict) -> list[str]:
    lines = [f"# churn, seed {w['seed']}: fault, at, detected/admitted, re-formed, first step after (s)"]
    for e in w["events"]:
        lines.append(f"  {e['kind']:<12} {e['target']:<8} {e['at_s']!s:>8} {e.get('detected_s')!s:>8} "
                     f"{e.get('recovered_s')!s:>8} {e.get('first_success_s')!s:>8}")
    return ["\n".join(lines)]


def start_line(spec: dict) -> str:
    return " ".join(["churn"] + ([str(spec["op"])] if "op" in spec else []))


def report_section(workloads: list[dict]) -> list[str]:
    return []


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    return []
