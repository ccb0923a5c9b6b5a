"""Benchmark: collectives on emulated fabrics against the analytical models (printed, not asserted).

    .venv/bin/python benchmarks/collectives.py [--nic-mbps 5] [--size 4MiB]

1. Ring AllReduce, 8 ranks over 2 servers on rail-optimized: busbw / bound (goal >= 0.85).
2. All-to-all on rail-only (two-step) vs rail-optimized (direct): measured time ratio vs the models'.
3. Hierarchical vs flat ring AllGather on rail-only.
"""
import argparse
import tempfile

from testbed import runner
from testbed.fabric.links import NIC_MTU
from testbed.scenario.schema import parse_size


def collective(kind, op, algo, size, nic, mtu, iterations=2):
    scenario = {"name": f"bench-{kind}-{op}-{algo}",
                "fabric": {"kind": kind, "servers": 2, "gpus_per_server": 4, "spines": 2, "nic_mbps": nic,
                           "nic_mtu": mtu},
                "workloads": [{"type": "collective", "op": op, "algo": algo, "sizes": [size],
                               "iterations": iterations}]}
    out = runner.run(scenario, tempfile.mkdtemp(prefix="tb-bench-"), echo=lambda *a: None)
    w = out["workloads"][0]
    if not w["rows"]:
        raise SystemExit(f"{kind} {op}/{algo} failed: {[c['detail'] for c in out['checks'] if not c['ok']]}")
    return {**w["rows"][0], "cpu_idle": w["cpu_idle_mean_pct"], "cpu_bound": w["cpu_bound"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nic-mbps", type=float, default=5)
    ap.add_argument("--size", default="4MiB")
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    args = ap.parse_args()
    size, link = parse_size(args.size), (args.nic_mbps, args.nic_mtu)
    rows = []
    ring = collective("rail-optimized", "allreduce", "ring", size, *link)
    rows.append(("ring allreduce, rail-optimized", ring))
    a2a_ro = collective("rail-only", "alltoall", "two-step", size, *link)
    a2a_opt = collective("rail-optimized", "alltoall", "direct", size, *link)
    rows += [("alltoall two-step, rail-only", a2a_ro), ("alltoall direct, rail-optimized", a2a_opt)]
    ag_ring = collective("rail-only", "allgather", "ring", size, *link)
    ag_hier = collective("rail-only", "allgather", "hierarchical", size, *link)
    rows += [("allgather ring, rail-only", ag_ring), ("allgather hierarchical, rail-only", ag_hier)]

    print(f"{'case':<36} {'bytes':>9} {'time s':>8} {'busbw MB/s':>11} {'bound':>7} {'ratio':>6} "
          f"{'retx':>5} {'idle%':>6} ok")
    for name, r in rows:
        print(f"{name:<36} {r['bytes']:>9} {r['seconds']:>8.3f} {r['busbw_MBps']:>11.3f} "
              f"{r['bound_busbw_MBps']:>7.3f} {r['bus_ratio']:>6.2f} {r['retransmits']:>5} "
              f"{r['cpu_idle']:>6} {'yes' if r['correct'] else 'NO'}{' (CPU-bound)' if r['cpu_bound'] else ''}")
    measured = a2a_ro["seconds"] / a2a_opt["seconds"]
    model = (a2a_ro["bytes"] / a2a_ro["bound_busbw_MBps"]) / (a2a_opt["bytes"] / a2a_opt["bound_busbw_MBps"])
    print(f"\nall-to-all rail-only / rail-optimized time: measured {measured:.3f}, model {model:.3f} "
          f"(off by {abs(measured / model - 1):.1%}; goal within 15%)")
    print(f"AllGather on rail-only: hierarchical {ag_hier['seconds']:.3f} s vs flat ring {ag_ring['seconds']:.3f} s "
          f"({ag_ring['seconds'] / ag_hier['seconds']:.2f}x)")
    print(f"ring AllReduce busbw/bound: {ring['bus_ratio']:.2f} (goal >= 0.85)")


if __name__ == "__main__":
    main()
