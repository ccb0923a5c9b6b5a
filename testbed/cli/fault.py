"""`testbed fault TARGET ACTION`: a fault injected by hand into the fabric a run has up; each action is a
fault kind's (testbed.faults.HAND)."""
from __future__ import annotations

from testbed.faults import HAND, FaultError
from testbed.faults.running import HandFaultError, running_fabric


def register(subparsers) -> None:
    p = subparsers.add_parser("fault", help="inject a fault by hand into the running fabric")
    p.add_argument("target", help="rail0-spine1 | HOST/nic | HOST/hb | path:SRC>DST | SWITCH | GPU host")
    p.add_argument("action", choices=tuple(HAND),
                   help="down/up for links and switches; for a GPU host's processes: crash, hang (all of it "
                        "stops), stall (its rank blocks at its next kernel, its heartbeats go on), resume, "
                        "declare (declared failed)")
    p.set_defaults(func=run)


def run(args) -> int:
    net = running_fabric()
    kind, up = HAND[args.action]
    fault = {"kind": kind.name, "target": args.target}
    try:
        kind.check(net.fabric, fault)
        rec = kind.inject(net, fault, up)
    except FaultError as exc:
        raise HandFaultError(str(exc)) from None
    if "processes" in rec:
        print(f"{args.target}: {args.action}, {rec['processes']} processes signalled")
    else:
        print(f"{args.target}: {args.action} ({rec['links']} links)")
    return 0
