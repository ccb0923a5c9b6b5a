"""Wang et al., "Rail-only: A Low-Cost High-Performance Network for Training LLMs with Trillion Parameters".

Its claims beside ours:
- Table II, cell by cell: switches, transceivers and the cost and power saved at 32768 and 65536 GPUs (the
  planner, computed; the unit prices are fitted to the paper's savings, which it gives without prices);
- all-to-all on rail-only (two steps, through the HB domain) against rail-optimized: the time ratio its formula
  gives for the emulated fabric's C_S and C_F, against the ratio measured;
- hierarchical AllGather: the measured time against the paper's formula (rail step, then HB step);
- a dense model's iteration takes the same time on rail-only as on rail-optimized: the ratio, measured on the
  same (2, 2, 2) plan with the same message sizes on both;
- Fig. 3, the traffic of Megatron-LM: TP over 75% of the bytes, over 99% of GPU pairs idle; from the rail-only
  iteration's traffic matrix (bytes the ranks sent each other, per phase), and from the plan's volume formulas
  and pairing at the paper's scale (GPT-1T on 3072 GPUs, (t, p, d) = (8, 64, 6), 512 micro-batches);
- jobs tiled on rail-aligned blocks do not disturb each other: two 4-GPU ring AllReduce jobs (the concurrent
  workload, placement policy rail-aligned) run as fast together as alone; placed across the rails, rail-only
  has no path for them, and rail-optimized 1:1 runs them through the spines, where they slow each other down.
"""
from __future__ import annotations

import os
from typing import Callable

from testbed.fabric.kinds import RAIL_ONLY, RAIL_OPTIMIZED
from testbed.papers import AT_LEAST, REPRODUCED, Claim, short_of_cpu

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
# Megatron-LM's GPT-1T (Narayanan et al., SC'21): the paper's Fig. 3 setting at its largest
GPT_1T = {"tp": 8, "pp": 64, "dp": 6, "micro_batches": 512, "layers": 128, "hidden": 25600, "seq_len": 2048,
          "params": 1.0e12}
TILING = "scenarios/concurrent_tiling.yaml"     # two 4-GPU rings, rail-aligned on rail-only 2x4
# the poor placement: each job on two rails of one server and the two other rails of the other
POOR = ["workloads.0.jobs.0.placement={hosts: [s0g0, s0g1, s1g2, s1g3]}",
        "workloads.0.jobs.1.placement={hosts: [s0g2, s0g3, s1g0, s1g1]}"]
RAIL_OPTIMIZED_1_1 = [f"fabric.kind={RAIL_OPTIMIZED.name}", "fabric.spines=2", "fabric.oversubscription=1"]


def claims(quick: bool, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    return table_ii() + measured(SETTINGS[quick], out_dir, echo) + tiling(SETTINGS[quick], out_dir, echo)


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
    ratios, hier, iteration, idle, traffic = [], [], [], {}, []
    for i in range(s["repeats"]):
        echo(f"rail-only: collectives and a (2, 2, 2) iteration on both fabrics, round {i + 1} of {s['repeats']}")
        ro, opt = (_run(kind, s, os.path.join(out_dir, f"{kind.name}-{i + 1}")) for kind in (RAIL_ONLY, RAIL_OPTIMIZED))
        ratios.append(ro["alltoall"]["seconds"] / opt["alltoall"]["seconds"])
        hier.append(1 / ro["allgather"]["bus_ratio"])
        iteration.append(ro["iteration"] / opt["iteration"])
        traffic.append(ro["traffic"])
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
    return out + traffic_shares(traffic, f"the rail-only (2, 2, 2) iteration on {TRAINING_GRID[0]}x"
                                         f"{TRAINING_GRID[1]}, {s['micro_batches']} micro-batches")


def tp_share(traffic: dict) -> float:
    """TP's share of the payload bytes the ranks sent (a training_iteration's traffic matrices)."""
    tp = sum(map(sum, traffic["tp"]))
    return tp / (tp + sum(map(sum, traffic["pp"])) + sum(map(sum, traffic["dp"])))


def idle_pairs(traffic: dict) -> float:
    """The share of (unordered) GPU pairs that exchanged no byte, either way."""
    m, n = traffic["bytes"], len(traffic["bytes"])
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    return sum(1 for a, b in pairs if not m[a][b] and not m[b][a]) / len(pairs)


def paper_scale() -> tuple[float, float]:
    """TP's share of the bytes and the share of idle GPU pairs for GPT-1T at the paper's scale: the plan's volume
    formulas (training's expected_bytes) and its pairing (Layout.roles), both held by the measured runs."""
    from types import SimpleNamespace
    from hosts.collectives.layout import Layout
    from testbed.workloads.training import expected_bytes
    from testbed.workloads.training_plan import MODEL
    g = GPT_1T
    layout = Layout(g["tp"], g["pp"], g["dp"])
    model = SimpleNamespace(act_bytes=MODEL["bytes_per_param"], layers=g["layers"], recompute=MODEL["recompute"])
    plan = SimpleNamespace(layout=layout, m=g["micro_batches"], model=model,
                           activation_count=g["seq_len"] * g["hidden"] * MODEL["micro_batch"],
                           gradient_count=int(g["params"] / (g["tp"] * g["pp"])))
    volume = expected_bytes(plan, [None])
    busy = {tuple(sorted(pair)) for pair in layout.roles()}
    n = layout.world
    return volume["tp"] / sum(volume.values()), 1 - len(busy) / (n * (n - 1) / 2)


def traffic_shares(traffic: list[dict], config: str) -> list[Claim]:
    """Fig. 3: TP over 75% of the bytes, over 99% of GPU pairs idle; measured, and at the paper's scale."""
    tp_1t, idle_1t = paper_scale()
    g = GPT_1T
    big = (f"GPT-1T, (t, p, d) = ({g['tp']}, {g['pp']}, {g['dp']}) on {g['tp'] * g['pp'] * g['dp']} GPUs, "
           f"{g['micro_batches']} micro-batches: the plan's volume formulas and pairing (computed)")
    n = len(traffic[0]["bytes"]) if traffic else 0
    out = [Claim("traffic-tp-share", "Fig. 3(a): TP's share of the bytes sent (over 75%)", 0.75, 0.0, config,
                 [tp_share(t) for t in traffic], bound=AT_LEAST),
           Claim("traffic-idle-pairs", "Fig. 3(b): the share of GPU pairs that carry no traffic (over 99%)", 0.99,
                 0.0, config, [idle_pairs(t) for t in traffic], bound=AT_LEAST),
           Claim("traffic-tp-share-gpt-1t", "Fig. 3(a) at the paper's scale: TP's share of the bytes (over 75%)",
                 0.75, 0.0, big, [round(tp_1t, 4)], computed=True, bound=AT_LEAST),
           Claim("traffic-idle-pairs-gpt-1t", "Fig. 3(b) at the paper's scale: GPU pairs with no traffic "
                 "(over 99%)", 0.99, 0.0, big, [round(idle_1t, 5)], computed=True, bound=AT_LEAST)]
    if out[0].verdict != REPRODUCED:
        out[0].why = ("TP's bytes grow with the micro-batches, DP's (the gradients) do not: with a few micro-batches "
                      f"the gradients weigh more; at the paper's 512 micro-batches the same formulas give TP "
                      f"{100 * tp_1t:.0f}% (the computed row)")
    if out[1].verdict != REPRODUCED:
        out[1].why = (f"a GPU talks to its TP, DP and pipeline peers whatever the cluster's size, so the idle share "
                      f"grows with the GPUs: {n} GPUs leave {100 * out[1].median:.0f}% of pairs idle, the paper's 3072 "
                      f"{100 * idle_1t:.2f}% (the computed row)")
    return out


def tiling(s: dict, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    """Two 4-GPU rings on rail-aligned blocks of rail-only: their slowdown together; the poor placement refused
    on rail-only and measured on rail-optimized 1:1 (single path), for contrast."""
    from testbed import runner, scenario
    from testbed.scenario.schema import ScenarioError
    aligned, poor, refused, jobs = [], [], [], []
    for i in range(s["repeats"]):
        echo(f"rail-only: two ring jobs tiled on rail-aligned blocks, and placed across the rails, round {i + 1} "
             f"of {s['repeats']}")
        tiled = _jobs(runner.run(scenario.load(TILING), os.path.join(out_dir, f"tiled-{i + 1}"),
                                 echo=lambda *a: None))
        aligned += [j["slowdown"] for j in tiled]
        jobs += tiled
        try:
            doc = scenario.load(TILING, POOR)
            runner.check(doc, runner.fabric_of(doc))
            refused.append(0.0)
        except ScenarioError:
            refused.append(1.0)
        poor += [j["slowdown"] for j in _jobs(runner.run(scenario.load(TILING, RAIL_OPTIMIZED_1_1 + POOR),
                                                         os.path.join(out_dir, f"poor-{i + 1}"),
                                                         echo=lambda *a: None))]
    spread = f"{min(poor):.2f}-{max(poor):.2f}" if poor else "-"
    config = (f"two 4-GPU ring AllReduce jobs, 1 MiB, rail-only 2x4, NIC 5 Mbit/s, placement rail-aligned, "
              f"{s['repeats']} run(s); placed across the rails on rail-optimized 1:1 (2 spines, single path): "
              f"slowdown {spread}")
    out = [Claim("tiling-rail-aligned", "jobs tiled on rail-aligned blocks of rail-only do not disturb each other: "
                 "each job's time together / alone", 1.0, 0.10, config, aligned),
           Claim("tiling-poor-refused", "placed across the rails, rail-only has no path for the jobs (1 = refused "
                 "before bring-up)", 1.0, 0.0, "the same jobs, each on two rails of one server and the other two "
                 "rails of the other", refused)]
    if out[0].verdict != REPRODUCED:
        retx = {when: sum(r.get("retransmits", 0) for j in jobs for r in (j[when] or {}).get("rows") or [])
                for when in ("alone", "together")}
        out[0].why = short_of_cpu(min((j["idle"] for j in jobs if j["idle"] is not None), default=None)) or (
            f"the jobs' ranks retransmitted {retx['alone']} packets alone and {retx['together']} together: "
            "a loss, not a shared link, moved the times")
    return out


def _jobs(out: dict) -> list[dict]:
    """A concurrent run's jobs, each with the CPU idle of its workload."""
    jobs = [{**j, "idle": w.get("cpu_idle_mean_pct")} for w in _checked(out) for j in w.get("jobs", [])]
    if not jobs or any(j["slowdown"] is None for j in jobs):
        raise RuntimeError(f"{out.get('scenario', 'a tiling run')}: a job has no slowdown")
    return jobs


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
    return {**rows, "iteration": w["measured"]["iteration"], "traffic": w["traffic"], "idle": idle}


def _checked(out: dict) -> list[dict]:
    failed = [c["detail"] for c in out["checks"] if not c["ok"]]
    if failed or any(not r.get("correct", True) for w in out["workloads"] for r in w.get("rows", [])):
        raise RuntimeError(f"{out.get('scenario', 'a run')} failed: {failed or 'a wrong result'}")
    return out["workloads"]
