"""`testbed paper NAME [--quick] [--out DIR]`: a seed paper's claims reproduced, each beside the paper's figure
(testbed/papers/); `testbed paper --list` names the papers.

Writes paper.md, paper.html and paper.json in DIR (default results/paper-NAME/<time>/) and prints the table.
Exit status 0 when every claim ran (whatever its verdict: a claim that differs is a finding, said with its
reason), 1 when a run failed, 2 for an unknown paper.
"""
from __future__ import annotations

import os
import sys
import time

from testbed.cli.errors import EXIT_FAILED, UsageError


def register(subparsers) -> None:
    p = subparsers.add_parser("paper", help="reproduce a seed paper's claims beside its figures (--list: which)")
    p.add_argument("name", nargs="?", help="the paper (testbed paper --list)")
    p.add_argument("--list", action="store_true", help="name the papers and what each reproduces")
    p.add_argument("--quick", action="store_true", help="smaller runs, one of each (minutes, not an hour)")
    p.add_argument("--out", help="the report's folder (default results/paper-NAME/<time>)")
    p.set_defaults(func=cmd_paper)


def cmd_paper(args) -> int:
    from testbed import papers
    if args.list or not args.name:
        if not args.list:
            raise UsageError("name a paper, or --list")
        for name in papers.PAPERS:
            print(f"{name:<12} {papers.module(name).TITLE}")
        return 0
    try:
        module = papers.module(args.name)
    except papers.PaperError as exc:
        raise UsageError(str(exc)) from None
    if hasattr(module, "missing") and (problem := module.missing()):    # an optional extra the paper needs
        raise UsageError(problem)
    if os.geteuid() != 0:
        raise UsageError("`testbed paper` brings fabrics up: it needs root (namespaces, Open vSwitch); try sudo")
    from testbed.fabric import ovs
    ovs.require_running()
    from testbed.papers import report
    out = args.out or os.path.join("results", f"paper-{args.name}", time.strftime("%Y%m%d-%H%M%S"))
    try:
        claims = module.claims(args.quick, os.path.join(out, "runs"), echo=lambda line: print(line, flush=True))
    except RuntimeError as exc:
        print(f"testbed paper {args.name}: a run failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    written = report.write(module, claims, args.quick, out)
    with open(written[1]) as f:
        print(f.read())
    print("report: " + ", ".join(written))
    return 0
