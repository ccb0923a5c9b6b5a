"""Benchmark: an N-to-1 incast into one bottleneck with no congestion control, the delay-based one and DCQCN
(printed, not asserted; in-process fabric, no privileges).

    .venv/bin/python benchmarks/dcqcn.py [--senders 4] [--mbps 5] [--kb 384] [--reps 3] [--time-scale 300]
                                         [--kmin-ms 10] [--kmax-ms 0] [--pmax 1] [--buffer-ms 400] [--threshold 5]
                                         [--schemes none,delay,dcqcn]

N uroce senders, each paced at the bottleneck's rate (a NIC as fast as the link it meets), RDMA WRITE --kb each at
once to one receiver behind a --mbps FIFO (hosts/rdma/transport.py's Bottleneck) that marks CE above --kmin-ms of
queue (with --kmax-ms, RED-style: probability rising to --pmax at Kmax, 1 above) and drops above --buffer-ms. DCQCN runs ConnectX's parameters scaled by --time-scale (hosts/rdma/dcqcn.py),
with F = --threshold fast-recovery stages (5, the paper's; ConnectX ships 1).
Every write is checked byte for byte. Printed per scheme, mean and spread (min-max) over --reps runs:

- queue: the median and 95th percentile of the queue packets found (ms of the bottleneck);
- queue peak (ms) and when the first cut came (ms after the writes were posted): the start of the incast;
- goodput: payload bytes over the time until the last write completed, as a fraction of the bottleneck's rate
  (a packet of 1024 payload bytes is 1068 bytes on this link, so 0.96 is the most);
- busy 2nd half: the share of the second half of the link's traffic it spent sending (the steady state, after
  the start's over-shoot);
- Jain's fairness index over the senders' rates (each one's bytes over its own completion time);
- drops at the buffer, retransmitted packets, CNPs received and rate cuts.
"""
import argparse
import os
import statistics
import threading
import time

from hosts.rdma import Access, QPType, SendWR, WROpcode, open_device
from hosts.rdma.transport import Bottleneck, MemoryFabric

SCHEMES = ("none", "delay", "dcqcn")


def incast(args, cc) -> dict:
    link = Bottleneck(args.mbps * 1e6, mark_above_s=args.kmin_ms / 1e3, limit_s=args.buffer_ms / 1e3,
                      kmax_s=args.kmax_ms / 1e3 if args.kmax_ms else None, pmax=args.pmax)
    fab = MemoryFabric(drop=link.drop, mark=link.mark, delay=link.delay)
    size = args.kb * 1024
    rx = open_device("10.8.0.100", backend="uroce", transport=fab.attach("10.8.0.100"))
    pd_r, cq_r = rx.alloc_pd(), rx.create_cq()
    opts = dict(rate_limit_bps=args.mbps * 1e6, timeout=1.0, rto="adaptive", time_scale=args.time_scale)
    if cc:
        opts["cc"] = cc
    if cc == "dcqcn":
        opts["dcqcn"] = {"rpg_threshold": args.threshold}
    senders = []
    for i in range(args.senders):
        dev = open_device(f"10.8.0.{i + 1}", backend="uroce", transport=fab.attach(f"10.8.0.{i + 1}"))
        pd, cq = dev.alloc_pd(), dev.create_cq()
        src, dst = bytearray(os.urandom(size)), bytearray(size)
        ms, md = pd.reg_mr(src, Access.ALL), pd_r.reg_mr(dst, Access.ALL)
        qs, qr = dev.create_qp(pd, QPType.RC, cq, **opts), rx.create_qp(pd_r, QPType.RC, cq_r, **opts)
        qs.connect(qr.info())
        qr.connect(qs.info())
        senders.append((dev, cq, qs, ms, md, src, dst))
    t0 = time.monotonic()
    first_cut = []
    if cc == "dcqcn":                   # when the first cut came: the start's feedback delay
        def watch():
            while not first_cut and time.monotonic() - t0 < 60:
                if any(s[2].cc.decreases for s in senders):
                    first_cut.append(time.monotonic() - t0)
                time.sleep(0.001)
        threading.Thread(target=watch, daemon=True).start()
    for _, _, qs, ms, md, _, _ in senders:
        qs.post_send(SendWR(WROpcode.RDMA_WRITE, [ms.sge(0, size)], wr_id=1, remote_addr=md.addr, rkey=md.rkey))
    done = []
    for dev, cq, qs, _, _, src, dst in senders:
        wc = cq.wait(1, 300)
        assert wc and wc[0].ok, (cc, wc)
        done.append(time.monotonic() - t0)
        assert dst == src, f"{cc}: the data differs"
    # completion is observed sender by sender: a later sender's time is when it was polled at the latest
    rates = [size / t for t in done]
    out = {
        "queue_p50_ms": statistics.median(link.queues) * 1e3,
        "queue_p95_ms": statistics.quantiles(link.queues, n=20)[-1] * 1e3,
        "queue_max_ms": max(link.queues) * 1e3,
        "first_cut_ms": first_cut[0] * 1e3 if first_cut else float("nan"),
        "goodput": size * len(senders) * 8 / max(done) / (args.mbps * 1e6),
        "busy_late": link.utilization(0.5),
        "jain": sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates)),
        "drops": link.drops,
        "retransmits": sum(s[2].counters["retransmits"] for s in senders),
        "cnps": sum(s[2].counters["cnp_received"] for s in senders),
        "cuts": sum(s[2].counters["cc_rate_cuts"] for s in senders),
    }
    for s in senders:
        s[0].close()
    rx.close()
    return out


def fmt(values, digits=2) -> str:
    return f"{statistics.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--mbps", type=float, default=5)
    ap.add_argument("--kb", type=int, default=384)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time-scale", type=float, default=300)
    ap.add_argument("--kmin-ms", type=float, default=10)
    ap.add_argument("--kmax-ms", type=float, default=0, help="RED-style marking up to pmax at kmax (0: step)")
    ap.add_argument("--pmax", type=float, default=1.0)
    ap.add_argument("--buffer-ms", type=float, default=400)
    ap.add_argument("--threshold", type=int, default=5, help="DCQCN's F (rpg_threshold)")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help="which of none, delay, dcqcn")
    args = ap.parse_args(argv)
    schemes = args.schemes.split(",")
    if not set(schemes) <= set(SCHEMES):
        ap.error(f"--schemes: choose among {', '.join(SCHEMES)}")
    marks = f"{args.kmin_ms:g} ms" + (f" (to p {args.pmax:g} at {args.kmax_ms:g} ms)" if args.kmax_ms else "")
    print(f"{args.senders}-to-1 incast, {args.kb} KiB each, {args.mbps:g} Mbit/s bottleneck, CE above "
          f"{marks}, buffer {args.buffer_ms:g} ms, DCQCN time scale {args.time_scale:g}, "
          f"F {args.threshold}, {args.reps} runs: mean (min-max)")
    print(f"{'scheme':<7} {'queue p50 ms':>20} {'queue p95 ms':>20} {'queue peak ms':>20} {'1st cut ms':>17} "
          f"{'goodput':>17} {'busy 2nd half':>17} {'Jain':>17} {'drops':>14} {'resent':>17} {'CNPs':>17} "
          f"{'cuts':>17}")
    for name in schemes:
        cc = None if name == "none" else name
        runs = [incast(args, cc) for _ in range(args.reps)]
        col = lambda k, d=2: fmt([r[k] for r in runs], d)
        print(f"{cc or 'none':<7} {col('queue_p50_ms', 0):>20} {col('queue_p95_ms', 0):>20} "
              f"{col('queue_max_ms', 0):>20} {col('first_cut_ms', 0):>17} {col('goodput'):>17} {col('busy_late'):>17} "
              f"{col('jain'):>17} {col('drops', 0):>14} {col('retransmits', 0):>17} {col('cnps', 0):>17} "
              f"{col('cuts', 0):>17}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
