"""CPU budgets for processes in emulated hosts, and their CPU time.

Enforced: a CFS quota of `cores` x the period on the whole process, all of its threads (tf.data's thread
pools included) together, in a cgroup of its own: cgroup v1 (cpu.cfs_quota_us) or v2 (cpu.max), whichever
the machine has (hosts.cgroups detects it); optionally CPU affinity. The launcher applies it from the
machine's root namespace right after starting the process (namespaced shells such as `ip netns exec` do
not see the cgroup tree), before TensorFlow has started its threads; threads made later inherit it.
`within`: the group's parent, a cgroup directory (a Docker host's container: the budget then holds inside the
container's own limits); by default the hierarchy's root.
"""
from __future__ import annotations

import os

from hosts import cgroups

PERIOD_US = 20_000       # short periods: a throttled process stalls for less at a time
_detected: cgroups.CpuCgroups | None = None


def hierarchy() -> cgroups.CpuCgroups:
    """The machine's cgroup hierarchy with the cpu controller (detected once; CgroupError if none)."""
    global _detected
    if _detected is None:
        _detected = cgroups.detect()
    return _detected


def _relative(name: str, h: cgroups.CpuCgroups, within: str | None) -> str:
    """The group's path relative to the hierarchy's root."""
    rel = os.path.relpath(within, h.root) if within else "."
    return os.path.normpath(os.path.join(rel, f"tb-tfdata-{name}"))


def group_path(name: str, hier: cgroups.CpuCgroups | None = None, within: str | None = None) -> str:
    h = hier or hierarchy()
    return h.path(_relative(name, h, within))


def limit(name: str, pid: int, cores: float | None, cpus: list[int] | None = None,
          hier: cgroups.CpuCgroups | None = None, within: str | None = None) -> dict:
    """Put process `pid` in cgroup tb-tfdata-<name> with a quota of `cores`; returns what was applied."""
    applied = {"cores": None, "cpus": None}
    if cpus:
        os.sched_setaffinity(pid, cpus)
        applied["cpus"] = sorted(os.sched_getaffinity(pid))
    if cores:
        h = hier or hierarchy()
        path = h.create(_relative(name, h, within), cores, PERIOD_US)
        h.add(path, pid)
        applied["cores"] = cores
        applied["cgroup"] = f"v{h.version}"
    return applied


def remove(name: str, hier: cgroups.CpuCgroups | None = None, within: str | None = None) -> None:
    """Remove the group once its processes have ended (a group with processes in it stays)."""
    try:
        h = hier or hierarchy()
    except cgroups.CgroupError:
        return
    h.remove(group_path(name, h, within))


def throttled_s(name: str, hier: cgroups.CpuCgroups | None = None, within: str | None = None) -> float:
    """Seconds the group spent throttled (quota exhausted): evidence that the budget was binding."""
    try:
        h = hier or hierarchy()
    except cgroups.CgroupError:
        return 0.0
    return h.throttled_s(group_path(name, h, within))


def cpu_seconds(pid: int | str = "self") -> float:
    """utime + stime of a process (all threads) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
