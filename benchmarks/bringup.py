"""Benchmark: bring-up and tear-down time of a fabric (printed, not asserted).

    .venv/bin/python benchmarks/bringup.py [KIND SERVERS GPUS SPINES [HOSTS]]   (default rail-optimized 8 8 4 netns)

HOSTS is netns (namespaces) or docker (containers; the host image is checked, and built if needed,
before the clock starts).

Bring-up counts everything until the controller has confirmed routes on every switch; a
connectivity pass then proves the fabric is usable.
"""
import sys
import time

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import connectivity


def main() -> None:
    kind, n, k, s, hosts = (sys.argv[1:] + ["rail-optimized", "8", "8", "4", "netns"][len(sys.argv) - 1:])[:5]
    fabric = build(kind, int(n), int(k), spines=int(s))
    c = fabric.counts()
    if hosts == "docker":
        from testbed.fabric.backends import dockerhost, image
        image.ensure(dockerhost.engine())
    net = Network(fabric, routing="ecmp", hosts=hosts)
    with net:
        t0 = time.monotonic()
        result = connectivity.run(net, {})
        probe_s = time.monotonic() - t0
    print(f"{kind} {n}x{k}, {s} spines: {c['hosts']} {hosts} hosts, {c['switches']} switches, {c['links']} links")
    print(f"  bring-up   {net.timings['bring_up_s']:6.2f} s   (target < 60 s)")
    print(f"  tear-down  {net.timings['tear_down_s']:6.2f} s")
    print(f"  connectivity {result['reachable_ok']}/{result['expected_reachable']} pairs in {probe_s:.2f} s "
          f"({'ok' if result['ok'] else 'FAILED'})")


if __name__ == "__main__":
    main()
