"""Khalilov et al. (SPCL, SC'24): AllGather as a composition of switch-multicast broadcasts, with a bitmap of
received chunks and RDMA-Read recovery.

Its claims beside ours, from the multicast AllGather, the rank-order ring and the rail-aware ring run one after
the other on the same rail-optimized fabric, every result checked against numpy:
- T = N(P-1)/BW: multicast is as fast as the ring (its time over the faster ring's);
- the traffic: "up to 2x" fewer bytes than the ring, counted as SPCL counts them (every link: the NICs, every
  switch port and the HB links both ways), against the rank-order ring and the rail-aware one;
- every shard crosses each link of its tree once: the network's bytes over the minimal trees'.
"""
from __future__ import annotations

import os
from typing import Callable

from testbed.fabric.kinds import RAIL_OPTIMIZED
from testbed.papers import REPRODUCED, Claim, short_of_cpu

NAME = "spcl-multicast"
TITLE = "Khalilov et al., multicast-based AllGather (SPCL, SC'24)"
SOURCE = "the SPCL slides among the seeds: T = N(P-1)/BW, up to 2x less traffic than the ring"

SETTINGS = {True: {"repeats": 1, "grids": ((2, 4),), "size": "1MiB"},
            False: {"repeats": 3, "grids": ((2, 4), (4, 4)), "size": "1MiB"}}
NIC_MBPS = 5
ALGOS = {"ring-rank": {"algo": "ring", "ring": "rank"}, "ring-rail": {"algo": "ring", "ring": "rail"},
         "multicast": {"algo": "multicast"}}
ITERATIONS, WARMUP = 2, 1


def claims(quick: bool, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    s = SETTINGS[quick]
    out = []
    for servers, per in s["grids"]:
        rounds = []
        for i in range(s["repeats"]):
            echo(f"spcl-multicast: {servers}x{per}, multicast and both rings, round {i + 1} of {s['repeats']}")
            rounds.append(_round(servers, per, s["size"], os.path.join(out_dir, f"{servers}x{per}-{i + 1}")))
        out += _claims_of(servers, per, s["size"], rounds)
    return out


def _claims_of(servers: int, per: int, size: str, rounds: list[dict]) -> list[Claim]:
    grid = f"{servers}x{per}"
    config = (f"rail-optimized {grid} ({servers * per} GPUs), 2 spines, NIC {NIC_MBPS} Mbit/s, {size}, "
              f"{len(rounds)} round(s)")

    def per_op(r, name):
        return r[name]["link_bytes"] / (ITERATIONS + WARMUP)
    out = [
        Claim(f"{grid}-time", "T = N(P-1)/BW: multicast AllGather time / the faster ring's", 1.0, 0.10, config,
              [r["multicast"]["seconds"] / min(r["ring-rank"]["seconds"], r["ring-rail"]["seconds"])
               for r in rounds]),
        Claim(f"{grid}-bytes-vs-rank-ring", "bytes on all links: the rank-order ring's / multicast's (up to 2x)",
              2.0, 0.10, config, [per_op(r, "ring-rank") / per_op(r, "multicast") for r in rounds], "x"),
        Claim(f"{grid}-bytes-vs-rail-ring", "bytes on all links: the rail-aware ring's / multicast's (up to 2x)",
              2.0, 0.10, config, [per_op(r, "ring-rail") / per_op(r, "multicast") for r in rounds], "x"),
        Claim(f"{grid}-trees", "every shard once over each link of its tree: the network's bytes / the minimal "
              "trees'", 1.0, 0.05, config, [r["multicast"]["tree_ratio"] for r in rounds]),
    ]
    for claim in out[1:3]:
        if claim.verdict != REPRODUCED:
            claim.why = (f"\"up to\": the paper's largest saving, at 188 nodes; this fabric has {servers * per} GPUs, "
                         "and the saving grows with their number (the full run adds 16)")
    least = min((r["idle"] for r in rounds if r["idle"] is not None), default=None)
    for claim in (out[0], out[3]):
        if claim.verdict != REPRODUCED:
            claim.why = short_of_cpu(least)
    return out


def _round(servers: int, per: int, size: str, out_dir: str) -> dict:
    """One bring-up, the three algorithms one after the other: their rows by name, and the least CPU idle."""
    from testbed import runner
    fabric = {"kind": RAIL_OPTIMIZED.name, "servers": servers, "gpus_per_server": per, "spines": 2,
              "nic_mbps": NIC_MBPS}
    workloads = [{"type": "collective", "name": name, "op": "allgather", "sizes": [size], "iterations": ITERATIONS,
                  "warmup": WARMUP, **algo} for name, algo in ALGOS.items()]
    out = runner.run({"name": f"paper-spcl-{servers}x{per}", "fabric": fabric, "workloads": workloads}, out_dir,
                     echo=lambda *a: None)
    failed = [c["detail"] for c in out["checks"] if not c["ok"]]
    rows = {w["name"]: w["rows"][0] for w in out["workloads"] if w.get("rows")}
    if failed or len(rows) != len(ALGOS) or not all(r["correct"] for r in rows.values()):
        raise RuntimeError(f"spcl-multicast {servers}x{per}: {failed or 'a wrong result or a missing row'}")
    idle = [w["cpu_idle_mean_pct"] for w in out["workloads"] if w.get("cpu_idle_mean_pct") is not None]
    return {**rows, "idle": min(idle, default=None)}
