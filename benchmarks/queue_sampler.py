"""Benchmark: what one queue sample costs in CPU, per namespace of N shaped ports (printed, not asserted).

    .venv/bin/python benchmarks/queue_sampler.py [PORTS [ROUNDS]]       (default 40 ports, 200 rounds; root)

Makes a namespace of its own with PORTS veth pairs, a tbf on one end of each, and times, in CPU, one qdisc
dump read the sampler's way (testbed/monitor/queues.py: pyroute2's socket, only the fields it needs decoded)
against pyroute2's get_qdiscs (every attribute decoded), and one device dump (the devices' drop counters, every
10th sample). Five batches of ROUNDS each: mean and spread over the batches, and the ratio.
"""
import statistics
import subprocess
import sys
import time

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import RTM_GETLINK, RTM_GETQDISC
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from testbed import PREFIX
from testbed.fabric.linuxcalls import netns
from testbed.fabric.links import fabric_tag, tbf
from testbed.monitor import queues

BATCHES = 5


def cpu_ms(fn, rounds: int) -> list[float]:
    """CPU ms per call, one figure per batch."""
    out = []
    for _ in range(BATCHES):
        t = time.thread_time()
        for _ in range(rounds):
            fn()
        out.append((time.thread_time() - t) / rounds * 1e3)
    return out


def line(name: str, ms: list[float], base: list[float] | None = None) -> str:
    mean = statistics.mean(ms)
    ratio = f"  {statistics.mean(base) / mean:5.1f}x less" if base else ""
    return f"  {name:<32} {mean:7.3f} ms  (spread {min(ms):.3f}-{max(ms):.3f}){ratio}"


def main() -> None:
    ports, rounds = (int(a) for a in (sys.argv[1:] + ["40", "200"][len(sys.argv) - 1:])[:2])
    ns = f"{PREFIX}{fabric_tag()}qbench"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        script = []
        for i in range(ports):
            script += [f"ip link add qb{i} type veth peer name qc{i}", f"ip link set qb{i} up", f"ip link set qc{i} up",
                       tbf(f"qb{i}", 10.0, 9000)]
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-ec", "\n".join(script)], check=True)
        with netns(f"/run/netns/{ns}"):
            ipr = IPRoute()
        lean = cpu_ms(lambda: queues.root_qdiscs(queues.dump(ipr, tcmsg(), RTM_GETQDISC)), rounds)
        full = cpu_ms(lambda: ipr.get_qdiscs(), max(rounds // 10, 5))
        devices = cpu_ms(lambda: queues.devices(queues.dump(ipr, ifinfmsg(), RTM_GETLINK)), rounds)
        ipr.close()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    per_sample = statistics.mean(lean) + statistics.mean(devices) / queues.DEVICE_EVERY
    print(f"one namespace, {ports} tbf ports ({2 * ports + 1} devices), CPU per call:")
    print(line("qdisc dump, pyroute2 decoded", full))
    print(line("qdisc dump, the sampler's read", lean, full))
    print(line("device dump (every 10th sample)", devices))
    print(f"  per sample {per_sample:.3f} ms: {per_sample / (queues.PERIOD_S * 1e3):.1%} of a core at "
          f"{queues.PERIOD_S * 1e3:.0f} ms (budget {queues.CPU_BUDGET:.0%})")


if __name__ == "__main__":
    main()
