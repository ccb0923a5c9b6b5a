"""Benchmark: the CPU cost of link delay on the path that runs here (printed, not asserted).

    sudo .venv/bin/python benchmarks/delay.py [--rates 1000,5000,10000] [--size 1000] [--seconds 5] [--reps 3]

Two namespaces joined by one veth link, shaped with tbf at twice the offered rate (so that the link never limits),
carry a paced UDP flow one way for a few seconds, with the delay off (the link alone) and on (1 ms each way). Per
1000 packets delivered it prints the CPU seconds of:
- the delay process (utime + stime; with the kernel work done in its system calls);
- the sender and the receiver (their system calls carry the divert and the tbf);
- the whole machine (busy time from /proc/stat: includes other work on a shared machine, so read its spread).
The packet rate one core sustains for the delay process is 1000 / its CPU seconds per 1000 packets; a last run
floods the delayed link unpaced and prints what it delivers. Every figure is the mean of --reps runs [min-max].
"""
import argparse
import os
import statistics
import subprocess
import sys
import textwrap
import time

from testbed import PREFIX
from testbed.fabric.delay import Delays, End, LinkDelay
from testbed.fabric.links import fabric_tag, tbf

TICK = os.sysconf("SC_CLK_TCK")
SENDER = textwrap.dedent("""
    import resource, socket, sys, time
    rate, size, seconds = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload, sent, start = bytes(size), 0, time.monotonic()
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate) if rate else sent + 64     # paced in 1 ms steps, or a flood
        while sent < due:
            s.sendto(payload, ("10.78.0.2", 5003))
            sent += 1
        if rate:
            time.sleep(0.001)
    u = resource.getrusage(resource.RUSAGE_SELF)
    print(sent, u.ru_utime + u.ru_stime)
""")
RECEIVER = textwrap.dedent("""
    import resource, socket
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)       # SO_RCVBUFFORCE
    s.bind(("10.78.0.2", 5003)); s.settimeout(1.0)
    print("ready", flush=True)
    n, start = 0, None
    try:
        while True:
            s.recv(65536); n += 1
    except socket.timeout:
        pass
    u = resource.getrusage(resource.RUSAGE_SELF)
    print(n, u.ru_utime + u.ru_stime)
""")


def sh(cmd: str) -> None:
    subprocess.run(cmd, shell=True, check=True, capture_output=True)


def busy_s() -> float:
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / TICK


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Link:
    def __init__(self, mbps: float):
        t = fabric_tag()
        self.ns = {s: f"{PREFIX}{t}bench-{s}" for s in "ab"}
        self.dev = {s: f"{PREFIX}{t}bench{s}" for s in "ab"}
        self.mbps = mbps
        for s in "ab":
            sh(f"ip netns add {self.ns[s]}")
        sh(f"ip link add {self.dev['a']} netns {self.ns['a']} mtu 9000 type veth peer name {self.dev['b']} "
           f"netns {self.ns['b']} mtu 9000")
        for i, s in enumerate("ab"):
            sh(f"ip -n {self.ns[s]} addr add 10.78.0.{i + 1}/24 dev {self.dev[s]}")
            sh(f"ip -n {self.ns[s]} link set {self.dev[s]} up")
            sh(f"ip netns exec {self.ns[s]} {tbf(self.dev[s], mbps, 9000)}")
        sh(f"ip netns exec {self.ns['a']} ping -c 1 -W 2 10.78.0.2")

    def delay(self, delay_us: float = 1000) -> LinkDelay:
        return LinkDelay("b", *(End(self.dev[s], f"/run/netns/{self.ns[s]}", self.mbps, 9000) for s in "ab"),
                         delay_us=delay_us)

    def ping(self, count: int = 20) -> list[float]:
        """Round trips in ms, 50 ms apart, after two that resolve the neighbour (ARP crosses the delay too)."""
        ping = f"ip netns exec {self.ns['a']} ping -n -i 0.05 -W 2"
        subprocess.run(f"{ping} -q -c 2 10.78.0.2", shell=True, capture_output=True)
        out = subprocess.run(f"{ping} -c {count} 10.78.0.2", shell=True, capture_output=True, text=True).stdout
        return [float(w.split("=")[1]) for w in out.split() if w.startswith("time=")]

    def flow(self, rate: float, size: int, seconds: float, delayd: int | None) -> dict:
        rx = subprocess.Popen(["ip", "netns", "exec", self.ns["b"], sys.executable, "-c", RECEIVER],
                              stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "ready"
        d0, m0 = (proc_cpu_s(delayd) if delayd else 0.0), busy_s()
        tx = subprocess.run(["ip", "netns", "exec", self.ns["a"], sys.executable, "-c", SENDER, str(rate), str(size),
                             str(seconds)], capture_output=True, text=True, check=True).stdout.split()
        time.sleep(0.05)        # the last frames through the delay; the receiver then waits out its timeout idle
        d1, m1 = (proc_cpu_s(delayd) if delayd else 0.0), busy_s()
        got = rx.communicate(timeout=30)[0].split()
        delivered = int(got[0])
        per = 1000 / max(delivered, 1)
        return {"sent": int(tx[0]), "delivered": delivered, "pps": delivered / seconds,
                "delayd": (d1 - d0) * per, "ends": (float(tx[1]) + float(got[1])) * per, "machine": (m1 - m0) * per}

    def close(self):
        for s in "ab":
            subprocess.run(["ip", "netns", "delete", self.ns[s]], capture_output=True)


def spread(xs: list[float], fmt: str = "{:.4f}") -> str:
    return f"{fmt.format(statistics.mean(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def round_trip(delay_ms: float, count: int = 20) -> list[float]:
    """Ping round trips (ms) over a link delayed `delay_ms` each way (shaped at 10 Mbit/s)."""
    link = Link(10)
    try:
        with Delays() as delays:
            delays.apply(link.delay(delay_ms * 1000))
            return link.ping(count)
    finally:
        link.close()


def flows(rate: float, size: int, seconds: float, reps: int, mode: str) -> list[dict]:
    """`reps` paced flows over a link shaped at twice their rate, the delay `mode` "off" or "on" (1 ms)."""
    mbps = max(1.0, 2 * rate * (size + 42) * 8 / 1e6)
    runs = []
    for _ in range(reps):
        link = Link(mbps)
        try:
            with Delays() as delays:
                if mode == "on":
                    delays.apply(link.delay())
                pid = delays.state()["delay_pids"][0] if mode == "on" else None
                runs.append(link.flow(rate, size, seconds, pid))
                runs[-1]["line_lost"] = sum(n["dropped"] + n["send_errors"] for n in delays.stats().values())
        finally:
            link.close()
    return runs


def measure(rate: float, size: int, seconds: float, reps: int) -> None:
    for mode in ("off", "on"):
        runs = flows(rate, size, seconds, reps, mode)
        col = {k: [r[k] for r in runs] for k in runs[0]}
        lost = f"{sum(r['sent'] - r['delivered'] for r in runs)} ({sum(r['line_lost'] for r in runs)} by the delay line)"
        line = (f"{rate:>7.0f} pps {size:>5} B  delay {mode:>3}: delivered {spread(col['pps'], '{:.0f}')} pps, "
                f"lost {lost};  CPU s / 1000 pkts: ends {spread(col['ends'])}, machine {spread(col['machine'])}")
        if mode == "on":
            per_core = [1 / x for x in col["delayd"] if x > 0]
            line += f", delay process {spread(col['delayd'])} (one core: {spread(per_core, '{:.0f}')}k pps)"
        print(line, flush=True)


def flood(size: int, seconds: float) -> None:
    link = Link(10_000)
    try:
        with Delays() as delays:
            delays.apply(link.delay())
            pid = delays.state()["delay_pids"][0]
            r = link.flow(0, size, seconds, pid)
            stats = delays.stats()
    finally:
        link.close()
    print(f"flood, {size} B, unpaced: sent {r['sent'] / seconds:.0f} pps, delivered {r['pps']:.0f} pps, "
          f"delay process {r['delayd']:.4f} CPU s / 1000 pkts, line {stats}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rates", default="1000,5000,10000")
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average before: {f.read().split()[0]} on {os.cpu_count()} cores")
    for rate in (float(r) for r in args.rates.split(",")):
        measure(rate, args.size, args.seconds, args.reps)
    measure(1000, 8972, args.seconds, args.reps)        # jumbo frames
    flood(args.size, 3.0)
    with open("/proc/loadavg") as f:
        print(f"load average after: {f.read().split()[0]}")


if __name__ == "__main__":
    main()
