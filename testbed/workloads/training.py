"""Workload `training_iteration`: the real traffic of one training iteration of a (p, t, d) parallelism plan, against
the analytical model T = Tcomp + Ttp + Tpp + Tdp + Tbubble.

Ranks sit as hosts.collectives.layout says (Megatron's order on GPUs filled server by server: TP groups inside an
HB domain; DP groups and pipeline neighbours on one rail of other servers when K divides t*d). Every GPU host runs
hosts.agents.training_rank: a 1F1B or GPipe schedule whose passes sleep the GPU model's compute time and run the
TP AllReduces of the activations, pipeline sends of activations and gradients, and a DP AllReduce of the gradients.

Scaling: the model (testbed.planning.prediction, the same formulas as `testbed plan --predict`) first predicts the
full-scale iteration on the cluster the run stands for (`hardware`). The emulated links are `dilation_link` =
real NIC rate / emulated NIC rate times slower; message sizes are multiplied by `scale`, so every transfer takes
dilation = scale x dilation_link times longer than at full scale, and compute sleeps are stretched by the same
factor. The emulated run is then compared with the prediction for exactly the sizes and link rates it used, and
measured / dilation is the full-scale equivalent (exact when the fabric keeps the cluster's HB/NIC rate ratio).

Measured phases come from the rank that finished last (the critical path): its compute sleeps, TP AllReduces and DP
AllReduce; the pipeline transfer time is m x (mean activation send + mean gradient send) over all pipeline sends (a
send completes without the receiver, so its duration is the transfer); the bubble is the rest of the iteration
(waiting for other stages), less the rank's own checking overhead.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from hosts.spec.rank import Parallelism, TrainingRankSpec
from testbed.fabric import ovs
from testbed.planning.prediction import Prediction
from testbed.runtime.launch import run_on_hosts
from testbed.scenario.schema import NAME, POSITIVE_INT, RATE
from testbed.workloads import collective_fabric, collective_rows, rank_setup, traffic
from testbed.workloads.training_plan import Plan, make_plan, settings
from testbed.workloads.training_report import (  # noqa: F401 (its part of the report)
    RESULT_SCHEMA, report_plots, report_section)

# This workload's part of the scenario schema (the scenario file's `workloads:` items of its type).
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type", "plan"],
    "description": "The real traffic of training iterations of a (tp, pp, dp) plan, scaled to the emulated "
                   "links, against the analytical model.",
    "properties": {
        "type": {"const": "training_iteration", "description": "Training iterations."}, "name": NAME,
        "plan": {"type": "object", "additionalProperties": False, "required": ["tp", "pp", "dp"],
                 "description": "The parallelism; tp x pp x dp must be the fabric's GPU count.",
                 "properties": {"tp": {**POSITIVE_INT, "description": "Tensor-parallel degree (divides "
                                       "gpus_per_server)."},
                                "pp": {**POSITIVE_INT, "description": "Pipeline stages (divides model.layers)."},
                                "dp": {**POSITIVE_INT, "description": "Data-parallel degree."}}},
        "micro_batches": {"type": "integer", "minimum": 1, "maximum": 64, "default": 4,
                          "description": "Micro-batches per iteration."},
        "schedule": {"enum": ["1f1b", "gpipe"], "default": "1f1b", "description": "The pipeline schedule."},
        "model": {"type": "object", "additionalProperties": False, "default": {},
                  "description": "The full-scale model the run stands for.",
                  "properties": {"layers": {**POSITIVE_INT, "default": 4, "description": "Transformer layers."},
                                 "hidden": {**POSITIVE_INT, "default": 8192, "description": "Hidden size."},
                                 "seq_len": {**POSITIVE_INT, "default": 2048, "description": "Sequence length."},
                                 "micro_batch": {**POSITIVE_INT, "default": 1, "description": "Sequences per "
                                                 "micro-batch."},
                                 "params": {**RATE, "default": 3.2e9, "description": "Parameter count."},
                                 "bytes_per_param": {"enum": [2, 4], "default": 2,
                                                     "description": "2 (float16) or 4 (float32)."},
                                 "recompute": {"type": "boolean", "default": True,
                                               "description": "Activation recomputation in the backward pass."}}},
        "hardware": {"type": "object", "additionalProperties": False, "default": {},
                     "description": "The full-scale cluster the run stands for.",
                     "properties": {"gpu_tflops": {**RATE, "default": 989.0, "description": "Peak TFLOP/s per GPU."},
                                    "nic_gbps": {**RATE, "default": 400.0, "description": "NIC rate, Gbit/s."},
                                    "hb_gbps": {**RATE, "default": 3600.0, "description": "HB-domain rate, Gbit/s."},
                                    "utilisation": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
                                                    "default": 0.5, "description": "The fraction of peak reached."}}},
        "scale": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
                  "description": "Message sizes x this. Default: what brings an iteration to target_s."},
        "target_s": {"type": "number", "minimum": 1, "maximum": 600, "default": 15.0,
                     "description": "The emulated iteration's length in seconds (unless scale is given)."},
        "iterations": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1,
                       "description": "Iterations run."},
        "check": {"type": "boolean", "default": True,
                  "description": "Check the AllReduces' results against numpy's, and the pipeline data."},
        "timeout_s": {"type": "number", "minimum": 1, "maximum": 3600, "default": 60,
                      "description": "Seconds a rank waits on its peers before failing."},
        "expect": {"type": "object", "additionalProperties": False, "default": {},
                   "description": "Checks on the figures.",
                   "properties": {"max_ratio": {"type": "number", "exclusiveMinimum": 0,
                                                "description": "Fail if measured / predicted iteration time is "
                                                               "higher. Default: no such check."}}},
    },
}


PHASES = ("comp", "tp", "pp", "dp", "bubble", "iteration")
DTYPES = {2: "float16", 4: "float32"}


def validate(fabric, spec: dict, scenario: dict | None = None) -> None:
    make_plan(fabric, spec)


def warnings(fabric, spec: dict) -> list[str]:
    return []


def phases(pred: Prediction) -> dict:
    return {"comp": pred.comp, "tp": pred.tp, "pp": pred.pp, "dp": pred.dp, "bubble": pred.bubble,
            "iteration": pred.iteration}


def rank_spec(plan: Plan, s: dict, fabric, routing: str, peers: tuple, store: str) -> TrainingRankSpec:
    """What every rank of hosts.agents.training_rank is told (rank 0's spec: run() numbers each host's)."""
    return TrainingRankSpec(
        rank=0, peers=tuple(peers), store=store, plan=Parallelism(**s["plan"]), micro_batches=plan.m,
        schedule=s["schedule"], layers=s["model"]["layers"] // plan.layout.pp, recompute=s["model"]["recompute"],
        activation_count=plan.activation_count, gradient_count=plan.gradient_count,
        dtype=DTYPES[s["model"]["bytes_per_param"]], compute_s=plan.emulated.comp / plan.m,
        tp_algo=plan.emulated.algorithms["tp_allreduce"], dp_algo=plan.emulated.algorithms["dp_allreduce"],
        iterations=s["iterations"], check=s["check"], timeout_s=s["timeout_s"],
        **rank_setup.transport(fabric, routing))


def run(net, spec: dict) -> dict:
    fabric = net.fabric
    plan = make_plan(fabric, spec)
    s = settings(spec)
    hosts = collective_fabric.ranks(fabric)
    store = os.path.join(net.run_dir, "store", f"training-{time.monotonic_ns()}")
    os.makedirs(store)
    commands = {}
    common = rank_spec(plan, s, fabric, net.routing, rank_setup.peers(hosts), store)
    for r, h in enumerate(hosts):
        path = os.path.join(store, f"rank{r}.json")
        dataclasses.replace(common, rank=r).save(path)
        commands[h.name] = ["hosts.agents.training_rank", path]
    budget = 4 * plan.emulated.iteration * s["iterations"] + s["timeout_s"] + 30
    before = net.counters()
    try:
        out, failed = run_on_hosts(net, commands, timeout=budget, partial=True)
    finally:
        after = net.counters()
        shutil.rmtree(store, ignore_errors=True)
    failed += [o["error"] for o in out.values() if "error" in o]
    result = describe(plan, s, fabric, hosts)
    result["first_error_at"] = min((o["error_at"] for o in out.values() if "error_at" in o), default=None)
    if failed:
        result["checks"] = [{"name": "completed", "ok": False,
                             "detail": "; ".join(failed[:4]) + (f" (+{len(failed) - 4} more)" if len(failed) > 4
                                                                 else "")}]
        result["ok"] = False
        return result
    outs = sorted(out.values(), key=lambda o: o["rank"])
    result.update(measure(plan, outs))
    result["traffic"] = traffic_matrix(plan, hosts, outs)
    up = traffic.uplink_bytes(fabric, before, after)
    result.update(fabric_bytes=sum(ovs.growth(before, after, p) for p in after),
                  nic_bytes=collective_rows.send_nic_bytes(fabric, before, after),
                  spine_bytes=sum(up.values()) if up else None)
    result["checks"] = checks(plan, s, fabric, result)
    result["ok"] = all(c["ok"] for c in result["checks"])
    return result


def describe(plan: Plan, s: dict, fabric, hosts) -> dict:
    """What was run: the plan, the layout, the sizes and the predictions."""
    lay = plan.layout
    return {"type": "training_iteration", "plan": {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp},
            "micro_batches": plan.m, "schedule": s["schedule"], "gpus": lay.world, "fabric": fabric.kind,
            "model": s["model"], "hardware": s["hardware"],
            "layout": [{"rank": r, "gpu": h.name, "tp": c[0], "dp": c[1], "stage": c[2]}
                       for r, h in enumerate(hosts) for c in [lay.coords(r)]],
            "rail_aligned": plan.rail_aligned, "algorithms": plan.emulated.algorithms,
            "scale": plan.scale, "dilation_link": plan.dilation_link, "dilation": plan.dilation,
            "activation_bytes": plan.activation_count * s["model"]["bytes_per_param"],
            "gradient_bytes": plan.gradient_count * s["model"]["bytes_per_param"],
            "predicted": phases(plan.emulated),
            "bubble_ratio": {"formula": (lay.pp - 1) / (lay.pp - 1 + plan.m)},
            "full_scale": {"predicted": phases(plan.full)}}


def measure(plan: Plan, outs: list[dict]) -> dict:
    """Measured phases per iteration (critical rank; see the module docstring), averaged over the iterations."""
    lay, m = plan.layout, plan.m
    per_iteration = []
    for i in range(len(outs[0]["iterations"])):
        its = [o["iterations"][i] for o in outs]
        start = min(x["start"] for x in its)
        crit = max(range(len(its)), key=lambda r: its[r]["end"])
        c = its[crit]
        total = c["end"] - start
        fwd = [d for x in its for d in x["activation_sends"]]
        bwd = [d for x in its for d in x["gradient_sends"]]
        pp = m * (sum(fwd) / len(fwd) + sum(bwd) / len(bwd)) if fwd and bwd else 0.0
        row = {"comp": c["compute_s"], "tp": c["tp_s"], "pp": pp, "dp": c["dp_s"], "iteration": total}
        row["bubble"] = total - row["comp"] - row["tp"] - pp - row["dp"] - c["check_s"]
        per_iteration.append({**row, "critical_rank": crit, "overhead": c["check_s"]})
    mean = {k: sum(x[k] for x in per_iteration) / len(per_iteration) for k in PHASES}
    pred = phases(plan.emulated)
    ratio = {k: (mean[k] / pred[k] if pred[k] > 0 else None) for k in PHASES}
    busy = mean["iteration"] - mean["dp"]
    return {"measured": mean, "ratio": ratio, "per_iteration": per_iteration,
            "bubble_ratio": {"formula": (lay.pp - 1) / (lay.pp - 1 + m),
                             "predicted": pred["bubble"] / (pred["iteration"] - pred["dp"]),
                             "measured": mean["bubble"] / busy if busy > 0 else None},
            "full_scale": {"predicted": phases(plan.full),
                           "measured_equivalent": {k: v / plan.dilation for k, v in mean.items()}},
            "correct": {what: all(o["correct"][what] is not False for o in outs)
                        for what in ("tp", "pp", "dp")},
            "per_rank": [{"rank": o["rank"], "stage": o["stage"],
                          **{k: round(sum(x[k] for x in o["iterations"]) / len(o["iterations"]), 6)
                             for k in ("compute_s", "tp_s", "pp_send_s", "pp_recv_s", "dp_s", "check_s")},
                          "seconds": round(sum(x["end"] - x["start"] for x in o["iterations"])
                                           / len(o["iterations"]), 6),
                          "retransmits": o["counters"].get("retransmits", 0)} for o in outs]}


def traffic_matrix(plan: Plan, hosts, outs: list[dict]) -> dict:
    """Payload bytes each GPU sent each other GPU (rows: sender), per phase and in all, with the IP bytes its
    queue pairs sent (headers, acknowledgements and retransmissions included)."""
    n = len(hosts)
    by = {ph: [[0] * n for _ in range(n)] for ph in ("tp", "pp", "dp")}
    wire = [[0] * n for _ in range(n)]
    for o in outs:
        for ph, row in o["sent"].items():
            for dst, nbytes in row.items():
                by[ph][o["rank"]][int(dst)] += nbytes
        for dst, nbytes in o["wire_sent"].items():
            wire[o["rank"]][int(dst)] += nbytes
    total = [[sum(by[ph][a][b] for ph in by) for b in range(n)] for a in range(n)]
    cross_rail = sum(total[a][b] for a in range(n) for b in range(n)
                     if hosts[a].server != hosts[b].server and hosts[a].rank != hosts[b].rank)
    return {"gpus": [h.name for h in hosts], "servers": [h.server for h in hosts], "bytes": total, **by,
            "wire_bytes": wire, "expected": expected_bytes(plan, outs[0]["iterations"]), "cross_rail_bytes": cross_rail}


def expected_bytes(plan: Plan, iterations: list) -> dict:
    """Payload bytes the plan moves per phase, summed over all GPUs: TP 2(t-1) x activations per AllReduce and
    group, pipeline m activations forward and m gradients back per neighbour pair, DP 2(d-1) x gradients per
    group (ring and hierarchical alike)."""
    lay, m, it = plan.layout, plan.m, len(iterations)
    item = plan.model.act_bytes                       # bytes per parameter and per activation element
    act, grad = plan.activation_count * item, plan.gradient_count * item
    ars = m * plan.model.layers // lay.pp * (4 + 2 * plan.model.recompute)
    return {"tp": it * lay.pp * lay.dp * ars * 2 * (lay.tp - 1) * act,
            "pp": it * 2 * m * (lay.pp - 1) * lay.tp * lay.dp * act,
            "dp": it * lay.pp * lay.tp * 2 * (lay.dp - 1) * grad}


def checks(plan: Plan, s: dict, fabric, result: dict) -> list[dict]:
    tr, lay = result["traffic"], plan.layout
    out = []
    if s["check"]:
        bad = [k for k, ok in result["correct"].items() if not ok]
        out.append({"name": "correct", "ok": not bad,
                    "detail": "TP and DP AllReduce results equal numpy's, pipeline data arrived intact"
                    if not bad else f"wrong results in {', '.join(bad)}"})
    roles = lay.roles()
    hosts = collective_fabric.ranks(fabric)
    strays = [f"{ph} {tr['gpus'][a]}->{tr['gpus'][b]}" for ph in ("tp", "pp", "dp") for a, row in enumerate(tr[ph])
              for b, v in enumerate(row) if v and ph not in roles.get((a, b), ())]
    tp_out = [f"{tr['gpus'][a]}->{tr['gpus'][b]}" for a, row in enumerate(tr["tp"]) for b, v in enumerate(row)
              if v and hosts[a].server != hosts[b].server]
    sums = {ph: sum(map(sum, tr[ph])) for ph in ("tp", "pp", "dp")}
    off = [f"{ph} {sums[ph]} B (plan {tr['expected'][ph]} B)" for ph in sums if sums[ph] != tr["expected"][ph]]
    out.append({"name": "traffic matrix", "ok": not strays and not tp_out and not off,
                "detail": "; ".join(filter(None, [
                    f"bytes outside their groups: {', '.join(strays[:4])}" if strays else "",
                    f"TP bytes leave the HB domain: {', '.join(tp_out[:4])}" if tp_out else "",
                    f"bytes differ from the plan: {', '.join(off)}" if off else ""]))
                or f"TP {sums['tp']} B inside HB domains, PP {sums['pp']} B and DP {sums['dp']} B between their "
                   "groups' GPUs, as the plan says"})
    if plan.rail_aligned and fabric.design.rails:          # a ToR fabric has no rails: spines carry it there
        ok = tr["cross_rail_bytes"] == 0
        detail = f"{tr['cross_rail_bytes']} B between GPUs of different servers and rails"
        if result.get("spine_bytes") is not None:
            # a few stray control packets may cross a spine; the training traffic must not
            ok = ok and result["spine_bytes"] <= 0.01 * max(result["nic_bytes"], 1)
            detail += f"; spines carried {result['spine_bytes']} B of {result['nic_bytes']} B the NICs sent"
        out.append({"name": "rails carry it", "ok": ok, "detail": detail})
    limit = s.get("expect", {}).get("max_ratio")
    if limit is not None:
        r = result["ratio"]["iteration"]
        out.append({"name": "iteration time", "ok": r <= limit,
                    "detail": f"measured / predicted {r:.2f} (expected <= {limit})"})
    return out


def summary(result: dict) -> str:
    p = result["plan"]
    what = f"p{p['pp']} t{p['tp']} d{p['dp']} m{result['micro_batches']} {result['schedule']}"
    if "measured" not in result:
        return what + ": did not complete"
    return (f"{what}: {result['measured']['iteration']:.2f} s, predicted {result['predicted']['iteration']:.2f} s "
            f"(x{result['ratio']['iteration']:.2f})")


def table(result: dict) -> str:
    p = result["plan"]
    lines = [f"#  training_iteration p={p['pp']} t={p['tp']} d={p['dp']}, m={result['micro_batches']}, "
             f"{result['schedule']}, {result['gpus']} GPUs on {result['fabric']}; sizes x{result['scale']:.3g}, "
             f"time x{result['dilation']:.3g}",
             f"# {'phase':<10} {'predicted s':>12} {'measured s':>11} {'ratio':>6} {'full-scale ms':>14} "
             f"{'measured eq. ms':>16}"]
    if "measured" not in result:
        return "\n".join(lines + ["  (did not complete)"])
    for k in PHASES:
        r = result["ratio"][k]
        lines.append(f"  {k:<10} {result['predicted'][k]:>12.3f} {result['measured'][k]:>11.3f} "
                     f"{'-' if r is None else f'{r:.2f}':>6} {result['full_scale']['predicted'][k] * 1e3:>14.2f} "
                     f"{result['full_scale']['measured_equivalent'][k] * 1e3:>16.2f}")
    b, tr = result["bubble_ratio"], result["traffic"]
    lines.append(f"# bubble ratio (p-1)/(p-1+m) = {b['formula']:.3f}, measured {b['measured']:.3f}")
    mb = {ph: sum(map(sum, tr[ph])) / 1e6 for ph in ("tp", "pp", "dp")}
    lines.append(f"# traffic: TP {mb['tp']:.2f} MB, PP {mb['pp']:.2f} MB, DP {mb['dp']:.2f} MB; between servers "
                 f"on different rails {tr['cross_rail_bytes']} B"
                 + (f"; spines {result['spine_bytes']} B" if result.get("spine_bytes") is not None else ""))
    return "\n".join(lines)


def tables(w: dict) -> list[str]:
    return [table(w)]


def start_line(spec: dict) -> str:
    return "training_iteration"
