"""`testbed ls [ROOT]` and `testbed compare A B`: past runs, their outcome and figures."""
from __future__ import annotations

import json
import os
import sys

from testbed.results.runs import (
    checks_passed,
    compare,
    find,
    headline,
    load,
    load_quietly,
    version_problem,
)


def cmd_ls(args) -> int:
    runs = find(args.root)
    if not runs:
        print(f"no runs under {args.root}")
        return 0
    print(f"{'started':<26} {'scenario':<22} {'ok':<4} {'checks':>7}  {'folder':<40} best figures")
    problems = []
    for d in runs:
        r = load_quietly(d)
        print(f"{r.get('started', '?'):<26} {r.get('scenario', '?'):<22} {('yes' if r.get('ok') else 'NO'):<4} "
              f"{checks_passed(r):>7}  {os.path.relpath(d):<40} {headline(r)}")
        if version_problem(r):
            problems.append(f"warning: {os.path.relpath(d)}: {version_problem(r)}")
    for line in problems:                 # after the table, which stays one line per run
        print(line, file=sys.stderr)
    return 0


def cmd_compare(args) -> int:
    a, b = load(args.a), load(args.b)
    print(f"A: {args.a} ({a.get('scenario')}, {a.get('started')})\nB: {args.b} ({b.get('scenario')}, {b.get('started')})")
    print("\n".join(compare(a, b)))
    ea, eb = (_env(d) for d in (args.a, args.b))
    differs = {k: (ea.get(k), eb.get(k)) for k in ("git_commit", "kernel", "openvswitch", "python", "cpus")
               if ea.get(k) != eb.get(k)}
    for k, (va, vb) in differs.items():
        print(f"environment differs: {k} {va} -> {vb}")
    return 0


def _env(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "environment.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def register(subparsers) -> None:
    p = subparsers.add_parser("ls", help="list past runs (results folders) with their outcome and best figures")
    p.add_argument("root", nargs="?", default="results", help="where to look (default: results)")
    p.set_defaults(func=cmd_ls)
    c = subparsers.add_parser("compare", help="two runs' measurements side by side, with B / A")
    c.add_argument("a", help="results folder A")
    c.add_argument("b", help="results folder B")
    c.set_defaults(func=cmd_compare)
