"""Benchmark: what a packet costs Open vSwitch's user-space datapath, against the number of ports it polls
(printed, not asserted).

    .venv/bin/python benchmarks/ovs_ports.py [--idle 0,50,100] [--pps 1000] [--seconds 10] [--repeats 3]

Two hosts on one switch (links of 1 Gbit/s, jumbo frames); one sends UDP datagrams the size of a full RoCE
packet to the other, paced at --pps, while --idle ports that carry nothing are attached to another bridge of
the same daemon (veth pairs, both ends up). Printed per count of idle ports: microseconds of ovs-vswitchd's CPU
per packet it forwarded, median [min-max] over the repeats, with the ports its datapath had.

Why: the user-space datapath serves every port that is not a poll-mode one (veths, taps) from ovs-vswitchd's
main thread, and each time that thread wakes it tries to receive from every such port, whichever bridge it is
on (docs/capacity.md). At low packet rates each packet wakes it, so what a packet costs grows with the fabric.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from pyroute2 import IPRoute

from testbed import PREFIX
from testbed.fabric import ovs
from testbed.fabric.network import Network
from testbed.fabric.topo import build

sys.path.insert(0, os.path.dirname(__file__))
from capacity import VSWITCHD_PID, cpu_seconds, roce_udp_payload, switch_packets  # noqa: E402

IDLE_BRIDGE = f"{PREFIX}idle"
SENDER = """
import socket, sys, time
dst, size, pps, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s, payload, t0 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), bytes(size), time.monotonic()
for i in range(int(pps * seconds)):
    late = t0 + i / pps - time.monotonic()
    if late > 0:
        time.sleep(late)
    s.sendto(payload, (dst, 9))
"""


def idle_port(i: int) -> tuple[str, str]:
    return f"{PREFIX}idle{i}a", f"{PREFIX}idle{i}b"


def add_idle_ports(n: int) -> None:
    if not n:
        return
    ovs.vsctl("add-br", IDLE_BRIDGE, "--", "set", "bridge", IDLE_BRIDGE, "datapath_type=netdev")
    with IPRoute() as ipr:
        for i in range(n):
            a, b = idle_port(i)
            ipr.link("add", ifname=a, kind="veth", peer=b)
            for dev in (a, b):
                ipr.link("set", index=ipr.link_lookup(ifname=dev)[0], state="up")
    ovs.vsctl(*[arg for i in range(n) for arg in ("--", "add-port", IDLE_BRIDGE, idle_port(i)[0])], timeout=60)


def remove_idle_ports(n: int) -> None:
    ovs.delete_bridges([IDLE_BRIDGE])
    with IPRoute() as ipr:
        for i in range(n):
            for index in ipr.link_lookup(ifname=idle_port(i)[0]):
                ipr.link("del", index=index)         # its peer goes with it


def datapath_ports() -> int:
    """Ports of the user-space datapath, every bridge's together (`ovs-appctl dpctl/show`)."""
    out = subprocess.run(["ovs-appctl", "dpctl/show"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.strip().startswith("port "))


def one_run(net, idle: int, pps: float, seconds: float, size: int, settle: float) -> dict:
    add_idle_ports(idle)
    try:
        time.sleep(settle)              # let the daemon take in the new ports before it is timed
        ports = datapath_ports()
        a, b = net.host("s0g0"), net.host("s1g0")
        cpu0, pkts0 = cpu_seconds(VSWITCHD_PID), switch_packets(net)
        proc = a.popen([sys.executable, "-c", SENDER, b.IP(), str(size), str(pps), str(seconds)])
        proc.wait(seconds * 3 + 30)
        time.sleep(0.2)
        cpu, pkts = cpu_seconds(VSWITCHD_PID) - cpu0, switch_packets(net) - pkts0
    finally:
        remove_idle_ports(idle)
    return {"idle": idle, "ports": ports, "packets": pkts, "us_per_packet": cpu / max(pkts, 1) * 1e6}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle", default="0,50,100", help="comma-separated counts of idle ports")
    p.add_argument("--pps", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--settle", type=float, default=10.0, help="seconds between adding ports and timing")
    args = p.parse_args()
    try:
        counts = [int(x) for x in args.idle.split(",")]
    except ValueError:
        p.error(f"--idle {args.idle!r}: expected comma-separated whole numbers")
    if any(c < 0 or c > 500 for c in counts) or args.pps <= 0 or args.seconds <= 0 or args.repeats < 1:
        p.error("--idle counts must be 0-500, --pps, --seconds and --repeats positive")
    ovs.require_running()
    fabric = build("rail-optimized", 2, 1, spines=1, nic_mbps=1000, hb_mbps=1000, nic_mtu=9000)
    size = roce_udp_payload(fabric)
    results: dict[int, list[dict]] = {c: [] for c in counts}
    with Network(fabric) as net:
        for r in range(args.repeats):
            for c in counts:            # interleaved, so a slower spell of the machine falls on every count
                run = one_run(net, c, args.pps, args.seconds, size, args.settle)
                results[c].append(run)
                print(f"  repeat {r + 1}: {c} idle ports ({run['ports']} in the datapath): "
                      f"{run['us_per_packet']:.0f} us of ovs-vswitchd CPU per packet, {run['packets']} packets",
                      flush=True)
    print(f"\nOpen vSwitch (user-space datapath), {args.pps:g} packets/s of {size + 42} bytes, one switch hop:")
    print(f"{'idle ports':>10} {'datapath ports':>15} {'us per packet, median [min-max]':>33}")
    for c in counts:
        us = [run["us_per_packet"] for run in results[c]]
        print(f"{c:>10} {results[c][0]['ports']:>15} {statistics.median(us):>15.0f} [{min(us):.0f}-{max(us):.0f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
