"""Machines: the scenario's machine list, and a remote process's life tied to its ssh client.

The remote side is played by a local `sh -c` standing in for ssh (Machine.ssh is what turns a command line
into a remote one), so what runs is exactly the command line a machine's shell would get."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from testbed.fabric import machines
from testbed.fabric.machines import Machine, MachineError, machines_from


class LocalMachine(Machine):
    def ssh(self, tty: bool = False) -> list[str]:
        return ["sh", "-c"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def wait_gone(pid: int, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_machines_from_reads_the_scenario_list_with_its_defaults():
    ms = machines_from([{"name": "m1", "address": "10.0.0.2"},
                        {"name": "m2", "address": "m2.lab", "ssh_user": "ops", "ssh_options": ["-p", "2222"]}])
    assert [m.name for m in ms] == ["m1", "m2"]
    assert ms[0].ssh_user == "root" and ms[0].pythonpath == "/opt/testbed" and ms[0].python == "python3"
    assert ms[1].ssh_options == ("-p", "2222")
    assert ms[1].ssh()[-1] == "ops@m2.lab" and "-p" in ms[1].ssh()
    assert ms[1].as_root(["ip", "link"]) == ["sudo", "-n", "-E", "ip", "link"]
    assert ms[0].as_root(["ip", "link"]) == ["ip", "link"]


@pytest.mark.parametrize("entries, words", [
    ([{"name": "m 1", "address": "a"}], "not a machine name"),
    ([{"name": "m1", "address": "a"}, {"name": "m1", "address": "b"}], "listed twice"),
    ([{"name": "m1"}], "an address is needed"),
])
def test_bad_machine_entries_are_named(entries, words):
    with pytest.raises(MachineError, match=words):
        machines_from(entries)


def test_an_address_that_does_not_resolve_is_named():
    m = Machine("m9", "no-such-machine.invalid")
    with pytest.raises(MachineError, match="m9: address 'no-such-machine.invalid' does not resolve"):
        m.ip


def test_one_ssh_connection_per_machine_is_shared():
    argv = Machine("m1", "10.0.0.2").ssh()
    assert "ControlMaster=auto" in argv and any(a.startswith("ControlPath=" + machines.SSH_DIR) for a in argv)
    assert argv[-2:] == ["-T", "root@10.0.0.2"] and Machine("m1", "10.0.0.2").ssh(tty=True)[-2] == "-tt"


def test_a_remote_process_gets_its_arguments_intact_and_its_exit_status_comes_back():
    spec = {"store": "/run/testbed/x y", "quote": "it's \"here\"", "n": [1, 2]}
    proc = LocalMachine("m1", "h").popen([sys.executable, "-c", "import sys, json; print(sys.argv[1]); sys.exit(3)",
                                          json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=20)
    assert json.loads(out) == spec
    assert proc.returncode == 3


def test_killing_the_ssh_client_ends_the_remote_process(tmp_path):
    pidfile = tmp_path / "pid"
    proc = LocalMachine("m1", "h").popen(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    remote = int(pidfile.read_text())
    assert alive(remote)
    os.killpg(proc.pid, signal.SIGKILL)     # the ssh client and its session: as a lost connection
    proc.wait(5)
    # the stand-in ran the remote shell in the client's session, so the kill reached it too; what matters here
    # is that nothing outlives the client
    assert wait_gone(remote)


def test_sigint_stops_the_remote_process_and_its_last_output_still_arrives():
    proc = LocalMachine("m1", "h").popen(
        [sys.executable, "-u", "-c", "import signal, sys, time\n"
         "signal.signal(signal.SIGTERM, lambda *a: (print('flushed'), sys.exit(0)))\n"
         "print('started'); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert out.strip() == "flushed" and time.monotonic() - t0 < 5
    assert proc.returncode == 0


SPLIT = {"name": "x", "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 4, "spares_per_server": 1},
         "machines": [{"name": "m1", "address": "10.0.0.1"}, {"name": "m2", "address": "10.0.0.2"}],
         "workloads": [{"type": "connectivity"}]}


@pytest.mark.parametrize("change, words", [
    ({"hosts": "docker"}, "machines: a fabric spread over machines runs namespace hosts"),
    ({"machines": [{"name": "m1", "address": "a"}, {"name": "m1", "address": "b"}]}, "machines: a name is listed twice"),
    ({"machines": [{"name": "m1"}]}, "machines.0: 'address' is a required property"),
    ({"machines": [{"name": f"m{i}", "address": "a"} for i in range(5)]}, "5 machines but the fabric has 4 rails"),
    ({"workloads": [{"type": "collective", "op": "allreduce", "algo": "ring", "sizes": ["1MiB"], "recovery": "spare"}]},
     "recovery spare does not work across machines yet"),
    ({"workloads": [{"type": "program", "command": "true", "launcher": "mpirun"}]},
     "launcher mpirun does not work across machines yet"),
])
def test_what_cannot_run_across_machines_is_refused_before_bring_up(change, words):
    import copy

    from testbed import runner
    from testbed.scenario import ScenarioError, validate
    with pytest.raises(ScenarioError, match=words):
        doc = validate({**copy.deepcopy(SPLIT), **change})
        runner.check(doc, runner.fabric_of(doc))
