"""Benchmark: how much jobs on one fabric slow each other down, per figure (printed, not asserted).

    .venv/bin/python benchmarks/jobs_slowdown.py [--figure rings|tiling|multicast|all] [--repeats 3]
    .venv/bin/python benchmarks/jobs_slowdown.py --figure rings --modes single,ecmp,spray,split:4

Figures (docs/concurrent.md), each a scenario run under a few variants:
    rings      scenarios/concurrent_rings.yaml: two ring AllReduce jobs sharing the spine uplinks of a 1:1
               rail-optimized fabric, per routing mode (--modes)
    tiling     scenarios/concurrent_tiling.yaml: two 4-GPU rings tiled on rail-aligned blocks of rail-only, against
               a poor placement (each job across the rails of two servers), which only rail-optimized can run
    multicast  scenarios/concurrent_multicast.yaml: multicast AllGather against the rank-order and the rail-aware
               ring AllGather, while a UDP permutation loads the spines

Each run times every job alone, then all together; a line per job and run, then per variant and job the median
slowdown with its range over the runs, and the 1-minute load average the runs started at (a 2-core machine's
neighbours move these figures). `retx`/`timeouts`: RC retransmissions and timer expiries of a collective job's
ranks, alone / together: a slowdown far from the others usually comes with them.
"""
import argparse
import os
import statistics
import tempfile

from testbed import runner, scenario
from testbed.scenario.schema import ScenarioError

POOR = ["workloads.0.jobs.0.placement={hosts: [s0g0, s0g1, s1g2, s1g3]}",
        "workloads.0.jobs.1.placement={hosts: [s0g2, s0g3, s1g0, s1g1]}"]
RAIL_OPTIMIZED = ["fabric.kind=rail-optimized", "fabric.spines=2", "fabric.oversubscription=1"]


def figures(modes: list[str]) -> dict[str, list[tuple[str, str, list[str]]]]:
    """figure -> [(variant, scenario file, --set overrides)]."""
    return {
        "rings": [(mode, "scenarios/concurrent_rings.yaml", [f"routing.mode={mode}"]) for mode in modes],
        "tiling": [("rail-only aligned", "scenarios/concurrent_tiling.yaml", []),
                   ("rail-opt aligned", "scenarios/concurrent_tiling.yaml", RAIL_OPTIMIZED),
                   ("rail-only poor", "scenarios/concurrent_tiling.yaml", POOR),
                   ("rail-opt poor", "scenarios/concurrent_tiling.yaml", RAIL_OPTIMIZED + POOR)],
        "multicast": [("multicast", "scenarios/concurrent_multicast.yaml", []),
                      ("ring rank", "scenarios/concurrent_multicast.yaml",
                       ["workloads.0.jobs.0.algo=ring", "workloads.0.jobs.0.ring=rank"]),
                      ("ring rail", "scenarios/concurrent_multicast.yaml", ["workloads.0.jobs.0.algo=ring"])],
    }


def retx(result: dict | None) -> str:
    rows = (result or {}).get("rows") or []
    if not rows or "retransmits" not in rows[0]:
        return "-"
    return f"{sum(r['retransmits'] for r in rows)}/{sum(r['transport'].get('timeouts', 0) for r in rows)}"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]" if values else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--figure", default="rings", choices=["rings", "tiling", "multicast", "all"])
    ap.add_argument("--modes", default="single,ecmp,spray,split:4", help="routing modes of the rings figure")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    table = figures(args.modes.split(","))
    chosen = list(table) if args.figure == "all" else [args.figure]
    print(f"{'variant':<18} {'run':>3} {'load':>5} {'job':<8} {'alone s':>8} {'together s':>10} {'slowdown':>8} "
          f"{'retx/timeouts alone':>19} {'together':>9} ok")
    figures_seen: dict[tuple, dict[str, list[float]]] = {}     # (variant, job) -> figure -> values
    loads: dict[str, list[float]] = {}
    for variant, path, overrides in [v for f in chosen for v in table[f]]:
        for run in range(args.repeats):
            try:
                doc = scenario.load(path, overrides)
                fabric = runner.fabric_of(doc)
                runner.check(doc, fabric)
            except ScenarioError as exc:          # a placement the fabric cannot run: say so once
                print(f"{variant:<18} refused: {exc}")
                break
            load = os.getloadavg()[0]
            loads.setdefault(variant, []).append(load)
            out = runner.run(doc, tempfile.mkdtemp(prefix="tb-concurrent-"), echo=lambda *a: None)
            for w in out["workloads"]:
                for j in w.get("jobs", []):
                    seen = figures_seen.setdefault((variant, j["job"]), {"slowdown": [], "alone": [], "together": []})
                    for key, value in (("slowdown", j["slowdown"]), ("alone", j["seconds_alone"]),
                                       ("together", j["seconds_together"])):
                        if value is not None:
                            seen[key].append(value)
                    print(f"{variant:<18} {run:>3} {load:>5.2f} {j['job']:<8} {j['seconds_alone'] or 0:>8.3f} "
                          f"{j['seconds_together'] or 0:>10.3f} {j['slowdown'] or 0:>8.2f} "
                          f"{retx(j['alone']):>19} {retx(j['together']):>9} {'yes' if j['ok'] else 'NO'}")
            for c in out["checks"]:
                if not c["ok"]:
                    print(f"{variant:<18} FAILED {c['name']}: {c['detail']}")
            if any(c["name"] == "interrupted" for c in out["checks"]):
                return                                 # Ctrl-C / SIGTERM ends the whole comparison
    print(f"\n{'variant':<18} {'job':<8} {'slowdown median [min-max]':>26} {'alone s':>19} {'together s':>19} "
          f"{'runs':>4} {'load':>9}")
    for (variant, job), seen in figures_seen.items():
        print(f"{variant:<18} {job:<8} {spread(seen['slowdown']):>26} {spread(seen['alone']):>19} "
              f"{spread(seen['together']):>19} {len(seen['together']):>4} "
              f"{f'{min(loads[variant]):.1f}-{max(loads[variant]):.1f}':>9}")


if __name__ == "__main__":
    main()
