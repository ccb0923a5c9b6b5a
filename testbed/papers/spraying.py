"""Addanki et al., "Challenging the Need for Packet Spraying in Large-Scale Distributed Training".

Its claim: a single-path transport with minimal flow splitting at the application layer is equivalent to ideal
packet spraying in maximum congestion, so a collective completes as fast. Its premise, which the GPU-fabric essay
among the seeds states too: ECMP, one hashed path per flow, collides where spraying does not.

Ours: an all-to-all and a rank-order ring AllReduce over a rail-optimized fabric whose uplinks are shaped like
every link (a collision costs time), 1:1 and (the full version) 2:1 oversubscribed, with each routing mode on the
same sizes: packet spraying (`routing.mode: spray`: the hosts vary the source port per packet and the switches
hash it), ECMP, and flow splitting (`split:K`: each message striped over K queue pairs, K the paths between two
rails and twice that). Each collective runs with the delay-based congestion control and with DCQCN (the switch
ports mark ECN; the fabric is a 1.5 Gbit/s one run 300 times slower, so DCQCN's timers scale with it):
- maximum congestion: the busiest uplink's bytes over the mean uplink's, splitting's (or ECMP's) over spraying's;
- completion: each collective's time, splitting's (or ECMP's) over spraying's.
"""
from __future__ import annotations

import os
from typing import Callable

from testbed.fabric.kinds import RAIL_OPTIMIZED
from testbed.papers import AT_LEAST, REPRODUCED, Claim, short_of_cpu

NAME = "spraying"
TITLE = 'Addanki et al., "Challenging the Need for Packet Spraying in Large-Scale Distributed Training"'
SOURCE = ("its abstract among the seeds: minimal flow splitting equals ideal packet spraying in maximum congestion; "
          "the GPU-fabric essay among the seeds: ECMP's hash collisions, spraying, DCQCN")

SETTINGS = {True: {"repeats": 1, "size": "2MiB", "ratios": (1,)},
            False: {"repeats": 3, "size": "2MiB", "ratios": (1, 2)}}
GRID, SPINES = (2, 4), 2
NIC_MBPS, TIME_SCALE = 1500, 300        # a 1.5 Gbit/s fabric run at 5 Mbit/s, DCQCN's timers slowed alike
ECN = {"kmin_kb": 8, "kmax_kb": 40, "pmax": 1.0}      # benchmarks/congestion.py's marking (docs/ecn.md)
SPLITS = (SPINES, 2 * SPINES)           # sub-flows per flow: as many as the paths (minimal), and twice that
MODES = ("spray", "ecmp") + tuple(f"split:{k}" for k in SPLITS)
CONTROLS = ("delay", "dcqcn")
WORKLOADS = {"all-to-all": {"op": "alltoall", "algo": "direct"},
             "ring AllReduce": {"op": "allreduce", "algo": "ring", "ring": "rank"}}


def claims(quick: bool, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    s = SETTINGS[quick]
    out = []
    for ratio in s["ratios"]:
        rounds = []
        for i in range(s["repeats"]):
            echo(f"spraying: {', '.join(MODES)} on a {ratio}:1 fabric, each collective with {' and '.join(CONTROLS)}, "
                 f"round {i + 1} of {s['repeats']}")
            rounds.append({mode: _run(mode, ratio, s["size"], os.path.join(out_dir, f"{ratio}to1-{_slug(mode)}-{i + 1}"))
                           for mode in MODES})
        for cc in CONTROLS:
            out += _claims_of(ratio, cc, s["size"], rounds)
    return out


def _slug(text: str) -> str:
    return text.replace(":", "").replace(" ", "-").lower()


def _claims_of(ratio: int, cc: str, size: str, rounds: list[dict]) -> list[Claim]:
    """Each mode against spraying, per workload: maximum congestion and completion time. Keys keep the first
    set-up's (1:1, delay) unprefixed."""
    prefix = ("" if ratio == 1 else f"{ratio}to1-") + ("" if cc == "delay" else f"{cc}-")
    config = (f"rail-optimized {GRID[0]}x{GRID[1]}, {SPINES} spines, {ratio}:1, uplinks shaped, NIC {NIC_MBPS / 1000:g} "
              f"Gbit/s at time scale {TIME_SCALE} ({NIC_MBPS / TIME_SCALE:g} Mbit/s), ECN marking from "
              f"{ECN['kmin_kb']} to {ECN['kmax_kb']} KiB, {size}, congestion: {cc}, {len(rounds)} round(s)")
    least = min(r[m]["idle"] for r in rounds for m in r)
    out = []
    for mode in MODES[1:]:
        ecmp = mode == "ecmp"
        for name in WORKLOADS:
            key = f"{prefix}{_slug(mode)}-{_slug(name)}"
            row = (name, cc)
            if ecmp:      # the premise: ECMP is the worse of the two, at least
                congestion = Claim(f"{key}-congestion", f"{name}, {cc}: maximum congestion (busiest uplink / mean), "
                                   "ECMP's over spraying's: ECMP collides (at least 1)", 1.0, 0.10, config,
                                   bound=AT_LEAST)
                time = Claim(f"{key}-time", f"{name}, {cc}: completion time, ECMP's over spraying's: spraying at "
                             "least as fast (at least 1)", 1.0, 0.10, config, bound=AT_LEAST)
            else:
                congestion = Claim(f"{key}-congestion", f"{name}, {cc}: maximum congestion (busiest uplink / mean), "
                                   f"{mode} over spraying", 1.0, 0.10, config)
                time = Claim(f"{key}-time", f"{name}, {cc}: completion time, {mode} over spraying", 1.0, 0.10, config)
            congestion.ours = [r[mode][row]["uplink_imbalance"] / r["spray"][row]["uplink_imbalance"] for r in rounds]
            time.ours = [r[mode][row]["seconds"] / r["spray"][row]["seconds"] for r in rounds]
            for claim in (congestion, time):
                if claim.verdict != REPRODUCED:
                    claim.why = _why(claim, mode, row, rounds, least)
            out += [congestion, time]
    return out


def _why(claim: Claim, mode: str, row: tuple, rounds: list[dict], least_idle: float) -> str:
    """What the runs show of why `mode` and spraying differ here."""
    why = short_of_cpu(least_idle)
    if why:
        return why

    def total(m, key):
        return sum(r[m][row]["transport"].get(key, 0) for r in rounds)
    spray = {k: total("spray", k) for k in ("out_of_order", "retransmits", "timeouts")}
    if claim.key.endswith("-congestion"):
        if mode == "ecmp":          # under spraying's congestion: no collision this time
            return ("ECMP's hash put the flows on the uplinks as evenly as spraying did: with few flows per uplink "
                    "a collision is a matter of chance, and the ring's uplink load is set by where it crosses servers")
        return ("the switches hash each sub-flow's source port over the paths (dp_hash), where the paper places the "
                "sub-flows on distinct paths: sub-flows share a path by chance, the fewer the likelier")
    if claim.median < claim.paper:
        return (f"{mode} did better than spraying, which delivered {spray['out_of_order']} packets out of order and "
                f"retransmitted {spray['retransmits']} ({spray['timeouts']} timeouts): our spraying is not the "
                "paper's ideal one, which loses nothing to reordering")
    timeouts = total(mode, "timeouts")
    if timeouts > spray["timeouts"]:
        return (f"{mode}'s flows waited out {timeouts} retransmission timeouts (spraying {spray['timeouts']}): lost "
                "tails of short sub-flows wait for the timer")
    return (f"{mode} took longer with {total(mode, 'retransmits')} packets resent (spraying {spray['retransmits']}); "
            f"its maximum congestion was {_busiest_ratio(rounds, mode, row):.2f} of spraying's")


def _busiest_ratio(rounds: list[dict], mode: str, row: tuple) -> float:
    return (sum(r[mode][row]["uplink_imbalance"] for r in rounds)
            / sum(r["spray"][row]["uplink_imbalance"] for r in rounds))


def _run(mode: str, ratio: int, size: str, out_dir: str) -> dict:
    """One bring-up in `mode`: both collectives with each congestion control in turn; their rows by (workload,
    congestion), and the least CPU idle."""
    from testbed import runner
    fabric = {"kind": RAIL_OPTIMIZED.name, "servers": GRID[0], "gpus_per_server": GRID[1], "spines": SPINES,
              "oversubscription": ratio, "nic_mbps": NIC_MBPS, "time_scale": TIME_SCALE, "ecn": ECN}
    workloads = [{"type": "collective", "name": f"{name}, {cc}", "sizes": [size], "iterations": 1, "congestion": cc,
                  **w} for cc in CONTROLS for name, w in WORKLOADS.items()]
    out = runner.run({"name": f"paper-spraying-{ratio}to1-{_slug(mode)}", "fabric": fabric,
                      "routing": {"mode": mode}, "workloads": workloads}, out_dir, echo=lambda *a: None)
    failed = [c["detail"] for c in out["checks"] if not c["ok"]]
    rows = {tuple(w["name"].split(", ")): w["rows"][0] for w in out["workloads"] if w.get("rows")}
    if failed or len(rows) != len(workloads) or not all(r["correct"] for r in rows.values()):
        raise RuntimeError(f"spraying {mode} at {ratio}:1: {failed or 'a wrong result or a missing row'}")
    idle = [w["cpu_idle_mean_pct"] for w in out["workloads"] if w.get("cpu_idle_mean_pct") is not None]
    return {**rows, "idle": min(idle, default=100.0)}
