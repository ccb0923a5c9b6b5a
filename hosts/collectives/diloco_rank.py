"""One rank of a DiLoCo run, as a library; its program is hosts/agents/diloco_rank.py (with the SPEC).

Every inner step sleeps the emulated compute time, then AllReduces the step's gradient within the rank's site
(a ring over the site's ranks) and takes an SGD step. The variants differ in what crosses sites:

    ddp         every step, the site's gradient sum: the baseline that synchronises everything every step
    diloco      every H steps, the pseudo-gradient (outer - theta), then Nesterov on the outer parameters;
                training waits for it
    streaming   P fragments in turn, one every H/P steps; a fragment's exchange runs while the next step
                computes (the sleep is only what is left of the compute time after it), and its outer update
                is applied after that step, merged with the fragment's local progress (`mix`)

One rank per site crosses sites: the site's first rank (its leader) AllReduces with the other sites' leaders
(ring in site order: diloco.ring_sum is its exact sum), or AllGathers their quantised payloads, and broadcasts
the result through its site. Every rank of a site holds the same parameters, so one exchange per site is all
the WAN needs; a site of any size takes part the same way.

With `rejoin` (diloco), a site cut off for longer than the transport's retries leaves the outer steps and comes
back with the global state (diloco_rejoin.py).

Prints {"rank", "site", "steps": [{"start", "end", "compute_s", "site_s", "wan_s", "wan_bytes",
"wan_wire_bytes"}], "theta", "outer" (digests), "loss", "counters", "membership" (with rejoin)} or {"rank",
"error", "error_at"}.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.collectives import algorithms
from hosts.collectives import diloco as dl
from hosts.collectives.diloco_rejoin import Membership
from hosts.collectives.store import FileStore
from hosts.collectives.subcomm import SubComm
from hosts.spec.rank import DilocoRankSpec


class DilocoRank:
    def __init__(self, spec: DilocoRankSpec, comm):
        self.spec, self.comm = spec, comm
        me = comm.rank
        self.site = next(i for i, ranks in enumerate(spec.sites) if me in ranks)
        self.leaders = [ranks[0] for ranks in spec.sites]
        self.local = SubComm(comm, list(spec.sites[self.site]), "site", {})
        self.wan_sent: dict[int, int] = {}
        self.cross = None
        if me in self.leaders:
            self.cross = SubComm(comm, self.leaders, "wan", self.wan_sent)
            self.cross.ring = list(range(len(self.leaders)))       # site order: the order ring_sum reproduces
        n = spec.count
        self.goal = dl.target(n, spec.seed)
        self.theta, self.outer = dl.initial(n, spec.seed), dl.initial(n, spec.seed)
        self.momentum, self.residual = np.zeros(n, dl.F32), np.zeros(n, dl.F32)
        self.frag = dl.fragments(n, spec.fragments if spec.variant == "streaming" else 1)
        self.membership = Membership(self) if spec.rejoin else None

    def connect(self) -> None:
        """Open the queue pairs this rank uses before the clock starts, in ascending peer order on every rank."""
        self.comm.op = "connect"
        peers = set(self.local.members) | set(self.cross.members if self.cross else ())
        for q in sorted(peers - {self.comm.rank}):
            self.comm.channel(q)

    def wire_to_other_sites(self) -> int:
        others = {q for i, ranks in enumerate(self.spec.sites) if i != self.site for q in ranks}
        return sum(qp.counters.get("tx_bytes", 0) for q, ch in self.comm.channels.items() if q in others
                   for qp in ch.qps)

    # -- the exchanges across sites --------------------------------------------------------------
    def cross_sum(self, x: np.ndarray) -> np.ndarray:
        """The float sum over sites (ring AllReduce of the leaders), broadcast through the site."""
        if self.cross is not None:
            algorithms.allreduce(self.cross, x, "sum", "ring")
        return algorithms.broadcast(self.local, x, 0)

    def cross_mean_quantized(self, delta: np.ndarray, p: int) -> np.ndarray:
        sl, bits, n = self.frag[p], self.spec.quantize, len(delta)
        mine = dl.with_feedback(delta, self.residual[sl], bits)     # every rank of the site keeps the residual
        gathered = np.empty(len(self.spec.sites) * len(mine), np.uint8)
        if self.cross is not None:
            gathered = algorithms.allgather(self.cross, mine, "ring")
        algorithms.broadcast(self.local, gathered, 0)
        parts = np.split(gathered, len(self.spec.sites))
        return dl.ordered_sum(parts, bits, n) / dl.F32(len(self.spec.sites))

    def exchange(self, p: int) -> np.ndarray:
        """The averaged pseudo-gradient of fragment p over the sites."""
        sl = self.frag[p]
        delta = self.outer[sl] - self.theta[sl]
        if self.spec.quantize:
            return self.cross_mean_quantized(delta, p)
        return self.cross_sum(delta) / dl.F32(len(self.spec.sites))

    def outer_step(self, p: int, avg: np.ndarray) -> None:
        sl = self.frag[p]
        dl.nesterov(self.outer[sl], self.momentum[sl], avg, self.spec.outer_lr, self.spec.momentum)

    # -- one inner step --------------------------------------------------------------------------
    def step(self, t: int, pending: list[int]) -> tuple[dict, list[int]]:
        s = self.spec
        wire0, sent0 = self.wire_to_other_sites(), sum(self.wan_sent.values())
        start = time.monotonic()
        overlapped = [(p, self.exchange(p)) for p in pending]        # streaming: during this step's compute
        wan_s = time.monotonic() - start
        time.sleep(max(0.0, s.compute_s - wan_s))
        compute_end = time.monotonic()
        g = dl.gradient(self.theta, self.goal, s.seed, self.comm.rank, t)
        algorithms.allreduce(self.local, g, "sum", "ring")
        ranks = len(self.local.members)
        if s.variant == "ddp":
            t0 = time.monotonic()
            g = self.cross_sum(g)
            wan_s += time.monotonic() - t0
            ranks = sum(map(len, s.sites))
        dl.inner_update(self.theta, g, s.inner_lr, ranks)
        site_end = time.monotonic()
        for p, avg in overlapped:
            self.outer_step(p, avg)
            dl.merge(self.theta[self.frag[p]], self.outer[self.frag[p]], s.mix)
        launch = dl.launched(s.variant, t + 1, s.sync_every, s.fragments, s.steps)
        if s.variant == "diloco" and launch:
            t0 = time.monotonic()
            if self.membership is not None:
                self.membership.outer_sync((t + 1) // s.sync_every - 1, t + 1)
            else:
                self.outer_step(0, self.exchange(0))
                self.theta[:] = self.outer
            wan_s += time.monotonic() - t0
            launch = []
        end = time.monotonic()
        return ({"start": start, "end": end, "compute_s": compute_end - start, "site_s": site_end - compute_end,
                 "wan_s": wan_s, "wan_bytes": sum(self.wan_sent.values()) - sent0,
                 "wan_wire_bytes": self.wire_to_other_sites() - wire0}, launch)


def run_rank(spec: DilocoRankSpec, comm, store: FileStore) -> dict:
    """Connect, then run the inner steps after a barrier; returns this rank's measurements and parameters."""
    rank = DilocoRank(spec, comm)
    rank.connect()
    store.barrier("start", comm.rank, comm.world)
    steps, pending = [], []
    for t in range(spec.steps):
        row, pending = rank.step(t, pending)
        steps.append(row)
    outer = rank.theta if spec.variant == "ddp" else rank.outer
    out = {"rank": comm.rank, "site": rank.site, "steps": steps, "theta": dl.digest(rank.theta),
           "outer": dl.digest(outer), "loss": dl.loss(rank.theta, rank.goal), "counters": comm.counters()}
    if rank.membership is not None:
        out["membership"] = rank.membership.report()
    return out
