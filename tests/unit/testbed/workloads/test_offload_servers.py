"""tf.data.service servers and the trainer that do not start: the error names why, whatever the start-up failure;
the trainer's budget is set at its ready line."""
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from hosts.spec import TrainerSpec
from testbed.workloads import offload

TRAINER = TrainerSpec(pipeline="compute", policy="fixed", gpu_steps_per_s=10)


class FakeHost:
    """Runs the given program instead of the service (the namespace does not matter here)."""

    python = sys.executable

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
    net = fake_net("import json, os, sys, time; sys.stderr.write('I serving on 5050\\n'); "
                   "print(json.dumps({'role': 'worker', 'pid': os.getpid(), 'port': 5051}), flush=True); time.sleep(30)")
    net.out_dir = str(tmp_path)
    with offload.Servers(net, ["cpu0"], 0.5, start_timeout=20):
        pass
    kept = (tmp_path / "hosts" / "cpu0" / "tfdata_service.stderr").read_text()
    assert kept.count("== hosts.agents.tfdata_service (exit -9)") == 2       # the dispatcher and the worker
    assert kept.count("I serving on 5050") == 2


def test_a_server_line_its_schema_rejects_is_an_error_naming_the_key(no_cpu_budgets):
    net = fake_net("import json, time; print(json.dumps({'role': 'worker', 'pid': 1, 'port': '5051'}), flush=True); "
                   "time.sleep(30)")
    with pytest.raises(RuntimeError, match=r"dispatcher printed a line its schema rejects: port: "):
        with offload.Servers(net, ["cpu0"], 0.5, start_timeout=20):
            pass


# -- the trainer: its budget is set at its ready line, before any preprocessing -----------------------------

def exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def budget_recorder(monkeypatch, fail=None):
    """budget.limit records the PID it was given; with `fail`, it raises that once the process has exited,
    as the kernel refuses to move a PID that is gone. The rest of the budget is a no-op."""
    calls = []

    def limit(name, pid, cores, within=None):
        calls.append(pid)
        if fail:
            deadline = time.monotonic() + 10
            while not exited(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            raise fail
        return {"cores": cores, "cgroup": "v2"}
    monkeypatch.setattr(offload.budget, "limit", limit)
    monkeypatch.setattr(offload.budget, "remove", lambda *a, **k: None)
    monkeypatch.setattr(offload.budget, "throttled_s", lambda *a, **k: 0.0)
    return calls


def test_the_trainer_gets_its_budget_at_its_ready_line_then_the_go(monkeypatch):
    calls = budget_recorder(monkeypatch)
    net = fake_net("import json, sys; print(json.dumps({'ready': True}), flush=True); "
                   "go = sys.stdin.readline(); print(json.dumps({'policy': 'fixed', 'pipeline': 'compute', "
                   "'config': {'go': go}, 'steps_per_s': 5.0}))")
    out = offload.run_trainer(net, "s0g0", TRAINER, 0.3, timeout=20)
    assert out["steps_per_s"] == 5.0 and out["config"]["go"] == "go\n" and out["cgroup"] == "v2" and len(calls) == 1


def test_a_trainer_result_its_schema_rejects_is_an_error_naming_the_key(monkeypatch):
    budget_recorder(monkeypatch)
    net = fake_net("import json, sys; print(json.dumps({'ready': True}), flush=True); sys.stdin.readline(); "
                   "print(json.dumps({'policy': 'fixed', 'pipeline': 'compute', 'config': {}, 'steps_per_s': '5'}))")
    with pytest.raises(RuntimeError, match=r"trainer on s0g0 printed a result its schema rejects: steps_per_s: "):
        offload.run_trainer(net, "s0g0", TRAINER, 0.3, timeout=20)


def test_a_trainer_that_dies_after_its_ready_line_is_reported_not_a_budget_error(monkeypatch):
    from hosts.cgroups import CgroupError
    budget_recorder(monkeypatch, fail=CgroupError("cannot write 4242 to cgroup.procs: No such process"))
    net = fake_net("import json, sys; print(json.dumps({'ready': True}), flush=True); "
                   "sys.stderr.write('ImportError: no pipelines\\n'); sys.exit(3)")
    with pytest.raises(RuntimeError, match=r"trainer on s0g0 exited 3: ImportError: no pipelines"):
        offload.run_trainer(net, "s0g0", TRAINER, 0.3, timeout=20)


def test_a_trainer_that_never_gets_ready_is_reported_with_its_last_error_line(monkeypatch):
    calls = budget_recorder(monkeypatch)
    net = fake_net("import sys; sys.stderr.write('tensorflow: illegal instruction\\n'); sys.exit(4)")
    with pytest.raises(RuntimeError, match=r"trainer on s0g0 exited 4: tensorflow: illegal instruction"):
        offload.run_trainer(net, "s0g0", TRAINER, 0.3, timeout=20)
    assert calls == []
