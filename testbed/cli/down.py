"""`testbed down`: tear down the fabric `testbed up` keeps (its process gets SIGTERM and tears it down).

If that process died without tearing down, `testbed clean` removes what it left (not done here: clean also takes
the testbed's named namespaces, which other tools of the machine may be using).
"""
from __future__ import annotations

import os
import signal
import time

from testbed.cli.errors import UsageError
from testbed.cli.live import require_root
from testbed.runtime.launch import process_state


def register(subparsers) -> None:
    p = subparsers.add_parser("down", help="tear down the fabric `testbed up` brought up")
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for the teardown (default 300)")
    p.set_defaults(func=cmd_down)


def cmd_down(args) -> int:
    print(take_down(args.timeout))
    return 0


def take_down(timeout: float = 300) -> str:
    """Stop the live fabric; returns one line saying what happened."""
    from testbed.fabric import runstate
    found = runstate.live_fabric()
    if found is None:
        return _clean_after_crash()
    _, state = found
    pid = state["owner_pid"]
    if "live" not in state:
        raise UsageError(f"the fabric up belongs to a `testbed run` (pid {pid}), which takes it down itself")
    require_root("down")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    while os.path.exists(f"/proc/{pid}") and not _zombie(pid):
        if time.monotonic() - t0 > timeout:
            os.kill(pid, signal.SIGKILL)       # a stuck teardown: remove what is left by name
            time.sleep(0.5)
            raise UsageError(f"the fabric process (pid {pid}) did not finish within {timeout:g} s and was killed; "
                             "`testbed clean` removes what it left")
        time.sleep(0.2)
    return f"fabric down in {time.monotonic() - t0:.1f} s"


def _zombie(pid: int) -> bool:
    return process_state(pid) == "Z"


def _clean_after_crash() -> str:
    from testbed.fabric import runstate
    dead = [st["owner_pid"] for st in runstate.all_runs().values() if "live" in st and not runstate.alive(st)]
    if dead:
        raise UsageError(f"the fabric process (pid {dead[0]}) is gone without tearing down; "
                         "`testbed clean` removes what it left")
    raise UsageError("no fabric is up on this machine")
