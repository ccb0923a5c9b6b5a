"""Benchmark: one transfer across a long fat pipe over 1..N parallel TCP connections, as PCCL does across the
internet. Two Clos sites of one server x 2 GPUs joined by one WAN link (a rate, a one-way delay); each
connection's receive window clamped to `window`, so one connection carries at most window / round trip however
fast the pipe: window-bound. Per N: goodput against the pipe's rate and against min(pipe, N x window / round
trip), the bound its windows set, with the spread over repeats (printed, not asserted).

    .venv/bin/python benchmarks/pccl_wan.py [--connections 1,2,4,8] [--repeats 3] [--wan-mbps 8]
                                            [--delay-ms 40] [--window 16KiB] [--size 2MiB] [--nic-mbps 20]

The transfer is `size` in all, split evenly over the N connections. The pipe's bandwidth-delay product (8 Mbit/s
x 80 ms = 80 kB) is what must be in flight to fill it: 16 KiB windows need 5 connections.
"""
import argparse
import statistics

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.scenario.schema import parse_size
from testbed.workloads import traffic


def two_sites(args):
    return build("clos", 1, 2, spines=1, nic_mbps=args.nic_mbps, sites={"eu": {}, "us": {}},
                 wan=[{"a": "eu", "b": "us", "mbps": args.wan_mbps, "delay_us": args.delay_ms * 1000,
                       "queue_kb": args.queue_kb}])


def transfer(net, connections: int, size: int, window: str) -> dict:
    """One transfer of `size` bytes from s0g0 (eu) to s1g0 (us) over `connections` TCP connections: its `wan`
    block (testbed/workloads/traffic.py:long_fat_pipe), every byte delivered or an error."""
    out = traffic.run(net, {"pattern": "pairs", "pairs": [["s0g0", "s1g0"]], "protocol": "tcp",
                            "flows_per_pair": connections, "size": -(-size // connections), "window": window})
    if not out["ok"]:
        raise RuntimeError(f"{connections} connections: {[c['detail'] for c in out['checks'] if not c['ok']]}")
    return out["wan"]


def measure(args) -> dict[int, list[dict]]:
    """{N: [the wan block of each repeat]}, the N interleaved within each repeat on one fabric."""
    runs: dict[int, list[dict]] = {n: [] for n in args.connections}
    with Network(two_sites(args), routing="single") as net:
        for _ in range(args.repeats):
            for n in args.connections:
                runs[n].append(transfer(net, n, parse_size(args.size), args.window))
    return runs


def bound(pipe: dict) -> float:
    """What the pipe and the windows allow together."""
    return min(pipe["mbps"], pipe["window_bound_mbps"])


def spread(xs, digits=2):
    return f"{statistics.median(xs):.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"


def parse(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=lambda s: [int(n) for n in s.split(",")], default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--wan-mbps", type=float, default=8)
    ap.add_argument("--delay-ms", type=float, default=40)
    ap.add_argument("--window", default="16KiB")
    ap.add_argument("--size", default="2MiB")
    ap.add_argument("--nic-mbps", type=float, default=20)
    ap.add_argument("--queue-kb", type=int, default=256)
    return ap.parse_args(argv)


def main():
    args = parse()
    runs = measure(args)
    pipe = runs[args.connections[0]][0]
    print(f"WAN {args.wan_mbps:g} Mbit/s, {args.delay_ms:g} ms one way (round trip {pipe['rtt_ms']:g} ms, BDP "
          f"{pipe['bdp_bytes']} B); window {args.window} per connection; {args.size} in all; NICs {args.nic_mbps:g} "
          f"Mbit/s; {args.repeats} repeats (median [min-max])\n")
    print(f"{'N':>3} {'window bound':>13} {'goodput Mbit/s':>22} {'/ pipe':>20} {'/ min(pipe, bound)':>20}")
    for n, got in runs.items():
        print(f"{n:>3} {got[0]['window_bound_mbps']:>13.2f} {spread([g['goodput_mbps'] for g in got]):>22} "
              f"{spread([g['of_pipe'] for g in got]):>20} "
              f"{spread([g['goodput_mbps'] / bound(g) for g in got]):>20}")


if __name__ == "__main__":
    main()
