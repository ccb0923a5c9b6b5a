"""The reaper kills, besides the run's cgroup, the processes outside it that the owner named over its pipe: only
those still the same processes (PID and start time), and only once the owner's end closes."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from testbed import PROJECT_ROOT
from testbed.fabric import lifeline


def sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def test_named_processes_die_when_the_owner_goes_and_not_before():
    named, renamed, bystander = sleeper(), sleeper(), sleeper()
    read_fd, write_fd = os.pipe()
    reaper = subprocess.Popen([sys.executable, "-m", "testbed.fabric.lifeline", "/nonexistent-cgroup"],
                              stdin=read_fd, cwd=PROJECT_ROOT)
    os.close(read_fd)
    try:
        line = f"{named.pid} {lifeline.start_time(named.pid)}\n"
        os.write(write_fd, line[:5].encode())          # a line split over two writes still counts
        os.write(write_fd, line[5:].encode())
        os.write(write_fd, f"{renamed.pid} 1\n".encode())   # a reused PID: another start time, spared
        os.write(write_fd, b"garbage\n")
        time.sleep(0.3)
        assert named.poll() is None and reaper.poll() is None      # the owner lives: nothing is killed
        os.close(write_fd)
        assert reaper.wait(10) == 0
        assert named.wait(5) == -9
        assert renamed.poll() is None and bystander.poll() is None
    finally:
        for p in (named, renamed, bystander):
            p.kill()
            p.wait()


def test_also_without_a_tied_run_does_nothing():
    p = sleeper()
    try:
        lifeline.also(p.pid)
        time.sleep(0.1)
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()
