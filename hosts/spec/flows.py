"""The specs of the traffic programs: concurrent flows (hosts/agents/flows.py, a JSON file) and the
reachability probe (hosts/agents/probe.py, command-line flags)."""
from __future__ import annotations

import argparse
import dataclasses
from typing import Literal

from hosts.spec.base import Spec

Proto = Literal["udp", "tcp"]


@dataclasses.dataclass(frozen=True)
class Listen(Spec):
    """A flow this host receives."""
    flow: int
    proto: Proto
    port: int
    bytes: int
    rate_mbps: float | None = None      # the sender's pace: silences are measured against its spacing


@dataclasses.dataclass(frozen=True)
class Send(Spec):
    """A flow this host sends; UDP is paced at rate_mbps, TCP is limited by the shaped NIC (and paced at
    rate_mbps too with pace_tcp: an offered load)."""
    flow: int
    proto: Proto
    dst: str
    dport: int
    sport: int
    bytes: int
    rate_mbps: float
    sport_mode: Literal["qp", "packet"] = "qp"     # packet: a random source port per datagram (spraying)
    split: int = 1                                 # source ports in round robin
    pace_tcp: bool = False                         # TCP at rate_mbps (the kernel's own pacing, no qdisc needed)


@dataclasses.dataclass(frozen=True)
class FlowsSpec(Spec):
    start_at: float                     # wall time every flow starts
    deadline: float                     # wall time receivers give up
    listen: tuple[Listen, ...] = ()
    send: tuple[Send, ...] = ()


@dataclasses.dataclass(frozen=True)
class ProbeSpec(Spec):
    """A reachability probe: its targets, when it stops at the latest, and which targets should answer."""
    until: float
    targets: tuple[str, ...] = ()
    expected: tuple[str, ...] | None = None     # None: unknown, the probe runs to `until`
    not_before: float = 0.0                     # no early stop before (wall time)
    port: int = 7000

    def to_argv(self) -> list[str]:
        argv = ["--targets", ",".join(self.targets), "--until", f"{self.until:.3f}"]
        if self.expected is not None:
            argv += ["--expected", ",".join(self.expected)]
        if self.not_before:
            argv += ["--not-before", f"{self.not_before:.3f}"]
        if self.port != ProbeSpec.port:
            argv += ["--port", str(self.port)]
        return argv

    @classmethod
    def from_argv(cls, argv: list[str] | None = None) -> "ProbeSpec":
        ap = argparse.ArgumentParser(description="UDP reachability probe")
        ap.add_argument("--targets", default="")
        ap.add_argument("--until", type=float, required=True, help="wall-clock deadline (epoch seconds)")
        ap.add_argument("--expected", default=None, help="the targets that should answer (default: unknown)")
        ap.add_argument("--not-before", type=float, default=cls.not_before, help="no early stop before (epoch s)")
        ap.add_argument("--port", type=int, default=cls.port)
        a = ap.parse_args(argv)
        return cls(until=a.until, targets=_addresses(a.targets), not_before=a.not_before, port=a.port,
                   expected=None if a.expected is None else _addresses(a.expected))


def _addresses(text: str) -> tuple[str, ...]:
    return tuple(t for t in text.split(",") if t)
