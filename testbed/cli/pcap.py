"""`testbed pcap summarize FILE [--json]`: what a capture holds (RoCE opcodes, retransmissions, truncated
packets, ICRC, CNPs and ECN marks, multicast copies, flows)."""
from __future__ import annotations

import json

from testbed.monitor.pcap import format_summary, summarize


def register(subparsers) -> None:
    p = subparsers.add_parser("pcap", help="inspect packet captures")
    sub = p.add_subparsers(dest="pcap_command", required=True, parser_class=type(p))
    s = sub.add_parser("summarize", help="per-opcode counts, retransmissions, CNPs, multicast copies and flows")
    s.add_argument("file")
    s.add_argument("--json", action="store_true")
    s.add_argument("--no-icrc", action="store_true", help="skip the ICRC check (faster on big files)")
    s.set_defaults(func=run)


def run(args) -> int:
    summary = summarize(args.file, check_icrc=not args.no_icrc)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
