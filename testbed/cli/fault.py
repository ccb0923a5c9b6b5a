"""`testbed fault TARGET ACTION`: a fault injected by hand into the fabric a run has up."""
from __future__ import annotations

import signal

from testbed.runtime import faults
from testbed.runtime.handfaults import HandFaultError, running_fabric


def register(subparsers) -> None:
    p = subparsers.add_parser("fault", help="inject a fault by hand into the running fabric")
    p.add_argument("target", help="rail0-spine1 | HOST/nic | HOST/hb | path:SRC>DST | SWITCH | GPU host")
    p.add_argument("action", choices=("down", "up", "crash", "hang", "stall", "resume", "declare"),
                   help="down/up for links and switches; for a GPU host's processes: crash, hang (all of it "
                        "stops), stall (its rank blocks at its next kernel, its heartbeats go on), resume, "
                        "declare (declared failed)")
    p.set_defaults(func=run)


def run(args) -> int:
    net = running_fabric()
    if args.action in ("down", "up"):
        try:
            rec = faults.inject(net, args.target, up=args.action == "up")
        except faults.FaultError as exc:
            raise HandFaultError(str(exc)) from None
        print(f"{args.target}: {args.action} ({rec['links']} links)")
        return 0
    sig = {"crash": signal.SIGKILL, "hang": signal.SIGSTOP, "stall": signal.SIGUSR2, "resume": signal.SIGCONT,
           "declare": signal.SIGUSR1}[args.action]
    try:
        hosts = faults.gpu_hosts(net.fabric, "gpu-crash", args.target)
    except faults.FaultError as exc:
        raise HandFaultError(str(exc)) from None
    print(f"{args.target}: {args.action}, {faults.signal_gpus(net, hosts, sig)} processes signalled")
    return 0
