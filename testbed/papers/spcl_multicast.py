"""Khalilov et al. (SPCL, SC'24): AllGather as a composition of switch-multicast broadcasts, with a bitmap of
received chunks and RDMA-Read recovery.

Its claims beside ours, from the multicast AllGather, the rank-order ring and the rail-aware ring run one after
the other on the same rail-optimized fabric, every result checked against numpy:
- T = N(P-1)/BW: multicast is as fast as the ring (its time over the faster ring's);
- the traffic: "up to 2x" fewer bytes than the ring, counted as SPCL counts them (every link: the NICs, every
  switch port and the HB links both ways), against the rank-order ring and the rail-aware one;
- every shard crosses each link of its tree once: the network's bytes over the minimal trees'.

"How to deal with reliable data delivery?": multicast datagrams are unreliable; each rank keeps a bitmap of the
chunks it received and fetches the missing ones with RDMA Reads. The slides give no figure under loss, so we test
the shape of the claim with every rank dropping LOSS of the packets it sends (the collective's `loss`), the
multicast AllGather and the rank-order ring (SPCL's baseline) one after the other: the result still exact, the
chunks recovered by READ as many as the loss took, and its time and traffic saving against the ring at the same
loss as without.

"Inter-job traffic and slow collectives can create pipeline bubbles! Can we minimize inter-job traffic? Yes, with
the multicast primitive": a multicast AllGather as one job and a rank-order ring AllReduce as another, on servers
of their own whose ring crosses the same rail switches' spine uplinks (`concurrent` workload, alone and then
together): each job's time together over alone, and the multicast job's bytes, split by job, against its bytes
alone.
"""
from __future__ import annotations

import math
import os
from typing import Callable

from hosts.rdma.mtu import NIC_MTU, roce_mtu
from testbed.fabric.kinds import RAIL_OPTIMIZED
from testbed.papers import AT_MOST, REPRODUCED, Claim, short_of_cpu

NAME = "spcl-multicast"
TITLE = "Khalilov et al., multicast-based AllGather (SPCL, SC'24)"
SOURCE = ("the SPCL slides among the seeds: T = N(P-1)/BW, up to 2x less traffic than the ring, reliable delivery "
          "by a bitmap of received chunks and RDMA Reads, multicast to minimize inter-job traffic")

# (servers, GPUs per server, NIC Mbit/s, under loss too): 32 GPUs at 2 Mbit/s leave a 2-core machine no idle CPU,
# and under loss their heartbeats go late (a rank declared dead): their traffic is measured, their loss is not
SETTINGS = {True: {"repeats": 1, "grids": ((2, 4, 5, True),), "size": "1MiB"},
            False: {"repeats": 3, "grids": ((2, 4, 5, True), (4, 4, 5, True), (4, 8, 2, False)), "size": "1MiB"}}
NIC_MBPS = 5                 # the concurrent jobs'
ALGOS = {"ring-rank": {"algo": "ring", "ring": "rank"}, "ring-rail": {"algo": "ring", "ring": "rail"},
         "multicast": {"algo": "multicast"}}
LOSSY_ALGOS = ("ring-rank", "multicast")
ITERATIONS, WARMUP = 2, 1
LOSS = 0.05
# the concurrent jobs: 4 servers x 2 GPUs, the AllGather on servers 0-1, a rank-order ring AllReduce on servers 2-3
# (its server-crossing hops go up rail 1's spine uplinks, where the multicast trees cross too), sized so that
# both last about as long (a job that ends early leaves the fabric to the other)
CONCURRENT_GRID = (4, 2)
OTHER_JOB_SIZE = "512KiB"


def claims(quick: bool, out_dir: str, echo: Callable[[str], None]) -> list[Claim]:
    s = SETTINGS[quick]
    out = []
    for servers, per, mbps, lossy in s["grids"]:
        rounds = []
        for i in range(s["repeats"]):
            echo(f"spcl-multicast: {servers}x{per}, multicast and both rings, round {i + 1} of {s['repeats']}")
            rounds.append(_round(servers, per, mbps, s["size"], os.path.join(out_dir, f"{servers}x{per}-{i + 1}")))
            if not lossy:
                continue
            echo(f"spcl-multicast: {servers}x{per}, multicast and the ring at {LOSS:.0%} loss, round {i + 1}")
            lossy_dir = os.path.join(out_dir, f"{servers}x{per}-loss-{i + 1}")
            rounds[-1]["lossy"] = _round(servers, per, mbps, s["size"], lossy_dir, loss=LOSS)
        out += _claims_of(servers, per, mbps, s["size"], rounds)
        out += _loss_claims(servers, per, mbps, s["size"], rounds) if lossy else []
    together = []
    for i in range(s["repeats"]):
        echo(f"spcl-multicast: multicast AllGather beside a ring AllReduce, round {i + 1} of {s['repeats']}")
        together.append(_concurrent_round(s["size"], os.path.join(out_dir, f"concurrent-{i + 1}")))
    return out + _concurrent_claims(s["size"], together)


def _claims_of(servers: int, per: int, mbps: float, size: str, rounds: list[dict]) -> list[Claim]:
    grid = f"{servers}x{per}"
    config = (f"rail-optimized {grid} ({servers * per} GPUs), 2 spines, NIC {mbps:g} Mbit/s, {size}, "
              f"{len(rounds)} round(s)")
    out = [
        Claim(f"{grid}-time", "T = N(P-1)/BW: multicast AllGather time / the faster ring's", 1.0, 0.10, config,
              [r["multicast"]["seconds"] / min(r["ring-rank"]["seconds"], r["ring-rail"]["seconds"])
               for r in rounds]),
        Claim(f"{grid}-bytes-vs-rank-ring", "bytes on all links: the rank-order ring's / multicast's (up to 2x)",
              2.0, 0.10, config, [_per_op(r, "ring-rank") / _per_op(r, "multicast") for r in rounds], "x"),
        Claim(f"{grid}-bytes-vs-rail-ring", "bytes on all links: the rail-aware ring's / multicast's (up to 2x)",
              2.0, 0.10, config, [_per_op(r, "ring-rail") / _per_op(r, "multicast") for r in rounds], "x"),
        Claim(f"{grid}-trees", "every shard once over each link of its tree: the network's bytes / the minimal "
              "trees'", 1.0, 0.05, config, [r["multicast"]["tree_ratio"] for r in rounds]),
    ]
    for claim in out[1:3]:
        if claim.verdict != REPRODUCED:
            claim.why = (f"\"up to\": the paper's largest saving, at 188 nodes; this fabric has {servers * per} GPUs, "
                         "and the saving grows with their number (the full run adds 16 and 32)")
    least = min((r["idle"] for r in rounds if r["idle"] is not None), default=None)
    for claim in (out[0], out[3]):
        if claim.verdict != REPRODUCED:
            claim.why = short_of_cpu(least)
    return out


def _per_op(r: dict, name: str) -> float:
    return r[name]["link_bytes"] / (ITERATIONS + WARMUP)


def chunks_lost_expected(servers: int, per: int, row: dict, loss: float) -> float:
    """The chunks the receivers miss, on average, when every rank drops `loss` of the packets it sends: each
    shard goes out as one datagram per chunk (one RoCE MTU), a datagram dropped at its sender is missed by all
    n-1 receivers; over the warm-up and the measured operations."""
    n = servers * per
    chunks = math.ceil(row["bytes"] / n / roce_mtu(NIC_MTU))
    return loss * (ITERATIONS + WARMUP) * n * chunks * (n - 1)


def recovery_tolerance(servers: int, per: int, row: dict, loss: float) -> float:
    """Three standard deviations of the dropped datagrams' count (binomial), relative to its mean: the loss is
    random, and each drop costs n-1 recovered chunks at once."""
    n = servers * per
    drops = chunks_lost_expected(servers, per, row, loss) / (n - 1)
    return round(3 * math.sqrt(drops * (1 - loss)) / drops, 2)


def _loss_claims(servers: int, per: int, mbps: float, size: str, rounds: list[dict]) -> list[Claim]:
    grid = f"{servers}x{per}"
    lossy = [r["lossy"] for r in rounds]
    recovered = [r["multicast"]["recovered_chunks"] for r in lossy]
    expected = chunks_lost_expected(servers, per, lossy[0]["multicast"], LOSS)
    config = (f"rail-optimized {grid} ({servers * per} GPUs), 2 spines, NIC {mbps:g} Mbit/s, {size}, every rank "
              f"dropping {LOSS:.0%} of the packets it sends, {len(rounds)} round(s); chunks recovered by READ: "
              f"{', '.join(map(str, recovered))} (expected {expected:.0f}); the ring's retransmissions: "
              f"{', '.join(str(r['ring-rank']['retransmits']) for r in lossy)}")
    out = [
        Claim(f"{grid}-loss-exact", "reliable delivery: under loss, with the bitmap and RDMA Reads every rank's "
              "result equals numpy's (1 = all exact)", 1.0, 0.0, config,
              [float(r["multicast"]["correct"]) for r in lossy]),
        Claim(f"{grid}-loss-recovered", "missing chunks are fetched with RDMA Reads: the chunks recovered / the "
              "chunks the loss took (expected)", 1.0, recovery_tolerance(servers, per, lossy[0]["multicast"], LOSS),
              config, [c / expected for c in recovered]),
        Claim(f"{grid}-loss-time", "as good as the ring, under loss: multicast's time / the rank-order ring's at the "
              "same loss (at most 1)", 1.0, 0.10, config,
              [r["multicast"]["seconds"] / r["ring-rank"]["seconds"] for r in lossy], bound=AT_MOST),
        Claim(f"{grid}-loss-bytes", "the traffic saving kept under loss: (the rank-order ring's bytes / multicast's) "
              "at the loss over the same without", 1.0, 0.10, config,
              [(_per_op(r["lossy"], "ring-rank") / _per_op(r["lossy"], "multicast"))
               / (_per_op(r, "ring-rank") / _per_op(r, "multicast")) for r in rounds]),
    ]
    why = {f"{grid}-loss-exact": "a rank's result differed from numpy's: recovery missed chunks",
           f"{grid}-loss-recovered": "READs fetched more chunks than the loss took: the receivers missed chunks "
                                     "the senders did not drop (queues overflowing) or fewer than it took",
           f"{grid}-loss-time": _loss_time_why(servers, per, lossy),
           f"{grid}-loss-bytes": "the ring's retransmissions and multicast's READs cost different bytes: "
                                 + _loss_time_why(servers, per, lossy)}
    least = min((x["idle"] for x in lossy if x["idle"] is not None), default=None)
    for claim in out:
        if claim.verdict != REPRODUCED:
            claim.why = "; ".join(filter(None, (why[claim.key], short_of_cpu(least))))
    return out


def _loss_time_why(servers: int, per: int, lossy: list[dict]) -> str:
    """Where multicast and the ring part under loss: the ring's go-back retransmissions against multicast's
    READs of the missing chunks, which go round the ring when a chunk was dropped at its sender."""
    ring = [r["ring-rank"] for r in lossy]
    return (f"a chunk dropped at its sender is missed by all {servers * per - 1} receivers, and each reads it from "
            "its right neighbour once that one has the shard whole: the repair goes round the ring, one READ after "
            "the other, each a round trip, and a retransmission timeout when the loss takes a READ's packet. The "
            "ring repairs each loss by retransmitting (" + ", ".join(str(r["retransmits"]) for r in ring)
            + " packets). The slides give no figure under loss")


def _round(servers: int, per: int, mbps: float, size: str, out_dir: str, loss: float = 0.0) -> dict:
    """One bring-up, the algorithms one after the other (with `loss`, the rank-order ring and multicast, every
    rank dropping that share of its packets): their rows by name, and the least CPU idle. A wrong result
    without loss is a failure; under loss it is what the claim measures."""
    from testbed import runner
    fabric = {"kind": RAIL_OPTIMIZED.name, "servers": servers, "gpus_per_server": per, "spines": 2,
              "nic_mbps": mbps}
    algos = {name: ALGOS[name] for name in (LOSSY_ALGOS if loss else ALGOS)}
    workloads = [{"type": "collective", "name": name, "op": "allgather", "sizes": [size], "iterations": ITERATIONS,
                  "warmup": WARMUP, **algo, **({"loss": loss} if loss else {})} for name, algo in algos.items()]
    out = runner.run({"name": f"paper-spcl-{servers}x{per}{'-loss' if loss else ''}", "fabric": fabric,
                      "workloads": workloads}, out_dir, echo=lambda *a: None)
    rows = {w["name"]: w["rows"][0] for w in out["workloads"] if w.get("rows")}
    failed = [c["detail"] for c in out["checks"] if not c["ok"] and not (loss and c["name"].endswith(": correct"))]
    if failed or len(rows) != len(algos) or not (loss or all(r["correct"] for r in rows.values())):
        raise RuntimeError(f"spcl-multicast {servers}x{per}: {failed or 'a wrong result or a missing row'}")
    idle = [w["cpu_idle_mean_pct"] for w in out["workloads"] if w.get("cpu_idle_mean_pct") is not None]
    return {**rows, "idle": min(idle, default=None)}


def _concurrent_round(size: str, out_dir: str) -> dict:
    """One bring-up: the multicast AllGather (job `gather`) and a rank-order ring AllReduce (job `other`), each
    alone and then together. Returns each job's record, the bytes by job, the gap between the split and the port
    counters, and the least CPU idle."""
    from testbed import runner
    servers, per = CONCURRENT_GRID
    fabric = {"kind": RAIL_OPTIMIZED.name, "servers": servers, "gpus_per_server": per, "spines": 2,
              "nic_mbps": NIC_MBPS}
    jobs = [{"name": "gather", "type": "collective", "op": "allgather", "algo": "multicast", "sizes": [size],
             "iterations": ITERATIONS, "warmup": WARMUP, "placement": {"servers": [0, 1]}},
            {"name": "other", "type": "collective", "op": "allreduce", "algo": "ring", "ring": "rank",
             "sizes": [OTHER_JOB_SIZE], "iterations": ITERATIONS, "warmup": WARMUP, "placement": {"servers": [2, 3]}}]
    out = runner.run({"name": "paper-spcl-concurrent", "fabric": fabric, "routing": {"mode": "ecmp"},
                      "workloads": [{"type": "concurrent", "name": "side-by-side", "jobs": jobs}]}, out_dir,
                     echo=lambda *a: None)
    failed = [c["detail"] for c in out["checks"] if not c["ok"]]
    w = out["workloads"][0] if out["workloads"] else {}
    records = {j["job"]: j for j in w.get("jobs", [])}
    if failed or set(records) != {"gather", "other"} or any(j["slowdown"] is None for j in records.values()):
        raise RuntimeError(f"spcl-multicast beside a ring: {failed or 'a job did not run alone and together'}")
    idle = [x["cpu_idle_mean_pct"] for j in records.values() for x in (j["alone"], j["together"])
            if x.get("cpu_idle_mean_pct") is not None]
    return {"jobs": records, "links": w["link_bytes_by_job"], "uplinks": w.get("uplink_bytes_by_job") or {},
            "deviation": w["job_bytes_deviation"],
            "idle": min(idle, default=None)}


def job_switch_bytes(links_by_job: dict[str, dict[str, int]], job: str) -> int:
    """What the switches' ports sent for `job` while the jobs ran together (bytes by job, every port)."""
    return sum(by.get(job, 0) for by in links_by_job.values())


def shared_uplinks(uplinks_by_job: dict[str, dict[str, int]]) -> list[str]:
    """The spine uplinks (either way) that carried bytes of both jobs while they ran together."""
    return sorted(link for link, by in uplinks_by_job.items() if by.get("gather") and by.get("other"))


def _concurrent_claims(size: str, rounds: list[dict]) -> list[Claim]:
    servers, per = CONCURRENT_GRID
    alone = [r["jobs"]["gather"]["alone"]["rows"][0]["fabric_bytes"] for r in rounds]
    together = [job_switch_bytes(r["links"], "gather") for r in rounds]
    config = (f"rail-optimized {servers}x{per}, 2 spines, ECMP, NIC {NIC_MBPS} Mbit/s: a {size} multicast AllGather "
              f"on servers 0-1 beside a {OTHER_JOB_SIZE} rank-order ring AllReduce on servers 2-3 (its server-crossing "
              f"hops up the same rail switches' spine uplinks), each alone then together, {len(rounds)} round(s); "
              "seconds alone -> together: "
              + "; ".join(f"gather {r['jobs']['gather']['seconds_alone']:.2f} -> "
                          f"{r['jobs']['gather']['seconds_together']:.2f}, other "
                          f"{r['jobs']['other']['seconds_alone']:.2f} -> {r['jobs']['other']['seconds_together']:.2f}"
                          for r in rounds)
              + "; the multicast job's switch bytes alone / together: "
              + ", ".join(f"{a} / {t}" for a, t in zip(alone, together))
              + "; spine links (either way) carrying both jobs' bytes: "
              + ", ".join(f"{len(shared_uplinks(r.get('uplinks', {})))} of {len(r.get('uplinks', {}))}"
                          for r in rounds))
    out = [
        Claim("concurrent-gather", "multicast to minimize inter-job traffic: the multicast AllGather's time beside "
              "another job / alone", 1.0, 0.10, config, [r["jobs"]["gather"]["slowdown"] for r in rounds]),
        Claim("concurrent-other", "... and the other job's (a ring AllReduce): its time beside the multicast "
              "AllGather / alone", 1.0, 0.10, config, [r["jobs"]["other"]["slowdown"] for r in rounds]),
        Claim("concurrent-bytes", "the multicast job's traffic beside another job: its switch bytes, split by job, "
              "/ its switch bytes alone", 1.0, 0.05, config, [t / a for a, t in zip(alone, together)]),
        Claim("concurrent-split", "(the testbed's rule) the bytes by job add up to the port counters: the largest "
              "gap, relative", 0.0, 0.02, config, [r["deviation"] for r in rounds]),
    ]
    least = min((r["idle"] for r in rounds if r["idle"] is not None), default=None)
    contend = ("the jobs share the rail switches' spine uplinks: where ECMP hashes the ring's queue pairs onto the "
               "trees' uplinks, they contend")
    why = {"concurrent-gather": contend, "concurrent-other": contend,
           "concurrent-bytes": "the multicast job moved other bytes beside the other job than alone (READs of "
                               "chunks its receivers missed, or counters the split could not follow)",
           "concurrent-split": "the routes' counters did not add up to the ports' (a route replaced while the "
                               "jobs ran, or a group several jobs share)"}
    for claim in out:
        if claim.verdict != REPRODUCED:
            claim.why = "; ".join(filter(None, (why[claim.key], short_of_cpu(least))))
    return out
