"""CPU budgets for processes in emulated hosts, and their CPU time.

Enforced: a CFS quota of `cores` x the period on the whole process, all of its threads (tf.data's thread
pools included) together, through the cgroup cpu controller of whichever hierarchy the machine has, found at
run time: cgroup v2 (`cpu.max`, the unified hierarchy of Debian 12 and Ubuntu 22.04+) or v1
(`cpu.cfs_quota_us`, a separate cpu hierarchy); optionally CPU affinity. The launcher applies it from the
machine's root namespace right after starting the process (namespaced shells such as `ip netns exec` do not
see the cgroup tree), before TensorFlow has started its threads; threads made later inherit it.
"""
from __future__ import annotations

import os

CGROUP_ROOT = "/sys/fs/cgroup"
PERIOD_US = 20_000       # short periods: a throttled process stalls for less at a time


class BudgetError(RuntimeError):
    pass


def hierarchy(root: str | None = None) -> tuple[str, str]:
    """("v2", the unified hierarchy's root) or ("v1", the cpu controller's mount), whichever this machine has."""
    root = root or CGROUP_ROOT
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        return "v2", root
    for name in ("cpu", "cpu,cpuacct"):
        if os.path.exists(os.path.join(root, name, "cpu.cfs_quota_us")):
            return "v1", os.path.join(root, name)
    raise BudgetError(f"no cgroup cpu controller under {root} (neither cgroup v2 nor a v1 cpu hierarchy)")


def group_path(name: str) -> str:
    return os.path.join(hierarchy()[1], f"tb-tfdata-{name}")


def _write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _enable_cpu_controller(parent: str) -> None:
    """cgroup v2: children of `parent` get the cpu controller only once the parent hands it down."""
    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        if "cpu" in f.read().split():
            return
    with open(os.path.join(parent, "cgroup.controllers")) as f:
        if "cpu" not in f.read().split():
            raise BudgetError(f"cgroup v2 at {parent} offers no cpu controller")
    _write(os.path.join(parent, "cgroup.subtree_control"), "+cpu")


def limit(name: str, pid: int, cores: float | None, cpus: list[int] | None = None) -> dict:
    """Put process `pid` in cgroup tb-tfdata-<name> with a quota of `cores`; returns what was applied."""
    applied = {"cores": None, "cpus": None}
    if cpus:
        os.sched_setaffinity(pid, cpus)
        applied["cpus"] = sorted(os.sched_getaffinity(pid))
    if cores:
        version, parent = hierarchy()
        path = os.path.join(parent, f"tb-tfdata-{name}")
        quota = max(1000, int(cores * PERIOD_US))
        if version == "v2":
            _enable_cpu_controller(parent)
            os.makedirs(path, exist_ok=True)
            _write(os.path.join(path, "cpu.max"), f"{quota} {PERIOD_US}")
        else:
            os.makedirs(path, exist_ok=True)
            _write(os.path.join(path, "cpu.cfs_period_us"), PERIOD_US)
            _write(os.path.join(path, "cpu.cfs_quota_us"), quota)
        _write(os.path.join(path, "cgroup.procs"), pid)
        applied.update(cores=cores, cgroup=version)
    return applied


def remove(name: str) -> None:
    """Remove the group once its processes have ended (a group with processes in it stays)."""
    try:
        os.rmdir(group_path(name))
    except (OSError, BudgetError):
        pass


def throttled_s(name: str) -> float:
    """Seconds the group spent throttled (quota exhausted): evidence that the budget was binding."""
    try:
        with open(os.path.join(group_path(name), "cpu.stat")) as f:
            stats = dict(line.split()[:2] for line in f if line.strip())
    except (OSError, BudgetError):
        return 0.0
    if "throttled_usec" in stats:                     # v2
        return int(stats["throttled_usec"]) / 1e6
    return int(stats.get("throttled_time", 0)) / 1e9  # v1: nanoseconds


def cpu_seconds(pid: int | str = "self") -> float:
    """utime + stime of a process (all threads) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
