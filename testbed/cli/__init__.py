"""The `testbed` command line.

    testbed topo KIND --servers N --gpus K [--spines S] [--spares-per-server P] [--spare-servers M] [--json]
                 [--draw FILE.svg]
    testbed run SCENARIO.yaml [--set key=value ...] [--out DIR]     (or --again RESULTS_DIR)
    testbed ls [RESULTS_ROOT]                           past runs: outcome and best figures
    testbed compare RESULTS_DIR_A RESULTS_DIR_B         two runs' measurements side by side
    testbed clean
    testbed pcap summarize FILE [--json]
    testbed fault TARGET down|up|crash|hang|stall|resume|declare   (into the fabric a run has up)
    testbed up SCENARIO | --topo KIND[,KEY=VALUE...] [--cli]   a fabric kept up (see testbed/cli/up.py)
    testbed status [--json] | exec HOST -- CMD | shell HOST | cli | down      (on the fabric that is up)
    testbed plan --gpus G --hb-size K --radix R [--kind ...] [--predict] [--json]   (see testbed/cli/plan.py)
    testbed paper NAME [--quick] [--out DIR] | --list   a seed paper's claims beside its figures

Before the verb (and after `run`): -q (only the final summary and errors), -v (every stage), --debug (-v, full
tracebacks of unexpected errors, DEBUG logging); see testbed/cli/verbosity.py.

Exit status: 0 success; 1 a check failed; 2 bad input (one line on stderr naming the problem);
130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
import traceback

from testbed.cli import clean, console, down, fault, paper, pcap, plan, run, runs, shell, status, topo, up, validate
from testbed.cli.errors import EXIT_FAILED, EXIT_USAGE, Parser, UsageError
from testbed.cli.verbosity import add_flags as add_output_flags, configure as configure_output
from testbed.fabric.topo import TopologyError

# each module adds its own subcommand(s)
VERBS = (topo, run, runs, clean, fault, pcap, plan, paper, up, status, shell, console, down, validate)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="testbed", description="Emulation testbed for AI-training networks")
    add_output_flags(p)
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for verb in VERBS:
        verb.register(sub)
    return p


def check_fabric_tag() -> None:
    """A bad TESTBED_FABRIC_TAG is bad input to every command: one line and exit 2, before anything runs."""
    from testbed.fabric.links import fabric_tag
    try:
        fabric_tag()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    from testbed.fabric.delay import DelayUnavailable
    from testbed.fabric.ecn import EcnUnavailable
    from testbed.fabric.pfc import PfcUnavailable
    from testbed.monitor.pcap import PcapError
    from testbed.results.runs import RunsError
    from testbed.faults.running import HandFaultError
    from testbed.scenario.schema import ScenarioError
    from testbed.runtime.pace import PaceError
    args = parser().parse_args(argv)
    try:
        configure_output(args)
        check_fabric_tag()
        return args.func(args)
    except (TopologyError, ScenarioError, UsageError, PcapError, HandFaultError, RunsError, DelayUnavailable,
            EcnUnavailable, PfcUnavailable, PaceError) as exc:
        print(f"testbed {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:   # e.g. OVS not running: one line, not a traceback (unless --debug)
        if args.debug:
            traceback.print_exc()
        print(f"testbed {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
