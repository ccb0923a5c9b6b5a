"""`testbed up SCENARIO | --topo KIND[,KEY=VALUE...]`: bring a fabric up and keep it until `testbed down`.

The fabric is owned by a small detached process (this command with --foreground), which holds the machine's
fabric lock and the Mininet objects, records `live` in its run's state file, and tears everything down on
SIGTERM (what `testbed down` sends). `up` returns once the routes are installed; `up --cli` opens the console
on the fabric and takes it down when the console exits.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from testbed import RUN_ROOT
from testbed.cli.errors import EXIT_FAILED, UsageError, require_machine
from testbed.fabric import params
from testbed.fabric.links import fabric_tag


def log_path() -> str:
    """The fabric process's output, under RUN_ROOT (its run directory goes with the fabric); one per fabric tag."""
    return os.path.join(RUN_ROOT, f"up{fabric_tag()}.log")


def register(subparsers) -> None:
    p = subparsers.add_parser("up", help="bring a fabric up and keep it (until `testbed down`)")
    p.add_argument("scenario", nargs="?", help="a scenario file: its fabric, routing and hosts (not its workloads)")
    p.add_argument("--topo", metavar="KIND[,KEY=VALUE...]",
                   help="a fabric without a scenario, e.g. rail-optimized,servers=2,gpus=2,spines=1 "
                        f"(keys: {', '.join(params.shown_topo_keys())})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario value")
    p.add_argument("--routing", help="routing mode (single, ecmp, spray, rr, split:K); default the scenario's or ecmp")
    p.add_argument("--hosts", help="host backend: netns (default) or docker")
    p.add_argument("--cli", action="store_true", help="open the console on the fabric; exiting it takes it down")
    p.add_argument("--foreground", action="store_true",
                   help="keep the fabric in this process until Ctrl-C or `testbed down`")
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)     # the detached process reports on it
    p.set_defaults(func=cmd_up)


def topo_doc(spec: str) -> dict:
    """A scenario document for --topo KIND[,KEY=VALUE...] (validated as a scenario's fabric is)."""
    import yaml
    kind, *pairs = [part.strip() for part in spec.split(",")]
    fabric: dict = {"kind": kind}
    keys = params.topo_keys()
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key.strip().replace("-", "_") not in keys:
            raise UsageError(f"--topo: {pair!r}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(params.shown_topo_keys())}")
        try:
            fabric[keys[key.strip().replace("-", "_")]] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise UsageError(f"--topo: {pair!r}: not a number") from None
    return {"name": "live", "fabric": fabric, "workloads": [{"type": "connectivity"}]}


def scenario_of(args) -> dict:
    """The validated scenario document the fabric comes from, with --routing and --hosts applied."""
    from testbed import scenario
    if bool(args.scenario) == bool(args.topo):
        raise UsageError("give a scenario file or --topo KIND[,KEY=VALUE...] (one of them)")
    if args.topo:
        if args.set:
            raise UsageError("--set overrides a scenario's values; with --topo give them as KEY=VALUE")
        doc = topo_doc(args.topo)
        try:
            scenario.validate(doc)
        except scenario.ScenarioError as exc:
            raise UsageError(f"--topo {args.topo}: {exc}") from None
    else:
        doc = scenario.load(args.scenario, args.set or [])
    if args.routing:
        doc.setdefault("routing", {})["mode"] = args.routing
    if args.hosts:
        doc["hosts"] = args.hosts
    if doc.get("machines"):
        raise UsageError("a live fabric runs on this machine only; `testbed run` spreads a scenario over its machines")
    return scenario.validate(doc)


def source_of(args) -> str:
    return f"--topo {args.topo}" if args.topo else os.path.abspath(args.scenario)


def cmd_up(args) -> int:
    from testbed import runner
    doc = scenario_of(args)
    fabric = runner.fabric_of(doc)                  # sizes checked before anything is touched
    for key in params.ignored_params(fabric.kind, doc["fabric"]):
        print(f"warning: fabric.{key}: a {fabric.kind} fabric has no use for it; ignored", file=sys.stderr)
    if not fabric.params.faithful:
        print("warning: fabric.ideal_uplinks: the uplinks never limit; this fabric is not faithful", file=sys.stderr)
    for line in fabric.params.time_scaling():
        print(line)
    if any(l.delay_us for l in fabric.links):
        from testbed.fabric.delay import choose_path
        choose_path()               # DelayUnavailable (exit status 2) here, not from the detached process
    if fabric.params.ecn:
        from testbed.fabric import ecn
        ecn.require()               # likewise
    if fabric.params.pfc:
        from testbed.fabric import pfc
        for line in pfc.problems(fabric):
            raise pfc.PfcUnavailable(line)      # likewise
    _refuse_second_fabric()
    require_machine(doc, "up")
    if args.foreground:
        from testbed.cli import fabricd
        return fabricd.serve(doc, source_of(args), args.ready_fd)
    t0 = time.monotonic()
    try:
        report = _spawn(_child_argv(args))
    except FabricFailed as exc:
        print(f"testbed up: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    took = time.monotonic() - t0
    c = fabric.counts()
    print(f"fabric up: {fabric.kind} {c['servers']} servers x {c['gpus_per_server']} GPUs, {c['hosts']} hosts, "
          f"{c['switches']} switches, routing {doc.get('routing', {}).get('mode', 'ecmp')}, hosts "
          f"{doc.get('hosts', 'netns')}; up in {report['bring_up_s']:.1f} s ({took:.1f} s in all"
          + (f", {report['lock_wait_s']:.0f} s queued for the fabric lock" if report.get("lock_wait_s", 0) >= 1 else "")
          + f"), pid {report['pid']}")
    if not args.cli:
        print("testbed status | exec HOST -- CMD | shell HOST | cli | fault ... | down")
        return 0
    from testbed.cli import console, down
    try:
        console.run_console()
    finally:
        print(down.take_down())
    return 0


def _refuse_second_fabric() -> None:
    from testbed.fabric import runstate
    found = runstate.live_fabric()
    if found and "live" in found[1]:
        state = found[1]
        since = time.strftime("%H:%M:%S", time.localtime(state["live"]["since"]))
        raise UsageError(f"a fabric is already up (pid {state['owner_pid']}, since {since}, from "
                         f"{state['live']['source']}): `testbed down` first")


def _child_argv(args) -> list[str]:
    argv = [sys.executable, "-m", "testbed.cli", "up", "--foreground"]
    argv += ["--topo", args.topo] if args.topo else [os.path.abspath(args.scenario)]
    for assignment in args.set or []:
        argv += ["--set", assignment]
    for flag in ("routing", "hosts"):
        if getattr(args, flag):
            argv += [f"--{flag}", getattr(args, flag)]
    return argv


def _spawn(argv: list[str]) -> dict:
    """Start the fabric process detached (its own session: the terminal's Ctrl-C and hang-up do not reach it)
    and wait for its report on a pipe: {"ok", "pid", "bring_up_s"} or {"ok": false, "error"}."""
    os.makedirs(RUN_ROOT, exist_ok=True)
    read_end, write_end = os.pipe()
    with open(log_path(), "w") as log:
        proc = subprocess.Popen(argv + ["--ready-fd", str(write_end)], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, pass_fds=(write_end,), start_new_session=True,
                                cwd=os.getcwd())
    os.close(write_end)
    try:
        with os.fdopen(read_end) as pipe:
            line = pipe.readline()
    except KeyboardInterrupt:          # Ctrl-C while it comes up: it tears down what it made
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        raise
    report = json.loads(line) if line.strip() else {"ok": False, "error": _died(proc)}
    if not report["ok"]:
        proc.wait()
        raise FabricFailed(report["error"])
    return report


def _died(proc) -> str:
    status = proc.wait()
    try:
        with open(log_path()) as f:
            last = [line.strip() for line in f if line.strip()][-1:]
    except OSError:
        last = []
    return f"the fabric process exited with status {status}" + (f": {last[0]}" if last else "")


class FabricFailed(RuntimeError):
    """Bring-up failed; the fabric process has torn down what it made."""

