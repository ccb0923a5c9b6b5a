"""Benchmark: DDP, DiLoCo and Streaming DiLoCo across two sites of one fabric (each server a site, 4 GPUs each
by default; the leaders' NIC links are what crosses sites) as the cross-site rate falls: WAN bytes per inner
step against DDP's, the peak step against DiLoCo's (by the ranks' accounting, and by the leaders' NIC ports' counters sampled over the
run: the most bytes within a window of one step's compute, docs/diloco.md), wall-clock per step, with their
spread over repeats (printed, not asserted; benchmarks/measured.py's `diloco` figure publishes them).

    .venv/bin/python benchmarks/diloco.py [--nic-mbps 40,20,10,5] [--repeats 3] [--quantize 8]
                                          [--servers 2 --gpus 4] [--size 256KiB] [--steps 8 --h 4 --p 2]
                                          [--compute-s 0.4]

The papers' factors to hold the figures against: DiLoCo sends 1/H of DDP's bytes (its paper's H = 500 gives
1/500), Streaming DiLoCo's peak is 1/P of DiLoCo's and quantisation to b bits b/32 of float32's; with both the
Streaming DiLoCo paper reports about two orders of magnitude less bandwidth.
"""
import argparse
import statistics
import tempfile

from testbed import runner
from testbed.workloads.diloco_sites import server_sites_scenario


def scenario_of(args, mbps) -> dict:
    """One run's scenario: rail-optimized servers x gpus, each server a site, its first GPU the leader."""
    return server_sites_scenario("bench-diloco", args.servers, args.gpus, mbps, steps=args.steps, sync_every=args.h,
                                 fragments=args.p, size=args.size, quantize=args.quantize, compute_s=args.compute_s)


def one(args, mbps):
    out = runner.run(scenario_of(args, mbps), tempfile.mkdtemp(prefix="tb-bench-"), echo=lambda *a: None)
    w = out["workloads"][0]
    bad = [c["detail"] for c in out["checks"] if not c["ok"]]
    return {(v["variant"], v["quantize"]): v for v in w["variants"] if "replicas" in v}, bad


def defaults(**overrides) -> argparse.Namespace:
    """The command line's defaults, some replaced: one run's settings for another script (benchmarks/measured.py)."""
    return argparse.Namespace(**{**vars(parser().parse_args([])), **overrides})


def spread(xs):
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nic-mbps", default="40,20,10,5")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--size", default="256KiB")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--h", type=int, default=4)
    ap.add_argument("--p", type=int, default=2)
    ap.add_argument("--quantize", type=int, default=8, choices=(0, 4, 8))
    ap.add_argument("--compute-s", type=float, default=0.4)
    return ap


def main():
    args = parser().parse_args()
    print(f"{args.servers} sites x {args.gpus} GPUs, {args.size} float32, H={args.h}, P={args.p}, {args.steps} steps, "
          f"compute {args.compute_s} s/step, {args.repeats} repeats (median [min-max])\n")
    print(f"{'Mbit/s':>6} {'variant':<16} {'wire B/step / ddp':>22} {'peak / diloco':>22} "
          f"{'sampled peak / diloco':>22} {'s/step':>22} {'replicas':>9}")
    for mbps in map(float, args.nic_mbps.split(",")):
        runs, problems = [], []
        for _ in range(args.repeats):
            rows, bad = one(args, mbps)
            runs.append(rows)
            problems += bad
        for key in runs[0]:
            got = [r[key] for r in runs if key in r and ("ddp", 0) in r and ("diloco", 0) in r]
            rel = [g["wan_wire_bytes_per_step"] / r["ddp", 0]["wan_wire_bytes_per_step"] for g, r in zip(got, runs)]
            peak = [g["peak_wan_wire_bytes"] / r["diloco", 0]["peak_wan_wire_bytes"] for g, r in zip(got, runs)]
            sampled = [g["sampled_peak_wan_bytes"] / r["diloco", 0]["sampled_peak_wan_bytes"]
                       for g, r in zip(got, runs) if "sampled_peak_wan_bytes" in g]
            exact = all(not g["replicas"]["wrong"] and g["replicas"]["outer_agree"] for g in got)
            name = key[0] + (f" {key[1]}-bit" if key[1] else "")
            print(f"{mbps:>6g} {name:<16} {spread(rel):>22} {spread(peak):>22} "
                  f"{spread(sampled) if sampled else '-':>22} {spread([g['step_s'] for g in got]):>22} {'exact' if exact else 'DIFFER':>9}")
        for p in sorted(set(problems)):
            print(f"       failed check: {p}")


if __name__ == "__main__":
    main()
