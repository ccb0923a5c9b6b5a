"""DiLoCo's outer synchronisation when a site may leave and come back, as PCCL's peers do: the outer step of the
sites still reachable, and the state handed to a site that is back.

The store (the job's control plane, outside the emulated network, as PCCL's master is) holds the decisions; the
data crosses the WAN. At outer step k every leader in the group tries the ring AllReduce of the group's
pseudo-gradients (quantised: the ring AllGather of their payloads, summed in site order) and writes whether it
completed. The anchor (site 0's leader, which keeps the run's state)
decides the step's members: the whole group if every leader completed, else the anchor and the sites whose
exchange completed, which run the exchange again among themselves over fresh queue pairs (alone, the anchor's
own pseudo-gradient is the mean). A site left out is away: its ranks go on with inner steps on their own
parameters. At every later outer step an away leader asks to come back; the anchor sends it the state after its
outer step (outer parameters and momentum) over fresh queue pairs, and the site takes part from the next outer
step on, its parameters the outer ones and its error-feedback residual cleared (diloco.reference models this
history exactly). If the handover fails the site stays away and asks again. The anchor's word, in the store, is
final: a site that received the state but is not in the next group discards it.

Site 0 is kept whatever happened; when the anchor itself is cut off the other sites leave and come back.
"""
from __future__ import annotations

import os
import time

import numpy as np

from hosts.collectives import algorithms
from hosts.collectives import diloco as dl
from hosts.collectives.comm import CollectiveError
from hosts.collectives.store import FileStore
from hosts.collectives.subcomm import SubComm

ANCHOR = 0


class Membership:
    def __init__(self, rank):
        self.r = rank
        self.base = rank.comm.store
        self.group = list(range(len(rank.spec.sites)))     # the sites in the job, as this site knows it
        self.away = False
        self.history: list[list[int]] = []                  # the members of each outer step
        self.resyncs: list[list[int]] = []                  # [inner steps done, site] of each state handover
        self.events: list[dict] = []                        # this site leaving and coming back
        self.resync_bytes = 0

    @property
    def leader(self) -> bool:
        return self.r.cross is not None

    def fresh_channels(self, sites: list[int], tag: str) -> None:
        """New queue pairs to the other leaders of `sites`: the old ones may have failed with the WAN."""
        comm, me = self.r.comm, self.r.comm.rank
        others = sorted(self.r.leaders[j] for j in sites if self.r.leaders[j] != me)
        for q in others:
            comm.replace_channel(q)
        comm.store = FileStore(os.path.join(self.base.path, tag), timeout=self.base.timeout)
        try:
            for q in others:
                comm.channel(q)
        finally:
            comm.store = self.base

    def ring(self, sites: list[int], delta: np.ndarray) -> np.ndarray:
        """The sum over `sites` of their pseudo-gradients: a ring AllReduce of float32, or with `quantize` a ring
        AllGather of the sites' payloads summed in site order (the sum diloco.ordered_sum reproduces)."""
        cross = SubComm(self.r.comm, [self.r.leaders[j] for j in sites], "wan", self.r.wan_sent)
        cross.ring = list(range(len(sites)))                # site order: the order ring_sum reproduces
        bits = self.r.spec.quantize
        if bits:
            gathered = algorithms.allgather(cross, delta, "ring") if len(sites) > 1 else delta
            return dl.ordered_sum(np.split(gathered, len(sites)), bits, len(self.r.outer))
        x = delta.copy()
        if len(sites) > 1:
            algorithms.allreduce(cross, x, "sum", "ring")
        return x

    def try_ring(self, sites: list[int], delta: np.ndarray) -> np.ndarray | None:
        try:
            return self.ring(sites, delta)
        except CollectiveError:
            for j in sites:                                 # their queue pairs may be in error: new ones later
                if self.r.leaders[j] != self.r.comm.rank:
                    self.r.comm.replace_channel(self.r.leaders[j])
            return None

    # -- the leaders ------------------------------------------------------------------------------
    def lead(self, k: int, delta: np.ndarray) -> tuple[list[int], np.ndarray | None]:
        """This leader's part of outer step k: (the step's members, the sum of their pseudo-gradients if this
        site is one)."""
        me, base = self.r.site, self.base
        total = self.try_ring(self.group, delta)
        base.set(f"status/{k}/{me}", total is not None)
        if me == ANCHOR:
            done = {j: base.get(f"status/{k}/{j}", what=f"site {j}'s outer step {k}") for j in self.group}
            members = self.group if all(done.values()) else [j for j in self.group if j == ANCHOR or
                                                               (done[j] and done[ANCHOR])]
            base.set(f"decision/{k}", {"members": members, "again": members != self.group})
        decision = base.get(f"decision/{k}", what=f"the anchor's outer step {k}")
        members = decision["members"]
        if me not in members:
            return members, None
        if decision["again"]:
            self.fresh_channels(members, f"again{k}")
            total = self.ring(members, delta)               # among sites that just exchanged: no retry here
        return members, total

    def hand_over(self, k: int, done: int, members: list[int], state: np.ndarray) -> list[int]:
        """The anchor after outer step k: the state to every away site that asked; the next group."""
        base, joined = self.base, []
        for j in sorted(set(range(len(self.r.spec.sites))) - set(members)):
            if not base.exists(f"join/{k}/{j}"):
                continue
            base.set(f"offer/{k}/{j}", True)
            self.fresh_channels([ANCHOR, j], f"join{k}-{j}")
            try:
                self.r.comm.exchange(sends=[(self.r.leaders[j], state)])
            except CollectiveError:
                self.r.comm.replace_channel(self.r.leaders[j])
                continue
            joined.append(j)
            self.resync_bytes += state.nbytes
        group = sorted(set(members) | set(joined))
        base.set(f"group/{k + 1}", {"group": group, "joined": joined, "done": done})
        return group

    def ask_back(self, k: int, state: np.ndarray) -> bool:
        """An away leader after outer step k: ask, take the state if offered; back if the anchor says so."""
        base, me = self.base, self.r.site
        base.set(f"join/{k}/{me}", True)
        key, start = None, time.monotonic()
        while key is None:
            key = next((x for x in (f"offer/{k}/{me}", f"group/{k + 1}") if base.exists(x)), None)
            if time.monotonic() - start > base.timeout:
                base.get(f"group/{k + 1}", timeout=0, what=f"the anchor after outer step {k}")
            time.sleep(0.005)
        if key.startswith("offer"):
            self.fresh_channels([ANCHOR, me], f"join{k}-{me}")
            try:
                self.r.comm.exchange(recvs=[(self.r.leaders[ANCHOR], state)])
            except CollectiveError:
                self.r.comm.replace_channel(self.r.leaders[ANCHOR])
        return me in base.get(f"group/{k + 1}", what=f"the anchor after outer step {k}")["group"]

    # -- every rank -------------------------------------------------------------------------------
    def outer_sync(self, k: int, done: int) -> None:
        """DiLoCo's outer step k (after `done` inner steps) with sites leaving and coming back."""
        r, me, base = self.r, self.r.site, self.base
        was_away = self.away
        n = len(r.outer)
        delta = r.outer - r.theta
        if r.spec.quantize and not was_away:                # what this site sends: its payload, fed back once
            delta = dl.with_feedback(delta, r.residual, r.spec.quantize)
        members, total = None, None
        if self.leader and not was_away:
            members, total = self.lead(k, delta)
        if self.leader and was_away:
            members = base.get(f"decision/{k}", what=f"the anchor's outer step {k}")["members"]
        # the site's part: whether it took part, then the sum, through the site
        members = members if self.leader else base.get(f"decision/{k}", what=f"the anchor's outer step {k}")["members"]
        if me in members:
            total = algorithms.broadcast(r.local, total if total is not None else np.zeros(n, dl.F32), 0)
            dl.nesterov(r.outer, r.momentum, total / dl.F32(len(members)), r.spec.outer_lr, r.spec.momentum)
            r.theta[:] = r.outer
        elif not was_away:
            self.away = True
            self.events.append({"event": "left", "outer_step": k, "done": done, "event_at": time.time()})
        self.history.append(members)
        # the handover: the anchor offers, away leaders ask; the anchor's next group is final for everyone
        state = np.concatenate([r.outer, r.momentum])
        if self.leader and me == ANCHOR:
            self.group = self.hand_over(k, done, members, state)
        elif self.leader and was_away:
            self.ask_back(k, state)
        nxt = base.get(f"group/{k + 1}", what=f"the anchor after outer step {k}")
        if self.leader:
            self.group = nxt["group"]
        back = me in nxt["joined"]
        self.resyncs += [[done, j] for j in nxt["joined"]]
        if back:
            state = algorithms.broadcast(r.local, state, 0)
            r.outer[:], r.momentum[:] = state[:n], state[n:]
            r.theta[:] = r.outer
            r.residual[:] = 0
            self.away = False
            self.resync_bytes += state.nbytes if self.leader else 0
            self.events.append({"event": "rejoined", "outer_step": k, "done": done, "event_at": time.time()})
        if self.leader and (nxt["joined"] or self.group != members) and me in self.group and len(self.group) > 1:
            self.fresh_channels(self.group, f"group{k + 1}")

    def report(self) -> dict:
        return {"members": self.history, "resyncs": self.resyncs, "events": self.events,
                "resync_bytes": self.resync_bytes}
