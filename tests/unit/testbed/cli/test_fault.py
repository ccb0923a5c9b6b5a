"""`testbed fault TARGET ACTION` runs the fault kind that owns the action on the live run's fabric: links go
down and up, a GPU host's processes get the kind's signal, and a bad target is one line and exit 2."""
import signal
from types import SimpleNamespace

import pytest

from testbed import cli
from testbed.cli import fault
from testbed.fabric.topo import build


class FakeNet:
    """What a RunningFabric offers the kinds, recording what they did."""

    def __init__(self):
        self.fabric = build("rail-optimized", 2, 2, spines=2)
        self.did = []

    def is_patch(self, link):
        return False

    def crosses(self, link):
        return False

    def run_at(self, node, argv, check=True):
        self.did.append((node, " ".join(argv)))

    def set_host_port(self, host, port, up):
        self.did.append((host, f"port {port} {'up' if up else 'down'}"))

    def host(self, name):
        net = self
        return SimpleNamespace(processes=lambda: {7: "python -m hosts.agents.collective_rank", 8: "sleep 9"},
                               fail=lambda sig, idle=True: None,
                               signal=lambda pids, sig: net.did.append((name, sorted(pids), sig)) or len(pids))


@pytest.fixture
def net(monkeypatch):
    fake = FakeNet()
    monkeypatch.setattr(fault, "running_fabric", lambda: fake)
    return fake


def test_down_and_up_cut_and_mend_the_cable(net, capsys):
    assert cli.main(["fault", "rail0-spine1", "down"]) == 0
    assert capsys.readouterr().out == "rail0-spine1: down (1 links)\n"
    assert cli.main(["fault", "s0g0/nic", "up"]) == 0
    assert capsys.readouterr().out == "s0g0/nic: up (1 links)\n"
    assert net.did[0][1].startswith("ip link set") and net.did[0][1].endswith("down")
    assert net.did[1] == ("s0g0", "port 0 up")


@pytest.mark.parametrize("action, sig, pids", [
    ("crash", signal.SIGKILL, [7, 8]), ("hang", signal.SIGSTOP, [7, 8]), ("stall", signal.SIGUSR2, [7]),
    ("resume", signal.SIGCONT, [7, 8]), ("declare", signal.SIGUSR1, [7])])
def test_a_gpu_action_signals_the_hosts_processes(net, capsys, action, sig, pids):
    assert cli.main(["fault", "s1g1", action]) == 0
    assert capsys.readouterr().out == f"s1g1: {action}, {len(pids)} processes signalled\n"
    assert net.did == [("s1g1", pids, sig)]


def test_a_bad_target_is_one_line_and_exit_2(net, capsys):
    assert cli.main(["fault", "rail9-spine0", "down"]) == 2
    assert "testbed fault: error: unknown fault target 'rail9-spine0'" in capsys.readouterr().err
    assert cli.main(["fault", "s1", "crash"]) == 2
    assert "unknown gpu-crash target 's1': expected a GPU host like s0g1" in capsys.readouterr().err
    assert net.did == []
