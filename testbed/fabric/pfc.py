"""Priority flow control (fabric.pfc), emulated: which switch queues pause which upstream ports, the Xoff/Xon
logic with its counters, and the process (pfcd.py) that does it on a live fabric.

The kernels here have no PFC. Each shaped end's data queue sits under a tbf of its own, the gate
(links.beats_first): open, it is far faster than the link and holds nothing; to pause a port, the gate's rate
drops to a frame every PAUSED_FRAME_S with a one-frame bucket, so the port finishes the frame it has tokens for (as a real port
finishes the frame on the wire) and holds the rest, in order, in its queue; heartbeats keep their own class.
To resume, the gate opens again and a MAC-control frame sent on the port starts its qdisc (tbf's timer was set
for the paused rate, seconds away): a tc BPF program on the port's htb takes that frame (TC_ACT_STOLEN), so it
never leaves and no drop is counted.

    plan = Plan.of(fabric, netns_of)            # the congestion points (switch ports) and the gates they pause
    with Pauses(plan, period_s=0.002) as pfc:   # pfcd watches the points' queues and works the gates
        ...
        pfc.stats()                             # per gate: pauses, paused_s; per point: xoffs

See docs/pfc.md.
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import asdict, dataclass

from testbed.fabric.daemon import Daemon
from testbed.fabric.links import interface

HOST_HOLD = 16 << 20        # a paused host NIC's queue: deeper than its senders' socket buffers (below)
PERIOD_S = 0.002            # how often the points' queues are read: the pause's reaction time, roughly
PAUSED_FRAME_S = 2.0        # a closed gate lets a frame through every 2 s at most
REPLY_TIMEOUT_S = 10.0


class PfcUnavailable(RuntimeError):
    """fabric.pfc asked of a fabric the testbed cannot pause: one line for the command line (exit status 2)."""


@dataclass(frozen=True)
class Gate:
    """An upstream port PFC can pause: what `node` sends to `peer` on one shaped link end."""
    name: str               # "node>peer", as the queue sampler names ports
    dev: str
    netns: str | None       # /proc/PID/ns/net of a host, None: the root namespace
    mtu: int
    limit: int              # the end's queue (the gate's FIFO), bytes
    ecn_pause: int | None = None    # the pause map of the port's ECN program (fabric.ecn), by id; None: none


@dataclass(frozen=True)
class Point:
    """A switch port's egress queue that sends pauses: above xoff bytes, it pauses the gates in `feeds` whose
    frames fill it (Pausing), until it falls below xon."""
    name: str               # "switch>peer"
    dev: str
    xoff: int
    xon: int
    feeds: tuple[str, ...]  # gate names
    ingress: tuple[str, ...] = ()   # the switch's own port where each feed's frames arrive (its datapath port)


@dataclass(frozen=True)
class Plan:
    points: tuple[Point, ...]
    gates: dict[str, Gate]

    @classmethod
    def of(cls, fabric, netns_of) -> "Plan":
        """The fabric's congestion points and gates. netns_of(host) -> its namespace path. A point's upstream
        ports are the far ends of its switch's other shaped links that can carry traffic into its queue: up-down
        routing never turns a packet that came down back up, so a port towards a higher tier (a leaf's uplink)
        is fed only by the links from below it."""
        level = levels(fabric)
        at: dict[str, list] = {}
        for l in fabric.links:
            if l.shaped:
                at.setdefault(l.a, []).append((l, l.b, l.b_port, l.a_port))
                at.setdefault(l.b, []).append((l, l.a, l.a_port, l.b_port))
        points, gates = [], {}
        for l in fabric.links:
            t = fabric.params.pfc_thresholds(l.kind)
            if not l.shaped or t is None:
                continue
            for node, port, peer in ((l.a, l.a_port, l.b), (l.b, l.b_port, l.a)):
                if node in fabric.hosts:
                    continue
                feeds = []
                for other, far, far_port, own_port in at.get(node, []):
                    if other is l or (level[peer] > level[node] and level[far] >= level[node]):
                        continue
                    name = f"{far}>{node}"
                    gates[name] = Gate(name, interface(fabric, far, far_port),
                                       netns_of(far) if far in fabric.hosts else None, other.mtu,
                                       gate_limit(other, far in fabric.hosts))
                    feeds.append((name, interface(fabric, node, own_port)))
                feeds.sort()
                points.append(Point(f"{node}>{peer}", interface(fabric, node, port), int(t["xoff_kb"] * 1024),
                                    int(t["xon_kb"] * 1024), tuple(f for f, _ in feeds), tuple(i for _, i in feeds)))
        return cls(tuple(points), gates)

    def to_json(self) -> dict:
        return {"points": [asdict(p) for p in self.points], "gates": {n: asdict(g) for n, g in self.gates.items()}}

    @classmethod
    def from_json(cls, doc: dict) -> "Plan":
        return cls(tuple(Point(**{**p, "feeds": tuple(p["feeds"]), "ingress": tuple(p.get("ingress", ()))})
                         for p in doc["points"]),
                   {n: Gate(**g) for n, g in doc["gates"].items()})


def gate_limit(link, host_end: bool) -> int:
    """The queue of a gated end: the link's; at a host's NIC, never less than HOST_HOLD. A lossless NIC never drops
    what its host hands it: a paused one stops taking, and its senders wait. Here they wait when their socket's
    send buffer is full (1 MiB for the RoCE transport and the traffic flows, which the kernel doubles and counts
    with each packet's overhead), so the NIC's queue must outlast those buffers."""
    return max(link.queue_bytes, HOST_HOLD) if host_end else link.queue_bytes


def levels(fabric) -> dict[str, int]:
    """Each node's tier: hosts 0, a switch one more than its nearest host (leaves 1, spines 2)."""
    level = {h: 0 for h in fabric.hosts}
    frontier = deque(fabric.hosts)
    near: dict[str, list[str]] = {}
    for l in fabric.links:
        near.setdefault(l.a, []).append(l.b)
        near.setdefault(l.b, []).append(l.a)
    while frontier:
        node = frontier.popleft()
        for n in near.get(node, []):
            if n not in level:
                level[n] = level[node] + 1
                frontier.append(n)
    return level | {s: level.get(s, 1) for s in fabric.switches}


def problems(fabric) -> list[str]:
    """Why fabric.pfc cannot be made on this fabric as asked, one line each (empty: it can)."""
    if not fabric.params.pfc:
        return []
    found = []
    for l in fabric.links:
        t = fabric.params.pfc_thresholds(l.kind)
        if t is None or not l.shaped:
            continue
        if t["xoff_kb"] * 1024 >= l.queue_bytes:
            found.append(f"fabric.pfc: xoff_kb ({t['xoff_kb']:g}) is not below the queue of {l.name} "
                         f"({l.queue_bytes / 1024:g} KiB): the queue would drop before it pauses")
        if l.delay_us:
            found.append(f"fabric.pfc: {l.name} has a delay; pauses are not made on delayed links")
    return found[:1]


class QueueParts:
    """Which upstream ports a point's queue came from, as a switch accounts its buffer per ingress port. The
    caller adds, per point, the bytes each feed sent into it since the last reading (from the switch's flow
    counters); the queue, a FIFO, holds the last `backlog` bytes that arrived, so its parts are those bytes' feeds.
    Drops and the heartbeats' own class make that approximate; a part read later than the backlog (the counters
    are read less often than the queues) is spread over the feeds in the proportions of what was read."""

    KEEP = 64 << 20         # arrivals remembered per point: more than any queue holds

    def __init__(self):
        self.arrivals: dict[str, deque[dict[str, int]]] = {}     # point -> batches of {gate: bytes}, newest last
        self.kept: dict[str, int] = {}

    def add(self, point: str, sent: dict[str, int]) -> None:
        batch = {g: n for g, n in sent.items() if n > 0}
        if not batch:
            return
        batches = self.arrivals.setdefault(point, deque())
        batches.append(batch)
        self.kept[point] = self.kept.get(point, 0) + sum(batch.values())
        while len(batches) > 1 and self.kept[point] - sum(batches[0].values()) >= self.KEEP:
            self.kept[point] -= sum(batches.popleft().values())

    def parts(self, point: str, backlog: int) -> dict[str, int] | None:
        """gate -> bytes of the point's queue that came from it (summing to the backlog); None: nothing known of
        what feeds it."""
        parts: dict[str, float] = {}
        left = backlog
        for batch in reversed(self.arrivals.get(point, ())):
            size = sum(batch.values())
            take = min(1.0, left / size)
            for g, n in batch.items():
                parts[g] = parts.get(g, 0.0) + n * take
            left -= size * take
            if left <= 0:
                break
        known = sum(parts.values())
        if not known:
            return None
        return {g: round(n * backlog / known) for g, n in parts.items()}


class Pausing:
    """The Xoff/Xon logic, driven by the points' queues (bytes) at times the caller gives, and what fills them.

    A point passing Xoff starts asserting pause, and stops below Xon. While it asserts it pauses the gates
    feeding it whose bytes in the asserting queues (summed over them) are above their share of its Xoff (xoff /
    the number of its feeds), and resumes one that falls below its share of Xon: as a switch that accounts its
    buffer per ingress port pauses only the ports whose frames fill it. The largest part is always above its
    share (the parts sum to a queue above Xoff), so some feed is paused. Where nothing is known of the queue's parts (no flow counters),
    every feed is paused. A gate is paused while any point pauses it. Counts the gates' pauses and paused time,
    the points' Xoff crossings and asserted time, and the crossings whose queue could not be attributed."""

    def __init__(self, points: tuple[Point, ...] | list[Point]):
        self.points = {p.name: p for p in points}
        self.asserting: dict[str, float] = {}       # point -> since
        self.holding: dict[str, set[str]] = {}      # point -> the gates it pauses
        self.paused: dict[str, float] = {}          # gate -> since
        self.pauses: dict[str, int] = {g: 0 for p in points for g in p.feeds}
        self.paused_s: dict[str, float] = {g: 0.0 for g in self.pauses}
        self.xoffs: dict[str, int] = {p: 0 for p in self.points}
        self.asserted_s: dict[str, float] = {p: 0.0 for p in self.points}
        self.unattributed: dict[str, int] = {p: 0 for p in self.points}

    def crossing(self, backlogs: dict[str, int]) -> bool:
        """Whether a point not asserting is past Xoff in these queues (its parts are wanted now)."""
        return any(q > self.points[n].xoff for n, q in backlogs.items() if n in self.points and n not in self.asserting)

    def step(self, now: float, backlogs: dict[str, int],
             parts: dict[str, dict[str, int] | None] | None = None) -> tuple[list[str], list[str]]:
        """The gates to pause and to resume now, given the points' queues (a point missing keeps its state) and,
        per point, its queue's parts by gate (QueueParts.parts; a point missing or None: not known)."""
        parts = parts or {}
        for name, p in self.points.items():
            queue = backlogs.get(name)
            if queue is None:
                continue
            if name in self.asserting and queue < p.xon:
                self.asserted_s[name] += now - self.asserting.pop(name)
                self.holding.pop(name, None)
                continue
            if name not in self.asserting and queue > p.xoff:
                self.asserting[name] = now
                self.xoffs[name] += 1
                self.unattributed[name] += not parts.get(name)
        held = self.held(parts)
        for name in self.asserting:
            if name in backlogs:
                self.holding[name] = self.filling(self.points[name], parts.get(name), held,
                                                  self.holding.get(name, set()))
        wanted = {g for gates in self.holding.values() for g in gates}
        pause = sorted(wanted - set(self.paused))
        resume = sorted(set(self.paused) - wanted)
        for g in pause:
            self.paused[g] = now
            self.pauses[g] += 1
        for g in resume:
            self.paused_s[g] += now - self.paused.pop(g)
        return pause, resume

    def held(self, parts: dict[str, dict[str, int] | None]) -> dict[str, int]:
        """gate -> its bytes in the asserting queues whose parts are known: a switch accounts a port's frames
        wherever they wait, so a feed filling two congested queues a little each counts once with both."""
        return sum((Counter(parts.get(name) or {}) for name in self.asserting), Counter())

    @staticmethod
    def filling(p: Point, parts: dict[str, int] | None, held: dict[str, int], holding: set[str]) -> set[str]:
        """The feeds an asserting point pauses: those whose bytes in the congested queues are above their share
        of its Xoff, and those it already pauses still at their share of Xon or above; every feed where its
        queue's parts are not known."""
        if not parts:
            return set(p.feeds)
        n = len(p.feeds)
        return {g for g in p.feeds
                if held.get(g, 0) * n > p.xoff or (g in holding and held.get(g, 0) * n >= p.xon)}

    def release(self, now: float) -> list[str]:
        """Every pause ends (the watcher stops): the gates to resume."""
        for name, since in self.asserting.items():
            self.asserted_s[name] += now - since
        self.asserting.clear()
        self.holding.clear()
        _, resume = self.step(now, {})
        return resume

    def counters(self, now: float) -> dict:
        """{"gates": {gate: {pauses, paused_s}}, "points": {point: {xoffs, asserted_s}}, "unattributed": {point:
        Xoff crossings whose parts were not known} (those with any)}, ongoing ones counted to now."""
        return {"gates": {g: {"pauses": n, "paused_s": round(self.paused_s[g] + now - self.paused.get(g, now), 6)}
                          for g, n in self.pauses.items()},
                "points": {p: {"xoffs": n, "asserted_s": round(self.asserted_s[p] + now - self.asserting.get(p, now),
                                                               6)} for p, n in self.xoffs.items()},
                "unattributed": {p: n for p, n in self.unattributed.items() if n}}


def totals(stats: dict) -> dict:
    """A fabric's pauses and paused time, summed over its gates."""
    gates = stats.get("gates", {}).values()
    return {"pauses": sum(g["pauses"] for g in gates), "paused_s": round(sum(g["paused_s"] for g in gates), 6)}


def growth(before: dict, after: dict) -> dict:
    """pfc_pauses and pfc_paused_s between two totals()."""
    return {"pfc_pauses": after["pauses"] - before["pauses"],
            "pfc_paused_s": round(after["paused_s"] - before["paused_s"], 6)}


class PfcError(RuntimeError):
    """The pause process failed or did not answer."""


class Pauses:
    """The fabric's pause process (pfcd.py): started with the plan, asked for its counters, ended by closing its
    input (it resumes every gate it paused before it exits)."""

    def __init__(self, plan: Plan, period_s: float = PERIOD_S):
        self.daemon: Daemon | None = Daemon("testbed.fabric.pfcd", REPLY_TIMEOUT_S)
        self.ask(op="start", plan=plan.to_json(), period_s=period_s)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def pid(self) -> int:
        return self.daemon.pid

    def stats(self) -> dict:
        """{"gates": {...}, "points": {...}, "polls", "cpu_s", "errors"} (Pausing.counters and the loop's own)."""
        return self.ask(op="stats")

    def ask(self, **cmd) -> dict:
        if self.daemon is None or not self.daemon.alive():
            raise PfcError("the pause process has exited")
        answer = self.daemon.ask(cmd)
        if not answer.get("ok"):
            raise PfcError(f"pause process, {cmd.get('op')}: {answer.get('error')}")
        return answer

    def close(self) -> dict:
        """Stop pausing; the last counters (empty if the process was gone)."""
        if self.daemon is None:
            return {}
        last = {}
        try:
            last = self.stats()
        except PfcError:
            pass
        self.daemon.end()
        self.daemon = None
        return last
