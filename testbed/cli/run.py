"""`testbed run SCENARIO.yaml [--set k=v] [--out DIR] [-q|-v|--debug]` (or `--again RESULTS_DIR`): run a scenario,
write its results. While it runs: the workload, its step, elapsed time and ETA, faults, nccl-tests rows as they
are measured (testbed/runtime/progress.py); -q prints the final summary and errors alone."""
from __future__ import annotations

import os
import sys

from testbed.cli import verbosity
from testbed.cli.errors import EXIT_FAILED, UsageError, require_machine


def cmd_run(args) -> int:
    from testbed import runner, scenario  # heavy imports only when running
    from testbed.results import runs
    from testbed.runtime import progress
    level = verbosity.level(args)
    if bool(args.again) == bool(args.scenario):
        raise UsageError("give a scenario file, or --again RESULTS_DIR to run a past run's scenario again")
    try:
        path = runs.scenario_of(args.again) if args.again else args.scenario
    except runs.RunsError as exc:
        raise UsageError(str(exc)) from None
    if args.dry_run:                                # the checks alone, and what would run (testbed/cli/validate.py)
        from testbed.cli import validate
        return validate.dry_run(path, args.set or [])
    doc = scenario.load(path, args.set or [])
    fabric = runner.fabric_of(doc)                  # validates sizes before anything is touched
    runner.check(doc, fabric)
    for warning in runner.warnings(doc, fabric):
        print(f"warning: {warning}", file=sys.stderr)
    require_machine(doc, "run")
    del fabric
    out = args.out or runner.default_out_dir(doc)
    report = progress.Progress(level)
    try:
        results = runner.run(doc, out, report=report)
    finally:
        report.done()                 # the status line goes before the summary (or a traceback)
    if level > progress.QUIET:
        print()
    print(runner.summary_table(results))
    print(f"\nresults: {os.path.join(out, 'results.json')}")
    print(f"report:  {os.path.join(out, 'summary.md')}" +
          (f", plots in {os.path.join(out, 'plots')}" if len(results.get("report", [])) > 1 else ""))
    if results.get("captures"):
        print(f"pcaps:   {os.path.join(out, 'pcaps')} (testbed pcap summarize FILE)")
    if any(c["name"] == "interrupted" for c in results["checks"]):
        return 130
    return 0 if results["ok"] else EXIT_FAILED


def register(subparsers) -> None:
    r = subparsers.add_parser("run", help="run a scenario and write results.json")
    r.add_argument("scenario", nargs="?")
    r.add_argument("--again", metavar="RESULTS_DIR", help="run the scenario a results folder ran (its scenario.yaml)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a scenario value, e.g. fabric.servers=4 or workloads.0.size=2MiB")
    r.add_argument("--out", help="output directory (default results/<scenario>/<timestamp>)")
    r.add_argument("--dry-run", action="store_true", help="check the scenario and say what would run; no root needed")
    verbosity.add_flags(r, verb=True)
    r.set_defaults(func=cmd_run)
