"""Host programs' stdout and stderr are kept in the results folder (RESULTS/hosts/HOST/PROGRAM.*), launch after
launch, failures included; a fabric without a results folder keeps nothing."""
import json
import subprocess
import sys

import pytest

from testbed.runtime.launch import LaunchError, run_on_hosts

PROGRAM = '''import json, sys
print("warming up", file=sys.stderr)
if sys.argv[1] == "fail":
    print("ValueError: bad size", file=sys.stderr)
    sys.exit(3)
print(json.dumps({"host": sys.argv[1]}))
'''


class Node:
    python = sys.executable

    def popen(self, argv, **kw):
        return subprocess.Popen(argv, **kw)


class Net:
    def __init__(self, out_dir=None):
        if out_dir is not None:
            self.out_dir = str(out_dir)

    def host(self, name):
        return Node()


@pytest.fixture
def program(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "tb_echo.py").write_text(PROGRAM)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "pkg"))
    return "tb_echo"


def test_every_launch_is_kept_per_host(tmp_path, program):
    out = tmp_path / "results"
    net = Net(out)
    for _ in range(2):          # a collective launches once per size: the files grow
        assert run_on_hosts(net, {"s0g0": [program, "s0g0"], "s0g1": [program, "s0g1"]}, timeout=30) == \
            {"s0g0": {"host": "s0g0"}, "s0g1": {"host": "s0g1"}}
    lines = (out / "hosts" / "s0g1" / "tb_echo.stdout").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"host": "s0g1"}] * 2
    err = (out / "hosts" / "s0g0" / "tb_echo.stderr").read_text().splitlines()
    assert err == ["== tb_echo (exit 0)", "warming up"] * 2


def test_a_failed_program_leaves_its_stderr(tmp_path, program):
    out = tmp_path / "results"
    with pytest.raises(LaunchError, match="s1g0: tb_echo exited 3: ValueError: bad size"):
        run_on_hosts(Net(out), {"s1g0": [program, "fail"]}, timeout=30)
    assert (out / "hosts" / "s1g0" / "tb_echo.stderr").read_text() == \
        "== tb_echo (exit 3)\nwarming up\nValueError: bad size\n"
    assert not (out / "hosts" / "s1g0" / "tb_echo.stdout").exists()


def test_without_a_results_folder_nothing_is_written(tmp_path, program, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_on_hosts(Net(), {"s0g0": [program, "s0g0"]}, timeout=30) == {"s0g0": {"host": "s0g0"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]
