"""Benchmark: RoCE congestion control on a fabric whose switch ports mark ECN (printed, not asserted; root).

    .venv/bin/python benchmarks/congestion.py [--quick] [--reps 3] [--parts incast,routing]
                                              [--schemes none,delay,dcqcn] [--modes ecmp,spray,split:4]
                                              [--loss lossy,lossless] [--kb 512] [--long-kb 2048] [--diagnose]

Both parts run a fabric given at a real fabric's rates and slowed by fabric.time_scale (1.5 Gbit/s NICs run at
5 Mbit/s, K = 300), so DCQCN's timers and rates scale with it (docs/rdma.md#dcqcn); the switch ports mark ECN
with fabric.ecn (a tc BPF program's virtual queue of the port's tbf, docs/ecn.md).

incast: 7 hosts on one switch RDMA WRITE --kb KiB each at once to an 8th (uroce RC queue pairs in the hosts'
namespaces, each paced at its NIC's rate, every write checked byte for byte), with no congestion control, the
delay-based one and DCQCN. The switch port into the receiver is the bottleneck; its tbf's queue is sampled every
50 ms. Printed per scheme, mean (min-max) over --reps runs:
- queue: median and 95th percentile of the samples, KiB, and the share of samples under Kmax;
- the sampled queue over the run (ten points, KiB, of one run);
- the queue's peak, and (DCQCN, with --diagnose) when the first rate cut came after the writes were posted: the
  incast's start;
- goodput: payload bytes over the time to the last completion, over the bottleneck's rate (RoCE MTU 4096 in
  9000-byte frames: 0.98 at most);
- Jain's fairness index over the senders' rates (bytes over each one's own completion time);
- busy 2nd half: the bytes the bottleneck's tbf sent over the second half of the sampled run, over its rate (the
  steady state, after the start's over-shoot; frames' bytes, so up to 1.00);
- drops at the bottleneck's queue (its buffer: --queue-kb), packets retransmitted, CNPs, ports' CE marks, and the
  share of the sampled intervals with the real queue over Kmax and frames arriving in which the port marked
  nothing (its virtual queue blind to the real one; with --diagnose, which reads the port's counters every sample
  and so loads the endpoints in this process: nan without it. The fabric test found spurious retransmissions in
  runs with it);
- the times the switch's datapath held the senders' frames (the port idle, neither getting nor sending, for 0.2 s
  or more, then a burst: Open vSwitch's userspace datapath does this while its main loop reconfigures, e.g. as
  another fabric on the same switch daemon is taken down) and the link's idle time meanwhile, and each run's
  goodput;
- with --diagnose, the rate the port sent at while its queue was backlogged, over its nominal rate, and the median
  of the real queue less the marking program's virtual queue (read from its state map) over the samples over
  Kmin.
With DCQCN, one more row (dcqcn@2048) runs --long-kb KiB each: DCQCN's start and end cost about the same time
whatever the transfer (docs/ecn.md), so a longer incast shows its steady state.
Each lossy (drops when the queue is full) and lossless (fabric.pfc: the port pauses the senders' NICs above
128 KiB of queue, resumes them below 64; pauses and paused time counted, docs/pfc.md).

routing: all-to-all and a rank-order ring AllReduce on rail-optimized 2 x 4 over two 2:1 oversubscribed spines
(scenarios/lb_compare.yaml's fabric), per routing mode (ECMP, per-packet spraying, flow splitting), each without
congestion control and with DCQCN. Printed: time, busbw / link bound, uplink imbalance, retransmissions, CE
marks received and CNPs, over the runs that completed (a workload that failed is printed with the run's failed
checks), and for the ring AllReduce DCQCN's cost (time with DCQCN / without - 1) over the runs where both did.

--quick: one repeat, smaller transfers (a few minutes).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NIC_MBPS, TIME_SCALE = 1500, 300            # a real fabric's rate, emulated at NIC_MBPS / TIME_SCALE = 5 Mbit/s
ECN = {"kmin_kb": 8, "kmax_kb": 40, "pmax": 1.0}
PFC = {"xoff_kb": 128, "xon_kb": 64}          # lossless: pauses above 128 KiB of a switch port's queue
SCHEMES = ("none", "delay", "dcqcn")
SENDERS = 7
SAMPLE_S = 0.05


def tc_stats(dev: str) -> dict:
    """The port's tbf: backlog (bytes), bytes sent and drops (packets)."""
    out = json.loads(subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", dev, "root"], capture_output=True,
                                    text=True, check=True).stdout)
    q = next(q for q in out if q["kind"] == "tbf")
    return {"backlog": q["backlog"], "bytes": q["bytes"], "drops": q["drops"]}


class QueueSampler(threading.Thread):
    """Samples a port's tbf every SAMPLE_S until stopped: (time, backlog, bytes sent, CE marks so far or None).
    Reading the marks spawns bpftool per sample, which loads the endpoints sharing this process: only with
    marks=True."""

    def __init__(self, dev: str, marks: bool = False):
        from testbed.fabric import ecn
        super().__init__(daemon=True)
        self.dev, self.samples, self._done = dev, [], threading.Event()
        found = ecn.maps(dev) if marks else {}          # one lookup; then the maps only
        self._marks_map, self._state_map = found.get("ecn_counters"), found.get("ecn_state")
        self._config = ecn.CONFIG.unpack(ecn.read_map(found["ecn_config"])) if marks else None

    def marks(self) -> int | None:
        from testbed.fabric import ecn
        return ecn.COUNTERS.unpack(ecn.read_map(self._marks_map))[2] if self._marks_map else None

    def virtual_queue(self) -> int | None:
        """The program's virtual queue now (bucket left out), drained to this moment as the program would."""
        from testbed.fabric import ecn
        if not self._state_map:
            return None
        _, _, backlog, last_ns = ecn.STATE.unpack(ecn.read_map(self._state_map))
        rate, burst = self._config[0], self._config[1]
        drained = max(time.monotonic_ns() - last_ns, 0) * rate // 10**9
        return max(backlog - drained - burst, 0)

    def run(self):
        while not self._done.wait(SAMPLE_S):
            st = tc_stats(self.dev)
            self.samples.append((time.monotonic(), st["backlog"], st["bytes"], self.marks(), self.virtual_queue()))

    def stop(self) -> list[tuple]:
        self._done.set()
        self.join()
        return self.samples


def link_busy(samples: list[tuple], bps: float, start: float = 0.5) -> float:
    """The share of the link's rate the port sent at from `start` of the sampled run to its end (frames' bytes)."""
    if len(samples) < 4:
        return float("nan")
    first = samples[int(start * (len(samples) - 1))]
    last = samples[-1]
    return (last[2] - first[2]) * 8 / (last[0] - first[0]) / bps


def drain_rate(samples: list[tuple], bps: float, floor: int = 8 * 1024) -> float:
    """The rate the port sent at over the sampled intervals whose queue was over `floor` bytes at both ends (never
    idle in between), over the link's rate: how fast the real queue drains against the tbf's nominal rate."""
    busy = [(a, b) for a, b in zip(samples, samples[1:]) if a[1] >= floor and b[1] >= floor]
    if not busy:
        return float("nan")
    return sum(b[2] - a[2] for a, b in busy) * 8 / sum(b[0] - a[0] for a, b in busy) / bps


def virtual_lag(samples: list[tuple]) -> float:
    """The median of (real queue - virtual queue) over the samples with the real queue over Kmin, KiB: what the
    marking program's virtual queue misses of the tbf's (nan: not sampled)."""
    gaps = [(s[1] - s[4]) / 1024 for s in samples if len(s) > 4 and s[4] is not None and s[1] >= ECN["kmin_kb"] * 1024]
    return statistics.median(gaps) if gaps else float("nan")


def arrived(a: tuple, b: tuple) -> int:
    """Bytes offered to the port between two samples: what its queue grew by plus what it sent."""
    return b[1] - a[1] + b[2] - a[2]


def unmarked_over_kmax(samples: list[tuple]) -> float:
    """The share of the sampled intervals with the queue over Kmax at both ends and frames arriving (two or more)
    in which the port marked nothing: every ECN-capable frame that finds Kmax is marked, so a share above 0 is
    marking blind to the real queue (nan: marks not sampled). An interval in which nothing arrived (the senders
    cut, the queue draining) has nothing to mark and is left out."""
    if samples and samples[0][3] is None:
        return float("nan")
    kmax = ECN["kmax_kb"] * 1024
    over = [(a, b) for a, b in zip(samples, samples[1:]) if min(a[1], b[1]) >= kmax and arrived(a, b) >= 2 * 1100]
    return sum(b[3] == a[3] for a, b in over) / len(over) if over else 0.0


def held_bursts(samples: list[tuple], offered_bps: float | None = None, idle_s: float = 0.2,
                burst: int = 64 * 1024) -> tuple[int, float]:
    """Times the switch's datapath held the senders' frames and let them go at once: the port neither got nor sent
    a byte for idle_s or more, then got `burst` bytes or more in one interval; or it got in one interval more than
    the senders' NICs could send in it (offered_bps, with a quarter and `burst` to spare). A userspace datapath
    does this while its main loop is busy elsewhere (docs/ecn.md). (count, seconds the port was idle before)."""
    count, held, since = 0, 0.0, None
    for a, b in zip(samples, samples[1:]):
        got = arrived(a, b)
        if got == 0 and b[2] == a[2]:
            since = a[0] if since is None else since
            continue
        after_idle = since is not None and a[0] - since >= idle_s and got >= burst
        if after_idle or (offered_bps and got > 1.25 * offered_bps / 8 * (b[0] - a[0]) + burst):
            count, held = count + 1, held + (a[0] - since if after_idle else 0.0)
        since = None
    return count, held


def incast_fabric(queue_kb: int, mtu: int, lossless: bool = False):
    from testbed.fabric.topo import build
    return build("rail-only", SENDERS + 1, 1, nic_mbps=NIC_MBPS, time_scale=TIME_SCALE, ecn=ECN,
                 queue_kb={"nic": queue_kb}, nic_mtu=mtu, pfc=PFC if lossless else None)


def incast_once(net, fabric, scheme: str, size: int, roce_mtu: int, diagnose: bool = False) -> dict:
    """One 7-to-1 incast on a live fabric; returns its figures."""
    from hosts.rdma import Access, QPType, SendWR, WROpcode, open_device
    from testbed.fabric import ecn, pfc
    from testbed.fabric.linuxcalls import netns
    from testbed.fabric.links import switch_port
    hosts = [f"s{i}g0" for i in range(SENDERS + 1)]
    link = next(l for l in fabric.links if {l.a, l.b} == {"rail0", hosts[-1]})
    port = switch_port("rail0", link.a_port if link.a == "rail0" else link.b_port)
    rate = NIC_MBPS / TIME_SCALE * 1e6
    devs = {}
    for h in hosts:
        node = net.host(h)
        with netns(f"/proc/{node.pid}/ns/net"):
            devs[h] = open_device(node.IP(), backend="uroce")
    rx = devs[hosts[-1]]
    pd_r, cq_r = rx.alloc_pd(), rx.create_cq()
    opts = dict(rate_limit_bps=rate, timeout=1.0, rto="adaptive", time_scale=TIME_SCALE, mtu=roce_mtu)
    if scheme != "none":
        opts["cc"] = scheme
    senders = []
    for h in hosts[:-1]:
        dev = devs[h]
        pd, cq = dev.alloc_pd(), dev.create_cq()
        src, dst = bytearray(os.urandom(size)), bytearray(size)
        ms, md = pd.reg_mr(src, Access.ALL), pd_r.reg_mr(dst, Access.ALL)
        qs, qr = dev.create_qp(pd, QPType.RC, cq, **opts), rx.create_qp(pd_r, QPType.RC, cq_r, **opts)
        qs.connect(qr.info())
        qr.connect(qs.info())
        senders.append((cq, qs, ms, md, src, dst))
    drain_by = time.monotonic() + 30             # what a run before left queued (duplicates resent) drains first
    while tc_stats(port)["backlog"] and time.monotonic() < drain_by:
        time.sleep(0.1)
    before, marks0 = tc_stats(port), ecn.counters(port)["marked_packets"]
    pauses0 = pfc.totals(net.pauses.stats()) if net.pauses else None
    sampler = QueueSampler(port, diagnose)
    sampler.start()
    t0 = time.monotonic()
    first_cut = []
    if scheme == "dcqcn" and diagnose:  # when the first cut came: the start's feedback delay
        def watch():
            while not first_cut and time.monotonic() - t0 < 60:
                if any(s[1].counters["cc_rate_cuts"] for s in senders):
                    first_cut.append(time.monotonic() - t0)
                time.sleep(0.002)
        threading.Thread(target=watch, daemon=True).start()
    for _, qs, ms, md, _, _ in senders:
        qs.post_send(SendWR(WROpcode.RDMA_WRITE, [ms.sge(0, size)], wr_id=1, remote_addr=md.addr, rkey=md.rkey))
    done = []
    try:
        for cq, _, _, _, src, dst in senders:
            wc = cq.wait(1, 300)
            if not (wc and wc[0].ok):
                raise RuntimeError(f"{scheme}: a write did not complete: {wc}")
            done.append(time.monotonic() - t0)
            if dst != src:
                raise RuntimeError(f"{scheme}: the data differs")
    finally:
        samples = sampler.stop()
        after = tc_stats(port)
        marks = ecn.counters(port)["marked_packets"] - marks0
        paused = pfc.growth(pauses0, pfc.totals(net.pauses.stats())) if pauses0 else {}
        counters = [s[1].counters for s in senders]
        for dev in devs.values():
            dev.close()
    rates = [size / t for t in done]
    kib = [s[1] / 1024 for s in samples] or [0]
    return {
        "queue_p50_kb": statistics.median(kib),
        "queue_p95_kb": statistics.quantiles(kib, n=20)[-1] if len(kib) > 1 else kib[0],
        "queue_max_kb": max(kib),
        "first_cut_ms": first_cut[0] * 1e3 if first_cut else float("nan"),
        "busy_late": link_busy(samples, rate),
        "unmarked_over_kmax": unmarked_over_kmax(samples),
        "held": held_bursts(samples, SENDERS * rate)[0],
        "held_s": held_bursts(samples, SENDERS * rate)[1],
        "drain": drain_rate(samples, rate),
        "virtual_lag_kb": virtual_lag(samples),
        "samples": samples,
        "under_kmax": sum(q < ECN["kmax_kb"] for q in kib) / len(kib),
        "series": [kib[int(i * len(kib) / 10)] for i in range(10)] if len(kib) >= 10 else kib,
        "goodput": size * SENDERS * 8 / max(done) / rate,
        "jain": sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates)),
        "drops": after["drops"] - before["drops"],
        "retransmits": sum(c["retransmits"] for c in counters),
        "cnps": sum(c["cnp_received"] for c in counters),
        "marks": marks,
        "pauses": paused.get("pfc_pauses", 0),
        "paused_s": paused.get("pfc_paused_s", 0.0),
    }


def fmt(values, digits=2) -> str:
    return f"{statistics.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def incast(args) -> dict:
    from testbed.fabric.network import Network
    size = args.kb * 1024
    roce_mtu = 4096 if args.mtu >= 4096 + 100 else 1024
    results = {}
    for loss in args.loss:
        fabric = incast_fabric(args.queue_kb, args.mtu, lossless=loss == "lossless")
        print(f"\n## {SENDERS}-to-1 incast, {args.kb} KiB each, NICs {NIC_MBPS:g} Mbit/s at time scale {TIME_SCALE} "
              f"({NIC_MBPS / TIME_SCALE:g} Mbit/s), ECN {ECN}, queue {args.queue_kb} KiB, {loss}"
              f"{f' (PFC {PFC})' if loss == 'lossless' else ''}; {args.reps} runs: mean (min-max)")
        print(f"{'scheme':<7} {'queue p50 KiB':>16} {'queue p95 KiB':>16} {'queue peak KiB':>16} {'<Kmax':>16} "
              f"{'1st cut ms':>14} {'goodput':>16} {'busy 2nd half':>16} {'Jain':>16} {'drops':>12} {'resent':>14} "
              f"{'CNPs':>12} {'CE marks':>14} {'unmarked>Kmax':>16} {'pauses':>12} {'paused s':>16}")
        rows = [(scheme, scheme, size) for scheme in args.schemes]
        if "dcqcn" in args.schemes and args.long_kb:     # DCQCN's steady state: a transfer its start does not rule
            rows.append((f"dcqcn@{args.long_kb}", "dcqcn", args.long_kb * 1024))
        with Network(fabric) as net:
            for name, scheme, nbytes in rows:
                runs = [incast_once(net, fabric, scheme, nbytes, roce_mtu, args.diagnose) for _ in range(args.reps)]
                results[loss, name] = runs
                col = lambda k, d=2: fmt([r[k] for r in runs], d)
                print(f"{name:<7} {col('queue_p50_kb', 0):>16} {col('queue_p95_kb', 0):>16} "
                      f"{col('queue_max_kb', 0):>16} {col('under_kmax'):>16} {col('first_cut_ms', 0):>14} "
                      f"{col('goodput'):>16} {col('busy_late'):>16} {col('jain'):>16} {col('drops', 0):>12} "
                      f"{col('retransmits', 0):>14} {col('cnps', 0):>12} {col('marks', 0):>14} "
                      f"{col('unmarked_over_kmax'):>16} {col('pauses', 0):>12} {col('paused_s', 1):>16}", flush=True)
                per_run = " ".join(f"{r['goodput']:.3f}" for r in runs)
                print(f"        the datapath held the frames {col('held', 0)} times, the link idle {col('held_s')} s "
                      f"meanwhile; goodput per run {per_run}", flush=True)
                if args.diagnose:
                    print(f"        drain while backlogged / rate {col('drain')}, real - virtual queue over Kmin "
                          f"(median, KiB) {col('virtual_lag_kb', 1)}", flush=True)
                if args.dump:
                    with open(args.dump, "a") as f:
                        for r in runs:
                            f.write(json.dumps({"loss": loss, "row": name, **r}) + "\n")
        print("queue over the run (KiB, ten points of the first run):")
        for name, _, _ in rows:
            print(f"  {name:<7} " + " ".join(f"{q:5.0f}" for q in results[loss, name][0]["series"]))
    return results


def routing_doc(mode: str, size: str, alltoall: bool = True) -> dict:
    work = []
    for cc in ("none", "dcqcn"):
        if alltoall:
            work.append({"type": "collective", "name": f"alltoall-{cc}", "op": "alltoall", "algo": "direct",
                         "sizes": [size], "iterations": 1, "congestion": cc})
        work.append({"type": "collective", "name": f"ring-{cc}", "op": "allreduce", "algo": "ring", "ring": "rank",
                     "sizes": [size], "iterations": 1, "congestion": cc})
    return {"name": f"bench-congestion-{mode.replace(':', '')}",
            "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 4, "spines": 2,
                       "oversubscription": 2, "nic_mbps": NIC_MBPS, "time_scale": TIME_SCALE, "ecn": ECN},
            "routing": {"mode": mode}, "workloads": work}


def routing(args) -> dict:
    from testbed import runner
    print(f"\n## routing modes with and without DCQCN: rail-optimized 2 x 4, 2 spines at 2:1, NICs {NIC_MBPS:g} "
          f"Mbit/s at time scale {TIME_SCALE}, ECN {ECN}, {args.size} per collective; {args.reps} runs: "
          f"mean (min-max)")
    print(f"{'mode':<8} {'workload':<15} {'time s':>18} {'busbw/bound':>16} {'imbalance':>16} {'resent':>12} "
          f"{'CE recv':>12} {'CNPs':>12} runs")
    results = {}
    for mode in args.modes:
        doc = routing_doc(mode, args.size)
        runs = []                       # per run: workload name -> its row (missing: it failed)
        for _ in range(args.reps):
            out = runner.run(doc, tempfile.mkdtemp(prefix="tb-cong-"), echo=lambda *a: None)
            rows = {w["name"]: w["rows"][0] for w in out["workloads"] if w["rows"] and w["rows"][0]["correct"]}
            for w in doc["workloads"]:
                if w["name"] not in rows:
                    why = [c["detail"] for c in out["checks"] if not c["ok"]]
                    print(f"{mode:<8} {w['name']:<15} FAILED: {'; '.join(why)[:200] or 'no result'}", flush=True)
            runs.append(rows)
        results[mode] = runs
        for w in doc["workloads"]:
            rs = [r[w["name"]] for r in runs if w["name"] in r]
            if not rs:
                continue
            col = lambda f, d=2: fmt([f(r) for r in rs], d)
            print(f"{mode:<8} {w['name']:<15} {col(lambda r: r['seconds']):>18} {col(lambda r: r['bus_ratio']):>16} "
                  f"{col(lambda r: r['uplink_imbalance'] or 0):>16} {col(lambda r: r['retransmits'], 0):>12} "
                  f"{col(lambda r: r.get('ecn_marked_packets') or 0, 0):>12} "
                  f"{col(lambda r: r.get('cnp_received') or 0, 0):>12} {len(rs)}/{len(runs)}", flush=True)
        cost = [r["ring-dcqcn"]["seconds"] / r["ring-none"]["seconds"] - 1 for r in runs
                if "ring-none" in r and "ring-dcqcn" in r]
        print(f"{mode:<8} ring AllReduce, DCQCN's cost: "
              f"{fmt([100 * c for c in cost], 1) + ' %' if cost else 'no run with both'}", flush=True)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one repeat, smaller transfers")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--parts", default="incast,routing")
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--modes", default="ecmp,spray,split:4")
    ap.add_argument("--kb", type=int, help="KiB each incast sender writes (default 512, quick 256)")
    ap.add_argument("--long-kb", type=int, help="KiB each in one more DCQCN incast, long enough for its steady "
                    "state (default 2048, quick 0: none)")
    ap.add_argument("--diagnose", action="store_true", help="also the first cut and unmarked>Kmax (a thread "
                    "and a bpftool per sample in the endpoints' process: they perturb the run)")
    ap.add_argument("--dump", help="append each incast run's figures and samples to this file (JSON lines)")
    ap.add_argument("--size", help="bytes per collective (default 2MiB, quick 1MiB)")
    ap.add_argument("--queue-kb", type=int, default=1024, help="the bottleneck's buffer (1 MiB: the testbed's default)")
    ap.add_argument("--mtu", type=int, default=1500, help="the links' MTU (9000: RoCE MTU 4096, else 1024)")
    ap.add_argument("--ecn", type=json.loads, help=f"fabric.ecn (default {json.dumps(ECN)})")
    ap.add_argument("--loss", default="lossy,lossless", help="lossy (drops at a full queue), lossless (fabric.pfc)")
    args = ap.parse_args(argv)
    if args.ecn:
        ECN.clear()
        ECN.update(args.ecn)
    args.reps = args.reps or (1 if args.quick else 3)
    args.kb = args.kb or (256 if args.quick else 512)
    args.long_kb = (0 if args.quick else 2048) if args.long_kb is None else args.long_kb
    args.size = args.size or ("1MiB" if args.quick else "2MiB")
    args.schemes, args.modes, parts = args.schemes.split(","), args.modes.split(","), args.parts.split(",")
    args.loss = args.loss.split(",")
    if not set(args.schemes) <= set(SCHEMES) or not set(parts) <= {"incast", "routing"} \
            or not set(args.loss) <= {"lossy", "lossless"}:
        ap.error(f"--schemes: among {', '.join(SCHEMES)}; --parts: among incast, routing; --loss: lossy, lossless")
    if os.geteuid() != 0:
        print("congestion.py needs root (a fabric)", file=sys.stderr)
        return 2
    from testbed.fabric import ecn
    lacking = ecn.missing()
    if lacking:
        print(f"congestion.py: cannot mark ECN here: {lacking}", file=sys.stderr)
        return 2
    if "incast" in parts:
        incast(args)
    if "routing" in parts:
        routing(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
