"""A GPU fault's processes: everything in the host's namespace but its shell and the testbed's own tools."""
import os
import subprocess
import sys
from types import SimpleNamespace

from testbed.fabric.backends.base import LocalProcesses
from testbed.faults.signals import host_processes


class FakeHost(LocalProcesses):
    def __init__(self, pid, tool_pids):
        self.pid, self.tool_pids = pid, tool_pids


def fake_net(shell_pid, tools=frozenset()):
    node = FakeHost(shell_pid, tools)
    return SimpleNamespace(host=lambda name: node)


def test_a_capture_in_the_host_is_not_one_of_its_processes():
    # this test's own namespace stands in for the host's: a program and a "capture" both live in it
    program = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    capture = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        seen = host_processes(fake_net(os.getpid(), frozenset({capture.pid})), "s0g0")
        assert program.pid in seen and capture.pid not in seen and os.getpid() not in seen
        assert capture.pid in host_processes(fake_net(os.getpid()), "s0g0")
    finally:
        for p in (program, capture):
            p.kill()
            p.wait()
