"""The launcher waits for every host program, but not for one left stopped (a hung GPU) once all the others
have ended, nor past its timeout; local processes stand in for the emulated hosts."""
import os
import subprocess
import sys
import time

import pytest

from testbed.runtime.launch import LaunchError, run_on_hosts, stopped

PROGRAMS = {
    "tb_done": "import json; print(json.dumps({'ok': 1}))",
    "tb_hang": "import json, os, signal; os.kill(os.getpid(), signal.SIGSTOP); print(json.dumps({'ok': 2}))",
    "tb_slow": "import json, time; time.sleep(1.5); print(json.dumps({'ok': 3}))",
    # a host program as `python -m hosts.agents.<name>` loads its package: "-m" in argv[0] while it does
    "tb_agent": "import sys; sys.argv[:1] = ['-m']; import hosts.agents, time; time.sleep(30)",
    "tb_quiet": "import time; time.sleep(30)",
}


class Node:
    python = sys.executable

    def __init__(self, path):
        self.env = dict(os.environ, PYTHONPATH=str(path))

    def popen(self, argv, **kw):
        return subprocess.Popen(argv, env=self.env, **kw)


class Net:
    def __init__(self, path):
        for name, text in PROGRAMS.items():
            (path / f"{name}.py").write_text(text + "\n")
        self.node = Node(path)

    def host(self, name):
        return self.node


def test_a_process_stopped_after_the_others_ended_is_killed_and_named(tmp_path):
    t0 = time.monotonic()
    out, errors = run_on_hosts(Net(tmp_path), {"a": ["tb_done"], "b": ["tb_hang"]}, timeout=60, partial=True)
    assert time.monotonic() - t0 < 10
    assert out == {"a": {"ok": 1}}
    assert errors == ["b: `tb_hang` stopped (a hung GPU) when every other process had ended"]


def test_a_slow_process_is_waited_for_and_a_lone_stopped_one_until_the_timeout(tmp_path):
    net = Net(tmp_path)
    assert run_on_hosts(net, {"a": ["tb_done"], "b": ["tb_slow"]}, timeout=60) == {"a": {"ok": 1}, "b": {"ok": 3}}
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"b: `tb_hang` still running after 2 s"):
        run_on_hosts(net, {"b": ["tb_hang"]}, timeout=2)            # nobody else ended: the timeout decides
    assert time.monotonic() - t0 >= 1.9


def test_a_host_program_past_its_timeout_prints_its_threads_stacks_before_it_is_killed(tmp_path):
    """Where it waited is in its stderr (kept in the host's log); a program that does not catch SIGQUIT is killed
    without it (SIGQUIT would kill it, maybe with a core file)."""
    ended = {}
    t0 = time.monotonic()
    out, errors = run_on_hosts(Net(tmp_path), {"a": ["tb_agent"], "b": ["tb_quiet"]}, timeout=2, partial=True,
                               on_exit=lambda host, code, stdout, stderr: ended.update({host: (code, stderr)}))
    assert time.monotonic() - t0 < 10 and out == {}
    assert sorted(errors) == ["a: `tb_agent` still running after 2 s (its threads' stacks are in its stderr)",
                              "b: `tb_quiet` still running after 2 s"]
    assert ended["a"][0] == ended["b"][0] == -9
    assert "tb_agent.py\", line 1 in <module>" in ended["a"][1], ended["a"][1]
    assert ended["b"][1] == ""


def test_stopped_reads_the_process_state():
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert not stopped(p.pid)
        p.send_signal(19)       # SIGSTOP
        deadline = time.monotonic() + 5
        while not stopped(p.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stopped(p.pid)
    finally:
        p.kill()
        p.wait()
    assert not stopped(p.pid)           # gone
