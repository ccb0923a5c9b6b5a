"""ECN marking at the shaped switch ports (fabric.ecn): the tc BPF program ecn_mark.bpf.c, compiled once into a
cached object, attached on each port's clsact egress, configured with the port's link and thresholds, and its
counters read back.

Each attached copy of the program has maps of its own, found from the port: tc names the program's id, bpftool
its maps' ids. Its config map is written after attaching (until then the program passes every frame untouched).
See docs/ecn.md.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import struct
import subprocess
from dataclasses import dataclass

from testbed.fabric.delayd import MARK as DELAY_MARK
from testbed.fabric.links import tbf_burst

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ecn_mark.bpf.c")
CACHE_VARIABLE = "TESTBED_BPF_CACHE"
CACHE = "/var/cache/tb-bpf"
PREF = 48                   # ahead of the delay line's divert (49), which takes frames off to delay them
SECTION = "tc"
CONFIG = struct.Struct("<QQQQQQII")     # struct config: rate, burst, limit, kmin, kmax, pmax (x 2^32), skip_mark
COUNTERS = struct.Struct("<QQQQ")       # struct counters: packets, ect, marked, queue
STATE = struct.Struct("<IIQQ")          # struct state: lock (and padding), backlog, last_ns
PAUSE = struct.Struct("<QQ")            # struct pause: since, total (CLOCK_MONOTONIC ns)
P_ONE = 1 << 32


class EcnUnavailable(RuntimeError):
    """This machine cannot mark: the message names what is missing, in one line."""


@dataclass(frozen=True)
class Thresholds:
    kmin_bytes: int
    kmax_bytes: int
    pmax: float

    @classmethod
    def of(cls, given: dict) -> "Thresholds":
        """From fabric.ecn's {kmin_kb, kmax_kb, pmax}."""
        return cls(int(given["kmin_kb"] * 1024), int(given["kmax_kb"] * 1024), given["pmax"])


class PauseClock:
    """A port's pauses as its marking program reads them (its pause map): while PFC pauses the port, the program's
    virtual queue does not drain, as the real queue behind the closed gate does not."""

    def __init__(self):
        self.since = 0          # when the current pause began (ns); 0: not paused
        self.total = 0          # ns of the pauses that have ended

    def pause(self, now_ns: int) -> bytes:
        if not self.since:
            self.since = max(now_ns, 1)
        return self.value()

    def resume(self, now_ns: int) -> bytes:
        if self.since:
            self.total += max(now_ns - self.since, 0)
            self.since = 0
        return self.value()

    def value(self) -> bytes:
        return PAUSE.pack(self.since, self.total)


def mark_probability(queue_bytes: int, t: Thresholds) -> float:
    """RED's marking probability at this queue, as the program works it out (its fixed point, 2^32 = 1)."""
    if queue_bytes >= t.kmax_bytes:
        return 1.0
    if queue_bytes < t.kmin_bytes:
        return 0.0
    return (round(t.pmax * P_ONE) * (queue_bytes - t.kmin_bytes) // (t.kmax_bytes - t.kmin_bytes)) / P_ONE


def missing() -> str | None:
    """What this machine lacks to mark ECN (None: nothing)."""
    for tool in ("clang", "bpftool", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup installs clang, bpftool and libbpf-dev)"
    version = subprocess.run(["tc", "-V"], capture_output=True, text=True).stdout
    if "libbpf" not in version:
        return f"tc ({version.strip()}) was built without libbpf: it cannot load a compiled BPF program"
    if not os.path.exists("/proc/sys/net/core/bpf_jit_enable"):
        return "the kernel has no BPF JIT (/proc/sys/net/core/bpf_jit_enable)"
    if not os.path.exists("/usr/include/bpf/bpf_helpers.h"):
        return "libbpf-dev is not installed (bpf/bpf_helpers.h)"
    return None


def require() -> None:
    """EcnUnavailable, naming what is missing, where this machine cannot mark."""
    lacking = missing()
    if lacking:
        raise EcnUnavailable(f"fabric.ecn: this machine cannot mark ECN: {lacking}")


def compiled() -> str:
    """The program's object, compiled on first use and kept (by the source's and the compiler's hash)."""
    clang = subprocess.run(["clang", "--version"], capture_output=True, text=True).stdout
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read() + clang.encode()).hexdigest()[:16]
    cache = os.environ.get(CACHE_VARIABLE, CACHE)
    path = os.path.join(cache, f"ecn_mark-{key}.o")
    if os.path.exists(path):
        return path
    os.makedirs(cache, exist_ok=True)
    arch = f"/usr/include/{platform.machine()}-linux-gnu"     # asm/types.h
    part = f"{path}.{os.getpid()}"
    done = subprocess.run(["clang", "-O2", "-g", "-target", "bpf", *(["-I", arch] if os.path.isdir(arch) else []),
                           "-c", SOURCE, "-o", part], capture_output=True, text=True)
    if done.returncode:
        raise EcnUnavailable(f"compiling {os.path.basename(SOURCE)} failed: {last_line(done.stderr)}")
    os.replace(part, path)          # whole or not at all: another run may compile it at the same time
    return path


def last_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else "(no message)"


def config(mbps: float, mtu: int, queue_bytes: int, t: Thresholds) -> bytes:
    """The config map's value for a port of a link at this rate, MTU and queue (the tbf's own rate and burst)."""
    return CONFIG.pack(int(mbps * 1e6 / 8), tbf_burst(mbps, mtu), queue_bytes, t.kmin_bytes, t.kmax_bytes,
                       round(t.pmax * P_ONE), DELAY_MARK, 0)


def run(args: list[str], netns: str | None = None) -> str:
    """A command's output (in the named network namespace, if any); EcnUnavailable with its last line if it failed."""
    done = subprocess.run((["ip", "netns", "exec", netns] if netns else []) + args, capture_output=True, text=True)
    if done.returncode:
        raise EcnUnavailable(f"{' '.join(args[:4])}: {last_line(done.stderr or done.stdout)}")
    return done.stdout


def attach(dev: str, obj: str, netns: str | None = None) -> None:
    """The program on dev's clsact egress (made if missing); it passes every frame until configured."""
    qdiscs = json.loads(run(["tc", "-j", "qdisc", "show", "dev", dev], netns) or "[]")
    if not any(q.get("kind") == "clsact" for q in qdiscs):
        run(["tc", "qdisc", "add", "dev", dev, "clsact"], netns)
    run(["tc", "filter", "replace", "dev", dev, "egress", "pref", str(PREF), "handle", "1", "bpf", "da",
         "obj", obj, "sec", SECTION], netns)


def configure(dev: str, value: bytes, netns: str | None = None, names: dict[int, str] | None = None) -> None:
    """The config map of the program on dev written (value: config())."""
    write_map(maps(dev, netns, names)["ecn_config"], value)


def program_id(dev: str, netns: str | None = None) -> int:
    """The id of the program on dev's egress at PREF."""
    for f in json.loads(run(["tc", "-j", "filter", "show", "dev", dev, "egress"], netns) or "[]"):
        prog = f.get("options", {}).get("prog")
        if f.get("pref") == PREF and prog:
            return prog["id"]
    raise EcnUnavailable(f"{dev} has no ECN program on its egress")


def map_names() -> dict[int, str]:
    """Map id -> name of every BPF map on the machine: one bpftool call for all the ports."""
    return {m["id"]: m.get("name", "") for m in json.loads(run(["bpftool", "-j", "map", "show"]) or "[]")}


def maps(dev: str, netns: str | None = None, names: dict[int, str] | None = None) -> dict[str, int]:
    """Map name -> id of the program on dev (names: map_names(), read once for many ports)."""
    prog = json.loads(run(["bpftool", "-j", "prog", "show", "id", str(program_id(dev, netns))]))
    names = names if names is not None else map_names()
    return {names[m]: m for m in prog.get("map_ids", []) if m in names}


def hex_bytes(data: bytes) -> list[str]:
    return [f"{b:02x}" for b in data]


def write_map(map_id: int, value: bytes) -> None:
    run(["bpftool", "map", "update", "id", str(map_id), "key", "hex", *hex_bytes(bytes(4)),
         "value", "hex", *hex_bytes(value)])


def read_map(map_id: int) -> bytes:
    found = json.loads(run(["bpftool", "-j", "map", "lookup", "id", str(map_id), "key", "hex", *hex_bytes(bytes(4))]))
    return bytes(int(b, 16) for b in found["value"])


def counters(dev: str, netns: str | None = None, names: dict[int, str] | None = None) -> dict[str, int]:
    """What the program on dev counted: packets seen, ECN-capable ones, marked ones, and the virtual queue's last
    value (bytes)."""
    packets, ect, marked, queue = COUNTERS.unpack(read_map(maps(dev, netns, names)["ecn_counters"]))
    return {"packets": packets, "ect_packets": ect, "marked_packets": marked, "virtual_queue_bytes": queue}


def port_ends(fabric) -> list[tuple[str, int, object]]:
    """(switch, port, link) of every shaped switch port that marks: the switch ends of shaped links whose tier
    has thresholds."""
    out = []
    for l in fabric.links:
        if not l.shaped or fabric.params.ecn_thresholds(l.kind) is None:
            continue
        out += [(node, port, l) for node, port in ((l.a, l.a_port), (l.b, l.b_port)) if node not in fabric.hosts]
    return out
