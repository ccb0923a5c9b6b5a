"""Addanki et al., "Challenging the Need for Packet Spraying in Large-Scale Distributed Training".

Its claim: a single-path transport with minimal flow splitting at the application layer is equivalent to ideal
packet spraying in maximum congestion, so a collective completes as fast. Ours: an all-to-all and a rank-order
ring AllReduce over a 1:1 rail-optimized fabric whose uplinks are shaped like every link (a collision costs
time), once with packet spraying (`routing.mode: spray`: the hosts vary the source port per packet and the
switches hash it) and with flow splitting (`split:K`: each message striped over K queue pairs, K the paths
between two rails and twice that), the same fabric and sizes, delay-based congestion control on all:
- maximum congestion: the busiest uplink's bytes over the mean uplink's, splitting's over spraying's;
- completion: each collective's time with splitting over its time with spraying.
"""
from __future__ import annotations

import os
from typing import Callable

from testbed.fabric.kinds import RAIL_OPTIMIZED
from testbed.papers import REPRODUCED, Claim, short_of_cpu

NAME = "spraying"
TITLE = 'Addanki et al., "Challenging the Need for Packet Spraying in Large-Scale Distributed Training"'
SOURCE = "its abstract among the seeds: minimal flow splitting equals ideal packet spraying in maximum congestion"

SETTINGS = {True: {"repeats": 1, "size": "2MiB"}, False: {"repeats": 3, "size": "2MiB"}}
GRID, SPINES, NIC_MBPS = (2, 4), 2, 5
SPLITS = (SPINES, 2 * SPINES)       # sub-flows per flow: as many as the paths (minimal), and twice that
WORKLOADS = {"all-to-all": {"op": "alltoall", "algo": "direct"},
             "ring AllReduce": {"op": "allreduce", "algo": "ring", "ring": "rank"}}


def claims(quick: bool, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    s = SETTINGS[quick]
    modes = ("spray",) + tuple(f"split:{k}" for k in SPLITS)
    rounds = []
    for i in range(s["repeats"]):
        echo(f"spraying: {', '.join(modes)} on a 1:1 fabric, round {i + 1} of {s['repeats']}")
        rounds.append({mode: _run(mode, s["size"], os.path.join(out_dir, f"{mode.replace(':', '')}-{i + 1}"))
                       for mode in modes})
    config = (f"rail-optimized {GRID[0]}x{GRID[1]}, {SPINES} spines, 1:1, uplinks shaped, NIC {NIC_MBPS} Mbit/s, "
              f"{s['size']}, congestion: delay, {len(rounds)} round(s)")
    out = []
    for split in modes[1:]:
        for name in WORKLOADS:
            key = f"{split.replace(':', '')}-{name.replace(' ', '-').lower()}"
            out.append(Claim(f"{key}-congestion", f"{name}: maximum congestion (busiest uplink / mean), {split} "
                             "over spraying", 1.0, 0.10, config,
                             [r[split][name]["uplink_imbalance"] / r["spray"][name]["uplink_imbalance"]
                              for r in rounds]))
            out.append(Claim(f"{key}-time", f"{name}: completion time, {split} over spraying", 1.0, 0.10, config,
                             [r[split][name]["seconds"] / r["spray"][name]["seconds"] for r in rounds]))
    least = min(r[m]["idle"] for r in rounds for m in r)
    for claim in out:
        if claim.verdict != REPRODUCED:
            claim.why = _why(claim, rounds, least)
    return out


def _why(claim: Claim, rounds: list[dict], least_idle: float) -> str:
    """What the runs show of why splitting and spraying differ here."""
    why = short_of_cpu(least_idle)
    if why:
        return why
    split, name = claim.what.split(" over ")[0].split(", ")[-1], claim.what.split(":")[0]
    timeouts = {m: sum(r[m][name]["transport"].get("timeouts", 0) for r in rounds) for m in ("spray", split)}
    if claim.median < claim.paper:
        spray = {k: sum(r["spray"][name]["transport"].get(k, 0) for r in rounds)
                 for k in ("out_of_order", "retransmits")}
        return (f"splitting did better than spraying, which delivered {spray['out_of_order']} packets out of order "
                f"and retransmitted {spray['retransmits']}")
    if claim.key.endswith("-time") and timeouts[split] > timeouts["spray"]:
        return (f"its sub-flows waited out {timeouts[split]} retransmission timeouts (spraying {timeouts['spray']}): "
                "lost tails of short sub-flows wait for the timer")
    return ("the switches hash each sub-flow's source port over the paths (dp_hash), where the paper places the "
            "sub-flows on distinct paths: sub-flows share a path by chance, the fewer the likelier")


def _run(mode: str, size: str, out_dir: str) -> dict:
    from testbed import runner
    fabric = {"kind": RAIL_OPTIMIZED.name, "servers": GRID[0], "gpus_per_server": GRID[1], "spines": SPINES,
              "oversubscription": 1, "nic_mbps": NIC_MBPS}
    workloads = [{"type": "collective", "name": name, "sizes": [size], "iterations": 1, "congestion": "delay", **w}
                 for name, w in WORKLOADS.items()]
    out = runner.run({"name": f"paper-spraying-{mode.replace(':', '')}", "fabric": fabric, "routing": {"mode": mode},
                      "workloads": workloads}, out_dir, echo=lambda *a: None)
    failed = [c["detail"] for c in out["checks"] if not c["ok"]]
    rows = {w["name"]: w["rows"][0] for w in out["workloads"] if w.get("rows")}
    if failed or len(rows) != len(WORKLOADS) or not all(r["correct"] for r in rows.values()):
        raise RuntimeError(f"spraying {mode}: {failed or 'a wrong result or a missing row'}")
    idle = [w["cpu_idle_mean_pct"] for w in out["workloads"] if w.get("cpu_idle_mean_pct") is not None]
    return {**rows, "idle": min(idle, default=100.0)}
