"""The `testbed` command line.

    testbed topo KIND --servers N --gpus K [--spines S] [--spares-per-server P] [--spare-servers M] [--json]
                 [--draw FILE.svg]
    testbed run SCENARIO.yaml [--set key=value ...] [--out DIR]     (or --again RESULTS_DIR)
    testbed ls [RESULTS_ROOT]                           past runs: outcome and best figures
    testbed compare RESULTS_DIR_A RESULTS_DIR_B         two runs' measurements side by side
    testbed clean
    testbed pcap summarize FILE [--json]
    testbed fault TARGET down|up|crash|hang|resume      (into the fabric a run has up)
    testbed plan --gpus G --hb-size K --radix R [--kind ...] [--predict] [--json]   (see testbed/cli/plan.py)

Exit status: 0 success; 1 a check failed; 2 bad input (one line on stderr naming the problem);
130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from testbed.fabric import topo

EXIT_FAILED, EXIT_USAGE = 1, 2


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit status 2 (its own default too)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def cmd_topo(args) -> int:
    fabric = topo.build(args.kind, args.servers, args.gpus, spines=args.spines,
                        oversubscription=args.oversubscription, nic_mbps=args.nic_mbps,
                        hb_mbps=args.hb_mbps, cpu_hosts=args.cpu_hosts,
                        spares_per_server=args.spares_per_server, spare_servers=args.spare_servers)
    if args.draw:
        from testbed.results import draw
        try:
            print(f"drawn: {draw.draw(fabric, args.draw)}")
        except draw.DrawError as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"--draw {args.draw}: {exc.strerror}") from None
    if args.json:
        print(json.dumps(fabric.to_json()))
        return 0
    c = fabric.counts()
    print(f"{fabric.kind}: {c['servers']} servers x {c['gpus_per_server']} GPUs, "
          f"{c['switches']} switches, {c['hosts']} hosts, {c['links']} links")
    for sw in fabric.switches.values():
        ports = [l for l in fabric.links if sw.name in (l.a, l.b)]
        print(f"  {sw.name:<8} {sw.kind:<8} {len(ports):>3} ports")
    return 0


def cmd_run(args) -> int:
    from testbed import runner, scenario   # heavy imports only when running
    from testbed.results import runs
    if bool(args.again) == bool(args.scenario):
        raise UsageError("give a scenario file, or --again RESULTS_DIR to run a past run's scenario again")
    try:
        path = runs.scenario_of(args.again) if args.again else args.scenario
    except runs.RunsError as exc:
        raise UsageError(str(exc)) from None
    doc = scenario.load(path, args.set or [])
    fabric = runner.fabric_of(doc)                  # validates sizes before anything is touched
    runner.check(doc, fabric)
    for warning in runner.warnings(doc, fabric):
        print(f"warning: {warning}", file=sys.stderr)
    if os.geteuid() != 0:
        raise UsageError("`testbed run` needs root (namespaces, Open vSwitch); try sudo")
    from testbed.fabric import ovs
    ovs.require_running()
    if doc.get("hosts") == "docker":
        from testbed.fabric.hosts.dockerhost import DockerUnavailable, engine
        try:
            engine()
        except DockerUnavailable as exc:
            raise UsageError(str(exc)) from None
    del fabric
    out = args.out or runner.default_out_dir(doc)
    results = runner.run(doc, out)
    print(runner.summary_table(results))
    print(f"\nresults: {os.path.join(out, 'results.json')}")
    print(f"report:  {os.path.join(out, 'summary.md')}" +
          (f", plots in {os.path.join(out, 'plots')}" if len(results.get("report", [])) > 1 else ""))
    if results.get("captures"):
        print(f"pcaps:   {os.path.join(out, 'pcaps')} (testbed pcap summarize FILE)")
    if any(c["name"] == "interrupted" for c in results["checks"]):
        return 130
    return 0 if results["ok"] else EXIT_FAILED


def cmd_clean(args) -> int:
    from testbed import clean
    removed = clean.clean()
    print("removed: " + ", ".join(f"{v} {k}" for k, v in removed.items()))
    return 0


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="testbed", description="Emulation testbed for AI-training networks")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    t = sub.add_parser("topo", help="print a fabric's switches, hosts and links (no root needed)")
    t.add_argument("kind", help="rail-only | rail-optimized | clos")
    t.add_argument("--servers", type=int, required=True)
    t.add_argument("--gpus", type=int, required=True, help="GPUs per server (= rails)")
    t.add_argument("--spines", type=int, default=2)
    t.add_argument("--oversubscription", type=float, default=1.0)
    t.add_argument("--nic-mbps", type=float, default=5.0)
    t.add_argument("--hb-mbps", type=float, default=None, help="default 9 x NIC")
    t.add_argument("--cpu-hosts", type=int, default=0)
    t.add_argument("--spares-per-server", type=int, default=0, help="idle spare GPUs per HB domain")
    t.add_argument("--spare-servers", type=int, default=0, help="idle spare servers")
    t.add_argument("--json", action="store_true")
    t.add_argument("--draw", metavar="FILE", help="also draw the fabric into FILE (.svg, .png or .pdf)")
    t.set_defaults(func=cmd_topo)

    r = sub.add_parser("run", help="run a scenario and write results.json")
    r.add_argument("scenario", nargs="?")
    r.add_argument("--again", metavar="RESULTS_DIR", help="run the scenario a results folder ran (its scenario.yaml)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a scenario value, e.g. fabric.servers=4 or workloads.0.size=2MiB")
    r.add_argument("--out", help="output directory (default results/<scenario>/<timestamp>)")
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("clean", help="remove everything the testbed left behind")
    c.set_defaults(func=cmd_clean)

    from testbed.runtime import handfaults    # fault, pcap summarize, plan, ls / compare
    from testbed.results import pcap, runs
    from testbed.cli import plan
    handfaults.register(sub)
    pcap.register(sub)
    plan.register(sub)
    runs.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from testbed.runtime.handfaults import HandFaultError
    from testbed.results.pcap import PcapError
    from testbed.results.runs import RunsError
    from testbed.scenario import ScenarioError
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (topo.TopologyError, ScenarioError, UsageError, PcapError, HandFaultError, RunsError) as exc:
        print(f"testbed {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:   # e.g. OVS not running: one line, not a traceback
        print(f"testbed {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
