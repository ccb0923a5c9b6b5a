"""Benchmark: rail-aware hierarchical collectives against their models, phase by phase (printed, not asserted).

    .venv/bin/python benchmarks/hierarchical.py [--kinds rail-only,rail-optimized] [--grids 2x4,4x4] [--repeat 3]
                                                [--nic-mbps 5] [--nic-mtu 1500] [--allreduce-size 4MiB]
                                                [--allgather-size 2MiB] [--ring] [--json FILE]

Per fabric kind and grid (servers x GPUs per server), one bring-up, then `--repeat` rounds of: hierarchical and
hierarchical-pipelined AllReduce and AllGather (optionally the flat ring AllReduce for reference). Every result
is checked against numpy. Printed per case: busbw / bound as the median of the rounds with its spread
(min-max), each phase's time / bound (sequential variants), and the pipelined variants' busbw over the
SEQUENTIAL bound (above 1: the overlap beats any sequential schedule). Ratios are taken against bounds in the
same run, so a busy machine shows as spread rather than as a shifted figure; idle% is the machine's CPU idle
share during each run (median), near 0 meaning the figure is CPU-bound rather than link-bound.
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


def cases(args) -> list[dict]:
    out = [{"op": "allreduce", "algo": a, "sizes": [args.allreduce_size]} for a in ("hierarchical",
                                                                                   "hierarchical-pipelined")]
    out += [{"op": "allgather", "algo": a, "sizes": [args.allgather_size]} for a in ("hierarchical",
                                                                                    "hierarchical-pipelined")]
    if args.ring:
        out.insert(0, {"op": "allreduce", "algo": "ring", "sizes": [args.allreduce_size]})
    return out


def run_grid(kind: str, servers: int, per: int, args) -> list[dict]:
    fabric = build(kind, servers, per, nic_mbps=args.nic_mbps, nic_mtu=args.nic_mtu,
                   **({"spines": 2} if kind != "rail-only" else {}))
    rows = []
    with Network(fabric) as net:
        for rnd in range(args.repeat):
            for case in cases(args):
                load, cpu = os.getloadavg()[0], cpu_times()
                res = collective.run(net, {"type": "collective", "iterations": args.iterations, **case})
                idle = idle_pct(cpu, cpu_times())
                if not res["rows"]:
                    raise SystemExit(f"{kind} {servers}x{per} {case['op']}/{case['algo']} failed: "
                                     f"{[c['detail'] for c in res['checks'] if not c['ok']]}")
                r = res["rows"][0]
                rows.append({**r, "kind": kind, "grid": f"{servers}x{per}", "round": rnd, "load1": load,
                             "cpu_idle_pct": idle})
                print(f"  round {rnd} {kind} {servers}x{per} {r['op']}/{r['algo']}: ratio {r['bus_ratio']:.3f}, "
                      f"CPU idle {idle:.0f}%"
                      f"{' WRONG' if not r['correct'] else ''}", file=sys.stderr, flush=True)
    return rows


def cpu_times() -> list[int]:
    """The machine's CPU time counters (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:]]


def idle_pct(before: list[int], after: list[int]) -> float:
    """Share of the machine's CPU time that was idle between two readings (idle + iowait)."""
    delta = [b - a for a, b in zip(before, after)]
    return 100.0 * (delta[3] + delta[4]) / max(1, sum(delta))


def spread(values) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def report(rows: list[dict]) -> None:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["kind"], r["grid"], r["op"], r["algo"], r["bytes"]), []).append(r)
    print(f"{'fabric':<16} {'grid':>4} {'op/algo':<34} {'bytes':>8} {'n':>2} {'busbw MB/s':>10} {'bound':>7} "
          f"{'busbw/bound':>17} {'vs sequential':>17} {'idle%':>5} ok")
    for (kind, grid, op, algo, nbytes), rs in groups.items():
        seq = [r["busbw_MBps"] / r["sequential_bound_busbw_MBps"] for r in rs if "sequential_bound_busbw_MBps" in r]
        print(f"{kind:<16} {grid:>4} {op + '/' + algo:<34} {nbytes:>8} {len(rs):>2} "
              f"{statistics.median(r['busbw_MBps'] for r in rs):>10.3f} {rs[0]['bound_busbw_MBps']:>7.3f} "
              f"{spread([r['bus_ratio'] for r in rs]):>17} {spread(seq) if seq else '-':>17} "
              f"{statistics.median(r.get('cpu_idle_pct', 0) for r in rs):>5.0f} "
              f"{'yes' if all(r['correct'] for r in rs) else 'NO'}")
        names = [p["name"] for p in rs[0].get("phases", [])] if algo != "hierarchical-pipelined" else []
        for name in names:
            ratios = [p["ratio"] for r in rs for p in r.get("phases", []) if p["name"] == name and p["ratio"]]
            secs = [p["seconds"] for r in rs for p in r.get("phases", []) if p["name"] == name]
            ph = next(p for p in rs[0]["phases"] if p["name"] == name)
            print(f"{'':<16} {'':>4}   phase {name:<18} {ph['link']:>4}  {statistics.median(secs):.3f} s "
                  f"(bound {ph['bound_seconds']:.3f} s): {spread(ratios)}")
        share = [sum(p["seconds"] for p in r.get("phases", [])) / r["seconds"] for r in rs if r.get("phases")]
        if names and share:
            print(f"{'':<16} {'':>4}   phases sum to {spread(share)} of the measured time")


def options(argv=None) -> argparse.Namespace:
    """The command line's settings (benchmarks/measured.py passes its own)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="rail-only,rail-optimized")
    ap.add_argument("--grids", default="2x4")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--nic-mbps", type=float, default=5)
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    ap.add_argument("--allreduce-size", default="4MiB")
    ap.add_argument("--allgather-size", default="2MiB")
    ap.add_argument("--ring", action="store_true", help="also the flat ring AllReduce, for reference")
    ap.add_argument("--json", help="write every round's rows to this file")
    return ap.parse_args(argv)


def main():
    args = options()
    try:
        grids = [tuple(int(v) for v in g.split("x")) for g in args.grids.split(",")]
        parse_size(args.allreduce_size), parse_size(args.allgather_size)
    except ValueError as exc:
        print(f"error: bad --grids or size: {exc}", file=sys.stderr)
        sys.exit(2)
    rows, t0 = [], time.time()
    for kind in args.kinds.split(","):
        for servers, per in grids:
            rows += run_grid(kind, servers, per, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    report(rows)
    print(f"\n{len(rows)} runs in {time.time() - t0:.0f} s; NIC {args.nic_mbps} Mbit/s, HB 9x; load average "
          f"{statistics.median(r['load1'] for r in rows):.1f} (median at the runs' starts)")


if __name__ == "__main__":
    main()
