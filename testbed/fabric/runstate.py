"""The run's state file and the machine's fabric lock: the one module that reads and writes them.

Every live fabric has a run directory under RUN_ROOT holding `state.json`: who owns it (PID), which bridges,
host and switch PIDs, containers and controller PID it made. `testbed clean` reads it after a crash to remove
exactly those objects; `testbed fault`, `status`, `exec`, `shell`, `cli` and `down` read it to reach a running
fabric. A fabric that `testbed up` keeps also records `live`: since when, from what, its routing.
"""
from __future__ import annotations

import fcntl
import glob
import json
import os
import time

from testbed import RUN_ROOT
from testbed.fabric.links import fabric_tag

STATE_FILE = "state.json"


class FabricBusy(RuntimeError):
    pass


def record(run_dir: str, **items) -> None:
    """Merge items into the run's state file (owned by this process)."""
    path = os.path.join(run_dir, STATE_FILE)
    state = load(run_dir)
    state.update(items, owner_pid=os.getpid())
    with open(path, "w") as f:
        json.dump(state, f)


def load(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, STATE_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def all_runs() -> dict[str, dict]:
    """Run directory -> its state, for runs that have not torn themselves down."""
    states = {}
    for path in glob.glob(os.path.join(RUN_ROOT, "run-*", STATE_FILE)):
        state = load(os.path.dirname(path))
        if state:
            states[os.path.dirname(path)] = state
    return states


def alive(state: dict) -> bool:
    """Whether the run's own process still exists (then its objects are in use, not left behind)."""
    pid = state.get("owner_pid")
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"     # killed, not yet reaped: gone
    except (OSError, IndexError):
        return False


def live_fabrics() -> dict[str, tuple[str, dict]]:
    """Fabric tag -> (run directory, state) of every fabric up on this machine, whichever command brought it
    up (the lock allows one per tag)."""
    return {state.get("tag", ""): (run_dir, state) for run_dir, state in all_runs().items()
            if alive(state) and "fabric" in state}


def live_fabric() -> tuple[str, dict] | None:
    """(run directory, state) of the fabric up under this process's fabric tag, or None."""
    return live_fabrics().get(fabric_tag())


def lock_path() -> str:
    """The lock file of this process's fabric tag."""
    return os.path.join(RUN_ROOT, f"fabric{fabric_tag()}.lock")


def take_lock(wait_s: float = 0.0) -> int:
    """One fabric per machine and fabric tag (a tag's switch names are the same in every run): an exclusive
    lock, waited for up to wait_s. The kernel releases it when its holder dies, so a crashed run never blocks
    the next. Returns the descriptor to give to release_lock."""
    os.makedirs(RUN_ROOT, exist_ok=True)
    fd = os.open(lock_path(), os.O_CREAT | os.O_RDWR, 0o644)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise FabricBusy("another testbed run is using this machine's fabric; wait for it to finish "
                                 "(or set TESTBED_WAIT_FOR_FABRIC=SECONDS to queue behind it, or "
                                 "TESTBED_FABRIC_TAG=<a letter or digit> to run beside it)") from None
            time.sleep(0.5)


def release_lock(fd: int) -> None:
    os.close(fd)
