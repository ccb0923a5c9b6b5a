"""Benchmark: a job under churn for 10 minutes (scenarios/churn.yaml): seeded GPU crashes, hangs, stalls and NIC
cuts, each GPU back 3-8 s later, a ring AllReduce with a shared state running throughout (printed).

    .venv/bin/python benchmarks/churn.py [--duration 600] [--seed 1] [--max-down 2] [--out results/churn]

Runs the scenario through `testbed run`'s runner (results.json, the report and plots in --out) and prints the
steps completed and lost, the failures and rejoins, the time in recovery and in growing, and the divergence of
the ranks' states from numpy's (must be 0), then one line per fault: when it struck, when the job noticed (or
admitted the GPU back), when it had re-formed, and when its first step after that completed.
Exit status 0 if every check passed.
"""
import argparse
import os
import sys
import time

import yaml

from testbed import runner
from testbed.fabric.links import NIC_MTU

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(duration: float, seed: int, max_down: int, nic_mtu: int, out: str) -> dict:
    """scenarios/churn.yaml for `duration` seconds with `seed`: the runner's results."""
    with open(os.path.join(ROOT, "scenarios", "churn.yaml")) as f:
        doc = yaml.safe_load(f)
    doc["fabric"]["nic_mtu"] = nic_mtu
    doc["workloads"][0].update(duration_s=duration, seed=seed, max_down=max_down)
    runner.check(doc, runner.fabric_of(doc))
    return runner.run(doc, out, echo=lambda *a: None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-down", type=int, default=2)
    ap.add_argument("--nic-mtu", type=int, default=NIC_MTU, help="9000: jumbo frames, RoCE MTU 4096; 1500: RoCE 1024")
    ap.add_argument("--out", default=os.path.join("results", "churn", time.strftime("%Y%m%d-%H%M%S")))
    args = ap.parse_args()
    t0 = time.monotonic()
    r = run(args.duration, args.seed, args.max_down, args.nic_mtu, args.out)
    w = r["workloads"][0]
    d = w["divergence"] or {}
    print(f"churn: {args.duration:g} s, seed {args.seed}, {w['ranks']} ranks, wall {time.monotonic() - t0:.0f} s")
    print(f"steps completed {w['steps_completed']}, lost {w['steps_lost']}; failures {w['failures']}, rejoins "
          f"{w['rejoins']}; in recovery {w['recovery_s']:.1f} s, growing {w['rejoin_s']:.1f} s; divergence "
          f"{d.get('divergent')} (of {d.get('steps')} steps on {d.get('ranks')} ranks, "
          f"{d.get('sync_mismatches')} mismatched copies, {d.get('synced')} copies sent)")
    for e in w["events"]:
        print(f"  {e['kind']:<12} {e['target']:<6} at {e['at_s']!s:>8}  noticed {e.get('detected_s')!s:>8}  "
              f"re-formed {e.get('recovered_s')!s:>8}  first step {e.get('first_success_s')!s:>8}")
    for c in r["checks"]:
        print(f"[{'PASS' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
