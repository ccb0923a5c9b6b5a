"""A communicator over a subset of a parent's ranks (a TP, DP or pipeline group), sharing its queue pairs.

The collective algorithms take any object with rank, world, peers, me, ring, chunk, op and exchange(); this
one renumbers the group's members 0..g-1 and forwards exchanges to the parent with the parent's ranks, so a
rank's TP and DP groups reuse the connections it already has (as ncclCommSplit children would their parent's
transport) and every byte it sends is tallied per destination.
"""
from __future__ import annotations

import numpy as np

from hosts.collectives.comm import Peer, rail_ring


class SubComm:
    def __init__(self, parent, members: list[int], label: str, sent: dict[int, int] | None = None):
        if parent.rank not in members:
            raise ValueError(f"rank {parent.rank} is not a member of its {label} group {members}")
        self.parent, self.members, self.label = parent, list(members), label
        self.peers = [Peer(**{**vars(parent.peers[g]), "rank": k}) for k, g in enumerate(self.members)]
        self.rank, self.world = self.members.index(parent.rank), len(self.members)
        self.me = self.peers[self.rank]
        self.ring = rail_ring(self.peers)
        self.chunk = parent.chunk
        self.sent = {} if sent is None else sent       # parent rank -> payload bytes sent to it

    @property
    def op(self) -> str:
        return self.parent.op

    @op.setter
    def op(self, value: str) -> None:
        self.parent.op = f"{self.label} {value}"       # errors name the group and the operation

    def fail(self, what: str):
        return self.parent.fail(what)

    def exchange(self, sends=(), recvs=()) -> None:
        sends = [(self.members[r], arr) for r, arr in sends]
        for r, arr in sends:
            self.sent[r] = self.sent.get(r, 0) + np.asarray(arr).nbytes
        self.parent.exchange(sends, [(self.members[r], arr) for r, arr in recvs])
