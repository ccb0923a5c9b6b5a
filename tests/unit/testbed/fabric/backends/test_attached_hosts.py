"""A live run's hosts reached from another process (`testbed fault`): each backend attaches its own kind, so
that the faults by hand never ask which backend a run has."""
import os
import signal
import subprocess
import sys

import pytest

from testbed.fabric.backends import backend_class
from testbed.fabric.backends.base import AttachedHost
from testbed.fabric.backends.dockerhost import AttachedContainer, container_name
from testbed.faults import running


def test_a_namespace_host_is_attached_by_its_shells_pid_and_fails_by_its_processes(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        host = backend_class("netns")(str(tmp_path)).attach("s0g0", sleeper.pid)
        assert type(host) is AttachedHost and host.pid == sleeper.pid
        assert host.fail(signal.SIGKILL) is None               # the caller signals the rank processes
        # the processes of the shell's network namespace (here, this machine's): ours among them, not the shell
        found = host.processes()
        assert os.getpid() in found and sleeper.pid not in found
        assert host.signal([sleeper.pid], signal.SIGKILL) == 1 and sleeper.wait(5) == -signal.SIGKILL
    finally:
        sleeper.kill()


def test_a_docker_host_is_attached_to_its_container_which_takes_its_gpu_failures(monkeypatch, tmp_path):
    host = backend_class("docker")(str(tmp_path)).attach("s1g0", 4242)
    assert type(host) is AttachedContainer and host.container == container_name("s1g0") and host.pid == 4242
    assert host.fail(signal.SIGUSR1) is None                   # a stall is the rank's, not the container's
    hit = []

    class Containers:
        def get(self, name):
            hit.append(name)
            return name

    monkeypatch.setattr("testbed.fabric.backends.dockerhost.engine",
                        lambda: type("E", (), {"containers": Containers()})())
    monkeypatch.setattr("testbed.fabric.backends.dockerhost.container_fault", lambda container, sig, idle=True: 3)
    assert host.fail(signal.SIGKILL) == 3 and hit == [container_name("s1g0")]


@pytest.mark.parametrize("hosts,kind", [(None, AttachedHost), ("netns", AttachedHost), ("docker", AttachedContainer)])
def test_a_running_fabric_attaches_its_hosts_through_the_runs_backend(hosts, kind, tmp_path):
    state = {"fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2}, "host_pids": {"s0g1": 77}}
    if hosts:
        state["hosts"] = hosts
    host = running.RunningFabric(state, str(tmp_path)).host("s0g1")
    assert type(host) is kind and host.pid == 77
