"""Pipelined hierarchical AllReduce and AllGather: the buffer is cut into pieces that flow HB -> rail -> HB
concurrently, as NCCL overlaps NVLink and the NIC, instead of one phase after the other.

Every stage of a piece is one direct exchange with the peers of its group (the HB domain is a switch, like
NVSwitch, and a rail's GPUs share a rail switch, so any two can talk):

    allreduce  HB reduce-scatter -> rail reduce-scatter -> rail all-gather -> HB all-gather   (4 stages)
    allgather  rail all-gather -> HB all-gather                                                (2 stages)

The whole operation is ONE Communicator.stream: every message is queued up front, in the order a lock-step
schedule would send it (step s runs stage j of piece s - j), and becomes ready when the data it carries is
computed: a stage's receipts complete, it reduces, and the next stage's messages go. No step waits for the
slowest link of the last one, so the rail streams while the HB domain works ahead or behind. The analytical
model of this schedule is testbed/model/bounds.py's pipelined_time.
"""
from __future__ import annotations

import numpy as np

from hosts.collectives.comm import Message
from hosts.collectives.groups import bounds, check_grid, hb_group, rail_group
from hosts.collectives.phases import phase

MIN_PIECE = 256 * 1024      # bytes of the whole buffer per piece, when the caller does not say how many
MAX_PIECES = 32


def pieces(comm, nbytes: int, elements: int) -> int:
    """How many pieces to cut a buffer of nbytes (`elements` the length of what is cut) into: comm.pieces if the
    caller chose (the testbed does, from the link rates: testbed/model/bounds.py pipeline_pieces), otherwise
    one per MIN_PIECE."""
    k = getattr(comm, "pieces", None) or nbytes // MIN_PIECE
    return max(1, min(MAX_PIECES, k, elements))


class Gate:
    """Runs `action` once `need` events have happened: a stage's receipts, plus one for the stage before it
    being done (its hit() comes from that stage's action, or from the start for a first stage)."""

    def __init__(self, need: int, action):
        self.need, self.action = need, action

    def hit(self) -> None:
        self.need -= 1
        if self.need == 0:
            self.action()


DONE = Gate(0, None)     # receipts nothing waits for (the last stage's)


def ready(messages):
    def go():
        for m in messages:
            m.ready = True
    return go


class Plan:
    """The sends and receives of one stream, each tagged with its lock-step position (step, stage) so that
    both ends of every pair list them in the same order."""

    def __init__(self):
        self.sends, self.recvs, self.first = [], [], []

    def send(self, at, peer, arr, is_ready=True) -> Message:
        m = Message(arr, is_ready)
        self.sends.append((at, peer, m))
        return m

    def recv(self, at, peer, arr, gate: Gate) -> None:
        self.recvs.append((at, peer, arr, gate.hit))

    def gate(self, receipts: int, action, first: bool = False) -> Gate:
        g = Gate(receipts + 1, action)
        if first:
            self.first.append(g)
        return g

    def run(self, comm) -> None:
        sends = [(peer, m) for _, peer, m in sorted(self.sends, key=lambda e: e[0])]
        recvs = [(peer, arr, then) for _, peer, arr, then in sorted(self.recvs, key=lambda e: e[0])]
        with phase(comm, "pipelined"):
            for g in self.first:          # a first stage waits for nothing before it
                g.hit()
            comm.stream(sends, recvs)


def allreduce(comm, x: np.ndarray, fn) -> np.ndarray:
    check_grid(comm)
    hb, rail = hb_group(comm), rail_group(comm)
    me, mr = hb.index(comm.rank), rail.index(comm.rank)
    hb_peers = [q for q in range(len(hb)) if q != me]
    rail_peers = [i for i in range(len(rail)) if i != mr]
    k = pieces(comm, x.nbytes, len(x))
    plan = Plan()
    for p, (plo, phi) in enumerate(bounds(len(x), k)):
        piece = x[plo:phi]
        segs = bounds(len(piece), len(hb))
        part = piece[segs[me][0]:segs[me][1]]          # this GPU's share of the piece, reduced across the rail
        rsegs = bounds(len(part), len(rail))
        mine = part[rsegs[mr][0]:rsegs[mr][1]]
        # the later stages' messages first: the gates of the earlier ones mark them ready
        hb_ag = [plan.send((p + 3, 3), hb[q], part, False) for q in hb_peers]
        rail_ag = [plan.send((p + 2, 2), rail[i], mine, False) for i in rail_peers]
        rail_rs = [plan.send((p + 1, 1), rail[i], part[rsegs[i][0]:rsegs[i][1]], False) for i in rail_peers]
        for q in hb_peers:
            plan.send((p, 0), hb[q], piece[segs[q][0]:segs[q][1]])
            plan.recv((p + 3, 3), hb[q], piece[segs[q][0]:segs[q][1]], DONE)
        tmp = np.empty((len(hb), len(part)), dtype=x.dtype)
        rtmp = np.empty((len(rail), len(mine)), dtype=x.dtype)
        gather = plan.gate(len(rail_peers), ready(hb_ag))
        rail_reduced = plan.gate(len(rail_peers), _then(_reduce(fn, mine, rtmp, rail_peers), ready(rail_ag),
                                                        gather.hit))
        hb_reduced = plan.gate(len(hb_peers), _then(_reduce(fn, part, tmp, hb_peers), ready(rail_rs),
                                                    rail_reduced.hit), first=True)
        for q in hb_peers:
            plan.recv((p, 0), hb[q], tmp[q], hb_reduced)
        for i in rail_peers:
            plan.recv((p + 1, 1), rail[i], rtmp[i], rail_reduced)
            plan.recv((p + 2, 2), rail[i], part[rsegs[i][0]:rsegs[i][1]], gather)
    plan.run(comm)
    return x


def _reduce(fn, into, tmp, rows):
    def go():
        for r in rows:
            fn(into, tmp[r], out=into)
    return go


def _then(*actions):
    def go():
        for a in actions:
            a()
    return go


def allgather(comm, shard: np.ndarray) -> np.ndarray:
    check_grid(comm)
    m, n = len(shard), comm.world
    out = np.empty(n * m, dtype=shard.dtype)
    out[comm.rank * m:(comm.rank + 1) * m] = shard
    blocks = out.reshape(n, m)
    hb, rail = hb_group(comm), rail_group(comm)
    rail_peers = [r for r in rail if r != comm.rank]
    k = pieces(comm, shard.nbytes * n, m)
    plan = Plan()
    for p, (lo, hi) in enumerate(bounds(m, k)):
        hb_msgs = []
        for peer in hb:                 # my rail's blocks of piece p to every HB peer, theirs from them
            if peer != comm.rank:
                hb_msgs += [plan.send((p + 1, 1), peer, blocks[r, lo:hi], r == comm.rank) for r in rail]
                for r in _rail_of(comm, peer):
                    plan.recv((p + 1, 1), peer, blocks[r, lo:hi], DONE)
        gathered = plan.gate(len(rail_peers), ready(hb_msgs), first=True)
        for r in rail_peers:
            plan.send((p, 0), r, blocks[comm.rank, lo:hi])
            plan.recv((p, 0), r, blocks[r, lo:hi], gathered)
    plan.run(comm)
    return out


def _rail_of(comm, rank: int) -> list[int]:
    """The ranks on `rank`'s rail, in server order (as that rank's rail_group lists them)."""
    local = comm.peers[rank].local_rank
    return sorted((p.rank for p in comm.peers if p.local_rank == local), key=lambda r: comm.peers[r].server)
