"""Benchmark: the RC retransmission timeout, fixed against adaptive (printed).

    .venv/bin/python benchmarks/rto.py [--mbps 5] [--delays-ms 0 20] [--reps 3] [--tail 8]

Two namespaces joined by one veth link shaped at --mbps with a 1 MiB queue, as the fabric's NICs are (with a delay,
the delay line of testbed/fabric/delay.py carries the rate and adds the one-way delay), uroce at RoCE MTU 4096 paced
at 0.95 of the rate, a window of 256 packets as the collectives keep. Two cases per timer and delay:

- tail: RDMA WRITEs of 1 MiB, each checked byte for byte; in the last one, the last --tail packets are lost once
  (a cut that takes a window's tail: nothing follows to reveal the gap, only the timer recovers it). Printed: the
  lossy write's time over the median of the lossless ones before it (what the loss cost), the timer when the loss
  happened, the timeouts.
- load: two QPs over the same link write 2 MiB each at once, offering twice its rate: the queue fills and the round
  trip grows from milliseconds to about a second within the transfer. Nothing is lost on purpose, so every timeout
  and every duplicate the responder sees is a spurious retransmission.

Fixed: --fixed-s (default 6.76 s, what the collectives use on a 5 Mbit/s fabric: 0.05 s + 2 x its worst queueing
delay); adaptive: RFC 6298 within [50 ms, the fixed value].
"""
import argparse
import os
import statistics
import time

from hosts.rdma import Access, QPType, SendWR, WROpcode, open_device
from hosts.rdma import headers as H
from hosts.rdma.netns import VethPair, netns
from testbed.fabric.delay import Delays, End, LinkDelay
from testbed.fabric.links import fabric_tag

MiB = 1 << 20
WINDOW = 256
QUEUE = MiB


class Link:
    """The two namespaces, their uroce devices, and the delay on the link (if any)."""

    def __init__(self, mbps: float, delay_ms: float):
        self.veth = VethPair(f"{fabric_tag()}rto{os.getpid() % 1000}", net=79, mtu=9000,
                             rate_mbit=None if delay_ms else mbps)
        self.delays = None
        try:
            if delay_ms:
                self.delays = Delays()
                ends = [End(dev, f"/run/netns/{ns}", mbps=mbps, mtu=9000, queue_bytes=QUEUE)
                        for ns, dev in zip(self.veth.ns, self.veth.ifs)]
                self.delays.apply(LinkDelay("rto", ends[0], ends[1], delay_ms * 1000))
            else:   # the fabric's NIC queue (VethPair's tbf holds 4 MB)
                for ns, dev in zip(self.veth.ns, self.veth.ifs):
                    os.system(f"ip netns exec {ns} tc qdisc replace dev {dev} root tbf rate {mbps}mbit "
                              f"burst 32kb limit {QUEUE}")
            self.devs = []
            for ns, ip in zip(self.veth.ns, self.veth.ips):
                with netns(ns):
                    self.devs.append(open_device(ip, backend="uroce", mtu=4096))
        except BaseException:
            self.close()
            raise
        self.rate = 0.95 * mbps * 1e6

    def pair(self, rto: str, fixed_s: float, size: int):
        """A connected RC QP pair with registered buffers (random source, zeroed destination)."""
        a, b = self.devs
        p = type("Pair", (), {})()
        p.pa, p.pb, p.ca, p.cb = a.alloc_pd(), b.alloc_pd(), a.create_cq(), b.create_cq()
        p.src, p.dst = bytearray(os.urandom(size)), bytearray(size)
        p.ma, p.mb = p.pa.reg_mr(p.src, Access.ALL), p.pb.reg_mr(p.dst, Access.ALL)
        opts = dict(timeout=fixed_s, rto=rto, retry_cnt=7, rate_limit_bps=self.rate, max_outstanding=WINDOW)
        p.qa, p.qb = a.create_qp(p.pa, QPType.RC, p.ca, **opts), b.create_qp(p.pb, QPType.RC, p.cb, **opts)
        p.qa.connect(p.qb.info())
        p.qb.connect(p.qa.info())
        return p

    def close(self):
        for d in getattr(self, "devs", []):
            d.close(linger=0)
        if self.delays:
            self.delays.close()
        self.veth.close()


def write(p, wr_id: int) -> float:
    p.dst[:] = bytes(len(p.dst))
    t = time.monotonic()
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [p.ma.sge()], remote_addr=p.mb.addr, rkey=p.mb.rkey, wr_id=wr_id))
    wc, = p.ca.wait(1, 120)
    dt = time.monotonic() - t
    if not wc.ok or p.dst != p.src:
        raise SystemExit(f"write {wr_id}: {wc.status!r}, data {'equal' if p.dst == p.src else 'DIFFERENT'}")
    return dt


def tail_case(link: Link, rto: str, fixed_s: float, tail: int, lossless: int = 3) -> dict:
    p = link.pair(rto, fixed_s, MiB)
    times = [write(p, i) for i in range(lossless)]
    npkts = MiB // 4096
    lost = set()

    def drop(pkt):      # the last `tail` packets of the write, first transmission only
        psn = int.from_bytes(pkt[37:40], "big")
        k = (psn - p.qa.psn) % (1 << 24) - lossless * npkts
        if pkt[28] in (H.WRITE_MIDDLE, H.WRITE_LAST) and npkts - tail <= k < npkts and k not in lost:
            lost.add(k)
            return True
        return False
    before = p.qa.counters["timeouts"]
    rto_then = p.qa.timeout
    link.devs[0].tx_drop_hook = drop
    try:
        dt = write(p, 99)
    finally:
        link.devs[0].tx_drop_hook = None
    p.qa.destroy(), p.qb.destroy()
    return {"cost": dt - statistics.median(times), "rto": rto_then, "timeouts": p.qa.counters["timeouts"] - before,
            "lost": len(lost), "srtt": p.qa.srtt}


def load_case(link: Link, rto: str, fixed_s: float) -> dict:
    pairs = [link.pair(rto, fixed_s, 2 * MiB) for _ in range(2)]
    t = time.monotonic()
    for i, p in enumerate(pairs):
        p.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [p.ma.sge()], remote_addr=p.mb.addr, rkey=p.mb.rkey, wr_id=i))
    for p in pairs:
        wc, = p.ca.wait(1, 300)
        if not wc.ok or p.dst != p.src:
            raise SystemExit(f"load: {wc.status!r}")
    out = {"seconds": time.monotonic() - t,
           "timeouts": sum(p.qa.counters["timeouts"] for p in pairs),
           "retransmits": sum(p.qa.counters["retransmits"] for p in pairs),
           "duplicates": sum(p.qb.counters["duplicates"] for p in pairs),
           "max_srtt": max(p.qa.srtt or 0 for p in pairs)}
    for p in pairs:
        p.qa.destroy(), p.qb.destroy()
    return out


def spread(xs, fmt="{:.2f}"):
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mbps", type=float, default=5)
    ap.add_argument("--delays-ms", type=float, nargs="+", default=[0, 20])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tail", type=int, default=8)
    ap.add_argument("--fixed-s", type=float, default=6.76)
    args = ap.parse_args()
    print(f"# one link at {args.mbps:g} Mbit/s (1 MiB queue), RoCE MTU 4096, window {WINDOW}; {args.reps} runs each; "
          f"median [min-max]")
    print(f"# {'delay':>6} {'timer':<9} {'tail: cost s':>20} {'timer then s':>18} {'timeouts':>8}   "
          f"{'load: s':>20} {'srtt max s':>10} {'timeouts':>8} {'retx':>6} {'dups':>6}")
    for delay_ms in args.delays_ms:
        link = Link(args.mbps, delay_ms)
        try:
            for rto in ("fixed", "adaptive"):
                tails = [tail_case(link, rto, args.fixed_s, args.tail) for _ in range(args.reps)]
                loads = [load_case(link, rto, args.fixed_s) for _ in range(args.reps)]
                print(f"  {delay_ms:>4g}ms {rto:<9} {spread([t['cost'] for t in tails]):>20} "
                      f"{spread([t['rto'] for t in tails], '{:.3f}'):>18} {sum(t['timeouts'] for t in tails):>8}   "
                      f"{spread([x['seconds'] for x in loads]):>20} {max(x['max_srtt'] for x in loads):>10.3f} "
                      f"{sum(x['timeouts'] for x in loads):>8} {sum(x['retransmits'] for x in loads):>6} "
                      f"{sum(x['duplicates'] for x in loads):>6}", flush=True)
        finally:
            link.close()


if __name__ == "__main__":
    main()
