"""Benchmark: the emulation's capacity, i.e. how fast the links may run before the machine, not the links,
sets the pace (printed, not asserted).

    .venv/bin/python benchmarks/capacity.py [--grids 2x4,4x4,4x8,8x8] [--mtus 1500,9000]
                                            [--rates 5,10,20,40,80] [--floor 0.85] [--seconds 4] [--json FILE]
                                            [--uplinks shaped,ideal] [--hb-mtu 9000] [--no-heartbeat]

For each rail-optimized grid (2 spines) and NIC MTU (1500: RoCE MTU 1024; 9000: jumbo frames, RoCE MTU
4096), NIC rates are tried in increasing order, one bring-up each: a rank-order ring AllReduce (its ring
crosses the spines) sized to take about --seconds of link time per operation, 1 warm-up and 2 timed
iterations, checked against numpy. A rate passes when busbw / bound >= --floor and the fidelity guard stays
quiet (mean CPU idle above its threshold, over the timed operations: the ranks' start-up and tear-down are left
out, as `testbed run` does); the capacity is the highest rate that passed (the search stops at the first
failure). Printed per run: busbw / bound, CPU idle, capacity_used (1 = the guard's limit), and the
packets per second the switches forwarded (every SDN port's transmitted packets over the operations' time), and
ovs-vswitchd's and the kernel's (system, irq, softirq: veths, tbf, sockets, ovs-vswitchd's own system calls)
shares of the machine's busy CPU time during the job, start-up of the ranks included; and the CPU budget per
packet over the timed operations: microseconds of CPU per packet delivered to a host, split into the ranks'
user space (their transport, from their own CPU time), the kernel (system, irq, softirq, less ovs-vswitchd's
system calls; machine-wide, so measure on a quiet machine) and ovs-vswitchd, with the switch hops per packet.

Then the machine's limit for this design: what Open vSwitch alone forwards here, two hosts on one switch
with unshaped links, iperf3 UDP as fast as it can send at the frame size of a full RoCE packet of each MTU,
as packets per second through the switch.

--uplinks shaped,ideal runs every grid both ways: uplinks shaped like every link (the default, a faithful
fabric) and unshaped patch ports (fabric.ideal_uplinks), the CPU that shaping the 1:1 uplinks costs.
--hb-mtu sets the HB links' MTU (fabric.hb_mtu; 9000: RoCE packets of 4 KiB there, as before 32 KiB became the
default) and --no-heartbeat runs the ring without its heartbeats: what each costs.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from hosts.rdma.qp import PACKET_OVERHEAD
from testbed.fabric.links import roce_mtus
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.monitor.fidelity import CpuSampler
from testbed.workloads import collective

VSWITCHD_PID = "/var/run/openvswitch/ovs-vswitchd.pid"
MIN_CHUNK = 64 * 1024


def roce_udp_payload(fabric) -> int:
    """The UDP payload of a full RoCE frame on the fabric's NIC links: its RoCE MTU, BTH and ICRC."""
    return roce_mtus(fabric)["nic"] + PACKET_OVERHEAD - 14 - 20 - 8


def cpu_seconds(pid_file: str) -> float:
    """User + system CPU seconds a daemon has used (from its pid file)."""
    with open(pid_file) as f:
        pid = f.read().strip()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_seconds() -> tuple[float, float]:
    """The machine's busy CPU seconds so far: all of it, and the kernel's (system, irq, softirq)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(v) - v[3] - v[4]) / tick, (v[2] + v[5] + v[6]) / tick


def switch_packets(net) -> int:
    return sum(c["tx_packets"] for c in net.counters().values())


def delivered_packets(net) -> int:
    """Packets the switches handed to hosts: each packet once, at its last hop."""
    hosts = net.fabric.hosts
    last_hops = {f"{sw}:{port}" for l in net.fabric.links
                 for sw, port, peer in ((l.a, l.a_port, l.b), (l.b, l.b_port, l.a)) if peer in hosts and sw not in hosts}
    return sum(c["tx_packets"] for key, c in net.counters().items() if key in last_hops)


class KernelBudget(threading.Thread):
    """The kernel's CPU (system, irq, softirq) and ovs-vswitchd's (user, system), sampled every `period` s (wall
    clock); spent() sums the intervals that end inside the timed operations' windows. Machine-wide: other work on
    the machine counts in the kernel's part."""

    def __init__(self, period: float = 0.25):
        super().__init__(daemon=True)
        self.period, self.samples, self.done = period, [], threading.Event()

    @staticmethod
    def now() -> tuple:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        with open(VSWITCHD_PID) as f:
            pid = f.read().strip()
        with open(f"/proc/{pid}/stat") as f:
            o = f.read().rsplit(")", 1)[1].split()
        return time.time(), v[2] + v[5] + v[6], int(o[11]), int(o[12])

    def run(self):
        while not self.done.wait(self.period):
            self.samples.append(self.now())

    def __enter__(self):
        self.samples.append(self.now())
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join()

    def spent(self, windows: list) -> tuple[float, float, float]:
        """Seconds of kernel (all of it), ovs-vswitchd user and ovs-vswitchd system over the windows, and the
        windows' sampled length."""
        tick, kernel, ovs_user, ovs_sys, seconds = os.sysconf("SC_CLK_TCK"), 0, 0, 0, 0.0
        for a, b in zip(self.samples, self.samples[1:]):
            if any(lo <= b[0] <= hi for lo, hi in windows):
                kernel, ovs_user, ovs_sys = kernel + b[1] - a[1], ovs_user + b[2] - a[2], ovs_sys + b[3] - a[3]
                seconds += b[0] - a[0]
        return kernel / tick, ovs_user / tick, ovs_sys / tick, seconds


def cpu_budget(rank_cpu: dict | None, kernel: tuple, packets_per_s: float) -> dict:
    """Microseconds of CPU per packet delivered to a host, by part: the ranks' user space (their transport, from
    their own CPU time), the kernel (system calls, softirq: veths, tbf, sockets; ovs-vswitchd's system calls
    left out) and ovs-vswitchd."""
    kernel_s, ovs_user, ovs_sys, seconds = kernel
    if not rank_cpu or not seconds or not packets_per_s:
        return {}
    packets = packets_per_s * seconds
    parts = {"ranks": rank_cpu["user_per_s"] * seconds, "kernel": kernel_s - ovs_sys, "ovs": ovs_user + ovs_sys}
    us = {part: round(1e6 * v / packets, 1) for part, v in parts.items()}
    return {**us, "total": round(sum(us.values()), 1)}


def sized(rate_mbps: float, ranks: int, seconds: float) -> int:
    """An AllReduce size whose ring takes about `seconds` of link time (2(n-1)/n of it crosses every NIC), and
    at least 64 KiB per rank, so that each of the ring's 2(n-1) steps moves more than a few packets."""
    nbytes = seconds * rate_mbps * 1e6 / 8 / (2 * (ranks - 1) / ranks)
    unit = ranks * 4096                              # whole pages per rank's chunk
    return max(ranks * MIN_CHUNK, int(nbytes // unit) * unit)


def ranks_per_process(setting: int | str, ranks: int) -> int:
    """--ranks-per-process: a number, or `cores` (the ranks spread over as many processes as the machine has)."""
    return -(-ranks // (os.cpu_count() or 1)) if setting == "cores" else setting


def one_run(servers: int, per: int, mtu: int, rate: float, args, uplinks: str = "shaped") -> dict:
    fabric = build("rail-optimized", servers, per, spines=2, nic_mbps=rate, nic_mtu=mtu,
                   ideal_uplinks=uplinks == "ideal", **({"hb_mtu": args.hb_mtu} if args.hb_mtu else {}))
    n = servers * per
    size = sized(rate, n, args.seconds)
    per_process = ranks_per_process(args.ranks_per_process, n)
    with Network(fabric) as net:
        before, ovs0, busy0 = switch_packets(net), cpu_seconds(VSWITCHD_PID), busy_seconds()
        delivered0 = delivered_packets(net)
        with CpuSampler() as cpu, KernelBudget() as budget:
            res = collective.run(net, {"type": "collective", "op": "allreduce", "algo": "ring", "ring": "rank",
                                       "sizes": [size], "iterations": 2, "warmup": 1, "timeout_s": 120,
                                       "ranks_per_process": per_process,
                                       **({"heartbeat": False} if args.no_heartbeat else {})})
        packets, delivered = switch_packets(net) - before, delivered_packets(net) - delivered0
        busy1 = busy_seconds()
        busy = max(1e-9, busy1[0] - busy0[0])
        ovs_share, kernel_share = (cpu_seconds(VSWITCHD_PID) - ovs0) / busy, (busy1[1] - busy0[1]) / busy
    windows = res.get("timed_windows") or []
    # the fidelity guard and the CPU budget over the timed operations only (start-up and tear-down left out)
    guard = {**cpu.report(windows), "ovs_share": round(ovs_share, 2), "kernel_share": round(kernel_share, 2),
             "hops_per_packet": round(packets / max(delivered, 1), 2)}
    if not res["rows"]:
        return {"grid": f"{servers}x{per}", "uplinks": uplinks, "gpus": n, "mtu": mtu, "rate": rate, "bytes": size,
                "ranks_per_process": per_process, "ok": False, "us_per_packet": {},
                "failed": "; ".join(c["detail"] for c in res["checks"] if not c["ok"])[:200], **guard}
    row = res["rows"][0]
    op_s = row["seconds"] * 3                  # warm-up + 2 iterations: the counters saw all three
    ranks = row.get("rank_cpu_s")
    guard["us_per_packet"] = cpu_budget(ranks and {"user_per_s": ranks["user"] / row["seconds"]},
                                        budget.spent(windows), delivered / op_s)
    # the ranks' transport engines woke this often per packet delivered (the run's, start-up included)
    wakes = row.get("transport", {}).get("engine_wakeups")
    return {"grid": f"{servers}x{per}", "uplinks": uplinks, "gpus": n, "mtu": mtu, "roce_mtu": roce_mtus(fabric)["nic"], "rate": rate,
            "bytes": size, "ranks_per_process": per_process, "ratio": row["bus_ratio"], "pps": round(packets / op_s), **guard,
            "wakeups_per_packet": round(wakes / max(delivered, 1), 2) if wakes else None,
            "ok": row["bus_ratio"] >= args.floor and not guard["cpu_bound"]}


def ovs_forwarding(mtu: int, seconds: float) -> dict:
    """Packets per second one OVS switch forwards between two hosts on unshaped links (the machine's limit)."""
    fabric = build("rail-optimized", 2, 1, spines=1, nic_mbps=10_000, hb_mbps=10_000, nic_mtu=mtu)
    payload = roce_udp_payload(fabric)
    with Network(fabric) as net:
        a, b = net.host("s0g0"), net.host("s1g0")
        server = b.popen(["iperf3", "-s", "-1", "-B", b.IP()], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        before, t0 = switch_packets(net), time.monotonic()
        out = a.cmd(f"iperf3 -u -b 0 -l {payload} -t {seconds:g} -c {b.IP()} --json")
        pps = (switch_packets(net) - before) / (time.monotonic() - t0)
        server.wait(10)
    lost = re.search(r'"lost_percent":\s*([0-9.]+)', out)
    return {"mtu": mtu, "frame": payload + 42, "switch_pps": round(pps), "iperf_lost_pct": float(lost.group(1))
            if lost else None}


def capacity_of(servers: int, per: int, mtu: int, rates: list[float], args, uplinks: str = "shaped"
                ) -> tuple[float | None, list[dict]]:
    """The highest of `rates`, tried in order up to the first that fails, at which the grid's ring passes (None:
    not even the first), and every run tried."""
    best, runs = None, []
    for rate in rates:
        r = one_run(servers, per, mtu, rate, args, uplinks)
        runs.append(r)
        print(f"{uplinks:>7} {r['grid']:>5} {r['gpus']:>4} {mtu:>5} {rate:>6g} {r['bytes'] / 2**20:>6.2f} "
              f"{r.get('ratio', float('nan')):>6.2f} {r['cpu_idle_mean_pct']:>6} {r['capacity_used']:>5} "
              f"{r.get('pps', 0):>10} {r['ovs_share']:>5} {r['kernel_share']:>5} "
              + "".join(f"{r['us_per_packet'].get(k, '-'):>7}" for k in ("total", "ranks", "kernel", "ovs"))
              + f"{r.get('wakeups_per_packet') or '-':>7}  "
              f"{'yes' if r['ok'] else 'no ' + r.get('failed', '')}", flush=True)
        if not r["ok"]:
            break
        best = rate
    return best, runs


def options(argv=None) -> argparse.Namespace:
    """The command line's settings (benchmarks/measured.py passes its own)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grids", default="2x4,4x4,4x8,8x8")
    ap.add_argument("--mtus", default="1500,9000")
    ap.add_argument("--rates", default="5,10,20,40,80", help="NIC Mbit/s, tried in this order")
    ap.add_argument("--floor", type=float, default=0.85)
    ap.add_argument("--seconds", type=float, default=4.0, help="link time per AllReduce")
    ap.add_argument("--forward-seconds", type=float, default=5.0)
    ap.add_argument("--uplinks", default="shaped", help="shaped, ideal (fabric.ideal_uplinks) or shaped,ideal")
    ap.add_argument("--hb-mtu", type=int, help="the HB links' MTU (fabric.hb_mtu; default: the fabric's)")
    ap.add_argument("--no-heartbeat", action="store_true", help="the ring without heartbeats (what they cost)")
    ap.add_argument("--ranks-per-process", default=1, type=per_process_setting,
                    help="ranks sharing a process (the workload's ranks_per_process), or `cores`: one process per "
                         "core (default 1)")
    ap.add_argument("--json")
    return ap.parse_args(argv)


def per_process_setting(text: str) -> int | str:
    if text == "cores" or (text.isdigit() and int(text) >= 1):
        return text if text == "cores" else int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: a whole number of ranks from 1, or cores")


def main() -> None:
    args = options()
    if os.geteuid() != 0:
        raise SystemExit("capacity: run as root (it brings fabrics up)")
    grids = [tuple(int(x) for x in g.split("x")) for g in args.grids.split(",")]
    mtus = [int(m) for m in args.mtus.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    runs, capacity = [], {}
    print(f"{'uplinks':>7} {'grid':>5} {'GPUs':>4} {'MTU':>5} {'Mbit/s':>6} {'MiB':>6} {'ratio':>6} {'idle%':>6} {'used':>5} "
          f"{'switch pps':>10} {'ovs':>5} {'kern':>5} {'us/pkt':>6} {'ranks':>6} {'kernel':>6} {'ovs':>6} {'wakes':>6}  pass")
    ways = args.uplinks.split(",")
    for servers, per in grids:
        for mtu, uplinks in [(m, u) for m in mtus for u in ways]:
            best, tried = capacity_of(servers, per, mtu, rates, args, uplinks)
            runs += tried
            capacity[f"{servers}x{per}/{mtu}/{uplinks}"] = best
    forwarding = [ovs_forwarding(mtu, args.forward_seconds) for mtu in mtus]
    print(f"\ncapacity: the highest NIC rate at which the ring stays >= {args.floor:.2f} of its bound "
          "with CPU headroom")
    for servers, per in grids:
        cells = [f"MTU {m}{'' if ways == ['shaped'] else ' ' + u + ' uplinks'}: "
                 f"{capacity[f'{servers}x{per}/{m}/{u}'] or '< ' + str(rates[0])} Mbit/s" for m in mtus for u in ways]
        print(f"  {servers * per:>3} GPUs ({servers}x{per}): " + ", ".join(cells))
    print("\nOpen vSwitch alone, two hosts, unshaped links, iperf3 UDP at full-RoCE-frame size:")
    for f in forwarding:
        print(f"  MTU {f['mtu']} ({f['frame']}-byte frames): {f['switch_pps']} packets/s through the switch "
              f"(iperf3 loss {f['iperf_lost_pct']}%)")
    at_capacity = [r for r in runs if r["ok"] and capacity.get(f"{r['grid']}/{r['mtu']}/{r['uplinks']}") == r["rate"]]
    for r in at_capacity:
        limit = next(f["switch_pps"] for f in forwarding if f["mtu"] == r["mtu"])
        print(f"  {r['grid']} MTU {r['mtu']} {r['uplinks']} uplinks at {r['rate']:g} Mbit/s: {r['pps']} packets/s, "
              f"{r['pps'] / limit:.2f} of OVS alone")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "capacity": capacity, "forwarding": forwarding,
                       "median_ratio": statistics.median(r["ratio"] for r in runs if "ratio" in r)}, f, indent=2)
    sys.exit(0)


if __name__ == "__main__":
    main()
