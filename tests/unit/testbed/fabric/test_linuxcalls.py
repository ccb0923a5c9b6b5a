"""timerfd through ctypes: readable once its deadline has passed, not before, and disarmed by None; the parent-death
signal: sent when the parent dies, unless disarmed."""
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from testbed import PROJECT_ROOT
from testbed.fabric.linuxcalls import Timer


def test_the_timer_fires_at_its_deadline_with_sub_millisecond_resolution():
    timer = Timer()
    try:
        ep = select.epoll()
        ep.register(timer.fd, select.EPOLLIN)
        start = time.monotonic_ns()
        timer.arm(start + 300_000)
        assert ep.poll(5)
        assert time.monotonic_ns() - start >= 300_000
        timer.clear()
        assert ep.poll(0) == []
        timer.arm(time.monotonic_ns() + 10_000_000)
        timer.arm(None)
        assert ep.poll(0.05) == []
    finally:
        timer.close()


ORPHAN = """
import os, signal, sys, time
from testbed.fabric.linuxcalls import parent_death_signal
ready, go = os.pipe()
child = os.fork()
if child == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1), os.dup2(null, 2)          # the test reads its parent's output to the end
    parent_death_signal(signal.SIGTERM)
    if sys.argv[1] == "disarm":
        parent_death_signal(0)
    os.write(go, b"x")
    time.sleep(20)
    os._exit(0)
os.read(ready, 1)
print(child, flush=True)
"""


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("mode", ["arm", "disarm"])
def test_the_parent_death_signal_reaches_an_orphan_until_disarmed(mode):
    out = subprocess.run([sys.executable, "-c", ORPHAN, mode], capture_output=True, text=True, timeout=20,
                         cwd=PROJECT_ROOT)
    orphan = int(out.stdout)
    try:
        assert _gone(orphan, 3.0) == (mode == "arm")
    finally:
        if mode == "disarm":
            os.kill(orphan, signal.SIGKILL)
