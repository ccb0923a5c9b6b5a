"""make bench: measure the figures of the README's Measured table, with repeats, and publish them.

    .venv/bin/python benchmarks/measured.py [--quick] [--only KEY,KEY] [--repeats N] [--accept] [--dry-run]
    .venv/bin/python benchmarks/measured.py --render          # rewrite docs/measured.md and the README's table

Every row of the README's Measured table is a figure here, in the table's order. A figure that this script can
measure has a `measure()` that runs its set-up once and returns named numbers; it runs `repeats` times and is
published as median [min-max] of each number, with the configuration, the machine (cores, kernel, Open vSwitch
datapath), the date and the commit, in docs/measured.json. The rest are measured by hand (the VM, the soaks):
their entry names the command and keeps the text of the last such run.

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
    Figure("hierarchical", "hierarchical AllReduce / AllGather, busbw / sequential bound",
           "[collectives](docs/collectives.md#with-jumbo-nic-links)",
           by_hand=".venv/bin/python benchmarks/hierarchical.py --grids 2x4,4x4"),
    Figure("peers", "AllReduce / line rate, 4 GPUs, 1 MiB, vs users' libraries",
           "[programs](docs/programs.md#side-by-side-our-ring-allreduce-and-the-libraries-users-pick-instead)",
           by_hand=".venv/bin/python benchmarks/peers.py --nic-mbps 10; --nic-mbps 50"),
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
           by_hand=".venv/bin/python benchmarks/multicast_allgather.py --grids 2x4,4x4 --sizes 1MiB"),
    Figure("training", "(2, 2, 2) training iteration, rail-only / rail-optimized / clos; compute emulated (the "
           "model's time, slept)", "[training](docs/training.md)",
           by_hand=".venv/bin/python benchmarks/training_iteration.py"),
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
           by_hand=".venv/bin/python benchmarks/recovery.py --kinds gpu-stall nic-down"),
    Figure("liveness", "heartbeats under 5% random loss, NIC queues filled by bursts (5 Mbit/s: 1.7 s of data)",
           "[faults](docs/faults.md)", by_hand=".venv/bin/python benchmarks/liveness.py --seconds 600"),
    Figure("early_exit", "a rank killed as it starts, before its first beat", "[faults](docs/faults.md)",
           by_hand=".venv/bin/python -m pytest -s tests/integration/test_recovery.py -k first_beat"),
    Figure("failover", "link cut, controller acting after 200 ms", "[faults](docs/faults.md#link-and-switch-faults)",
           "scenarios/failover.yaml (8 UDP flows, rail0's uplink cut for 1 s), with and without data-plane failover",
           failover_gap,
           lambda s: (f"flows resume in {s['fast_gap_ms'](0)} ms with data-plane failover ({s['fast_lost'](0)} packets "
                      f"lost), {s['controller_gap_ms'](0)} ms without ({s['controller_lost'](0)})"),
           held={"fast_gap_ms": "lower"}, repeats=5, quick=True),
    Figure("fastflow", "FastFlow input offloading (3 runs)", "[offload](docs/offload.md)",
           by_hand="sudo .venv/bin/python benchmarks/offload.py 100"),
    Figure("vm", "the VM, `make vm-test`, no KVM (TCG, 2 vCPUs), jumbo frames, on a busy host", "[VM](docs/vm.md)",
           by_hand="make vm-test"),
    Figure("capacity", "capacity: highest NIC rate still link-bound, 8 / 16 / 32 GPUs", "[capacity](docs/capacity.md)",
           by_hand=".venv/bin/python benchmarks/capacity.py --grids 2x4,4x4,4x8"),
    Figure("delay_line", "link delay where the kernel has no netem (a delay line in user space), 1 / 5 / 20 ms one way",
           "[delay](docs/delay.md)", by_hand=".venv/bin/python -m pytest -s tests/integration/test_link_delay.py"),
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
           by_hand=".venv/bin/python benchmarks/churn.py"),
    Figure("machines", "the same fabric on one machine / spread over two (containers acting as machines)",
           "[machines](docs/machines.md)", by_hand=".venv/bin/python benchmarks/machines.py"),
    Figure("soak", "soak: 100 runs with a link flap, GPU crash or NIC cut (20 min, 1500-byte frames)",
           "[testing](docs/testing.md)", by_hand=".venv/bin/python benchmarks/soak.py --runs 100"),
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
           "repeats, with its set-up, the machine, the date and the commit. Figures marked ‡ in the README are measured",
           "by hand with the command given here, not yet by `make bench`.", ""]
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
        change = (was - now) / was if better == "higher" else (now - was) / was
        if was and change > DROP:
            out.append(f"{fig.key}.{name}: {now:.4g} against {was:.4g} published ({change:.0%} worse)")
    return out


def measure(fig: Figure, repeats: int) -> dict:
    values: dict[str, list[float]] = {}
    for i in range(repeats):
        t0 = time.monotonic()
        for k, v in fig.measure().items():
            values.setdefault(k, []).append(float(v))
        print(f"  {fig.key} {i + 1}/{repeats}: " + ", ".join(f"{k} {vs[-1]:.4g}" for k, vs in values.items())
              + f" ({time.monotonic() - t0:.0f} s)", flush=True)
    return {"values": values, "config": fig.config, "machine": machine(),
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
        except Exception as e:                  # one figure's failure is reported; the others still run
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
