"""Benchmark: goodput of one RC QP (RDMA WRITE and READ) between two network namespaces over a veth
pair shaped with tbf, as a fraction of the link bound, and CPU seconds per GB. Needs root.

    python -m hosts.rdma.bench [--rate-mbit 100] [--size-mib 4] [--iters 3] [--mtu 1024] [--link-mtu N] [--switch]
                               [--unpaced]

The veth links get the Ethernet default MTU, 1500, or the smallest that carries the RoCE MTU's packets if that is
more (hosts/rdma/mtu.py); --link-mtu sets it, and a RoCE MTU that does not fit is refused.

Both endpoints run in this process (one engine thread each), so the CPU figure covers both ends.
Printed, never asserted."""
import argparse
import os
import time

from . import Access, QPType, SendWR, WROpcode, open_device
from .headers import BTH_LEN, ICRC_LEN, RETH_LEN, ROCE_MTUS
from .mtu import link_mtu_for, mtu_mismatch
from .netns import VethPair, netns
from .engine import ETH_OVERHEAD


def _cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[3] + v[4], sum(v[:8])          # idle + iowait, total


def link_bound_bps(rate_bps, size, mtu, reth_first):
    """Payload bits/s the link carries at most: line rate x payload / (payload + all headers)."""
    npkts = max(1, -(-size // mtu))
    per_pkt = ETH_OVERHEAD + 20 + 8 + BTH_LEN + ICRC_LEN
    wire = size + npkts * per_pkt + (RETH_LEN if reth_first else 0)
    return rate_bps * size / wire


def default_link_mtu(ib_mtu):
    """Ethernet's default MTU, or the smallest that carries RoCE MTU ib_mtu if that is more."""
    return max(1500, link_mtu_for(ib_mtu))


def run(rate_mbit=100, size=4 << 20, iters=3, mtu=1024, paced=True, tag=None, switch=False, link_mtu=None):
    tag = tag or f"b{os.getpid() % 100000}"
    v = VethPair(tag, net=79, rate_mbit=rate_mbit, switch=switch, mtu=link_mtu or default_link_mtu(mtu))
    devs = []
    try:
        for ns, ip in zip(v.ns, v.ips):
            with netns(ns):
                devs.append(open_device(ip, backend="uroce", mtu=mtu))
        a, b = devs
        pa, pb, ca, cb = a.alloc_pd(), b.alloc_pd(), a.create_cq(), b.create_cq()
        src, dst = bytearray(os.urandom(size)), bytearray(size)
        ma, mb = pa.reg_mr(src, Access.ALL), pb.reg_mr(dst, Access.ALL)
        rate = rate_mbit * 1e6 if paced else None
        qa = a.create_qp(pa, QPType.RC, ca, rate_limit_bps=rate)
        qb = b.create_qp(pb, QPType.RC, cb, rate_limit_bps=rate)
        qa.connect(qb.info())
        qb.connect(qa.info())
        results = {}
        for name, op in (("WRITE", WROpcode.RDMA_WRITE), ("READ", WROpcode.RDMA_READ)):
            for q in (qa, qb):
                q.counters.clear()
            if op == WROpcode.RDMA_READ:          # fresh remote data, so a READ that moved nothing fails
                dst[:] = os.urandom(size)
            want = bytes(src if op == WROpcode.RDMA_WRITE else dst)
            t0, c0, (i0, a0) = time.monotonic(), time.process_time(), _cpu_times()
            for i in range(iters):
                qa.post_send(SendWR(op, [ma.sge()], wr_id=i, remote_addr=mb.addr, rkey=mb.rkey))
            wcs = ca.wait(iters, 600)
            dt, cpu, (i1, a1) = time.monotonic() - t0, time.process_time() - c0, _cpu_times()
            ok = len(wcs) == iters and all(w.ok for w in wcs) and (dst if op == WROpcode.RDMA_WRITE else src) == want
            good = size * iters * 8 / dt
            bound = link_bound_bps(rate_mbit * 1e6, size, mtu, True)
            results[name] = dict(ok=ok, seconds=dt, goodput_mbit=good / 1e6, frac_line=good / (rate_mbit * 1e6),
                                 frac_bound=good / bound, cpu_s_per_gb=cpu / (size * iters / 1e9),
                                 retransmits=qa.counters["retransmits"], timeouts=qa.counters["timeouts"],
                                 machine_idle=(i1 - i0) / max(1, a1 - a0))
        return results
    finally:
        for d in devs:
            d.close()
        v.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate-mbit", type=float, default=100)
    ap.add_argument("--size-mib", type=float, default=4)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--mtu", type=int, default=1024, choices=ROCE_MTUS,
                    help="RoCE MTU of the QPs (above 4096: as on HB links)")
    ap.add_argument("--link-mtu", type=int, help="MTU of the veth links (default: 1500, or what --mtu needs)")
    ap.add_argument("--unpaced", action="store_true", help="also run without the QP rate limit (tbf back-pressure only)")
    ap.add_argument("--switch", action="store_true", help="put a Linux bridge (one switch hop) between the hosts")
    args = ap.parse_args(argv)
    link_mtu = args.link_mtu or default_link_mtu(args.mtu)
    if not 68 <= link_mtu <= 65535:
        ap.error(f"--link-mtu {link_mtu}: a veth link's MTU is 68 to 65535")
    problem = mtu_mismatch(args.mtu, link_mtu, "the veth link")
    if problem:
        ap.exit(2, f"{ap.prog}: {problem}\n")
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces, tbf, raw sockets)")
    size = int(args.size_mib * (1 << 20))
    modes = [True, False] if args.unpaced else [True]
    print(f"one RC QP, {'veth-bridge-veth' if args.switch else 'veth'} + tbf {args.rate_mbit:g} Mbit/s, message {size} B x {args.iters}, IB MTU {args.mtu}, link MTU {link_mtu}, "
          f"link bound (payload at line rate) {link_bound_bps(args.rate_mbit * 1e6, size, args.mtu, True) / 1e6:.1f} Mbit/s")
    for paced in modes:
        res = run(args.rate_mbit, size, args.iters, args.mtu, paced, switch=args.switch, link_mtu=link_mtu)
        for op, r in res.items():
            print(f"{op:5s} {'paced' if paced else 'unpaced':7s} ok={r['ok']} goodput {r['goodput_mbit']:6.1f} Mbit/s "
                  f"= {r['frac_bound']:.3f} of link bound ({r['frac_line']:.3f} of line rate), "
                  f"CPU {r['cpu_s_per_gb']:.1f} s/GB (both ends), retransmits {r['retransmits']}, timeouts {r['timeouts']}, "
                  f"machine idle {r['machine_idle']:.0%}" + ("  [NO CPU HEADROOM: figure not link-bound]"
                                                              if r['machine_idle'] < 0.10 else ""))


if __name__ == "__main__":
    main()
