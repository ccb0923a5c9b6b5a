"""The recovery membership of a collective job: the one module that knows its keys and files.

In the job's store (a FileStore on the job's directory, shared by the ranks and the testbed's job manager),
for each epoch E >= 1 that a failure starts:
    epoch{E}/alive/{name}   a survivor's announcement {"at", "step", "in_op", "suspects", "links_down", "server"}
    epoch{E}/failed         the verdict {"failed", "step", "lost_steps", ...}          (the first survivor)
    epoch{E}/members        the new membership {"members", "step", ...} or {"error"}   (a rank, or the manager)
    epoch{E}/plan{S}        the leader's plan at the boundary of step S {"grow": [names], "stop"}  (rank 0)
and, for a rank that comes back (a restarted GPU, a repaired NIC: it rejoins at a step boundary):
    join/{name}             its request {"at", "me": member entry}                    (the restarted rank)
    joined/{name}           the answer {"epoch": E} or {"error"}   (the rank that decides E, or the manager)
Beside them in the job's directory: epoch{E}/ (the epoch's own rendezvous store) and
spare-{host}-epoch{E}.json (the spec of a spare's rank joining epoch E).
"""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import asdict

from hosts.collectives.comm import Peer
from hosts.collectives.store import FileStore


def peer_entry(rank: int, name: str, ip: str, hb_ip: str | None, server: int | None,
               local_rank: int | None) -> dict:
    """A rank's entry in a job spec's "peers" (what the rank programs make a comm.Peer of)."""
    return asdict(Peer(rank=rank, name=name, ip=ip, hb_ip=hb_ip, server=server, local_rank=local_rank))


def member_entry(name: str, ip: str, hb_ip: str | None, server: int | None, local_rank: int | None) -> dict:
    """A rank's entry in an epoch's membership: where it runs (its number is its position)."""
    entry = peer_entry(0, name, ip, hb_ip, server, local_rank)
    del entry["rank"]
    return entry


def epoch_dir(job_dir: str, epoch: int) -> str:
    """The directory of an epoch's own rendezvous (its barriers and queue-pair exchange)."""
    return os.path.join(job_dir, f"epoch{epoch}")


def epoch_dirs(job_dir: str) -> list[str]:
    """The epochs' directories that exist so far."""
    try:
        names = os.listdir(job_dir)
    except FileNotFoundError:
        return []
    return [os.path.join(job_dir, n) for n in sorted(names)
            if n.startswith("epoch") and n[5:].isdigit() and os.path.isdir(os.path.join(job_dir, n))]


def spare_spec_path(job_dir: str, host: str, epoch: int) -> str:
    """Where the job manager writes the spec of the rank a spare host runs from epoch `epoch` on."""
    return os.path.join(job_dir, f"spare-{host}-epoch{epoch}.json")


def decide(names: list[str], announced: dict[str, dict], policy: str) -> dict:
    """The verdict once every member has announced itself or is known failed: who failed, the step to resume from
    (the earliest one a survivor had not completed; it is run again) and how many started steps are lost.

    A member that did not announce is failed (crashed, stopped, stalled). Members that did announce but
    found each other failed by their heartbeats (a NIC or cable cut, a partition: both ends alive, the path
    between them dead) cannot all stay: the members with the most such cuts go first until none is left;
    between equals, one whose own port has no carrier (it knows the cut is its own), then the later one in
    the job's order (a partition keeps the side of the first rank). Ranks watch their ring neighbours
    (beats.watched): a rank whose own link died is in its two neighbours' cuts, they in one each. A partition
    that leaves carrier up and splits a ring into runs of two or more is seen only where the runs meet: first,
    the ranks that hear each other are grouped (sides_to_remove), and when the cuts run only between groups
    and split them in two sides, the smaller side goes whole.

    A member whose own NIC has no carrier, in a job that spans servers, is cut off whether or not a peer has
    suspected it yet: it knows at once, while its peers' heartbeats time out up to a beat period apart, so
    a partitioned server's second GPU may not be suspected by the time every member has announced."""
    failed = [n for n in names if n not in announced]
    alive = [n for n in names if n in announced]
    cut_off = []
    if len({announced[n].get("server") for n in alive}) > 1:
        cut_off = [n for n in alive if "nic" in announced[n].get("links_down", [])]
        alive = [n for n in alive if n not in cut_off]
    cuts = {frozenset((a, b)) for a in alive for b in announced[a].get("suspects", {}) if b in alive and b != a}
    for n in sides_to_remove(names, alive, announced, cuts):
        cut_off.append(n)
        alive.remove(n)
    cuts = {cut for cut in cuts if cut <= set(alive)}
    while cuts:
        degree = Counter(n for cut in cuts for n in cut)
        worst = max(degree, key=lambda n: (degree[n], bool(announced[n].get("links_down")), names.index(n)))
        cut_off.append(worst)
        alive.remove(worst)
        cuts = {cut for cut in cuts if worst not in cut}
    survivors = {n: announced[n] for n in alive}
    verdict = {"failed": [n for n in names if n in failed or n in cut_off], "cut_off": cut_off,
               "step": min(a["step"] for a in survivors.values()), "decided_at": time.time(), "policy": policy}
    last_started = max(a["step"] if a["in_op"] else a["step"] - 1 for a in survivors.values())
    verdict["lost_steps"] = max(0, last_started - verdict["step"] + 1)
    return verdict


def sides_to_remove(names: list[str], alive: list[str], announced: dict[str, dict], cuts: set) -> list[str]:
    """The ranks of a partition's smaller side, when the cuts tell the sides apart; [] when they do not.

    Ranks that hear each other (a beat on a direct path in the last half timeout, `hears` in their
    announcements) are on one side: grouped, the runs of a ring that a partition split are groups, and the cuts
    run between them, each from a group of one side to one of the other. Where every cut joins two groups and
    the groups joined by cuts colour in two (the cuts make no odd cycle), each connected set of them with two
    cuts or more (a split ring has two ends at least; one cut may be one path's failure between two groups
    that a late beat left unjoined) loses its smaller colour: fewer ranks, then one with a port without
    carrier, then the one without the first rank in the job's order. Otherwise (a cut inside a group: a rank
    that lost one path but is heard on another, or three sides) the caller removes rank by rank."""
    if not cuts:
        return []
    group = {n: n for n in alive}

    def root(n):
        while group[n] != n:
            group[n] = group[group[n]]
            n = group[n]
        return n
    for a in alive:
        for b in announced[a].get("hears", ()):
            if b in group and b != a and frozenset((a, b)) not in cuts:
                group[root(a)] = root(b)
    between: dict[str, set[str]] = {}
    ends = Counter()                        # group -> the cuts that start from it (one end per cut)
    for a, b in (tuple(cut) for cut in cuts):
        ga, gb = root(a), root(b)
        if ga == gb:
            return []
        between.setdefault(ga, set()).add(gb)
        between.setdefault(gb, set()).add(ga)
        ends[ga] += 1
    members: dict[str, list[str]] = {}
    for n in alive:
        members.setdefault(root(n), []).append(n)
    colour: dict[str, int] = {}
    remove: list[str] = []
    for start in sorted(between, key=lambda g: names.index(members[g][0])):
        if start in colour:
            continue
        colour[start], todo, seen = 0, [start], [start]
        while todo:
            g = todo.pop()
            for h in between[g]:
                if h not in colour:
                    colour[h] = 1 - colour[g]
                    todo.append(h)
                    seen.append(h)
                elif colour[h] == colour[g]:
                    return []
        if sum(ends[g] for g in seen) < 2:      # one cut: a ring split has two ends; rank by rank decides
            continue
        sides = [[n for g in seen if colour[g] == c for n in members[g]] for c in (0, 1)]
        goes = max(sides, key=lambda side: (-len(side), any(announced[n].get("links_down") for n in side),
                                            min(names.index(n) for n in side)))
        remove += goes
    return sorted(remove, key=names.index, reverse=True)       # the later first, as rank by rank


def admit(members: list[dict], joining: list[dict], order: list[str]) -> list[dict]:
    """The membership grown by ranks that come back: each newcomer goes right after the last member that
    precedes it in the job's original order (`order`), so a job whose ranks all came back is numbered as
    it began; a name already a member is not added twice."""
    out = [dict(m) for m in members]
    for new in joining:
        if any(m["name"] == new["name"] for m in out):
            continue
        before = order[:order.index(new["name"])] if new["name"] in order else order
        at = max((i + 1 for i, m in enumerate(out) if m["name"] in before), default=0)
        out.insert(at, dict(new))
    return out


class Membership:
    """The membership keys of one job, over its FileStore."""

    def __init__(self, store: FileStore):
        self.store = store

    @staticmethod
    def _key(epoch: int, what: str) -> str:
        return f"epoch{epoch}/{what}"

    # a survivor's announcement
    def announce(self, epoch: int, name: str, info: dict) -> None:
        self.store.set(self._key(epoch, f"alive/{name}"), info)

    def announced(self, epoch: int, names: list[str]) -> dict[str, dict]:
        """The announcements made so far by `names`, in their order."""
        return {n: self.store.get(self._key(epoch, f"alive/{n}")) for n in names
                if self.store.exists(self._key(epoch, f"alive/{n}"))}

    # the verdict: who failed, where to resume
    def has_verdict(self, epoch: int) -> bool:
        return self.store.exists(self._key(epoch, "failed"))

    def verdict(self, epoch: int) -> dict:
        return self.store.get(self._key(epoch, "failed"))

    def set_verdict(self, epoch: int, verdict: dict) -> None:
        self.store.set(self._key(epoch, "failed"), verdict)

    # the new membership
    def has_members(self, epoch: int) -> bool:
        return self.store.exists(self._key(epoch, "members"))

    def members(self, epoch: int, timeout: float | None = None, what: str | None = None) -> dict:
        """Wait for epoch's membership (FileStore.get's timeout and `what`)."""
        return self.store.get(self._key(epoch, "members"), timeout=timeout, what=what)

    def set_members(self, epoch: int, decision: dict) -> None:
        self.store.set(self._key(epoch, "members"), decision)

    # the leader's plan at a step boundary: who joins, whether the job stops
    def set_plan(self, epoch: int, step: int, plan: dict) -> None:
        self.store.set(self._key(epoch, f"plan{step}"), plan)

    def plan(self, epoch: int, step: int) -> dict:
        """The plan, or {} if the leader made none (it is written before the leader's barrier arrival)."""
        key = self._key(epoch, f"plan{step}")
        return self.store.get(key) if self.store.exists(key) else {}

    # ranks that come back
    def request_join(self, name: str, me: dict) -> None:
        self.store.delete(f"joined/{name}")          # an answer to an earlier life is not this one's
        self.store.set(f"join/{name}", {"at": time.time(), "me": me})

    def join_requests(self) -> dict[str, dict]:
        """Pending requests: name -> {"at", "me"}, oldest first."""
        found = {n: self.store.get(f"join/{n}") for n in self.store.keys("join/")}
        return dict(sorted(found.items(), key=lambda kv: kv[1]["at"]))

    def answer_join(self, name: str, answer: dict) -> None:
        self.store.set(f"joined/{name}", answer)
        self.store.delete(f"join/{name}")

    def joined(self, name: str, timeout: float) -> dict:
        return self.store.get(f"joined/{name}", timeout=timeout, what="admission into the job")
