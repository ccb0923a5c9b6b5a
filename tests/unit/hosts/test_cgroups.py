"""CPU limits on cgroup v1 and v2 (hosts.cgroups, hosts.tfdata.budget): detection and the files written,
on fake cgroup trees in temporary directories laid out like each version's, and on this machine's own."""
import os
import subprocess
import sys

import pytest

from hosts import cgroups
from hosts.tfdata import budget

V1_LINE = "35 25 0:30 / {point} rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,{opts}\n"
V2_LINE = "29 25 0:26 / {point} rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
OTHER = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"


def fake_v1(tmp_path, with_unified=True):
    """A hybrid layout (this machine's kind): v1 hierarchies per controller plus an empty cgroup2."""
    root = tmp_path / "cgroup"
    lines = [OTHER]
    for name, opts in (("cpu,cpuacct", "cpu,cpuacct"), ("memory", "memory"), ("systemd", "xattr,name=systemd")):
        (root / name).mkdir(parents=True)
        lines.append(V1_LINE.format(point=root / name, opts=opts))
    if with_unified:
        (root / "unified").mkdir()
        (root / "unified" / "cgroup.controllers").write_text("\n")
        lines.append(V2_LINE.format(point=root / "unified"))
    mi = tmp_path / "mountinfo"
    mi.write_text("".join(lines))
    return mi, root


def fake_v2(tmp_path, controllers="cpuset cpu io memory hugetlb pids rdma misc", subtree=""):
    root = tmp_path / "cgroup"
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text(subtree + "\n")
    mi = tmp_path / "mountinfo"
    mi.write_text(OTHER + V2_LINE.format(point=root))
    return mi, root


def test_v1_detected_and_quota_files_written(tmp_path):
    mi, root = fake_v1(tmp_path)
    h = cgroups.detect(str(mi))
    assert (h.version, h.root) == (1, str(root / "cpu,cpuacct"))    # v1 holds cpu: the empty v2 is not used
    applied = budget.limit("t1", 4242, 0.3, hier=h)
    g = root / "cpu,cpuacct" / "tb-tfdata-t1"
    assert applied == {"cores": 0.3, "cpus": None, "cgroup": "v1"}
    assert (g / "cpu.cfs_period_us").read_text() == str(budget.PERIOD_US)
    assert (g / "cpu.cfs_quota_us").read_text() == str(int(0.3 * budget.PERIOD_US))
    assert (g / "cgroup.procs").read_text() == "4242"
    assert not (g / "cpu.max").exists()
    assert h.limit_cores(str(g)) == pytest.approx(0.3)
    (g / "cpu.stat").write_text("nr_periods 90\nnr_throttled 40\nthrottled_time 1500000000\n")
    assert budget.throttled_s("t1", hier=h) == pytest.approx(1.5)
    (g / "cpu.cfs_quota_us").write_text("-1")
    assert h.limit_cores(str(g)) is None


def test_v2_detected_controller_enabled_and_cpu_max_written(tmp_path):
    mi, root = fake_v2(tmp_path)
    h = cgroups.detect(str(mi))
    assert (h.version, h.root) == (2, str(root))
    applied = budget.limit("t2", 4343, 0.3, hier=h)
    g = root / "tb-tfdata-t2"
    assert applied["cgroup"] == "v2"
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"     # the parent hands cpu to its children
    assert (g / "cpu.max").read_text() == f"{int(0.3 * budget.PERIOD_US)} {budget.PERIOD_US}"
    assert (g / "cgroup.procs").read_text() == "4343"
    assert not (g / "cpu.cfs_quota_us").exists()
    assert h.limit_cores(str(g)) == pytest.approx(0.3)
    (g / "cpu.stat").write_text("usage_usec 900000\nnr_throttled 12\nthrottled_usec 250000\n")
    assert budget.throttled_s("t2", hier=h) == pytest.approx(0.25)
    (g / "cpu.max").write_text("max 100000\n")
    assert h.limit_cores(str(g)) is None
    # a group whose processes are gone (the kernel empties it) is removed
    for f in g.iterdir():
        f.unlink()
    budget.remove("t2", hier=h)
    assert not g.exists()


def test_v2_controller_already_enabled_is_left_alone(tmp_path):
    mi, root = fake_v2(tmp_path, subtree="cpu io memory")
    h = cgroups.detect(str(mi))
    h.create("tb-tfdata-t3", 1.5, 100_000)
    assert (root / "cgroup.subtree_control").read_text() == "cpu io memory\n"
    assert (root / "tb-tfdata-t3" / "cpu.max").read_text() == "150000 100000"


@pytest.mark.parametrize("fake,version", [(fake_v1, 1), (fake_v2, 2)])
def test_a_budget_within_a_containers_group_is_made_under_it(tmp_path, fake, version):
    """Docker hosts: the group goes under the container's, whose own limit then holds around it; on v2 the cpu
    controller is handed down from the root to the container's group."""
    mi, _ = fake(tmp_path)
    h = cgroups.detect(str(mi))
    container = os.path.join(h.root, "docker", "c0ffee")
    os.makedirs(container)
    if version == 2:
        for d in (os.path.join(h.root, "docker"), container):
            with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                f.write("\n")
    budget.limit("t4", 4444, 0.3, hier=h, within=container)
    g = os.path.join(container, "tb-tfdata-t4")
    assert budget.group_path("t4", hier=h, within=container) == g
    with open(os.path.join(g, "cgroup.procs")) as f:
        assert f.read() == "4444"
    assert h.limit_cores(g) == pytest.approx(0.3)
    assert not os.path.exists(budget.group_path("t4", hier=h))          # nothing at the root
    if version == 2:
        for d in (h.root, os.path.join(h.root, "docker"), container):
            with open(os.path.join(d, "cgroup.subtree_control")) as f:
                assert f.read() == "+cpu", d
    for f in os.listdir(g):
        os.unlink(os.path.join(g, f))
    budget.remove("t4", hier=h, within=container)
    assert not os.path.exists(g) and os.path.isdir(container)


def test_no_usable_cpu_controller_is_a_clear_error(tmp_path):
    mi, root = fake_v2(tmp_path, controllers="memory pids")
    with pytest.raises(cgroups.CgroupError, match="does not offer the cpu controller"):
        cgroups.detect(str(mi))
    mi.write_text(OTHER)
    with pytest.raises(cgroups.CgroupError, match="no cgroup file system"):
        cgroups.detect(str(mi))
    with pytest.raises(cgroups.CgroupError, match="cannot read the mount table"):
        cgroups.detect(str(tmp_path / "missing"))
    # the cpu controller cannot be enabled (here: the control file is not writable as a file)
    mi, root = fake_v2(tmp_path / "b")
    (root / "cgroup.subtree_control").unlink()
    (root / "cgroup.subtree_control").mkdir()
    with pytest.raises(cgroups.CgroupError, match="cgroup.subtree_control"):
        budget.limit("t4", 1, 0.5, hier=cgroups.detect(str(mi)))


def test_process_groups_found_in_both_versions(tmp_path):
    mi, root = fake_v1(tmp_path)
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "cgroup").write_text("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"
                                        "1:name=systemd:/docker/abc\n0::/docker/abc\n")
    for d in ("cpu,cpuacct", "memory", "systemd", "unified"):
        (root / d / "docker" / "abc").mkdir(parents=True)
    h = cgroups.detect(str(mi))
    assert h.of_process(77, proc=str(proc)) == str(root / "cpu,cpuacct" / "docker" / "abc")
    assert sorted(cgroups.process_cgroups(77, str(mi), str(proc))) == sorted(
        str(root / d / "docker" / "abc") for d in ("cpu,cpuacct", "memory", "systemd", "unified"))
    mi2, root2 = fake_v2(tmp_path / "v2")
    (proc / "78").mkdir()
    (proc / "78" / "cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    (root2 / "system.slice" / "docker-abc.scope").mkdir(parents=True)
    h2 = cgroups.detect(str(mi2))
    assert h2.of_process(78, proc=str(proc)) == str(root2 / "system.slice" / "docker-abc.scope")
    assert cgroups.process_cgroups(78, str(mi2), str(proc)) == [str(root2 / "system.slice" / "docker-abc.scope")]


def test_this_machine_detected_version():
    """The detected version is the one the machine mounts (cgroup2fs at /sys/fs/cgroup: v2 only)."""
    fstype = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout.strip()
    try:
        h = cgroups.detect()
    except cgroups.CgroupError as e:
        print(f"SKIP: {e}")
        pytest.skip(str(e))
    print(f"/sys/fs/cgroup is {fstype}: {h!r}")
    if fstype == "cgroup2fs":
        assert h.version == 2
    else:
        assert h.version in (1, 2) and os.path.isdir(h.root)


@pytest.mark.root
@pytest.mark.qemu
def test_budget_holds_on_this_machine():
    """A busy loop under a real 0.2-core budget gets about 0.2 core and is throttled."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    name = f"{os.getpid()}-unit"
    p = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"])
    try:
        applied = budget.limit(name, p.pid, 0.2)
        budget.cpu_seconds(p.pid)           # readable from the start
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    throttled = budget.throttled_s(name)
    path = budget.group_path(name)
    lim = budget.hierarchy().limit_cores(path)
    budget.remove(name)
    print(f"{applied}: throttled {throttled:.2f} s")
    assert lim == pytest.approx(0.2)
    assert throttled > 0.5
    assert not os.path.exists(path)
