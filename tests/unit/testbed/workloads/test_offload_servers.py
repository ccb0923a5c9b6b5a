"""tf.data.service servers that do not start: the error names why, whatever the start-up failure."""
import subprocess
import sys
from types import SimpleNamespace

import pytest

from testbed.workloads import offload


class FakeHost:
    """Runs the given program instead of the service (the namespace does not matter here)."""

    def __init__(self, program: str):
        self.program = program

    def popen(self, argv, **kw):
        return subprocess.Popen([sys.executable, "-c", self.program], **kw)


def fake_net(program: str):
    hosts = {"cpu0": SimpleNamespace(ip="10.13.0.1")}
    return SimpleNamespace(fabric=SimpleNamespace(hosts=hosts), host=lambda name: FakeHost(program))


@pytest.fixture
def no_cpu_budgets(monkeypatch):
    """The servers' CPU budgets are cgroups (root); not what these tests are about."""
    monkeypatch.setattr(offload.budget, "limit", lambda *a, **k: {})
    monkeypatch.setattr(offload.budget, "remove", lambda *a, **k: None)


def test_a_server_that_dies_is_reported_with_its_last_error_line(no_cpu_budgets):
    net = fake_net("import sys; sys.stderr.write('E grpc: address in use\\n'); sys.exit(3)")
    with pytest.raises(RuntimeError, match=r"dispatcher did not start \(exit 3\): E grpc: address in use"):
        with offload.Servers(net, ["cpu0"], 0.5, start_timeout=20):
            pass


def test_a_server_too_slow_to_start_is_reported_with_the_time_it_was_given(no_cpu_budgets):
    net = fake_net("import sys, time; sys.stderr.write('loading\\n'); sys.stderr.flush(); time.sleep(30)")
    with pytest.raises(RuntimeError, match=r"did not start \(not serving after 1 s\): loading"):
        with offload.Servers(net, ["cpu0"], 0.5, start_timeout=1):
            pass


def test_the_servers_logs_are_kept_in_the_results_folder(no_cpu_budgets, tmp_path):
    net = fake_net("import sys, time; sys.stderr.write('I serving on 5050\\n'); print('ready', flush=True); "
                   "time.sleep(30)")
    net.out_dir = str(tmp_path)
    with offload.Servers(net, ["cpu0"], 0.5, start_timeout=20):
        pass
    kept = (tmp_path / "hosts" / "cpu0" / "tfdata_service.stderr").read_text()
    assert kept.count("== hosts.agents.tfdata_service (exit -9)") == 2       # the dispatcher and the worker
    assert kept.count("I serving on 5050") == 2
