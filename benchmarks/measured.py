"""make bench: measure the figures of the README's Measured table, with repeats, and publish them.

    .venv/bin/python benchmarks/measured.py [--quick] [--only KEY,KEY] [--repeats N] [--accept] [--dry-run]
    .venv/bin/python benchmarks/measured.py --render          # rewrite docs/measured.md and the README's table

Every row of the README's Measured table is a figure here, in the table's order. A figure that this script can
measure has a `measure()` that runs its set-up once and returns named numbers; it runs `repeats` times and is
published as median [min-max] of each number, with the configuration, the machine (cores, kernel, Open vSwitch
datapath), the date and the commit, in docs/measured.json. A figure this script has not published yet keeps the
text of its last run by hand and is marked ‡ in the README.

docs/measured.md and the README's table are rendered from docs/measured.json (tests/unit/test_measured.py fails
when they disagree). A run fails (exit 1) when a held number of a figure comes out more than 15% worse than the
one published before, and then keeps the published one; `--accept` publishes it anyway.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON_PATH = os.path.join(ROOT, "docs", "measured.json")
MD_PATH = os.path.join(ROOT, "docs", "measured.md")
README_PATH = os.path.join(ROOT, "README.md")
BEGIN, END = "<!-- measured: begin (make bench writes this table from docs/measured.json) -->", "<!-- measured: end -->"
DROP = 0.15                     # a held number this much worse than the published one fails the run


@dataclass
class Figure:
    key: str
    what: str                                   # the README row's first column
    details: str                                # its link
    config: str = ""                            # the set-up, in words
    measure: Callable[[], dict] | None = None   # one repeat: named numbers
    render: Callable[[dict], str] | None = None  # stats (name -> median [min-max]) -> the figure's text
    held: dict = field(default_factory=dict)    # name -> "higher" / "lower" is better: the 15% check
    repeats: int = 3
    quick: bool = False                         # in `make bench-quick`
    by_hand: str = ""                           # the command, where this script does not measure it


# -- the measurements: each brings up what it needs, once per repeat ----------------------------------------

def _run(doc: dict) -> dict:
    from testbed import runner
    out = runner.run(doc, tempfile.mkdtemp(prefix="tb-bench-"), echo=lambda *a: None)
    if len(out["workloads"]) != len(doc["workloads"]):
        raise RuntimeError(f"{doc['name']}: {[c['detail'] for c in out['checks'] if not c['ok']] or 'no results'}")
    return out


def _collective(kind: str, op: str, algo: str, mtu: int, size: str = "4MiB") -> dict:
    doc = {"name": f"bench-{kind}-{op}-{algo}",
           "fabric": {"kind": kind, "servers": 2, "gpus_per_server": 4, "spines": 2, "nic_mbps": 5, "nic_mtu": mtu},
           "workloads": [{"type": "collective", "op": op, "algo": algo, "sizes": [size], "iterations": 2}]}
    out = _run(doc)
    rows = out["workloads"][0]["rows"]
    if not rows or not rows[0]["correct"]:
        raise RuntimeError(f"{kind} {op}/{algo} failed: {[c['detail'] for c in out['checks'] if not c['ok']]}")
    return rows[0]


def uplink_imbalance() -> dict:
    from testbed.scenario import load
    numbers = {}
    for mode in ("single", "ecmp", "spray"):
        doc = load(os.path.join(ROOT, "scenarios", "lb_compare.yaml"), [f"routing.mode={mode}"])
        doc["workloads"] = [w for w in doc["workloads"] if w.get("name") == "alltoall"]
        row, = _run(doc)["workloads"][0]["rows"]
        numbers[mode] = row["uplink_imbalance"]
    return numbers


def ring_allreduce() -> dict:
    return {"jumbo": _collective("rail-optimized", "allreduce", "ring", 9000)["bus_ratio"],
            "mtu1500": _collective("rail-optimized", "allreduce", "ring", 1500)["bus_ratio"]}


def dcqcn_incast() -> dict:
    import congestion
    from testbed.fabric.network import Network
    fabric = congestion.incast_fabric(queue_kb=1024, mtu=1500)
    with Network(fabric) as net:
        r = {cc: congestion.incast_once(net, fabric, cc, 512 * 1024, roce_mtu=1024) for cc in ("none", "dcqcn")}
    return {"dcqcn_goodput": r["dcqcn"]["goodput"], "dcqcn_drops": r["dcqcn"]["drops"],
            "dcqcn_under_kmax": r["dcqcn"]["under_kmax"], "none_goodput": r["none"]["goodput"],
            "none_drops": r["none"]["drops"]}


def dcqcn_incast_long() -> dict:
    import congestion
    from testbed.fabric.network import Network
    fabric = congestion.incast_fabric(queue_kb=1024, mtu=1500)
    with Network(fabric) as net:
        r = congestion.incast_once(net, fabric, "dcqcn", 2048 * 1024, roce_mtu=1024)
    return {"goodput": r["goodput"], "busy_late": r["busy_late"], "drops": r["drops"],
            "queue_max_kb": r["queue_max_kb"], "under_kmax": r["under_kmax"]}


def dcqcn_ring_cost() -> dict:
    import congestion
    rows = {w["name"]: w["rows"][0] for w in _run(congestion.routing_doc("ecmp", "4MiB", alltoall=False))["workloads"]}
    if not all(r["correct"] for r in rows.values()):
        raise RuntimeError(f"ring AllReduce with and without DCQCN: a wrong result: {rows}")
    return {"cost_pct": 100 * (rows["ring-dcqcn"]["seconds"] / rows["ring-none"]["seconds"] - 1),
            "dcqcn_bus_ratio": rows["ring-dcqcn"]["bus_ratio"], "none_bus_ratio": rows["ring-none"]["bus_ratio"]}


def alltoall_ratio() -> dict:
    ro, opt = (_collective(k, "alltoall", a, 9000) for k, a in (("rail-only", "two-step"), ("rail-optimized", "direct")))
    model = (ro["bytes"] / ro["bound_busbw_MBps"]) / (opt["bytes"] / opt["bound_busbw_MBps"])
    return {"measured": ro["seconds"] / opt["seconds"], "model": model}


def failover_gap() -> dict:
    from testbed.scenario import load
    numbers = {}
    for failover in (True, False):
        out = _run(load(os.path.join(ROOT, "scenarios", "failover.yaml"), [f"routing.failover={str(failover).lower()}"]))
        w = out["workloads"][0]
        name = "fast" if failover else "controller"
        numbers[f"{name}_gap_ms"], numbers[f"{name}_lost"] = w["max_gap_s"] * 1e3, w["lost_packets"]
    return numbers


def jobs_slowdown() -> dict:
    """Two ring AllReduce jobs over the same 1:1 spine uplinks: each mode's slowdown, the mean of the two jobs'."""
    from testbed.scenario import load
    numbers = {}
    for mode in ("single", "ecmp", "spray", "split:4"):
        out = _run(load(os.path.join(ROOT, "scenarios", "concurrent_rings.yaml"), [f"routing.mode={mode}"]))
        jobs = out["workloads"][0]["jobs"]
        if not all(j["ok"] and j["slowdown"] for j in jobs):
            raise RuntimeError(f"concurrent_rings / {mode}: {[c['detail'] for c in out['checks'] if not c['ok']]}")
        numbers[mode.replace(":", "")] = statistics.mean(j["slowdown"] for j in jobs)
    return numbers


def gpu_crash_recovery() -> dict:
    import recovery
    from testbed.fabric.network import Network
    from testbed.fabric.topo import build
    fabric = build("rail-optimized", 2, 4, spines=2, nic_mbps=5, spares_per_server=1, spare_servers=1)
    numbers = {}
    with Network(fabric) as net:
        for policy in ("shrink", "spare", "migrate"):
            f = recovery.case(net, "gpu-crash", policy, 4.0, "1MiB")["fault"]
            if f.get("recovered_s") is None:
                raise RuntimeError(f"gpu-crash / {policy}: not recovered: {f}")
            numbers[f"{policy}_detected_s"] = f["detected_s"] - f["at_s"]
            numbers[f"{policy}_reformed_s"] = f["recovered_s"] - f["at_s"]
    return numbers


def lost_tail() -> dict:
    import rto
    link = rto.Link(5, 0)
    try:
        return {f"{timer}_s": rto.tail_case(link, timer, 6.76, 8)["cost"] for timer in ("adaptive", "fixed")}
    finally:
        link.close()


def bring_up_64() -> dict:
    from testbed.fabric.network import Network
    from testbed.fabric.topo import build
    net = Network(build("rail-optimized", 8, 8, spines=4), routing="ecmp")
    with net:
        pass
    return {"netns_s": net.timings["bring_up_s"]}


def one_qp() -> dict:
    from hosts.rdma import bench
    r = bench.run(rate_mbit=100, size=4 << 20, iters=3, mtu=1024)
    if not all(x["ok"] for x in r.values()):
        raise RuntimeError(f"one RC QP: a transfer was wrong: {r}")
    return {"write": r["WRITE"]["frac_bound"], "read": r["READ"]["frac_bound"]}


def planner_table2() -> dict:
    from testbed.planning.costs import UnitCosts, savings
    from testbed.planning.counts import PAPER_HB_SIZE, count
    opt, only = (count(k, 32768, PAPER_HB_SIZE, 128) for k in ("rail-optimized", "rail-only"))
    return {"rail_only_switches": only.switches, "rail_optimized_switches": opt.switches,
            "cost_saved_pct": 100 * savings(opt, only, UnitCosts()).cost_fraction}


def hierarchical_grid(servers: int, per: int) -> dict:
    """benchmarks/hierarchical.py's round on rail-optimized: busbw / bound of the sequential variants, busbw / the
    sequential bound of the pipelined ones (above 1: the overlap beats any sequential schedule)."""
    import hierarchical
    numbers = {}
    for r in hierarchical.run_grid("rail-optimized", servers, per, hierarchical.options(["--repeat", "1"])):
        if not r["correct"]:
            raise RuntimeError(f"hierarchical {servers}x{per} {r['op']}/{r['algo']}: a wrong result")
        if r["algo"] == "hierarchical-pipelined":
            numbers[f"{r['op']}_pipelined"] = r["busbw_MBps"] / r["sequential_bound_busbw_MBps"]
        else:
            numbers[r["op"]] = r["bus_ratio"]
    return numbers


def hierarchical_text(s) -> str:
    return (f"AllReduce {s['allreduce']()} / AllGather {s['allgather']()}; pipelined {s['allreduce_pipelined']()} / "
            f"{s['allgather_pipelined']()} of the sequential bound")


MULTICAST_GRIDS = ("2x4", "4x4")


def multicast_allgather() -> dict:
    """benchmarks/multicast_allgather.py's round, 1 MiB, on each grid: multicast against both rings."""
    import multicast_allgather as bench
    args = bench.options(["--grids", ",".join(MULTICAST_GRIDS), "--sizes", "1MiB", "--repeat", "1"])
    rows = [r for servers, per in args.grids for r in bench.run_grid(servers, per, args)]
    wrong = [f"{r['grid']} {r['name']}" for r in rows if not r["correct"]]
    if wrong:
        raise RuntimeError(f"multicast AllGather: a wrong result: {wrong}")
    numbers = {}
    for (grid, _), c in bench.compare(rows).items():
        mc, = (r for r in rows if r["grid"] == grid and r["name"] == "multicast")
        numbers |= {f"{grid}_time": c["time"][0], f"{grid}_multicast_s": mc["seconds"],
                    f"{grid}_ring_s": min(r["seconds"] for r in rows if r["grid"] == grid and r["name"] != "multicast"),
                    f"{grid}_links_vs_rail": c["links"]["ring-rail"][0], f"{grid}_links_vs_rank": c["links"]["ring-rank"][0],
                    f"{grid}_network_vs_rail": c["network"]["ring-rail"][0], f"{grid}_trees": mc["tree_ratio"]}
    return numbers


def multicast_text(s) -> str:
    def each(name, digits=2):
        return " / ".join(s[f"{g}_{name}"](digits) for g in MULTICAST_GRIDS)
    return (f"{each('time')} of the faster ring's time ("
            + " / ".join(f"{s[f'{g}_multicast_s']()} vs {s[f'{g}_ring_s']()} s" for g in MULTICAST_GRIDS)
            + f"); bytes on all links (HB included) {each('links_vs_rail')}x fewer than the rail-aware ring, "
            f"{each('links_vs_rank')}x fewer than the rank-order ring; on the scale-out links alone (NICs and "
            f"switches) the rail-aware ring moves {each('network_vs_rail')}x multicast's; {each('trees')} of its "
            "minimal trees")


TRAINING_FABRICS = ("rail-only", "rail-optimized", "clos")
TRAINING_PHASES = {"pp": "PP", "tp": "TP", "bubble": "bubble", "dp": "DP"}


def training_iteration() -> dict:
    """benchmarks/training_iteration.py: one (2, 2, 2) iteration per fabric, the same message sizes on each."""
    import training_iteration as bench
    args = bench.options(["--fabrics", ",".join(TRAINING_FABRICS)])
    scale = bench.scale_of(TRAINING_FABRICS[0], args)
    numbers = {}
    for kind in TRAINING_FABRICS:
        w, failed = bench.run(kind, args, scale)
        if failed:
            raise RuntimeError(f"training iteration on {kind}: {[c['name'] for c in failed]}")
        numbers[f"{kind}_s"], numbers[f"{kind}_predicted_s"] = w["measured"]["iteration"], w["predicted"]["iteration"]
        numbers |= {f"{kind}_{k}": w["ratio"][k] for k in TRAINING_PHASES if w["ratio"][k] is not None}
    return numbers


def training_text(s) -> str:
    def each(name):
        return " / ".join(s[f"{k}_{name}"]() for k in TRAINING_FABRICS)
    return (f"{each('s')} s vs {each('predicted_s')} s predicted; per phase, measured / model: "
            + ", ".join(f"{label} {each(k)}" for k, label in TRAINING_PHASES.items() if f"{TRAINING_FABRICS[0]}_{k}" in s))


def stall_and_cut() -> dict:
    """benchmarks/recovery.py's cases gpu-stall and nic-down, shrink recovery, on gpu_crash_recovery's fabric."""
    import recovery
    from testbed.fabric.network import Network
    from testbed.fabric.topo import build
    fabric = build("rail-optimized", 2, 4, spines=2, nic_mbps=5, spares_per_server=1, spare_servers=1)
    numbers = {}
    with Network(fabric) as net:
        for kind, name, by in (("gpu-stall", "stall", "watchdog"), ("nic-down", "cut", "heartbeats")):
            f = recovery.case(net, kind, "shrink", 4.0, "1MiB")["fault"]
            if f.get("recovered_s") is None or f.get("detected_by") != by:
                raise RuntimeError(f"{kind} / shrink: not recovered or not detected by the {by}: {f}")
            numbers[f"{name}_detected_s"] = f["detected_s"] - f["at_s"]
            numbers[f"{name}_reformed_s"] = f["recovered_s"] - f["at_s"]
    return numbers


def early_exit() -> dict:
    """tests/integration/test_recovery.py's rank killed as it starts (gpu-crash 0 s into the workload), spare
    recovery: found by its launcher, where its peers would wait out the join grace (the workload's timeout)."""
    doc = {"name": "bench-early-exit",
           "fabric": {"kind": "rail-only", "servers": 2, "gpus_per_server": 2, "spares_per_server": 1},
           "workloads": [{"type": "collective", "op": "allreduce", "algo": "ring", "sizes": ["256KiB"],
                          "iterations": 5, "timeout_s": 60, "recovery": "spare"}],
           "faults": [{"workload": "collective#0", "at": 0.0, "kind": "gpu-crash", "target": "s1g1"}]}
    out = _run(doc)
    w, (fault,) = out["workloads"][0], out["faults"]
    if not out["ok"] or fault.get("detected_by") != "exit" or not all(r["correct"] for r in w["rows"]):
        raise RuntimeError(f"a rank killed as it starts: {fault}; {[c['detail'] for c in out['checks'] if not c['ok']]}")
    return {"detected_s": fault["detected_s"] - fault["at_s"], "wall_s": w["wall_s"]}


DELAYS_MS = (1, 5, 20)
DELAY_RATES = (1000, 5000)


def delay_line() -> dict:
    """benchmarks/delay.py: ping's round trip over each delay, and the delay process's CPU per frame."""
    import delay
    numbers = {}
    for ms in DELAYS_MS:
        rtts = delay.round_trip(ms)
        if len(rtts) < 18:
            raise RuntimeError(f"delay {ms} ms: {len(rtts)} of 20 pings answered")
        numbers[f"rtt_{ms}ms"] = statistics.median(rtts)
    for rate in DELAY_RATES:
        run, = delay.flows(rate, 1000, 3.0, 1, "on")
        numbers[f"cpu_us_{rate}pps"] = run["delayd"] * 1000        # CPU s per 1000 frames -> us per frame
    return numbers


def pccl_wan() -> dict:
    """scenarios/pccl_wan.yaml, 1 and 8 connections: one window-bound, eight filling the WAN link."""
    from testbed.scenario import load
    out = _run(load(os.path.join(ROOT, "scenarios", "pccl_wan.yaml"), ["workloads.0.connections=[1, 8]"]))
    runs = {r["connections"]: r for r in out["workloads"][0]["runs"]}
    if not out["ok"] or len(runs) != 2:
        raise RuntimeError(f"pccl_wan: {[c['detail'] for c in out['checks'] if not c['ok']]}")
    return {"one_of_window": runs[1]["mbps"] / runs[1]["window_mbps"], "one_of_rate": runs[1]["of_rate"],
            "eight_of_rate": runs[8]["of_rate"]}


DILOCO_RATES = (20, 2)          # Mbit/s across sites: DDP link-bound at the first, all but Streaming at the second
DILOCO_GPUS = 4                 # per site: the figures are at 2 sites of 4-8 GPUs


def diloco_sites() -> dict:
    """benchmarks/diloco.py (2 sites of DILOCO_GPUS) at 20 Mbit/s with 8-bit runs, then at 2 Mbit/s: the WAN bytes on the wire per inner
    step against DDP's, Streaming's peak on the wire (sampled) against DiLoCo's, seconds per inner step."""
    import diloco
    numbers = {}
    for mbps in DILOCO_RATES:
        rows, bad = diloco.one(diloco.defaults(servers=2, gpus=DILOCO_GPUS,
                                                quantize=8 if mbps == DILOCO_RATES[0] else 0), mbps)
        wanted = [("ddp", 0), ("diloco", 0), ("streaming", 0)] + ([("diloco", 8), ("streaming", 8)]
                                                                   if mbps == DILOCO_RATES[0] else [])
        wrong = [k for k in wanted if k not in rows or rows[k]["replicas"]["wrong"]]
        if wrong:
            raise RuntimeError(f"diloco at {mbps} Mbit/s: {wrong} incomplete or not exact: {bad}")
        ddp, di, st = rows["ddp", 0], rows["diloco", 0], rows["streaming", 0]
        if mbps == DILOCO_RATES[0]:
            for variant, bits in wanted[1:]:
                numbers[f"{variant}{bits or ''}_of_ddp"] = (rows[variant, bits]["wan_wire_bytes_per_step"]
                                                           / ddp["wan_wire_bytes_per_step"])
            numbers["sampled_peak_ratio"] = st["sampled_peak_wan_bytes"] / di["sampled_peak_wan_bytes"]
        for variant in ("ddp", "diloco", "streaming"):
            numbers[f"{variant}_{mbps}_s"] = rows[variant, 0]["step_s"]
    return numbers


REJOIN_OUTAGE_S = 11.0          # site us's WAN links down from second 1: past its leaders' retries


def diloco_rejoin() -> dict:
    """tests/integration/test_diloco_rejoin_fabric.py's run: DiLoCo with `rejoin: true` on scenarios/diloco_sites.yaml,
    site us cut off past the retries; when it left and came back against the outage, the outer steps without it,
    whether every replica is bit-equal to the numpy reference of that history (fails otherwise)."""
    from testbed.scenario import load
    doc = load(os.path.join(ROOT, "scenarios", "diloco_sites.yaml"),
               ["workloads.0.variants=[diloco]", "workloads.0.steps=24", "workloads.0.rejoin=true",
                "workloads.0.timeout_s=40", "fabric.wan.0.queue_kb=64",
                # the HB links' 32 KiB packets need a queue of more than 32 KB (as its integration test gives them)
                "fabric.queue_kb={nic: 32, uplink: 32, hb: 64}"])
    doc["faults"] = [{"at": 1.0, "kind": "link-down", "target": "site:us", "duration": REJOIN_OUTAGE_S}]
    out = _run(doc)
    w = out["workloads"][0]
    (row,), (fault,) = w["variants"], out["faults"]
    m = row.get("membership") or {}
    ev = {e["event"]: w["started_s"] + e["event_s"] for e in m.get("events", []) if e["site"] == 1}
    exact = row["replicas"]["wrong"] == [] and row["replicas"]["outer_agree"]
    if not out["ok"] or set(ev) != {"left", "rejoined"} or not exact:
        raise RuntimeError(f"diloco rejoin: events {m.get('events')}, replicas {row['replicas']}: "
                           f"{[c['detail'] for c in out['checks'] if not c['ok']]}")
    return {"left_s": ev["left"] - fault["at_s"], "back_s": ev["rejoined"] - fault["restored_s"],
            "alone_steps": sum(members == [0] for members in m["members"]), "outer_steps": len(m["members"]),
            "bit_equal": float(exact), "resync_bytes": m["resync_bytes"]}


def diloco_rejoin_text(s) -> str:
    return (f"site us left {s['left_s'](1)} s into the {REJOIN_OUTAGE_S:g} s outage, back {s['back_s'](1)} s after it "
            f"ended; {s['alone_steps'](0)} of {s['outer_steps'](0)} outer steps without it; one handover of "
            f"{s['resync_bytes'](0)} B; every replica bit-equal to the reference of that history in "
            + ("every run" if min(s["bit_equal"].values) == 1 else f"{s['bit_equal'](2)} of the runs"))


def diloco_text(s) -> str:
    fast, slow = DILOCO_RATES
    return (f"WAN bytes per inner step / DDP's: DiLoCo {s['diloco_of_ddp'](3)} (1/H = 0.25), Streaming "
            f"{s['streaming_of_ddp'](3)}, 8-bit {s['diloco8_of_ddp'](3)} / {s['streaming8_of_ddp'](3)}; Streaming's "
            f"peak on the wire {s['sampled_peak_ratio'](3)} of DiLoCo's (1/P = 0.5); s per step (0.4 s of compute) "
            f"at {fast} / {slow} Mbit/s: DDP {s[f'ddp_{fast}_s']()} / {s[f'ddp_{slow}_s']()}, DiLoCo "
            f"{s[f'diloco_{fast}_s']()} / {s[f'diloco_{slow}_s']()}, Streaming {s[f'streaming_{fast}_s']()} / "
            f"{s[f'streaming_{slow}_s']()}")


PEER_RATES = (10, 50)
PEER_NAMES = {"ours": "ours", "mpi-tuned": "Open MPI tuned", "mpi": "as installed", "gloo": "gloo", "tf": "TF"}


def peers_side_by_side() -> dict:
    """benchmarks/peers.py at 1 MiB: each library's busbw / line rate."""
    import peers
    from testbed.fabric.links import NIC_MTU
    names, missing = peers.available()
    if missing:
        raise RuntimeError("; ".join(missing))
    numbers = {}
    for mbps in PEER_RATES:
        cols, r = peers.run("1MiB", 3, mbps, NIC_MTU, names, tempfile.mkdtemp(prefix="tb-bench-peers-"))
        if not r["ok"]:
            raise RuntimeError(f"peers at {mbps} Mbit/s: {[c['detail'] for c in r['checks'] if not c['ok']]}")
        numbers |= {f"{n}_{mbps}": c[1 << 20] / (mbps / 8) for n, c in cols.items()}
    return numbers


def peers_text(s) -> str:
    def at(mbps):
        cells = {n: s[f"{n}_{mbps}"]() for n in PEER_NAMES if f"{n}_{mbps}" in s}
        return ", ".join(f"{PEER_NAMES[n]} {v}" if n != "mpi" else f"(as installed {v})" for n, v in cells.items()
                         ).replace(", (as", " (as")
    return "; ".join(f"{mbps} Mbit/s: {at(mbps)}" for mbps in PEER_RATES)


def fastflow() -> dict:
    """benchmarks/offload.py at 100 Mbit/s, the compute pipeline, one round: FastFlow (profiling, then its decision)
    against no offloading (ratio 0) and the best of the fixed-ratio sweep."""
    import offload as bench
    from testbed.fabric.links import NIC_MTU
    from testbed.workloads import offload_compare as compare
    w = bench.run(100, NIC_MTU, {**bench.SPEC, "pipelines": ["compute"], "repeats": 1})
    if not w["ok"]:
        raise RuntimeError(f"offload: {[c['detail'] for c in w['checks'] if not c['ok']]}")
    by = {p["policy"]: p for p in w["policies"]}
    ff, no, best = by["fastflow"], by["ratio=0"], compare.best(compare.sweep_of(w["policies"], "compute"))

    def steps(p):
        return p["steps_per_s"]["median"]
    return {"steps_per_s": steps(ff), "vs_no": steps(ff) / steps(no), "vs_best": steps(ff) / steps(best),
            "epoch_vs_no": ff["speedup_vs_tf_no"], "best_epoch_vs_no": best["speedup_vs_tf_no"],
            "off_ratio": ff["off_ratio"]["median"]}


def machines() -> dict:
    """benchmarks/machines.py's round, one machine and then two (containers acting as machines)."""
    import machines as bench
    args = bench.options(["--repeat", "1"])
    fabric = bench.fabric_of(args)
    with bench.two_machines() as two:
        rounds = {"one": bench.round_on(fabric, None, args), "two": bench.round_on(fabric, two, args)}
    return {f"{layout}_{name}": r[key] for layout, r in rounds.items() for name, key in (
        ("bring_up_s", "bring-up s"), ("ring", "allreduce/ring busbw/bound"),
        ("hierarchical", "allreduce/hierarchical busbw/bound"))}


CAPACITY_GRIDS = ((2, 4), (4, 4), (4, 8))
CAPACITY_RATES = (5, 10, 20, 40, 80)


def capacity() -> dict:
    """benchmarks/capacity.py's search with jumbo frames: per grid, the highest NIC rate (of CAPACITY_RATES, tried
    in order) at which the rank-order ring stays at 0.85 of its bound with CPU headroom; 0: not even the first."""
    import capacity as bench
    args = bench.options([])
    return {f"{s}x{p}_mbps": bench.capacity_of(s, p, 9000, CAPACITY_RATES, args)[0] or 0 for s, p in CAPACITY_GRIDS}


def capacity_text(s) -> str:
    # 0 is "under the first rate tried", in the median and in the spread alike: "under 5 [under 5-5]"
    cells = [re.sub(r"\b0\b", f"under {CAPACITY_RATES[0]}", s[f"{g}x{p}_mbps"](0)) for g, p in CAPACITY_GRIDS]
    return (" / ".join(cells)
            + " Mbit/s with the default frames (RoCE MTU 4096 on NICs, 32 KiB on HB links)")


LIVENESS_SECONDS = {"on": 600, "off": 120}     # without the priority, live peers fall silent within seconds


def liveness() -> dict:
    """benchmarks/liveness.py's default timeout (1 s, beats every 0.15 s) under 5% loss and bursts, with the beats'
    priority on the NIC queues and without it, LIVENESS_SECONDS each. The kill is timed with the priority only:
    without it the killed peer has mostly been found failed, falsely, before it was killed."""
    import liveness as bench
    numbers = {}
    with bench.network() as net:
        for name, priority in (("on", True), ("off", False)):
            r = bench.setting(net, LIVENESS_SECONDS[name], 1.0, priority, 0.05)
            numbers |= {f"{name}_false_pairs": bench.false_pairs(r), f"{name}_max_silence_s": r["max_silence_s"]}
            if priority:
                if r["detected_s"] is None:
                    raise RuntimeError("liveness, with the beats' priority: the kill was not found")
                numbers["on_detected_s"] = r["detected_s"]
    return numbers


CHURN_SECONDS = 600


def churn() -> dict:
    """benchmarks/churn.py: scenarios/churn.yaml for CHURN_SECONDS, seed 1; every rank's state against numpy's."""
    import churn as bench
    from testbed.fabric.links import NIC_MTU
    r = bench.run(CHURN_SECONDS, 1, 2, NIC_MTU, tempfile.mkdtemp(prefix="tb-bench-churn-"))
    w = r["workloads"][0]
    d = w["divergence"] or {}
    if not r["ok"] or d.get("divergent") != 0:
        raise RuntimeError(f"churn: divergence {d}; {[c['detail'] for c in r['checks'] if not c['ok']]}")
    return {"failures": w["failures"], "rejoins": w["rejoins"], "steps": w["steps_completed"], "lost": w["steps_lost"],
            "recovery_s": w["recovery_s"]}


SOAK_RUNS = 100


def soak() -> dict:
    """benchmarks/soak.py: SOAK_RUNS runs of `testbed run`, each checked for leftovers; the daemons' growth."""
    import soak as bench
    r = bench.soak(SOAK_RUNS)
    failed = sum(n for status, n in r["statuses"].items() if status)
    if failed or r["problems"]:
        raise RuntimeError(f"soak: exit statuses {r['statuses']}; leftovers {r['problems'][:5]}")
    numbers = {"runs": sum(r["statuses"].values())}
    for name in bench.DAEMONS:
        before, warm, after = r["before"][name], (r["warm"] or {}).get(name), r["after"][name]
        if before and after:
            key = name.replace("-", "_")
            numbers |= {f"{key}_rss_mib": (after[0] - before[0]) / 1024, f"{key}_fds": after[1] - before[1]}
            if warm:
                numbers |= {f"{key}_rss_mib_warm": (after[0] - warm[0]) / 1024, "warmup_runs": bench.WARMUP_RUNS}
    return numbers


def soak_text(s) -> str:
    def growth(key: str) -> str:
        warm = f" ({s[f'{key}_rss_mib_warm'](1)} after the first {s['warmup_runs'](0)} runs)" if f"{key}_rss_mib_warm" in s else ""
        return f"{s[f'{key}_rss_mib'](1)} MiB{warm}, {s[f'{key}_fds'](0)} open files"
    grown = [f"{name} {growth(key)}" for name, key in (("ovs-vswitchd", "ovs_vswitchd"), ("ovsdb-server", "ovsdb_server"),
                                                        ("dockerd", "dockerd")) if f"{key}_rss_mib" in s]
    return f"{s['runs'](0)} runs, all exit 0, nothing left behind; grown by: " + "; ".join(grown)


VM_STEPS = {"box": "box (scripts/vm-box)", "boot": "vagrant up (boot)", "provisioning": "provisioning",
            "checks": "checks in the VM"}


def vm_test() -> dict:
    """`make vm-test` from this checkout (scripts/vm-test: the box, a fresh VM, its provisioning, the checks inside,
    torn down): minutes per step and the checks that passed inside; fails unless it printed PASS."""
    import re
    done = subprocess.run(["scripts/vm-test"], cwd=ROOT, capture_output=True, text=True)
    out = done.stdout
    result = re.search(r"^vm-test: (PASS|FAIL) in (\d+) s$", out, re.M)
    if done.returncode or not result or result.group(1) != "PASS":
        failed = [line for line in out.splitlines() if line.startswith("[FAIL]")]
        raise RuntimeError(f"vm-test: {failed[:5] or out.strip().splitlines()[-3:]}")
    steps = {name: int(sec) for _, name, sec in re.findall(r"^\[(PASS|DONE)\] (.+?)\s+(\d+) s$", out, re.M)}
    inside = out.split("--- inside the VM:", 1)[-1]
    numbers = {"total_min": int(result.group(2)) / 60,
               "checks_passed": len(re.findall(r"^\[PASS\]", inside, re.M))}
    numbers |= {f"{key}_min": steps[name] / 60 for key, name in VM_STEPS.items() if name in steps}
    return numbers


def vm_text(s) -> str:
    steps = ", ".join("box cached" if key == "box" and max(s["box_min"].values) < 0.5 else f"{key} {s[f'{key}_min'](1)}"
                      for key in VM_STEPS if f"{key}_min" in s)
    return (f"PASS in {s['total_min'](0)} min ({steps} min); {s['checks_passed'](0)} checks inside passed: kernel OVS "
            "and kernel rxe in every host, connectivity, collectives under a link cut and the GPU crash's spare "
            "recovery equal to numpy, the same on Docker hosts with kernel rxe inside every container, captures "
            "clean, FastFlow on cgroup v2")


# -- the table, in the README's order ---------------------------------------------------------------------

FIGURES = [
    Figure("uplink_imbalance", "uplink imbalance, all-to-all over 2:1 spines", "[routing](docs/routing.md)",
           "scenarios/lb_compare.yaml (rail-optimized 2x4, 2 spines, 2:1, NIC 5 Mbit/s), its all-to-all row",
           uplink_imbalance, lambda s: f"single path {s['single']()}, ECMP {s['ecmp']()}, spraying {s['spray']()}",
           held={"spray": "lower"}, quick=True),
    Figure("ring_allreduce", "ring AllReduce busbw / link bound", "[collectives](docs/collectives.md)",
           "rail-optimized 2x4, 2 spines, NIC 5 Mbit/s, 4 MiB, 2 iterations; jumbo frames and 1500-byte frames",
           ring_allreduce, lambda s: f"{s['jumbo']()} ({s['mtu1500']()} with 1500-byte frames)",
           held={"jumbo": "higher", "mtu1500": "higher"}, quick=True),
    Figure("dcqcn_incast", "7-to-1 incast, DCQCN / no congestion control, goodput / bottleneck",
           "[ECN](docs/ecn.md#dcqcn-under-incast)",
           "benchmarks/congestion.py's incast: rail-only 8x1, NICs 1.5 Gbit/s at time scale 300 (5 Mbit/s), 1500-byte "
           "frames, ECN from 8 to 40 KiB, 1 MiB queue, 512 KiB RDMA WRITE per sender",
           dcqcn_incast,
           lambda s: (f"{s['dcqcn_goodput']()} with DCQCN ({s['dcqcn_drops'](0)} drops, queue under Kmax "
                      f"{s['dcqcn_under_kmax']()} of the run), {s['none_goodput']()} without ({s['none_drops'](0)} "
                      "drops)"),
           held={"dcqcn_goodput": "higher"}, quick=True),
    Figure("dcqcn_incast_long", "7-to-1 incast of 2 MiB each, DCQCN, goodput / bottleneck",
           "[ECN](docs/ecn.md#where-the-rest-of-the-link-goes-the-start-and-the-end-of-an-incast)",
           "as the 512 KiB incast, 2 MiB RDMA WRITE per sender: long enough for DCQCN's steady state",
           dcqcn_incast_long,
           lambda s: (f"{s['goodput']()} ({s['busy_late']()} of the link busy over the second half; queue peak "
                      f"{s['queue_max_kb'](0)} KiB, under Kmax {s['under_kmax']()} of the run; {s['drops'](0)} drops)"),
           held={"goodput": "higher"}),
    Figure("dcqcn_ring_cost", "ring AllReduce, DCQCN's cost in time", "[ECN](docs/ecn.md#dcqcn-under-incast)",
           "rail-optimized 2x4, 2 spines at 2:1, NICs 1.5 Gbit/s at time scale 300, ECN from 8 to 40 KiB, ECMP, 4 MiB",
           dcqcn_ring_cost,
           lambda s: (f"{s['cost_pct'](1)}% (busbw / bound {s['dcqcn_bus_ratio']()} with DCQCN, "
                      f"{s['none_bus_ratio']()} without)"),
           quick=True),
    Figure("hierarchical", "hierarchical AllReduce / AllGather, busbw / sequential bound, 2x4",
           "[collectives](docs/collectives.md#with-jumbo-nic-links)",
           "benchmarks/hierarchical.py's round on rail-optimized 2x4, 2 spines, NIC 5 Mbit/s, HB 9x, AllReduce 4 MiB, "
           "AllGather 2 MiB, 2 iterations (rail-only and 1500-byte frames: docs/collectives.md)",
           lambda: hierarchical_grid(2, 4), hierarchical_text,
           held={"allreduce": "higher", "allgather": "higher", "allreduce_pipelined": "higher"}, quick=True),
    Figure("hierarchical_4x4", "hierarchical AllReduce / AllGather, busbw / sequential bound, 4x4",
           "[collectives](docs/collectives.md#with-jumbo-nic-links)",
           "benchmarks/hierarchical.py's round on rail-optimized 4x4, 2 spines, NIC 5 Mbit/s, HB 9x, AllReduce 4 MiB, "
           "AllGather 2 MiB, 2 iterations",
           lambda: hierarchical_grid(4, 4), hierarchical_text,
           held={"allreduce": "higher", "allgather": "higher"}),
    Figure("peers", "AllReduce / line rate, 4 GPUs, 1 MiB, vs users' libraries",
           "[programs](docs/programs.md#side-by-side-our-ring-allreduce-and-the-libraries-users-pick-instead)",
           "benchmarks/peers.py: rail-optimized 4x1 (one NIC per GPU, every byte over the network), 1 spine, 1 MiB, "
           "3 iterations, at 10 and 50 Mbit/s: our ring AllReduce (RoCEv2 in user space), Open MPI (TCP, tuned and as "
           "installed), gloo (TCP), TensorFlow's ring (gRPC); busbw / line rate",
           peers_side_by_side, peers_text, held={"ours_10": "higher", "ours_50": "higher"}),
    Figure("alltoall", "all-to-all, rail-only / rail-optimized time", "[collectives](docs/collectives.md)",
           "2x4, NIC 5 Mbit/s, 4 MiB: two-step on rail-only against direct on rail-optimized",
           alltoall_ratio, lambda s: f"{s['measured'](3)} measured, {s['model'](3)} modelled", quick=True),
    Figure("jobs_slowdown", "two ring AllReduce jobs on the same 1:1 spine uplinks, slowdown together / alone",
           "[concurrent jobs](docs/concurrent.md#measured)",
           "scenarios/concurrent_rings.yaml (rail-optimized 2x2, 2 spines, NIC 5 Mbit/s, two 2-rank rings of 1 MiB), "
           "per routing mode; the mean of the two jobs' slowdowns",
           jobs_slowdown,
           lambda s: (f"single path {s['single']()}, ECMP {s['ecmp']()}, spraying {s['spray']()}, "
                      f"split:4 {s['split4']()}")),
    Figure("multicast", "AllGather, 1 MiB, 8 / 16 GPUs, switch multicast vs ring",
           "[multicast](docs/collectives.md#switch-multicast-and-the-multicast-allgather)",
           "benchmarks/multicast_allgather.py's round: rail-optimized 2x4 and 4x4, 2 spines, NIC 5 Mbit/s, 1 MiB, "
           "2 iterations after a warm-up; multicast against the rank-order and the rail-aware ring; bytes as SPCL "
           "counts them (every link, HB included), and on the NICs and switches alone",
           multicast_allgather, multicast_text,
           held={"2x4_time": "lower", "4x4_time": "lower", "2x4_links_vs_rail": "higher"}),
    Figure("training", "(2, 2, 2) training iteration, rail-only / rail-optimized / clos; compute emulated (the "
           "model's time, slept)", "[training](docs/training.md)",
           "benchmarks/training_iteration.py: (p, t, d) = (2, 2, 2), 4 micro-batches, 1F1B, 4 servers x 2 GPUs, NIC "
           "5 Mbit/s, message sizes scaled so that rail-only's model predicts 20 s; compute is the model's time, slept",
           training_iteration, training_text, held={f"{k}_s": "lower" for k in TRAINING_FABRICS}),
    Figure("gpu_crash", "GPU crash, recovery by shrink / spare / migrate", "[faults](docs/faults.md)",
           "rail-optimized 2x4 (+1 spare GPU per server, +1 spare server), NIC 5 Mbit/s, ring AllReduce 1 MiB, "
           "s1g1 crashed 4 s in; seconds after the crash",
           gpu_crash_recovery,
           lambda s: ("detected " + " / ".join(s[f"{p}_detected_s"]() for p in ("shrink", "spare", "migrate"))
                      + " s by heartbeats over the network, re-formed "
                      + " / ".join(s[f"{p}_reformed_s"]() for p in ("shrink", "spare", "migrate")) + " s"),
           held={f"{p}_{x}_s": "lower" for p in ("shrink", "spare", "migrate") for x in ("detected", "reformed")},
           quick=True),
    Figure("gpu_stall", "GPU stall (host alive), NIC cable cut", "[faults](docs/faults.md)",
           "benchmarks/recovery.py's gpu-stall and nic-down on s1g1 4 s in, shrink recovery, on the GPU crash's fabric; "
           "seconds after the fault",
           stall_and_cut,
           lambda s: (f"stall: found by the watchdog in {s['stall_detected_s']()} s, re-formed {s['stall_reformed_s']()} s; "
                      f"cable cut: heartbeats over the NIC {s['cut_detected_s']()} s, re-formed {s['cut_reformed_s']()} s"),
           held={"stall_detected_s": "lower", "cut_detected_s": "lower", "cut_reformed_s": "lower"}, quick=True),
    Figure("liveness", "heartbeats under 5% random loss, NIC queues filled by bursts (5 Mbit/s: 1.7 s of data)",
           "[faults](docs/faults.md)",
           "benchmarks/liveness.py: rail-optimized 2x2, NIC 5 Mbit/s, ECMP; heartbeats alone every 0.15 s, timeout 1 s, "
           "5% random loss, NIC queues filled by bursts, 10 min with the beats' priority and 2 min without; s1g1 "
           "killed 8 s before each end",
           liveness,
           lambda s: (f"{s['on_false_pairs'](0)} false suspicions in 10 min, longest silence of a live peer "
                      f"{s['on_max_silence_s']()} s against the 1 s timeout, a kill found in {s['on_detected_s']()} s; "
                      f"without the beats' priority, live peers silent {s['off_max_silence_s']()} s "
                      f"({s['off_false_pairs'](0)} false suspicions in 2 min)"),
           held={"on_max_silence_s": "lower"}),
    Figure("early_exit", "a rank killed as it starts, before its first beat", "[faults](docs/faults.md)",
           "rail-only 2x2 with a spare GPU per server, ring AllReduce 256 KiB x 5, spare recovery, timeout (the join "
           "grace) 60 s; gpu-crash on s1g1 0 s into the workload, its rank killed as it starts",
           early_exit,
           lambda s: (f"found {s['detected_s']()} s after the kill (its launcher's word), where its peers waited out the "
                      f"60 s join grace; the job done with a spare in {s['wall_s'](1)} s"),
           quick=True),
    Figure("failover", "link cut, controller acting after 200 ms", "[faults](docs/faults.md#link-and-switch-faults)",
           "scenarios/failover.yaml (8 UDP flows, rail0's uplink cut for 1 s), with and without data-plane failover",
           failover_gap,
           lambda s: (f"flows resume in {s['fast_gap_ms'](0)} ms with data-plane failover ({s['fast_lost'](0)} packets "
                      f"lost), {s['controller_gap_ms'](0)} ms without ({s['controller_lost'](0)})"),
           held={"fast_gap_ms": "lower"}, repeats=5, quick=True),
    Figure("fastflow", "FastFlow input offloading, compute pipeline, NIC 100 Mbit/s", "[offload](docs/offload.md)",
           "benchmarks/offload.py 100, the compute pipeline, one round per repeat: FastFlow, no offloading (TF-NO) "
           "and the fixed-ratio sweep (p'2, p'3; 0.25-1); 25 steps/s of emulated GPU, 0.3 cores for the trainer and "
           "each worker; epoch of 1000 steps, FastFlow's with its profiling",
           fastflow,
           lambda s: (f"after profiling {s['steps_per_s']()} steps/s (offloading {s['off_ratio']()}), {s['vs_no']()}x "
                      f"no offloading and {s['vs_best']()}x the best fixed ratio of the sweep; per epoch, its profiling "
                      f"included, {s['epoch_vs_no']()}x no offloading against {s['best_epoch_vs_no']()}x for that "
                      "fixed ratio"),
           held={"vs_no": "higher", "epoch_vs_no": "higher"}),
    Figure("vm", "the VM, `make vm-test`, no KVM (TCG, 2 vCPUs), jumbo frames, from a fresh clone", "[VM](docs/vm.md)",
           "scripts/vm-test: the local box (cached), a fresh VM booted, provisioned offline with scripts/setup and "
           "scripts/provision-kernel, scripts/vm-check inside, destroyed; one run (about half an hour without KVM)",
           vm_test, vm_text, held={"total_min": "lower"}, repeats=1),
    Figure("capacity", "capacity: highest NIC rate still link-bound, 8 / 16 / 32 GPUs", "[capacity](docs/capacity.md)",
           "benchmarks/capacity.py's search, jumbo frames: rail-optimized, 2 spines, a rank-order ring AllReduce of "
           "about 4 s of link time (1 warm-up, 2 timed) at 5, 10, 20, 40, 80 Mbit/s in turn, up to the first rate "
           "below 0.85 of its bound or short of CPU headroom (1500-byte frames: docs/capacity.md)",
           capacity, capacity_text, held={f"{s}x{p}_mbps": "higher" for s, p in CAPACITY_GRIDS}),
    Figure("delay_line", "link delay where the kernel has no netem (a delay line in user space), 1 / 5 / 20 ms one way",
           "[delay](docs/delay.md)",
           "benchmarks/delay.py: two namespaces, one veth shaped by tbf; 20 pings 50 ms apart at 10 Mbit/s (the median); "
           "then a 3 s paced UDP flow of 1000-byte frames over 1 ms, the delay process's CPU per frame",
           delay_line,
           lambda s: (f"ping RTT {s['rtt_1ms']()} / {s['rtt_5ms']()} / {s['rtt_20ms']()} ms (medians); "
                      f"{s['cpu_us_1000pps'](0)} / {s['cpu_us_5000pps'](0)} us of CPU per frame at 1000 / 5000 frames/s"),
           held={"rtt_5ms": "lower", "rtt_20ms": "lower"}, quick=True),
    Figure("pccl_wan", "a long fat pipe (5 Mbit/s, 20 ms one way), windows of 6 packets, 1 / 8 RoCE connections",
           "[sites](docs/sites.md#long-fat-pipes-pccl-parallel-connections)",
           "scenarios/pccl_wan.yaml: two Clos 2x2 sites, 512 KiB over 1 then 8 RC queue pairs of 6 x 1 KiB in flight",
           pccl_wan,
           lambda s: (f"one connection {s['one_of_window']()} of window / round trip ({s['one_of_rate']()} of the "
                      f"link); eight {s['eight_of_rate']()} of the link"),
           held={"eight_of_rate": "higher"}, quick=True),
    Figure("diloco", f"DDP / DiLoCo / Streaming DiLoCo across 2 sites of {DILOCO_GPUS} GPUs (256 KiB, H = 4, P = 2)",
           "[DiLoCo](docs/diloco.md#measured)",
           f"benchmarks/diloco.py --gpus {DILOCO_GPUS}: rail-optimized 2x{DILOCO_GPUS}, each server a site, the leaders' "
           "NICs what crosses sites; 256 KiB of float32, H = 4, P = 2, 8 inner steps of 0.4 s compute; at 20 Mbit/s "
           "with 8-bit runs (--nic-mbps 20 --quantize 8), then at 2 Mbit/s (--quantize 0), about a minute a repeat; "
           "bytes on the wire per inner step, the sampled peak over a window of one step's compute, every replica "
           "bit-equal to the numpy reference",
           diloco_sites, diloco_text,
           held={"diloco_of_ddp": "lower", "streaming_of_ddp": "lower", "sampled_peak_ratio": "lower",
                 "streaming_2_s": "lower"}),
    Figure("diloco_rejoin", "a site lost past the retries during DiLoCo, and back (2 sites of 4 GPUs)",
           "[DiLoCo](docs/diloco.md#a-site-lost-and-back)",
           "scenarios/diloco_sites.yaml (two Clos 2x2 sites, WAN link 5 Mbit/s, 10 ms): DiLoCo alone, 24 inner steps, "
           "rejoin: true, queues of 32 KB (64 KB on the HB and WAN links); site us's WAN links down from second 1 for "
           f"{REJOIN_OUTAGE_S:g} s; fails unless us left and rejoined once and every replica equals the numpy "
           "reference of that membership history",
           diloco_rejoin, diloco_rejoin_text),
    Figure("bring_up", "bring-up, 64 GPU hosts and 20 switches", "[Docker](docs/docker.md)",
           "rail-optimized 8x8, 4 spines, ECMP, namespaces (containers: benchmarks/bringup.py ... docker)",
           bring_up_64, lambda s: f"{s['netns_s'](1)} s on namespaces", held={"netns_s": "lower"}, quick=True),
    Figure("one_qp", "user-space RoCEv2, one RC QP", "[RDMA](docs/rdma.md)",
           "two namespaces, one veth with tbf at 100 Mbit/s, RDMA WRITE and READ of 4 MiB x 3, IB MTU 1024",
           one_qp, lambda s: f"{s['write']()} (WRITE) / {s['read']()} (READ) of the link bound",
           held={"write": "higher", "read": "higher"}, quick=True),
    Figure("lost_tail", "a window's tail lost at 5 Mbit/s (1 MiB queue), RC retransmission timeout",
           "[RDMA](docs/rdma.md#retransmission-timeout)",
           "one veth at 5 Mbit/s, 1 MiB queue, RoCE MTU 4096, a 1 MiB WRITE whose last 8 packets are lost once; "
           "the cost over a lossless WRITE",
           lost_tail, lambda s: f"adaptive (the default) {s['adaptive_s']()} s, fixed {s['fixed_s']()} s",
           held={"adaptive_s": "lower"}, quick=True),
    Figure("churn", "churn, 10 minutes, 8 GPUs (seed 1)", "[faults](docs/faults.md#churn-gpus-that-come-back)",
           "benchmarks/churn.py: scenarios/churn.yaml (rail-optimized 2x4, 64 KiB AllReduce with a shared state) for "
           "600 s, seed 1, at most 2 GPUs down; fails unless every rank's state equals numpy's after every step",
           churn,
           lambda s: (f"{s['failures'](0)} failures and {s['rejoins'](0)} rejoins, {s['steps'](0)} steps, "
                      f"{s['lost'](0)} lost; every rank's state bit-exact after every step"),
           held={"steps": "higher"}),
    Figure("machines", "the same fabric on one machine / spread over two (containers acting as machines)",
           "[machines](docs/machines.md)",
           "benchmarks/machines.py's round: rail-optimized 2x4, 2 spines, NIC 5 Mbit/s, rail-aware ring and "
           "hierarchical AllReduce of 4 MiB; on this machine, then over two containers acting as machines (VXLAN)",
           machines,
           lambda s: (f"bring-up {s['one_bring_up_s']()} / {s['two_bring_up_s']()} s; ring AllReduce "
                      f"{s['one_ring']()} / {s['two_ring']()}, hierarchical {s['one_hierarchical']()} / "
                      f"{s['two_hierarchical']()} of the bound"),
           held={"two_ring": "higher", "two_hierarchical": "higher"}),
    Figure("soak", "soak: 100 runs with a link flap, GPU crash or NIC cut", "[testing](docs/testing.md)",
           "benchmarks/soak.py: 100 runs of `testbed -q run` (rail-optimized 2x2, ring AllReduce 256 KiB, a link "
           "flap, GPU crash or NIC cut in turn), each checked for leftovers; fails on any exit status but 0 or "
           "anything left behind; the long-lived daemons' memory and open files after against before",
           soak, soak_text),
    Figure("planner", "32768 GPUs, radix 128 (computed)", "[planner](docs/planner.md)",
           "testbed plan's counting method, HB domains of 256 (GH200), non-blocking; unit prices fitted to the paper's savings",
           planner_table2,
           lambda s: (f"rail-only {s['rail_only_switches'](0)} vs {s['rail_optimized_switches'](0)} switches "
                      f"(Wang et al.'s Table II, cell by cell); {s['cost_saved_pct'](0)}% of the cost saved with unit "
                      "prices fitted to the paper's savings (it gives none)"),
           repeats=1, quick=True),
]
BY_KEY = {f.key: f for f in FIGURES}


# -- publishing -----------------------------------------------------------------------------------------------

class Stat:
    """A number's repeats, printed as the median, with [min-max] when they differ at the printed precision."""

    def __init__(self, values: list[float]):
        self.values = values

    def __call__(self, digits: int = 2) -> str:
        med, lo, hi = (f"{v:.{digits}f}" for v in (statistics.median(self.values), min(self.values), max(self.values)))
        return med if lo == hi else f"{med} [{lo}-{hi}]"


def figure_text(fig: Figure, entry: dict) -> str:
    if "values" in entry and fig.render:
        return fig.render({k: Stat(v) for k, v in entry["values"].items()})
    return entry["text"]


def load_published(path: str = JSON_PATH) -> dict:
    with open(path) as f:
        return json.load(f)


def readme_table(published: dict) -> str:
    rows = ["| what | figure | details |", "|---|---|---|"]
    for fig in FIGURES:
        entry = published[fig.key]
        mark = "" if "values" in entry else " ‡"
        rows.append(f"| {fig.what}{mark} | {figure_text(fig, entry)} | {fig.details} |")
    return "\n".join(rows)


def measured_md(published: dict) -> str:
    out = ["# Measured figures", "",
           "Written by `make bench` (benchmarks/measured.py) from [measured.json](measured.json); the README's Measured",
           "table is rendered from the same file. Each figure measured by `make bench` is the median [min-max] of its",
           "repeats, with its set-up, the machine, the date and the commit."]
    if any("values" not in published[fig.key] for fig in FIGURES):
        out += ["Figures marked ‡ in the README are measured by hand with the command given here, not yet by",
                "`make bench`."]
    out.append("")
    for fig in FIGURES:
        entry = published[fig.key]
        out += [f"## {fig.what}", "", figure_text(fig, entry), ""]
        if "values" in entry:
            out.append(f"- set-up: {fig.config}")
            out.append(f"- repeats: {len(next(iter(entry['values'].values())))}; every value: "
                       + "; ".join(f"{k} {', '.join(f'{v:.4g}' for v in vs)}" for k, vs in entry["values"].items()))
            out.append(f"- machine: {entry['machine']}")
            out.append(f"- measured {entry['date']} at commit {entry['commit']}")
        else:
            if fig.measure:         # a figure make bench measures, not yet published by it
                out.append(f"- a run by hand; `benchmarks/measured.py --only {fig.key}` measures it")
            else:
                out.append(f"- by hand: `{fig.by_hand}`" if fig.by_hand else "- by hand")
            if entry.get("date"):
                out.append(f"- last run {entry['date']}")
        out.append("")
    return "\n".join(out)


def readme_with(table: str, readme: str) -> str:
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def render(published: dict) -> None:
    with open(MD_PATH, "w") as f:
        f.write(measured_md(published))
    with open(README_PATH) as f:
        readme = f.read()
    with open(README_PATH, "w") as f:
        f.write(readme_with(readme_table(published), readme))


def machine() -> str:
    datapath = "kernel" if os.path.isdir("/sys/module/openvswitch") else "userspace (netdev)"
    return (f"{os.cpu_count()} cores, Linux {platform.release()}, Open vSwitch {datapath} datapath, "
            f"load average {os.getloadavg()[0]:.1f} at the start")


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def worse(fig: Figure, old: dict, new: dict, against: str = "median") -> list[str]:
    """The held numbers more than DROP worse than the published medians (`against="worst"`: than the worst of the
    published repeats, for one new run held against a figure whose repeats spread)."""
    out = []
    for name, better in fig.held.items():
        if name not in old.get("values", {}):
            continue
        published = old["values"][name]
        if against == "worst":
            was = min(published) if better == "higher" else max(published)
        else:
            was = statistics.median(published)
        now = statistics.median(new["values"][name])
        if not was:             # nothing to be a fraction of (a capacity of 0: under the first rate tried)
            continue
        change = (was - now) / was if better == "higher" else (now - was) / was
        if change > DROP:
            out.append(f"{fig.key}.{name}: {now:.4g} against {was:.4g} published ({change:.0%} worse)")
    return out


def measure(fig: Figure, repeats: int) -> dict:
    values: dict[str, list[float]] = {}
    where = machine()                       # its load average before the figure's own load
    for i in range(repeats):
        t0 = time.monotonic()
        for k, v in fig.measure().items():
            values.setdefault(k, []).append(float(v))
        print(f"  {fig.key} {i + 1}/{repeats}: " + ", ".join(f"{k} {vs[-1]:.4g}" for k, vs in values.items())
              + f" ({time.monotonic() - t0:.0f} s)", flush=True)
    return {"values": values, "config": fig.config, "machine": where,
            "date": datetime.date.today().isoformat(), "commit": commit()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the figures of make bench-quick")
    ap.add_argument("--only", help="comma-separated keys: " + ", ".join(f.key for f in FIGURES if f.measure))
    ap.add_argument("--repeats", type=int, help="override each figure's repeats")
    ap.add_argument("--accept", action="store_true", help="publish figures even when they are more than 15%% worse")
    ap.add_argument("--render", action="store_true", help="only rewrite docs/measured.md and the README's table")
    ap.add_argument("--dry-run", action="store_true", help="measure and print, publish nothing")
    args = ap.parse_args(argv)
    published = load_published()
    if args.render:
        render(published)
        return 0
    keys = args.only.split(",") if args.only else [f.key for f in FIGURES if f.measure and (f.quick or not args.quick)]
    unknown = [k for k in keys if k not in BY_KEY or not BY_KEY[k].measure]
    if unknown:
        raise SystemExit(f"measured.py: no figure measured here named {', '.join(unknown)}")
    if args.repeats is not None and args.repeats < 1:
        raise SystemExit("measured.py: --repeats must be at least 1")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))     # the benchmarks' own modules
    failures = []
    for key in keys:
        fig = BY_KEY[key]
        print(f"# {fig.key}: {fig.config}", flush=True)
        try:
            new = measure(fig, args.repeats or fig.repeats)
        except (Exception, SystemExit) as e:    # one figure's failure is reported; the others still run
            failures.append(f"{key}: {type(e).__name__}: {e}")
            print(f"  {key} FAILED: {e}", flush=True)
            continue
        drops = worse(fig, published.get(key, {}), new)      # a new figure has nothing to be worse than
        failures += drops
        print(f"  {fig.key}: {figure_text(fig, new)}" + (f"  WORSE: {'; '.join(drops)}" if drops else ""), flush=True)
        if not drops or args.accept:
            published[key] = new
    if args.dry_run:
        return 1 if failures else 0
    tmp = JSON_PATH + ".tmp"
    with open(tmp, "w") as f:
        json.dump(published, f, indent=1)
        f.write("\n")
    os.replace(tmp, JSON_PATH)
    render(published)
    for line in failures:
        print(f"FAILED {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
