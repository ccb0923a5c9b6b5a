"""Wang et al., "Rail-only: A Low-Cost High-Performance Network for Training LLMs with Trillion Parameters".

Its claims beside ours:
- Table II, cell by cell: switches, transceivers and the cost and power saved at 32768 and 65536 GPUs (the
  planner, computed; the unit prices are fitted to the paper's savings, which it gives without prices);
- all-to-all on rail-only (two steps, through the HB domain) against rail-optimized: the time ratio its formula
  gives for the emulated fabric's C_S and C_F, against the ratio measured;
- hierarchical AllGather: the measured time against the paper's formula (rail step, then HB step);
- a dense model's iteration takes the same time on rail-only as on rail-optimized: the ratio, measured on the
  same (2, 2, 2) plan with the same message sizes on both.
"""
from __future__ import annotations

import os
from typing import Callable

from testbed.fabric.kinds import RAIL_ONLY, RAIL_OPTIMIZED
from testbed.papers import REPRODUCED, Claim, short_of_cpu

NAME = "rail-only"
TITLE = 'Wang et al., "Rail-only: A Low-Cost High-Performance Network for Training LLMs with Trillion Parameters"'
SOURCE = "the Rail-only slides among the seeds: Table II, the all-to-all and hierarchical AllGather formulas, §5"

# Table II (GH200 HB domains of 256 GPUs): GPUs, radix, switches SOTA / rail-only, transceivers SOTA / rail-only,
# cost and power saved (percent).
TABLE_II = (
    (32768, 64, 2560, 1536, 196608, 131072, 38, 37),
    (32768, 128, 1280, 256, 196608, 65536, 77, 75),
    (32768, 256, 384, 128, 131072, 65536, 62, 60),
    (65536, 64, 5120, 3072, 393216, 262144, 38, 37),
    (65536, 128, 2560, 1536, 393216, 262144, 38, 37),
    (65536, 256, 1280, 256, 393216, 131072, 77, 75),
)

# The emulated runs: quick fits in a few minutes, full repeats them with larger messages.
SETTINGS = {True: {"repeats": 1, "size": "4MiB", "nic_mbps": 5, "target_s": 6.0, "micro_batches": 2},
            False: {"repeats": 3, "size": "4MiB", "nic_mbps": 5, "target_s": 15.0, "micro_batches": 4}}
GRID = (2, 4)               # servers x GPUs per server for the collectives
TRAINING_GRID = (4, 2)      # and for the (2, 2, 2) iteration
PLAN = {"tp": 2, "pp": 2, "dp": 2}


def claims(quick: bool, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    return table_ii() + measured(SETTINGS[quick], out_dir, echo)


def table_ii() -> list[Claim]:
    from testbed.planning.costs import UnitCosts, savings
    from testbed.planning.counts import PAPER_HB_SIZE, count
    out = []
    for gpus, radix, sw_sota, sw_ro, tr_sota, tr_ro, cost, power in TABLE_II:
        sota, rail_only = (count(k.name, gpus, PAPER_HB_SIZE, radix) for k in (RAIL_OPTIMIZED, RAIL_ONLY))
        saved = savings(sota, rail_only, UnitCosts())
        config = f"{gpus} GPUs, radix {radix}, HB domains of {PAPER_HB_SIZE} (testbed plan)"
        for label, paper, ours, unit in (("switches, rail-optimized", sw_sota, sota.switches, ""),
                                         ("switches, rail-only", sw_ro, rail_only.switches, ""),
                                         ("transceivers, rail-optimized", tr_sota, sota.transceivers, ""),
                                         ("transceivers, rail-only", tr_ro, rail_only.transceivers, ""),
                                         ("cost saved", cost, round(100 * saved.cost_fraction), "%"),
                                         ("power saved", power, round(100 * saved.power_fraction), "%")):
            why = "unit prices fitted to the paper's savings (it gives none)" if unit else ""
            out.append(Claim(f"table2-{gpus}-{radix}-{label.replace(', ', '-').replace(' ', '-')}",
                             f"Table II, {gpus} GPUs, radix {radix}: {label}", paper, 0.0, config, [ours], unit,
                             computed=True, why=why))
    return out


def measured(s: dict, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    from testbed.model.bounds import Cluster, time_model
    ratios, hier, iteration, idle = [], [], [], {}
    for i in range(s["repeats"]):
        echo(f"rail-only: collectives and a (2, 2, 2) iteration on both fabrics, round {i + 1} of {s['repeats']}")
        ro, opt = (_run(kind, s, os.path.join(out_dir, f"{kind.name}-{i + 1}")) for kind in (RAIL_ONLY, RAIL_OPTIMIZED))
        ratios.append(ro["alltoall"]["seconds"] / opt["alltoall"]["seconds"])
        hier.append(1 / ro["allgather"]["bus_ratio"])
        iteration.append(ro["iteration"] / opt["iteration"])
        runs = {RAIL_ONLY.name: ro, RAIL_OPTIMIZED.name: opt}
        for kind, r in runs.items():
            for name, pct in r["idle"].items():
                idle.setdefault(name, []).append(pct)
    servers, per = GRID
    grid = f"{servers}x{per}, NIC {s['nic_mbps']:g} Mbit/s, HB 9x NIC, {s['size']}, {s['repeats']} run(s)"
    x, y = per, servers
    c = Cluster(x, y, 1.0, 9.0)
    model_ratio = time_model("alltoall", "two-step", 1.0, c) / time_model("alltoall", "direct", 1.0, c)
    out = [
        Claim("alltoall-overhead", "all-to-all time, rail-only (two steps via the HB domain) / rail-optimized, "
              "as its formula gives it for C_F = 9 C_S", round(model_ratio, 4), 0.10, grid, ratios),
        Claim("hierarchical-allgather", "hierarchical AllGather time / the paper's formula "
              "(y-1)S/(xy)/C_S + (x-1)S/x/C_F", 1.0, 0.15, f"rail-only {grid}", hier),
        Claim("dense-iteration", "a dense model's iteration time, rail-only / rail-optimized (the same)", 1.0, 0.05,
              f"(2, 2, 2) on {TRAINING_GRID[0]}x{TRAINING_GRID[1]}, {s['micro_batches']} micro-batches, "
              f"NIC {s['nic_mbps']:g} Mbit/s, the same message sizes on both", iteration),
    ]
    runs_of = {"alltoall-overhead": ("alltoall",), "hierarchical-allgather": ("allgather",),
               "dense-iteration": ("iteration",)}
    for claim in out:
        least = min((p for name in runs_of[claim.key] for p in idle.get(name, [])), default=None)
        if claim.verdict != REPRODUCED:
            claim.why = short_of_cpu(least)
    return out


def _run(kind, s: dict, out_dir: str) -> dict:
    """One bring-up of a fabric kind for the collectives, one for the iteration: their figures. All-to-all goes
    direct where the network joins rails, in two steps through the HB domain where it does not (rail-only), and
    there the hierarchical AllGather runs too."""
    from testbed import runner
    from testbed.fabric.topo import build
    from testbed.workloads import training
    servers, per = GRID
    fabric = {"kind": kind.name, "servers": servers, "gpus_per_server": per, "nic_mbps": s["nic_mbps"],
              **({"spines": 2} if kind.spines else {})}
    algo = "direct" if kind.cross_rail else "two-step"
    workloads = [{"type": "collective", "name": "alltoall", "op": "alltoall", "algo": algo, "sizes": [s["size"]],
                  "iterations": 2}]
    if not kind.cross_rail:
        workloads.append({"type": "collective", "name": "allgather", "op": "allgather", "algo": "hierarchical",
                          "sizes": [s["size"]], "iterations": 2})
    done = _checked(runner.run({"name": f"paper-rail-only-{kind.name}", "fabric": fabric, "workloads": workloads},
                               out_dir + "-collectives", echo=lambda *a: None))
    rows = {w["name"]: w["rows"][0] for w in done}
    idle = {w["name"]: w["cpu_idle_mean_pct"] for w in done if w.get("cpu_idle_mean_pct") is not None}
    # the iteration: the message scale fixed from rail-optimized's prediction, so that both run the same sizes
    t_servers, t_per = TRAINING_GRID
    plan = {"plan": PLAN, "micro_batches": s["micro_batches"], "target_s": s["target_s"]}
    scale = training.make_plan(build(RAIL_OPTIMIZED.name, t_servers, t_per, nic_mbps=s["nic_mbps"], spines=2),
                               plan).scale
    t_fabric = {**fabric, "servers": t_servers, "gpus_per_server": t_per}
    spec = {"type": "training_iteration", "plan": PLAN, "micro_batches": s["micro_batches"], "scale": scale}
    doc = {"name": f"paper-rail-only-iteration-{kind.name}", "fabric": t_fabric, "workloads": [spec]}
    w, = _checked(runner.run(doc, out_dir + "-iteration", echo=lambda *a: None))
    if w.get("cpu_idle_mean_pct") is not None:
        idle["iteration"] = w["cpu_idle_mean_pct"]
    return {**rows, "iteration": w["measured"]["iteration"], "idle": idle}


def _checked(out: dict) -> list[dict]:
    failed = [c["detail"] for c in out["checks"] if not c["ok"]]
    if failed or any(not r.get("correct", True) for w in out["workloads"] for r in w.get("rows", [])):
        raise RuntimeError(f"{out.get('scenario', 'a run')} failed: {failed or 'a wrong result'}")
    return out["workloads"]
