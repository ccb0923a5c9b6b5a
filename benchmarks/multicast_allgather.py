"""Benchmark: ring vs multicast AllGather (printed, not asserted).

    .venv/bin/python benchmarks/multicast_allgather.py [--nic-mbps 5] [--size 1MiB] [--servers 2 4]

Per fabric (rail-optimized, rail-only) and server count (4 GPUs per server): completion time, bytes the
GPUs' NICs sent, bytes sent by all switch ports (fabric), chunks recovered by RDMA READ, CPU idle.
Algorithms: the rail-aware ring (rail-optimized only), the hierarchical ring (rail, then HB), flat
multicast over the whole fabric (rail-optimized only) and rail-scoped multicast (multicast inside each
rail, then the HB ring: the only multicast a rail-only fabric allows). Counters cover warm-up and
measured iterations alike, so compare bytes between rows, not with the size.
"""
import argparse

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import collective

ALGOS = {"rail-optimized": [("ring", {}), ("hierarchical", {}), ("multicast", {}),
                            ("multicast", {"multicast_scope": "rail"})],
         "rail-only": [("hierarchical", {}), ("multicast", {})]}


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[3] + v[4], sum(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nic-mbps", type=float, default=5)
    ap.add_argument("--size", default="1MiB")
    ap.add_argument("--servers", type=int, nargs="+", default=[2])
    ap.add_argument("--kinds", nargs="+", default=list(ALGOS))
    ap.add_argument("--iterations", type=int, default=2)
    args = ap.parse_args()
    print(f"# AllGather {args.size}, NIC {args.nic_mbps} Mbit/s, 4 GPUs per server, {args.iterations} iterations")
    print(f"# {'fabric':<15} {'P':>3} {'algo':<16} {'time s':>7} {'send NIC B':>11} {'fabric B':>11} "
          f"{'recovered':>9} {'correct':>7} {'idle %':>6}")
    for kind in args.kinds:
        for servers in args.servers:
            fabric = build(kind, servers, 4, spines=2, nic_mbps=args.nic_mbps)
            rows = {}
            with Network(fabric) as net:
                for algo, extra in ALGOS[kind]:
                    label = algo + ("/rail" if extra.get("multicast_scope") == "rail" or
                                    (algo == "multicast" and kind == "rail-only") else "")
                    idle0, total0 = cpu_times()
                    res = collective.run(net, {"op": "allgather", "algo": algo, "sizes": [args.size],
                                               "iterations": args.iterations, **extra})
                    idle1, total1 = cpu_times()
                    if not res["rows"]:
                        print(f"  {kind:<15} {servers * 4:>3} {label:<16} failed: {res['checks']}")
                        continue
                    r = rows[label] = res["rows"][0]
                    idle = 100 * (idle1 - idle0) / max(1, total1 - total0)
                    print(f"  {kind:<15} {servers * 4:>3} {label:<16} {r['seconds']:>7.3f} {r['send_nic_bytes']:>11} "
                          f"{r['fabric_bytes']:>11} {r['recovered_chunks']:>9} {str(r['correct']):>7} {idle:>6.0f}")
            base = rows.get("ring") or rows.get("hierarchical")
            for label, m in rows.items():
                if label.startswith("multicast") and base:
                    print(f"  -> {label} vs {base['algo']}: fabric bytes / {base['fabric_bytes'] / m['fabric_bytes']:.2f}, "
                          f"send-NIC bytes / {base['send_nic_bytes'] / m['send_nic_bytes']:.2f}, "
                          f"time x {m['seconds'] / base['seconds']:.2f}")


if __name__ == "__main__":
    main()
