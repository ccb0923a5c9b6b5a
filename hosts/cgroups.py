"""CPU limits through Linux cgroups, v1 or v2, whichever the machine has (detected at run time).

- cgroup v1: the hierarchy mounted with the ``cpu`` controller (``/sys/fs/cgroup/cpu`` or ``cpu,cpuacct``);
  a limit is ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, throttling shows in ``cpu.stat`` ``throttled_time`` (ns).
- cgroup v2: the unified hierarchy (``cgroup2``), used when it offers the ``cpu`` controller (on hybrid systems
  that still bind ``cpu`` to v1, v1 is used). The controller is enabled for the groups made here by writing
  ``+cpu`` to the hierarchy root's ``cgroup.subtree_control``; a limit is ``cpu.max`` ("QUOTA PERIOD"),
  throttling shows in ``cpu.stat`` ``throttled_usec``.

Groups are made directly under the hierarchy's root. Everything reads the mount table
(``/proc/self/mountinfo``) and the cgroup files; pass another mountinfo (and ``proc``) to work on a copy.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

MOUNTINFO = "/proc/self/mountinfo"


class CgroupError(RuntimeError):
    """No usable cpu controller, or a cgroup file could not be written (the message says which)."""


@dataclass
class Mount:
    point: str            # where it is mounted
    fstype: str           # "cgroup" (v1) or "cgroup2"
    options: set = field(default_factory=set)   # super options: the v1 controllers, name=...


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mounts(mountinfo: str = MOUNTINFO) -> list[Mount]:
    """The cgroup file systems in a mountinfo table."""
    out = []
    with open(mountinfo) as f:
        for line in f:
            left, sep, right = line.partition(" - ")
            fields = right.split()
            if not sep or len(fields) < 3 or fields[0] not in ("cgroup", "cgroup2"):
                continue
            out.append(Mount(_unescape(left.split()[4]), fields[0], set(fields[2].split(","))))
    return out


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value) -> None:
    try:
        with open(path, "w") as f:
            f.write(str(value))
    except OSError as e:
        raise CgroupError(f"cannot write {value!r} to {path}: {e.strerror or e}") from None


class CpuCgroups:
    """The hierarchy that holds the cpu controller: ``version`` 1 or 2, mounted at ``root``."""

    def __init__(self, version: int, root: str):
        if version not in (1, 2):
            raise ValueError(f"cgroup version must be 1 or 2, not {version!r}")
        self.version, self.root = version, root

    def __repr__(self) -> str:
        return f"<cgroup v{self.version} cpu at {self.root}>"

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def enable_controller(self, parent: str | None = None) -> None:
        """v2: make the cpu controller available to the children of `parent` (default the root) and of every
        group above it (no-op on v1 or where it is already on)."""
        if self.version != 2:
            return
        if parent and os.path.normpath(parent) != os.path.normpath(self.root):
            self.enable_controller(os.path.dirname(os.path.normpath(parent)))
        ctl = os.path.join(parent or self.root, "cgroup.subtree_control")
        try:
            enabled = {c.lstrip("+") for c in _read(ctl).split()}
        except OSError as e:
            raise CgroupError(f"cannot read {ctl}: {e.strerror or e}") from None
        if "cpu" not in enabled:
            _write(ctl, "+cpu")

    def create(self, name: str, cores: float, period_us: int = 100_000) -> str:
        """Make (or reuse) group `name` limited to `cores` CPUs; returns its directory."""
        if not cores or cores <= 0:
            raise ValueError(f"cores must be positive, not {cores!r}")
        quota = max(1000, int(cores * period_us))
        path = self.path(name)              # name may be a path under the root (a group in a container's)
        self.enable_controller(os.path.dirname(path))
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise CgroupError(f"cannot create cgroup {path}: {e.strerror or e}") from None
        if self.version == 1:
            _write(os.path.join(path, "cpu.cfs_period_us"), period_us)
            _write(os.path.join(path, "cpu.cfs_quota_us"), quota)
        else:
            _write(os.path.join(path, "cpu.max"), f"{quota} {period_us}")
        return path

    @staticmethod
    def add(path: str, pid: int) -> None:
        """Move process `pid` (all of its threads) into the group at `path`."""
        _write(os.path.join(path, "cgroup.procs"), int(pid))

    @staticmethod
    def remove(path: str) -> bool:
        """Remove the group once its processes have ended (a group with processes in it stays)."""
        try:
            os.rmdir(path)
            return True
        except OSError:
            return False

    def limit_cores(self, path: str) -> float | None:
        """The CPU limit of the group at `path` in cores, None when unlimited."""
        if self.version == 1:
            quota = int(_read(os.path.join(path, "cpu.cfs_quota_us")))
            period = int(_read(os.path.join(path, "cpu.cfs_period_us")))
        else:
            q, p = _read(os.path.join(path, "cpu.max")).split()
            if q == "max":
                return None
            quota, period = int(q), int(p)
        return None if quota < 0 else quota / period

    def throttled_s(self, path: str) -> float:
        """Seconds the group's processes were held back because its quota was used up."""
        try:
            stats = dict(line.split()[:2] for line in _read(os.path.join(path, "cpu.stat")).splitlines()
                         if len(line.split()) >= 2)
        except OSError:
            return 0.0
        if self.version == 1:
            return int(stats.get("throttled_time", 0)) / 1e9
        return int(stats.get("throttled_usec", 0)) / 1e6

    def of_process(self, pid: int | str = "self", proc: str = "/proc") -> str:
        """The directory of the group process `pid` is in, in this hierarchy."""
        with open(os.path.join(proc, str(pid), "cgroup")) as f:
            for line in f:
                hid, controllers, rel = line.rstrip("\n").split(":", 2)
                if (self.version == 2 and hid == "0") or \
                        (self.version == 1 and "cpu" in controllers.split(",")):
                    return os.path.join(self.root, rel.lstrip("/"))
        raise CgroupError(f"process {pid} is in no cgroup of {self!r}")


def detect(mountinfo: str = MOUNTINFO) -> CpuCgroups:
    """The hierarchy to use for CPU limits: v1's cpu hierarchy if mounted, else v2 if it offers cpu."""
    try:
        found = mounts(mountinfo)
    except OSError as e:
        raise CgroupError(f"cannot read the mount table {mountinfo}: {e.strerror or e}") from None
    for m in found:
        if m.fstype == "cgroup" and "cpu" in m.options:
            return CpuCgroups(1, m.point)
    v2 = [m for m in found if m.fstype == "cgroup2"]
    for m in v2:
        try:
            controllers = _read(os.path.join(m.point, "cgroup.controllers")).split()
        except OSError:
            continue
        if "cpu" in controllers:
            return CpuCgroups(2, m.point)
    if v2:
        raise CgroupError(f"the cgroup v2 hierarchy at {v2[0].point} does not offer the cpu controller "
                          "(not in its cgroup.controllers) and no cgroup v1 cpu hierarchy is mounted")
    raise CgroupError("no cgroup file system is mounted (neither a v1 cpu hierarchy nor cgroup2)")


def process_cgroups(pid: int, mountinfo: str = MOUNTINFO, proc: str = "/proc") -> list[str]:
    """The group directories of process `pid` in every mounted hierarchy (v1 and v2) that exist."""
    found = mounts(mountinfo)
    out = []
    with open(os.path.join(proc, str(pid), "cgroup")) as f:
        for line in f:
            hid, controllers, rel = line.rstrip("\n").split(":", 2)
            for m in found:
                if (hid == "0" and m.fstype == "cgroup2") or \
                        (m.fstype == "cgroup" and controllers and set(controllers.split(",")) <= m.options):
                    d = os.path.join(m.point, rel.lstrip("/"))
                    if os.path.isdir(d):
                        out.append(d)
                    break
    return out
