"""Benchmark: routing modes compared on scenarios/lb_compare.yaml (printed, not asserted).

    .venv/bin/python benchmarks/lb_compare.py [--modes single,ecmp,spray,split:4] [--retransmit-timeout fixed] [--congestion none]

`retx` is the RC packets retransmitted; `timeouts` the retransmission timers that fired (nothing is lost on purpose
here, so each is spurious, or a loss in an overflowing queue).
"""
import argparse
import tempfile

from testbed import runner, scenario
from testbed.fabric.links import NIC_MTU


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="single,ecmp,spray,split:4")
    ap.add_argument("--scenario", default="scenarios/lb_compare.yaml")
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    ap.add_argument("--retransmit-timeout", choices=["adaptive", "fixed"], default="adaptive",
                    help="the collectives' RC timer: adaptive (RFC 6298, the default) or fixed (sized for full queues)")
    ap.add_argument("--congestion", choices=["delay", "none"], help="override the scenario's congestion control")
    args = ap.parse_args()
    print(f"# RC retransmission timeout {args.retransmit_timeout}")
    print(f"{'mode':<9} {'workload':<16} {'time s':>8} {'busbw MB/s':>10} {'imbalance':>9} {'out-of-order':>12} "
          f"{'retx':>6} {'timeouts':>8} {'idle%':>6} correct")
    for mode in args.modes.split(","):
        doc = scenario.load(args.scenario, [f"routing.mode={mode}", f"fabric.nic_mtu={args.nic_mtu}"])
        for w in doc["workloads"]:
            if w["type"] == "collective":
                w["retransmit_timeout"] = args.retransmit_timeout
                if args.congestion:
                    w["congestion"] = args.congestion
        out = runner.run(doc, tempfile.mkdtemp(prefix="tb-lb-"), echo=lambda *a: None)
        for w in out["workloads"]:
            for r in w["rows"]:
                print(f"{mode:<9} {w['name']:<16} {r['seconds']:>8.3f} {r['busbw_MBps']:>10.3f} "
                      f"{r['uplink_imbalance'] or 0:>9.2f} {r['out_of_order']:>12} {r['retransmits']:>6} "
                      f"{r['transport'].get('timeouts', 0):>8} "
                      f"{w['cpu_idle_mean_pct']:>6} {'yes' if r['correct'] else 'NO'}")
        for c in out["checks"]:
            if not c["ok"]:
                print(f"{mode:<9} FAILED {c['name']}: {c['detail']}")
        if any(c["name"] == "interrupted" for c in out["checks"]):
            break                                      # Ctrl-C / SIGTERM ends the whole comparison


if __name__ == "__main__":
    main()
