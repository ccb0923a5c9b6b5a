"""`testbed clean` under a fabric tag touches that tag's runs and names only; a run killed before it wrote its
state is still found by the PID in its directory's name; its cgroup is found by its name."""
import json
import os

import pytest

from testbed import clean
from testbed.fabric import lifeline, runstate

DEAD = 2 ** 22 + 7          # above the default pid_max: no such process


@pytest.fixture
def run_root(tmp_path, monkeypatch):
    monkeypatch.setattr(runstate, "RUN_ROOT", str(tmp_path))
    monkeypatch.setattr(clean, "RUN_ROOT", str(tmp_path))
    return tmp_path


def make_run(root, name: str, **state) -> str:
    run_dir = root / name
    run_dir.mkdir()
    if state:
        (run_dir / runstate.STATE_FILE).write_text(json.dumps(state))
    return str(run_dir)


def test_a_tag_keeps_to_its_own_names(monkeypatch):
    monkeypatch.setenv("TESTBED_FABRIC_TAG", "o")
    assert clean.mine("tb-orail0") and not clean.mine("tb-prail0") and not clean.mine("xk-keep")
    monkeypatch.delenv("TESTBED_FABRIC_TAG")
    assert clean.mine("tb-orail0") and clean.mine("tb-prail0")


def test_a_tag_keeps_to_its_own_runs(run_root, monkeypatch):
    monkeypatch.setenv("TESTBED_FABRIC_TAG", "o")
    mine = make_run(run_root, f"run-{DEAD}-1", tag="o", owner_pid=DEAD)
    make_run(run_root, f"run-{DEAD}-2", tag="p", owner_pid=DEAD)
    live = make_run(run_root, f"run-{os.getpid()}-3", tag="o", owner_pid=os.getpid())
    states, in_progress = clean.runs()
    assert set(states) == {mine, live} and in_progress == {live}
    assert clean.left_run_dirs(states, in_progress) == [mine]


def test_a_run_killed_before_its_state_is_found_by_its_pid(run_root, monkeypatch):
    monkeypatch.setenv("TESTBED_FABRIC_TAG", "o")
    gone = make_run(run_root, f"run-{DEAD}-1")
    make_run(run_root, f"run-{os.getpid()}-2")          # beginning, in this process
    assert clean.left_run_dirs(*clean.runs()) == [gone]


def test_cgroups_of_runs_gone_are_stale_and_of_live_runs_kept(run_root, tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_FABRIC_TAG", "o")
    cgroups = tmp_path / "cgroup2"
    for name in ("tb-orun-1", "tb-orun-2", "tb-prun-3", "other"):
        (cgroups / name).mkdir(parents=True)
    monkeypatch.setattr(lifeline, "root", lambda: str(cgroups))
    live = make_run(run_root, f"run-{os.getpid()}-2", tag="o", owner_pid=os.getpid(),
                    cgroup=str(cgroups / "tb-orun-2"))
    states, in_progress = clean.runs()
    assert in_progress == {live}
    assert clean.stale_cgroups(states, in_progress) == [str(cgroups / "tb-orun-1")]
