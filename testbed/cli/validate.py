"""Scenario authoring: files checked as `testbed run` checks them before bring-up (the schema, sizes, the
fabric, every workload's validate() and warnings(), faults, captures), with no root and nothing brought up;
and the scenario schema, for editors, or its reference page.

    testbed validate FILE...                  "FILE: ok" and its warnings, or "FILE:LINE:COLUMN: problem"
                                              lines on stderr and exit status 2
    testbed run --dry-run SCENARIO [--set k=v]   the same for one file, then what the run would do
    testbed schema [--markdown]               the JSON Schema (draft 7), or docs/scenario-reference.md
"""
from __future__ import annotations

import json
import sys

from testbed.cli.errors import EXIT_USAGE


def check(path: str, overrides: list[str] = ()) -> tuple[dict | None, object, list[str], list[str]]:
    """(scenario, fabric, errors, warnings), each error and warning one 'FILE:LINE:COLUMN: message' line.
    Every schema error is reported; past the schema, the first problem (later checks build on earlier ones)."""
    from testbed import runner, scenario
    from testbed.fabric.topo import TopologyError
    from testbed.scenario.marks import message_path
    from testbed.scenario.schema import ScenarioError
    try:
        doc, marks = scenario.read(path, overrides)
    except ScenarioError as exc:
        return None, None, [str(exc)], []
    found = [marks.located(e) for e in scenario.problems(doc)]
    if found:
        return None, None, [str(e) for e in sorted(found, key=lambda e: e.position)], []
    try:
        scenario.validate(doc)
        fabric = runner.fabric_of(doc)
        runner.check(doc, fabric)
        warnings = runner.warnings(doc, fabric)
    except TopologyError as exc:               # "servers must be between 1 and 200, got 500"
        key = str(exc).split()[0]
        where = ("fabric", key) if key in doc["fabric"] else ("fabric",)
        return None, None, [str(marks.located(ScenarioError(f"fabric.{exc}" if len(where) == 2 else f"fabric: {exc}",
                                                             where)))], []
    except ScenarioError as exc:
        return None, None, [str(marks.located(exc))], []
    return doc, fabric, [], [str(marks.located(ScenarioError(f"warning: {w}", message_path(w)))) for w in warnings]


def cmd_validate(args) -> int:
    status = 0
    for path in args.files:
        _, _, errors, warnings = check(path)
        for line in errors:
            print(line, file=sys.stderr)
        if errors:
            status = EXIT_USAGE
            continue
        print(f"{path}: ok")
        for line in warnings:
            print(line)
    return status


def dry_run(path: str, overrides: list[str]) -> int:
    """`testbed run --dry-run`: check the scenario as run would, and say what the run would do."""
    doc, fabric, errors, warnings = check(path, overrides)
    for line in errors + warnings:
        print(line, file=sys.stderr)
    if errors:
        return EXIT_USAGE
    print(f"{path}: ok (dry run: nothing brought up). `testbed run` would:")
    for line in plan(doc, fabric):
        print(f"  {line}")
    return 0


def _settings(spec: dict, leave=("type", "name")) -> str:
    """key=value for each setting, values as JSON unless a plain word."""
    return " ".join(f"{k}={v if isinstance(v, str) and ' ' not in v else json.dumps(v)}"
                    for k, v in spec.items() if k not in leave)


def plan(doc: dict, fabric) -> list[str]:
    """What a run of this (valid) scenario would bring up and run, a line each."""
    from testbed import runner
    from testbed.fabric import sites
    p, c = fabric.params, fabric.counts()
    spares = f", {p.spares_per_server} spare GPU(s) per server" if p.spares_per_server else ""
    spares += f", {p.spare_servers} spare server(s)" if p.spare_servers else ""
    routing = doc.get("routing", {})
    lines = [f"bring up {fabric.kind}: {c['servers']} servers x {c['gpus_per_server']} GPUs{spares}, "
             f"{p.spines} spines, {p.cpu_hosts} CPU hosts; {c['switches']} switches, {c['hosts']} hosts, "
             f"{c['links']} links; NIC {p.nic_mbps:g} Mbit/s, HB {p.hb_mbps:g} Mbit/s",
             f"route {routing.get('mode', 'ecmp')}, data-plane failover "
             f"{'on' if routing.get('failover', True) else 'off'}; hosts: {doc.get('hosts', 'netns')}"]
    lines[1:1] = ["  " + line for line in sites.describe(fabric)]
    for i, spec in enumerate(doc["workloads"]):
        label = spec.get("name", f"{spec['type']}#{i}")         # as the runner names it
        lines.append(f"workload {i + 1}: {label} ({spec['type']}) {_settings(spec)}")
    for f in doc.get("faults", []):
        start = f"{f['workload']} starts" if "workload" in f else "the workloads start"
        lines.append(f"fault {f['at']:g} s after {start}: {f['kind']} {f['target']} "
                     + _settings(f, ("at", "kind", "target", "workload")))
    for cap in doc.get("capture", []):
        lines.append(f"capture {cap['point']} " + _settings(cap, ("point",)))
    lines.append(f"write results to {runner.default_out_dir(doc)} (or --out)")
    return [line.rstrip() for line in lines]


def cmd_schema(args) -> int:
    from testbed import scenario
    from testbed.scenario import reference
    if args.markdown:
        print(reference.markdown(scenario.SCHEMA), end="")
    else:
        print(json.dumps(scenario.export(), indent=2))
    return 0


def register(subparsers) -> None:
    v = subparsers.add_parser("validate", help="check scenario files as `run` does before bring-up (no root)")
    v.add_argument("files", nargs="+", metavar="FILE")
    v.set_defaults(func=cmd_validate)
    s = subparsers.add_parser("schema", help="print the scenario JSON Schema (for editors), or --markdown its "
                                             "reference")
    s.add_argument("--markdown", action="store_true", help="the reference of every key (docs/scenario-reference.md)")
    s.set_defaults(func=cmd_schema)
