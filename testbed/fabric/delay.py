"""Propagation delay on a link: each direction of a veth link gets a one-way delay, as Mininet's TCLink(delay=)
gives it, on every machine.

- netem where the kernel has it (netem.py);
- otherwise a delay line in user space (delayline.py: tc diverts each end's outgoing frames, after its rate
  limiter, to one delay process, delayd.py, that serves every delayed link of the fabric).

    paths = delay_paths()                  # what works here, best first: ("netem", "userspace"), or fewer
    with Delays() as delays:               # DelayUnavailable (one line) where no path works
        delays.apply(LinkDelay("7", End("eth0", "/proc/PID/ns/net", mbps=10, mtu=9000),
                               End("tb-rail0-p3", None, mbps=10, mtu=9000), delay_us=500))
        runstate.record(run_dir, **delays.state())     # what `testbed clean` looks for after a crash
        ...
        delays.remove("7")                 # or leave it to close(): nothing is left behind

While a delay is on, it owns the ends' egress qdiscs: give an end's rate here rather than shaping it too.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass

from testbed import PREFIX
from testbed.fabric import delayline, netem
from testbed.fabric.daemon import Daemon
from testbed.fabric.links import IFNAMSIZ, fabric_tag

PATHS = ("netem", "userspace")          # preference order: netem costs no process
DELAY_MAX_US = 10_000_000
REPLY_TIMEOUT_S = 10.0


class DelayUnavailable(RuntimeError):
    """A delay was asked for where no path works: one line for the command line (exit status 2)."""


class DelayError(RuntimeError):
    """A command that applies or removes a delay failed."""


@dataclass(frozen=True)
class End:
    """One end of a veth link. netns: /run/netns/NAME or /proc/PID/ns/net, None for the root namespace.
    mbps: the end's outgoing rate (tbf), None if unshaped; mtu sizes its bursts; queue_bytes is its tbf's
    limit (None: links.tbf_limit)."""
    dev: str
    netns: str | None = None
    mbps: float | None = None
    mtu: int = 1500
    queue_bytes: int | None = None

    @classmethod
    def of(cls, link, dev: str, netns: str | None) -> "End":
        """An end of a fabric's links.Link, shaped as the link is."""
        return cls(dev, netns, link.mbps if link.shaped else None, link.mtu, link.queue_bytes)


@dataclass(frozen=True)
class LinkDelay:
    """A delay on a link: delay_us one way in each direction (delay_us_ba, if given, from b to a), and loss, the
    share of frames each direction loses (netem's random loss, or the delay process dropping them on arrival).
    key names the link's helper devices: unique among the fabric's delayed links, 1-7 of [a-z0-9]."""
    key: str
    a: End
    b: End
    delay_us: float
    delay_us_ba: float | None = None
    loss: float = 0.0           # share of frames lost, each direction

    def directions(self):
        """(side, sending end, one-way delay in us) of each direction."""
        back = self.delay_us if self.delay_us_ba is None else self.delay_us_ba
        return (("a", self.a, self.delay_us), ("b", self.b, back))


def problems(link: LinkDelay) -> list[str]:
    """What is wrong with a link's delay, as lines for a user; empty if nothing."""
    found = []
    key = link.key
    if not re.fullmatch(f"[a-z0-9]{{1,{delayline.KEY_MAX}}}", key):
        found.append(f"key {key!r}: 1-{delayline.KEY_MAX} lowercase letters or digits")
    if not isinstance(link.loss, (int, float)) or not 0 <= link.loss < 1:
        found.append(f"loss {link.loss!r}: a share of frames in [0, 1)")
    for side, end, us in link.directions():
        if not isinstance(us, (int, float)) or not 0 <= us <= DELAY_MAX_US:
            found.append(f"delay {us!r} us from {side}: a number of microseconds, 0-{DELAY_MAX_US}")
        if not end.dev or len(end.dev) > IFNAMSIZ:
            found.append(f"end {side}: device name {end.dev!r} (1-{IFNAMSIZ} characters)")
        if end.mbps is not None and not end.mbps > 0:
            found.append(f"end {side}: rate {end.mbps!r} Mbit/s must be positive")
        if not 68 <= end.mtu <= 65535:
            found.append(f"end {side}: MTU {end.mtu!r} out of 68-65535")
        if end.queue_bytes is not None and not end.queue_bytes >= end.mtu:
            found.append(f"end {side}: queue of {end.queue_bytes!r} bytes holds no frame")
    return found


def in_netns(netns: str | None, cmd: str) -> list[str]:
    argv = shlex.split(cmd.removeprefix("-"))
    return (["nsenter", f"--net={netns}"] if netns else []) + argv


def run(cmds: list[str], netns: str | None = None, strict: bool = True) -> list[str]:
    """Run command lines in a namespace; a failure raises (strict) unless the line starts with "-".
    Returns the failures that were let pass."""
    passed = []
    for cmd in cmds:
        done = subprocess.run(in_netns(netns, cmd), capture_output=True, text=True)
        if done.returncode:
            why = f"{cmd.removeprefix('-')}: {done.stderr.strip() or done.returncode}"
            if strict and not cmd.startswith("-"):
                raise DelayError(why)
            passed.append(why)
    return passed


def probe(path: str) -> str | None:
    """Why the path does not work on this machine, or None if it does (tried in a throwaway namespace)."""
    if os.geteuid() != 0:
        return "needs root"
    ns = f"{PREFIX}{fabric_tag()}dlprobe{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode:
        return "cannot make a network namespace"
    try:
        if path == "netem":
            run(["ip link add tb-probe0 type veth peer name tb-probe1",
                 netem.PROBE.format(dev="tb-probe0")], f"/run/netns/{ns}")
        else:
            run(delayline.PROBE, f"/run/netns/{ns}")
            delayline.attach_divert("tb-probe0", "tb-probe1", f"/run/netns/{ns}")
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
        return None
    except Exception as exc:        # whatever this kernel refuses (netlink, BPF, sockets): the reason, in one line
        return " ".join(str(exc).split())
    finally:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


@functools.cache
def path_problems() -> dict[str, str | None]:
    return {path: probe(path) for path in PATHS}


def delay_paths(found: dict[str, str | None] | None = None) -> tuple[str, ...]:
    """The delay paths that work on this machine, best first."""
    found = path_problems() if found is None else found
    return tuple(p for p in PATHS if found.get(p) is None)


def choose_path(found: dict[str, str | None] | None = None) -> str:
    """The path to use, or DelayUnavailable naming why each one fails."""
    found = path_problems() if found is None else found
    works = delay_paths(found)
    if not works:
        raise DelayUnavailable("link delay: no way to delay a link on this machine: " +
                               "; ".join(f"{p}: {why}" for p, why in found.items()))
    return works[0]


class Delays:
    """The delayed links of a fabric, on one path; the user-space path's one delay process."""

    def __init__(self, path: str | None = None):
        self.path = path or choose_path()
        self.links: dict[str, tuple[LinkDelay, dict]] = {}    # key -> (link, what apply made)
        self.daemon: Daemon | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def apply(self, link: LinkDelay) -> None:
        wrong = problems(link)
        if wrong:
            raise ValueError(f"link delay {link.key}: " + "; ".join(wrong))
        if link.key in self.links:
            raise ValueError(f"link delay {link.key}: already applied")
        made = {}
        self.links[link.key] = (link, made)
        try:
            for side, end, us in link.directions():
                if self.path == "netem":
                    run(netem.apply(end.dev, us, end.mbps, end.mtu, end.queue_bytes, link.loss), end.netns)
                else:
                    self._line_on(link.key, side, end, us, made, link.loss)
                made[side] = True
        except BaseException:
            self.remove(link.key)
            raise

    def _line_on(self, key: str, side: str, end: End, us: float, made: dict, loss: float = 0.0) -> None:
        made[side + "_clsact"] = not has_clsact(end)
        run(delayline.setup(end.dev, key, side, end.mbps, end.mtu, end.queue_bytes), end.netns)
        self.ask(op="add", line=key + side, netns=end.netns, rx=delayline.helpers(key, side)[1], tx=end.dev,
                 delay_ns=int(us * 1000), **({"loss": loss} if loss else {}))
        if made[side + "_clsact"]:
            run([f"tc qdisc add dev {end.dev} clsact"], end.netns)
        delayline.attach_divert(end.dev, delayline.helpers(key, side)[0], end.netns)

    def remove(self, key: str) -> list[str]:
        """Take a link's delay away; returns what could not be undone (an end that is already gone)."""
        link, made = self.links.pop(key)
        left = []
        for side, end, _ in link.directions():
            if self.path == "netem":
                if made.get(side):
                    left += run(netem.remove(end.dev, end.mbps, end.mtu, end.queue_bytes), end.netns, strict=False)
                continue
            left += run(delayline.undivert(end.dev, end.mbps, end.mtu, end.queue_bytes), end.netns, strict=False)
            if self.proc is not None and self.proc.poll() is None:
                self.ask(op="remove", line=key + side, check=False)
            left += run(delayline.teardown(end.dev, key, side, made.get(side + "_clsact", False)), end.netns,
                        strict=False)
        return left

    def state(self) -> dict:
        """What `testbed clean` needs to find this object's process and keep its devices while it lives."""
        devices = [h for link, _ in self.links.values() for side, end, _ in link.directions()
                   if end.netns is None and self.path == "userspace" for h in delayline.helpers(link.key, side)]
        return {"delay_pids": [self.proc.pid] if self.proc else [], "delay_devices": devices}

    def stats(self) -> dict:
        """Frames forwarded, dropped and lost per line ("KEY" + side) of the delay process."""
        return self.ask(op="stats")["lines"] if self.proc else {}

    def close(self) -> None:
        for key in list(self.links):
            self.remove(key)
        if self.daemon is not None:
            self.daemon.end()
            self.daemon = None

    @property
    def proc(self):
        """The delay process, once started."""
        return self.daemon.proc if self.daemon is not None else None

    def ask(self, check: bool = True, **cmd) -> dict:
        """One command to the delay process (started on first use) and its answer."""
        if self.daemon is None:
            self.daemon = Daemon("testbed.fabric.delayd", REPLY_TIMEOUT_S)
        answer = self.daemon.ask(cmd)
        if check and not answer.get("ok"):
            raise DelayError(f"delay process, {cmd.get('op')} {cmd.get('line', '')}: {answer.get('error')}")
        return answer


def has_clsact(end: End) -> bool:
    out = subprocess.run(in_netns(end.netns, f"tc -j qdisc show dev {end.dev}"), capture_output=True, text=True)
    try:
        return any(q.get("kind") == "clsact" for q in json.loads(out.stdout or "[]"))
    except ValueError:
        return False
