"""Nothing outlives its run: every process a run starts dies with the process that owns the run.

The owner (`testbed run`, or the daemon `testbed up` leaves behind) moves itself into a cgroup of its own
(cgroup v2) before it starts anything, so every process it starts, and every process those start (tf.data
workers, MPI daemons, tcpdump, the controller, delay lines, the hosts' shells), lands there too, whichever
thread started it and whichever session it made. A small reaper outside that cgroup holds the read end of a
pipe whose only write end the owner keeps: when the owner dies, however it dies, the reaper reads EOF and
kills the cgroup. A cgroup whose reaper died as well is found by `testbed clean` through the run's state.

Processes in containers (Docker hosts) are in their container's cgroups, for its limits, not in the run's: the
owner names each container's init to the reaper over the same pipe (`also`), and the reaper kills it too, which
takes down the container's PID namespace and every process in it. The containers themselves, and other
machines, are `testbed clean`'s to remove.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from hosts import cgroups
from testbed import PREFIX, PROJECT_ROOT


def root() -> str | None:
    """Where cgroup v2 is mounted and writable, or None (then runs are not tied, `testbed clean` still works)."""
    for mount in cgroups.mounts():
        if mount.fstype == "cgroup2" and os.access(mount.point, os.W_OK):
            return mount.point
    return None


def ours(tag: str | None = None) -> list[str]:
    """The testbed's run cgroups on this machine (of one fabric tag if given)."""
    top = root()
    start = PREFIX + (tag or "")
    if not top:
        return []
    return sorted(os.path.join(top, d) for d in os.listdir(top) if d.startswith(start)
                  and os.path.isdir(os.path.join(top, d)))


def processes(cgroup: str) -> list[int]:
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []


def kill(cgroup: str, wait_s: float = 5.0) -> int:
    """SIGKILL every process in the cgroup and remove it; returns how many processes it held."""
    pids = processes(cgroup)
    try:
        with open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
            f.write("1")
    except FileNotFoundError:       # kernels before 5.14: one by one, until none is left
        for pid in pids:
            _signal(pid)
    except OSError:
        return 0
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(cgroup)          # only once it is empty
            return len(pids)
        except FileNotFoundError:
            return len(pids)
        except OSError:
            if time.monotonic() > deadline:
                return len(pids)
            for pid in processes(cgroup):
                _signal(pid)
            time.sleep(0.05)


def _signal(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): with the PID, who it is, even after the PID is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


_active: "Lifeline | None" = None         # this process's run, if it owns one


def also(pid: int) -> None:
    """Kill this process (and, for a PID namespace's init, the namespace) with the run, though it is outside the
    run's cgroup. Nothing to do where this process owns no tied run."""
    if _active is not None:
        _active.also(pid)


class Lifeline:
    """The owner's side: its cgroup, the cgroup it came from, and the pipe its reaper watches."""

    def __init__(self, cgroup: str, came_from: str, write_fd: int, reaper: subprocess.Popen):
        self.cgroup, self.came_from, self.write_fd, self.reaper = cgroup, came_from, write_fd, reaper

    def also(self, pid: int) -> None:
        started = start_time(pid)
        if started is not None:
            try:
                os.write(self.write_fd, f"{pid} {started}\n".encode())    # one short write: atomic on a pipe
            except OSError:
                pass

    def cut(self) -> int:
        """At the end of a run: the owner leaves its cgroup, what is still in there is killed, the reaper ends.
        An owner that cannot leave stays, and its reaper with it: killing the cgroup would kill the owner."""
        if not any(_join(cgroup) for cgroup in (self.came_from, os.path.dirname(self.cgroup))):
            return 0
        global _active
        left = kill(self.cgroup)
        if _active is self:
            _active = None
        os.close(self.write_fd)
        try:
            self.reaper.wait(5)
        except subprocess.TimeoutExpired:
            pass
        return left


def _join(cgroup: str) -> bool:
    """Move this process into cgroup; whether it could."""
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        return True
    except OSError:
        return False


def tie(run_dir: str, tag: str) -> Lifeline | None:
    """Move this process into a new cgroup for the run, watched by a reaper; None where cgroup v2 is not usable."""
    top = root()
    if top is None:
        return None
    cgroup = os.path.join(top, PREFIX + tag + os.path.basename(run_dir))
    came_from = os.path.join(top, _current())
    read_fd, write_fd = os.pipe()           # both close on exec: no child but the reaper holds an end
    try:
        os.mkdir(cgroup)
        reaper = subprocess.Popen([sys.executable, "-m", "testbed.fabric.lifeline", cgroup], stdin=read_fd,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT_ROOT,
                                  start_new_session=True)    # a kill of the owner's process group spares it
        if not _join(cgroup):
            raise OSError("cannot join the run's cgroup")
    except OSError:
        os.close(write_fd)
        _rmdir(cgroup)
        return None
    finally:
        os.close(read_fd)
    global _active
    _active = Lifeline(cgroup, came_from, write_fd, reaper)
    return _active


def _current() -> str:
    """This process's cgroup v2 path, relative to the mount."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line.strip()[3:].lstrip("/")
    return ""


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def reap(cgroup: str) -> None:
    """The reaper: wait for the owner's end of the pipe to close, then kill what the run left: its cgroup, and the
    processes outside it the owner named (`pid start-time` lines) that are still the same processes."""
    named, data = [], b""
    while chunk := os.read(0, 4096):
        data += chunk
        *lines, data = data.split(b"\n")
        named += [line.split() for line in lines if len(line.split()) == 2]
    if os.path.isdir(cgroup):
        kill(cgroup)
    for pid, started in named:
        if pid.isdigit() and start_time(int(pid)) == started.decode():
            _signal(int(pid))


if __name__ == "__main__":
    reap(sys.argv[1])
