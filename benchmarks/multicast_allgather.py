"""Benchmark: flat multicast AllGather against the rank-order and the rail-aware ring, or (--op broadcast)
multicast Broadcast against the pipelined chain (printed, not asserted).

    .venv/bin/python benchmarks/multicast_allgather.py [--grids 2x4,4x4] [--sizes 1MiB,4MiB] [--repeat 3]
                                                      [--nic-mbps 5] [--nic-mtu 1500] [--algos ring-rank,ring-rail,multicast]
                                                      [--op allgather|broadcast] [--json FILE]

Traffic is counted as SPCL (Khalilov et al., SC'24) counts it: bytes on every link, i.e. what the GPUs' NICs
send, what every switch port sends, and both directions of the HB links (a ring's hops inside a server cross
its HB domain, the GPUs' NVLink). Per rail-optimized grid (2 spines) one bring-up, then `--repeat` rounds of
every algorithm and size, each checked against numpy. Printed per case, as median [min-max] over the rounds:
time, bytes per operation on all links (and the network's share: NICs + switches), and for multicast the
network's bytes over the minimal trees' (testbed/model/multicast_minimum.py; 1 = every shard once over
each link of its tree). Then, per grid and size, the ratios the paper reports: ring bytes / multicast bytes
(SPCL: up to ~2x) and multicast time / the faster ring's time. Counters cover the warm-up as well, so bytes
are divided by the operations run (warm-up + iterations).
"""
import argparse
import json
import os
import statistics
import sys
import time

from testbed.fabric.links import NIC_MTU
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.scenario.schema import parse_size
from testbed.workloads import collective

ALGOS = {"ring-rank": {"algo": "ring", "ring": "rank"}, "ring-rail": {"algo": "ring", "ring": "rail"},
         "multicast": {"algo": "multicast"}, "multicast-rail": {"algo": "multicast", "multicast_scope": "rail"},
         "hierarchical": {"algo": "hierarchical"}, "chain": {"algo": "chain"}}
BASELINES = ("ring-rank", "ring-rail", "chain")          # what multicast is compared with, where they ran


def cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:]]


def idle_pct(before: list[int], after: list[int]) -> float:
    delta = [b - a for a, b in zip(before, after)]
    return 100.0 * (delta[3] + delta[4]) / max(1, sum(delta))


def run_grid(servers: int, per: int, args) -> list[dict]:
    fabric = build("rail-optimized", servers, per, spines=2, nic_mbps=args.nic_mbps, nic_mtu=args.nic_mtu)
    rows = []
    with Network(fabric) as net:
        for rnd in range(args.repeat):
            for size in args.sizes:
                for name in args.algos:
                    cpu = cpu_times()
                    spec = {"type": "collective", "op": args.op, "sizes": [size], "iterations": args.iterations,
                            "warmup": 1, **ALGOS[name]}
                    res = collective.run(net, spec)
                    idle = idle_pct(cpu, cpu_times())
                    if not res["rows"]:
                        raise SystemExit(f"{servers}x{per} {name} {size} failed: "
                                         f"{[c['detail'] for c in res['checks'] if not c['ok']]}")
                    r = res["rows"][0]
                    ops = 1 + args.iterations
                    network = r["send_nic_bytes"] + r["fabric_bytes"]
                    rows.append({**r, "name": name, "grid": f"{servers}x{per}", "round": rnd, "ops": ops,
                                 "network_per_op": network / ops, "links_per_op": r["link_bytes"] / ops,
                                 "cpu_idle_pct": idle})
                    print(f"  round {rnd} {servers}x{per} {size} {name}: {r['seconds']:.3f} s, all links "
                          f"{r['link_bytes'] / ops / 1e6:.2f} MB/op, tree ratio {r.get('tree_ratio') or '-'}, "
                          f"CPU idle {idle:.0f}%{'' if r['correct'] else ' WRONG'}", file=sys.stderr, flush=True)
    return rows


def spread(values, fmt=".2f") -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def report(rows: list[dict]) -> None:
    cases: dict[tuple, list[dict]] = {}
    for r in rows:
        cases.setdefault((r["grid"], r["bytes"], r["name"]), []).append(r)
    print(f"{'grid':>4} {'size':>8} {'algo':<14} {'n':>2} {'time s':>20} {'all links MB/op':>20} "
          f"{'network MB/op':>20} {'net/tree min':>18} {'idle%':>5} ok")
    for (grid, nbytes, name), rs in cases.items():
        trees = [r["tree_ratio"] for r in rs if r.get("tree_ratio")]
        print(f"{grid:>4} {nbytes:>8} {name:<14} {len(rs):>2} {spread([r['seconds'] for r in rs], '.3f'):>20} "
              f"{spread([r['links_per_op'] / 1e6 for r in rs]):>20} {spread([r['network_per_op'] / 1e6 for r in rs]):>20} "
              f"{spread(trees) if trees else '-':>18} {statistics.median(r['cpu_idle_pct'] for r in rs):>5.0f} "
              f"{'yes' if all(r['correct'] for r in rs) else 'NO'}")
    print()
    for (grid, nbytes), c in compare(rows).items():
        line = [f"vs {name}: {spread(c['links'][name])}x fewer link bytes ({spread(c['network'][name])}x network only)"
                for name in c["links"]]
        if c["time"]:
            line.append(f"time / the faster baseline's {spread(c['time'])}")
        print(f"{grid} {nbytes} B, multicast " + "; ".join(line))


def compare(rows: list[dict]) -> dict[tuple, dict]:
    """Per (grid, bytes) where multicast ran: per baseline, its bytes / multicast's, round by round, on all links
    ("links") and on the network alone ("network"); and multicast's time / the faster baseline's ("time")."""
    cases: dict[tuple, list[dict]] = {}
    for r in rows:
        cases.setdefault((r["grid"], r["bytes"], r["name"]), []).append(r)
    out = {}
    for grid, nbytes in dict.fromkeys((g, b) for g, b, _ in cases):
        mc = {r["round"]: r for r in cases.get((grid, nbytes, "multicast"), [])}
        if not mc:
            continue
        baselines = [n for n in BASELINES if (grid, nbytes, n) in cases]
        c = out[grid, nbytes] = {"links": {}, "network": {}, "time": []}
        for name in baselines:
            pairs = [(r, mc[r["round"]]) for r in cases[grid, nbytes, name] if r["round"] in mc]
            c["links"][name] = [a["links_per_op"] / b["links_per_op"] for a, b in pairs]
            c["network"][name] = [a["network_per_op"] / b["network_per_op"] for a, b in pairs]
        by_round = {n: {r["round"]: r["seconds"] for r in cases[grid, nbytes, n]} for n in baselines}
        c["time"] = [m["seconds"] / min(by_round[n][rnd] for n in baselines) for rnd, m in mc.items()
                     if baselines and all(rnd in by_round[n] for n in baselines)]
    return out


def options(argv=None) -> argparse.Namespace:
    """The command line's settings, checked (ValueError); benchmarks/measured.py passes its own."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", default="2x4")
    ap.add_argument("--sizes", default="1MiB,4MiB")
    ap.add_argument("--algos", help="default ring-rank,ring-rail,multicast (allgather), chain,multicast (broadcast)")
    ap.add_argument("--op", default="allgather", choices=["allgather", "broadcast"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--nic-mbps", type=float, default=5)
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    ap.add_argument("--json", help="write every round's rows to this file")
    args = ap.parse_args(argv)
    args.grids = [tuple(int(v) for v in g.split("x")) for g in args.grids.split(",")]
    args.sizes = args.sizes.split(",")
    [parse_size(s) for s in args.sizes]
    args.algos = (args.algos or ("chain,multicast" if args.op == "broadcast" else
                                 "ring-rank,ring-rail,multicast")).split(",")
    unknown = [a for a in args.algos if a not in ALGOS]
    if unknown or any(len(g) != 2 for g in args.grids):
        raise ValueError(f"unknown algos {unknown}; choose from {', '.join(ALGOS)}" if unknown else "grid")
    return args


def main():
    try:
        args = options()
    except ValueError as exc:
        print(f"error: bad --grids, --sizes or --algos: {exc}", file=sys.stderr)
        sys.exit(2)
    rows, t0 = [], time.time()
    for servers, per in args.grids:
        rows += run_grid(servers, per, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    report(rows)
    print(f"\n{len(rows)} runs in {time.time() - t0:.0f} s; NIC {args.nic_mbps} Mbit/s, HB 9x, 2 spines; "
          f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
