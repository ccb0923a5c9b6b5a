"""CPU budgets on either cgroup hierarchy: the version is found at run time and the right files are written.

The fake trees mimic each layout's files; detection, the writes and the throttling read-back are the real code.
The real hierarchy of this machine is exercised by the offload fabric test.
"""
import os

import pytest

from hosts.tfdata import budget


def fake_v2(root, controllers="cpuset cpu io memory pids", subtree=""):
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text(subtree + "\n")
    return root


def fake_v1(root, name="cpu"):
    (root / name).mkdir()
    (root / name / "cpu.cfs_quota_us").write_text("-1\n")
    return root


def test_v2_writes_cpu_max_and_hands_the_controller_down(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "CGROUP_ROOT", str(fake_v2(tmp_path)))
    assert budget.hierarchy() == ("v2", str(tmp_path))
    applied = budget.limit("t1", os.getpid(), 0.5)
    assert applied["cores"] == 0.5 and applied["cgroup"] == "v2"
    group = tmp_path / "tb-tfdata-t1"
    assert (group / "cpu.max").read_text() == f"10000 {budget.PERIOD_US}"
    assert (group / "cgroup.procs").read_text() == str(os.getpid())
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    (group / "cpu.stat").write_text("usage_usec 900\nnr_throttled 3\nthrottled_usec 1500000\n")
    assert budget.throttled_s("t1") == 1.5


def test_v2_leaves_an_enabled_controller_alone_and_refuses_a_missing_one(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "CGROUP_ROOT", str(fake_v2(tmp_path, subtree="cpu memory")))
    budget.limit("t2", os.getpid(), 2)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "cpu memory\n"       # untouched
    assert (tmp_path / "tb-tfdata-t2" / "cpu.max").read_text() == f"40000 {budget.PERIOD_US}"
    fake_v2(tmp_path, controllers="memory pids")
    with pytest.raises(budget.BudgetError, match="offers no cpu controller"):
        budget.limit("t3", os.getpid(), 1)


@pytest.mark.parametrize("mount", ["cpu", "cpu,cpuacct"])
def test_v1_writes_the_cfs_quota_and_period(mount, tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "CGROUP_ROOT", str(fake_v1(tmp_path, mount)))
    assert budget.hierarchy() == ("v1", str(tmp_path / mount))
    applied = budget.limit("t4", os.getpid(), 0.01)              # below the kernel's 1 ms minimum quota
    group = tmp_path / mount / "tb-tfdata-t4"
    assert applied["cgroup"] == "v1"
    assert (group / "cpu.cfs_period_us").read_text() == str(budget.PERIOD_US)
    assert (group / "cpu.cfs_quota_us").read_text() == "1000"
    (group / "cpu.stat").write_text("nr_periods 10\nnr_throttled 2\nthrottled_time 2000000000\n")
    assert budget.throttled_s("t4") == 2.0
    (group / "cpu.stat").unlink()
    (group / "cpu.cfs_period_us").unlink()
    (group / "cpu.cfs_quota_us").unlink()
    (group / "cgroup.procs").unlink()
    budget.remove("t4")
    assert not group.exists()


def test_no_cpu_controller_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "CGROUP_ROOT", str(tmp_path))
    with pytest.raises(budget.BudgetError, match="neither cgroup v2 nor a v1 cpu hierarchy"):
        budget.limit("t5", os.getpid(), 1)
    assert budget.limit("t5", os.getpid(), None) == {"cores": None, "cpus": None}     # no budget asked: fine
    assert budget.throttled_s("t5") == 0.0


def test_this_machines_hierarchy_is_found():
    version, path = budget.hierarchy()
    assert version in ("v1", "v2") and os.path.isdir(path)
    print(f"this machine: cgroup {version} at {path}")
