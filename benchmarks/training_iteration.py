"""Benchmark: one training iteration of a (p, t, d) plan on each fabric, measured against the analytical model
T = Tcomp + Ttp + Tpp + Tdp + Tbubble per phase (printed, not asserted).

    .venv/bin/python benchmarks/training_iteration.py [--fabrics rail-only,rail-optimized,clos] [--target-s 20]
                                                      [--micro-batches 4] [--nic-mbps 5] [--servers 4 --gpus 2]

Every fabric runs the same message sizes (the scale is fixed from the first fabric's prediction), so the rows
compare fabrics, not sizes. Spine bytes show where the traffic went: none on rail-optimized when the plan is
rail-aligned, through the spines on the ToR-based clos.
"""
import argparse
import tempfile

from testbed import runner
from testbed.fabric.links import NIC_MTU
from testbed.fabric.topo import build
from testbed.workloads import training


def run(kind, args, scale):
    fabric = {"kind": kind, "servers": args.servers, "gpus_per_server": args.gpus, "nic_mbps": args.nic_mbps,
              "nic_mtu": args.nic_mtu}
    if kind != "rail-only":
        fabric["spines"] = 2
    spec = {"type": "training_iteration", "plan": {"tp": args.tp, "pp": args.pp, "dp": args.dp},
            "micro_batches": args.micro_batches, "schedule": args.schedule, "scale": scale}
    scenario = {"name": f"bench-training-{kind}", "fabric": fabric, "workloads": [spec]}
    out = runner.run(scenario, tempfile.mkdtemp(prefix="tb-bench-"), echo=lambda *a: None)
    w = out["workloads"][0]
    if "measured" not in w:
        raise SystemExit(f"{kind} failed: {[c['detail'] for c in out['checks'] if not c['ok']]}")
    return w, [c for c in out["checks"] if not c["ok"]]


def scale_of(kind, args) -> float:
    """The message scale that makes `kind`'s predicted iteration last --target-s; every fabric then runs it."""
    fabric = build(kind, args.servers, args.gpus, nic_mbps=args.nic_mbps, nic_mtu=args.nic_mtu)
    return training.make_plan(fabric, {"plan": {"tp": args.tp, "pp": args.pp, "dp": args.dp},
                                       "micro_batches": args.micro_batches, "target_s": args.target_s}).scale


def options(argv=None) -> argparse.Namespace:
    """The command line's settings (benchmarks/measured.py passes its own)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--fabrics", default="rail-only,rail-optimized,clos")
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--schedule", default="1f1b", choices=("1f1b", "gpipe"))
    ap.add_argument("--nic-mbps", type=float, default=5)
    ap.add_argument("--target-s", type=float, default=20)
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    return ap.parse_args(argv)


def main():
    args = options()
    kinds = args.fabrics.split(",")
    scale = scale_of(kinds[0], args)
    print(f"p={args.pp} t={args.tp} d={args.dp}, m={args.micro_batches}, {args.schedule}, {args.servers} servers x "
          f"{args.gpus} GPUs, NIC {args.nic_mbps:g} Mbit/s, message sizes x{scale:.3g}\n")
    print(f"{'fabric':<15} {'phase':<10} {'predicted s':>12} {'measured s':>11} {'ratio':>6} {'full-scale ms':>14} "
          f"{'measured eq. ms':>16}")
    summary = []
    for kind in kinds:
        w, failed = run(kind, args, scale)
        for k in training.PHASES:
            r = w["ratio"][k]
            print(f"{kind:<15} {k:<10} {w['predicted'][k]:>12.3f} {w['measured'][k]:>11.3f} "
                  f"{'-' if r is None else f'{r:.2f}':>6} {w['full_scale']['predicted'][k] * 1e3:>14.2f} "
                  f"{w['full_scale']['measured_equivalent'][k] * 1e3:>16.2f}")
        summary.append((kind, w, failed))
        print()
    print(f"{'fabric':<15} {'iteration s':>12} {'x model':>8} {'bubble':>7} {'(p-1)/(p-1+m)':>14} {'NIC MB':>7} "
          f"{'spine MB':>9} {'cross-rail B':>13} {'idle%':>6} checks")
    for kind, w, failed in summary:
        spine = "-" if w["spine_bytes"] is None else f"{w['spine_bytes'] / 1e6:.2f}"
        print(f"{kind:<15} {w['measured']['iteration']:>12.2f} {w['ratio']['iteration']:>8.2f} "
              f"{w['bubble_ratio']['measured']:>7.3f} {w['bubble_ratio']['formula']:>14.3f} "
              f"{w['nic_bytes'] / 1e6:>7.2f} {spine:>9} {w['traffic']['cross_rail_bytes']:>13} "
              f"{w['cpu_idle_mean_pct']:>6} {'all pass' if not failed else '; '.join(c['name'] for c in failed)}")


if __name__ == "__main__":
    main()
