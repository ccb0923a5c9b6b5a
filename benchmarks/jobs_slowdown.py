"""Benchmark: two jobs' slowdowns per routing mode on scenarios/concurrent_rings.yaml (printed, not asserted).

    .venv/bin/python benchmarks/jobs_slowdown.py [--modes single,ecmp,spray,split:4] [--repeats 3]

Each run times both jobs alone, then together; a line per run, then per mode the median slowdown with its
range over the runs, and the 1-minute load average each run started at (a 2-core machine's neighbours move
these figures). `retx`/`timeouts`: RC retransmissions and timer expiries of the job's ranks, alone / together:
a slowdown far from the others usually comes with them.
"""
import argparse
import os
import statistics
import tempfile

from testbed import runner, scenario


def retx(result: dict | None) -> str:
    rows = (result or {}).get("rows") or []
    return f"{sum(r['retransmits'] for r in rows)}/{sum(r['transport'].get('timeouts', 0) for r in rows)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="single,ecmp,spray,split:4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scenario", default="scenarios/concurrent_rings.yaml")
    args = ap.parse_args()
    print(f"{'mode':<9} {'run':>3} {'load':>5} {'job':<8} {'alone s':>8} {'together s':>10} {'slowdown':>8} "
          f"{'retx/timeouts alone':>19} {'together':>9} ok")
    slowdowns: dict[str, list[float]] = {}
    loads: dict[str, list[float]] = {}
    for mode in args.modes.split(","):
        for run in range(args.repeats):
            load = os.getloadavg()[0]
            loads.setdefault(mode, []).append(load)
            doc = scenario.load(args.scenario, [f"routing.mode={mode}"])
            out = runner.run(doc, tempfile.mkdtemp(prefix="tb-concurrent-"), echo=lambda *a: None)
            for w in out["workloads"]:
                for j in w.get("jobs", []):
                    if j["slowdown"] is not None:
                        slowdowns.setdefault(mode, []).append(j["slowdown"])
                    print(f"{mode:<9} {run:>3} {load:>5.2f} {j['job']:<8} {j['seconds_alone'] or 0:>8.3f} "
                          f"{j['seconds_together'] or 0:>10.3f} {j['slowdown'] or 0:>8.2f} "
                          f"{retx(j['alone']):>19} {retx(j['together']):>9} {'yes' if j['ok'] else 'NO'}")
            for c in out["checks"]:
                if not c["ok"]:
                    print(f"{mode:<9} FAILED {c['name']}: {c['detail']}")
            if any(c["name"] == "interrupted" for c in out["checks"]):
                return                                 # Ctrl-C / SIGTERM ends the whole comparison
    print(f"\n{'mode':<9} {'slowdown median':>15} {'[min-max]':>13} {'jobs x runs':>11} {'load':>11}")
    for mode, values in slowdowns.items():
        print(f"{mode:<9} {statistics.median(values):>15.2f} {f'[{min(values):.2f}-{max(values):.2f}]':>13} "
              f"{len(values):>11} {f'{min(loads[mode]):.1f}-{max(loads[mode]):.1f}':>11}")


if __name__ == "__main__":
    main()
