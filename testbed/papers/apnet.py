"""The communication of dense-model training from its (p, t, d) plan (the APNet slides among the seeds): which GPU
pairs talk, how many bytes, the bubble and the iteration time.

Its claims beside ours, from real (2, 2, 2) iterations on a rail-optimized 4x2 fabric:
- the plan determines the communication matrix: no bytes between GPUs the plan does not pair;
- the traffic volume of each phase is computable: TP 2(t-1) x activations per AllReduce, PP m activations and m
  gradients per neighbour pair, DP 2(d-1) x the parameters' bytes per group; the bytes counted at the ranks;
- the bubble ratio is about (p-1)/(p-1+m);
- the analytical iteration model (T = Tcomp + Ttp + Tpp + Tdp + Tbubble) is about 90% accurate: measured over
  predicted iteration time, with the emulated links' rates as its effective bandwidths.
"""
from __future__ import annotations

import os
from typing import Callable

from testbed.fabric.kinds import RAIL_OPTIMIZED
from testbed.papers import REPRODUCED, Claim, short_of_cpu

NAME = "apnet"
TITLE = "The communication patterns of distributed training: matrix, volume and iteration model (APNet)"
SOURCE = "the APNet slides among the seeds: the communication matrix, traffic volume and Titer formulas"

SETTINGS = {True: {"repeats": 1, "micro_batches": (2,), "target_s": 6.0},
            False: {"repeats": 3, "micro_batches": (2, 8), "target_s": 15.0}}
GRID = (4, 2)
NIC_MBPS = 5
PLAN = {"tp": 2, "pp": 2, "dp": 2}


def claims(quick: bool, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    s = SETTINGS[quick]
    out = []
    for m in s["micro_batches"]:
        runs = []
        for i in range(s["repeats"]):
            echo(f"apnet: a (2, 2, 2) iteration with {m} micro-batches, run {i + 1} of {s['repeats']}")
            runs.append(_iteration(m, s["target_s"], os.path.join(out_dir, f"m{m}-{i + 1}")))
        out += _claims_of(m, runs, s["repeats"])
    return out


def _claims_of(m: int, runs: list[dict], repeats: int) -> list[Claim]:
    config = (f"(2, 2, 2), {m} micro-batches, 1F1B, rail-optimized {GRID[0]}x{GRID[1]}, NIC {NIC_MBPS} Mbit/s, "
              f"{repeats} run(s)")
    first = runs[0]["traffic"]
    out = [Claim(f"m{m}-matrix", "bytes between GPU pairs the (p, t, d) plan does not pair", 0, 0.0, config,
                 [r["stray_bytes"] for r in runs], " B")]
    for ph, label in (("tp", "TP AllReduce"), ("pp", "pipeline activations and gradients"),
                      ("dp", "DP AllReduce")):
        out.append(Claim(f"m{m}-volume-{ph}", f"{label}: bytes per iteration, as the plan computes them",
                         first["expected"][ph], 0.0, config, [sum(map(sum, r["traffic"][ph])) for r in runs], " B"))
    out.append(Claim(f"m{m}-bubble", "bubble ratio Tbubble / Titer, against (p-1)/(p-1+m)",
                     round(runs[0]["bubble_ratio"]["formula"], 4), 0.15, config,
                     [r["bubble_ratio"]["measured"] for r in runs]))
    out.append(Claim(f"m{m}-iteration", "iteration time, measured / the model's (the paper: about 90% accurate)",
                     1.0, 0.10, config, [r["ratio"]["iteration"] for r in runs]))
    least = min(r["cpu_idle_mean_pct"] for r in runs if r.get("cpu_idle_mean_pct") is not None) \
        if any(r.get("cpu_idle_mean_pct") is not None for r in runs) else None
    for claim in out:
        if claim.verdict != REPRODUCED:
            claim.why = short_of_cpu(least)
    return out


def _iteration(m: int, target_s: float, out_dir: str) -> dict:
    """One (2, 2, 2) iteration: the training workload's result, with the bytes that crossed unpaired GPUs."""
    from testbed import runner
    from testbed.fabric.topo import build
    from testbed.workloads import training
    servers, per = GRID
    spec = {"type": "training_iteration", "plan": PLAN, "micro_batches": m, "target_s": target_s}
    fabric = {"kind": RAIL_OPTIMIZED.name, "servers": servers, "gpus_per_server": per, "nic_mbps": NIC_MBPS,
              "spines": 2}
    out = runner.run({"name": f"paper-apnet-m{m}", "fabric": fabric, "workloads": [spec]}, out_dir,
                     echo=lambda *a: None)
    w = out["workloads"][0] if out["workloads"] else {}
    if "measured" not in w or not all(w["correct"].values()):
        raise RuntimeError(f"apnet iteration m={m}: {[c['detail'] for c in out['checks'] if not c['ok']]}")
    roles = training.make_plan(build(RAIL_OPTIMIZED.name, servers, per, nic_mbps=NIC_MBPS, spines=2),
                               spec).layout.roles()
    tr = w["traffic"]
    stray = sum(v for ph in ("tp", "pp", "dp") for a, row in enumerate(tr[ph]) for b, v in enumerate(row)
                if v and ph not in roles.get((a, b), ()))
    return {**w, "stray_bytes": stray}
