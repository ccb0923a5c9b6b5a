"""CPU budgets for processes in emulated hosts, and their CPU time.

Enforced: a CFS quota (cgroup v1 cpu controller) of `cores` x the period on the whole process, all of its
threads (tf.data's thread pools included) together; optionally CPU affinity. The launcher applies it from
the machine's root namespace right after starting the process (namespaced shells such as `ip netns exec`
do not see the cgroup tree), before TensorFlow has started its threads; threads made later inherit it.
"""
from __future__ import annotations

import os

CGROUP_CPU = "/sys/fs/cgroup/cpu"
PERIOD_US = 20_000       # short periods: a throttled process stalls for less at a time


def group_path(name: str) -> str:
    return os.path.join(CGROUP_CPU, f"tb-tfdata-{name}")


def limit(name: str, pid: int, cores: float | None, cpus: list[int] | None = None) -> dict:
    """Put process `pid` in cgroup tb-tfdata-<name> with a quota of `cores`; returns what was applied."""
    applied = {"cores": None, "cpus": None}
    if cpus:
        os.sched_setaffinity(pid, cpus)
        applied["cpus"] = sorted(os.sched_getaffinity(pid))
    if cores:
        path = group_path(name)
        os.makedirs(path, exist_ok=True)
        for key, value in (("cpu.cfs_period_us", PERIOD_US), ("cpu.cfs_quota_us", max(1000, int(cores * PERIOD_US)))):
            with open(os.path.join(path, key), "w") as f:
                f.write(str(value))
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        applied["cores"] = cores
    return applied


def remove(name: str) -> None:
    """Remove the group once its processes have ended (a group with processes in it stays)."""
    try:
        os.rmdir(group_path(name))
    except OSError:
        pass


def throttled_s(name: str) -> float:
    """Seconds the group spent throttled (quota exhausted): evidence that the budget was binding."""
    try:
        with open(os.path.join(group_path(name), "cpu.stat")) as f:
            stats = dict(line.split() for line in f)
        return int(stats.get("throttled_time", 0)) / 1e9
    except OSError:
        return 0.0


def cpu_seconds(pid: int | str = "self") -> float:
    """utime + stime of a process (all threads) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
