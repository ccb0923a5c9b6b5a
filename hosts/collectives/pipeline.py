"""Pipelined hierarchical AllReduce and AllGather: the buffer is cut into pieces that flow HB -> rail -> HB
concurrently, as NCCL overlaps NVLink and the NIC, instead of one phase after the other.

Every phase of a piece is one direct exchange with the peers of its group (the HB domain is a switch, like
NVSwitch, and a rail's GPUs share a rail switch, so any two can talk):

    allreduce  HB reduce-scatter -> rail reduce-scatter -> rail all-gather -> HB all-gather   (4 phases)
    allgather  rail all-gather -> HB all-gather                                                (2 phases)

Global step s runs phase j of piece s - j for every j at once, in ONE exchange, so while piece s crosses the HB
domain piece s - 1 crosses the rail. A step lasts as long as its slowest link's share; after the first L - 1
steps (the pipeline filling) every link is busy at once. The analytical model of this schedule is
testbed/results/models.py's pipelined_time. Within a step, entries for one peer are listed piece by piece and
phase by phase on both ends, so they match the order the peer sends them in.
"""
from __future__ import annotations

import numpy as np

from hosts.collectives.groups import bounds, check_grid, hb_group, rail_group
from hosts.collectives.phases import phase

MIN_PIECE = 64 * 1024       # bytes of the whole buffer per piece: smaller pieces cost more steps than they save
MAX_PIECES = 32


def pieces(nbytes: int) -> int:
    """How many pieces a buffer of nbytes is cut into (the model uses the same count)."""
    return max(1, min(MAX_PIECES, nbytes // MIN_PIECE))


def _run(comm, k: int, phases) -> None:
    """Global steps of the pipeline: phase j of piece s - j for every j, each phase (piece, sends, recvs, after)."""
    with phase(comm, "pipelined"):
        for s in range(k + len(phases) - 1):
            sends, recvs, after = [], [], []
            for j, make in enumerate(phases):
                if 0 <= s - j < k:
                    snd, rcv, fin = make(s - j)
                    sends += snd
                    recvs += rcv
                    after.append(fin)
            comm.exchange(sends=sends, recvs=recvs)
            for fin in after:
                if fin is not None:
                    fin()


def _reduce_scatter_phase(comm, group, buf_of, seg_of, fn):
    """Direct reduce-scatter inside `group` of the buffer buf_of(p): this rank reduces its own segment."""
    me = group.index(comm.rank)

    def make(p):
        buf = buf_of(p)
        segs = seg_of(p, len(buf))
        lo, hi = segs[me]
        tmp = np.empty((len(group), hi - lo), dtype=buf.dtype)
        others = [q for q in range(len(group)) if q != me]
        sends = [(group[q], buf[segs[q][0]:segs[q][1]]) for q in others]
        recvs = [(group[q], tmp[q]) for q in others]

        def fin():
            for q in others:
                fn(buf[lo:hi], tmp[q], out=buf[lo:hi])
        return sends, recvs, fin
    return make


def _allgather_phase(comm, group, buf_of, seg_of):
    """Direct all-gather inside `group`: every member's segment of buf_of(p) to every other member."""
    me = group.index(comm.rank)

    def make(p):
        buf = buf_of(p)
        segs = seg_of(p, len(buf))
        others = [q for q in range(len(group)) if q != me]
        sends = [(group[q], buf[segs[me][0]:segs[me][1]]) for q in others]
        recvs = [(group[q], buf[segs[q][0]:segs[q][1]]) for q in others]
        return sends, recvs, None
    return make


def allreduce(comm, x: np.ndarray, fn) -> np.ndarray:
    check_grid(comm)
    hb, rail = hb_group(comm), rail_group(comm)
    k = pieces(x.nbytes)
    cuts = bounds(len(x), k)
    me = hb.index(comm.rank)

    def piece(p):
        return x[cuts[p][0]:cuts[p][1]]

    def part(p):                                   # this GPU's HB segment of piece p, reduced across the rail
        lo, hi = bounds(cuts[p][1] - cuts[p][0], len(hb))[me]
        return piece(p)[lo:hi]

    def hb_segs(p, n):
        return bounds(n, len(hb))

    def rail_segs(p, n):
        return bounds(n, len(rail))
    phases = [_reduce_scatter_phase(comm, hb, piece, hb_segs, fn), _reduce_scatter_phase(comm, rail, part, rail_segs, fn),
              _allgather_phase(comm, rail, part, rail_segs), _allgather_phase(comm, hb, piece, hb_segs)]
    _run(comm, k, phases)
    return x


def allgather(comm, shard: np.ndarray) -> np.ndarray:
    servers, per = check_grid(comm)
    m, n = len(shard), comm.world
    out = np.empty(n * m, dtype=shard.dtype)
    out[comm.rank * m:(comm.rank + 1) * m] = shard
    k = pieces(shard.nbytes * n)
    cuts = bounds(m, k)
    hb, rail = hb_group(comm), rail_group(comm)
    blocks = out.reshape(n, m)

    def rail_phase(p):
        lo, hi = cuts[p]
        others = [r for r in rail if r != comm.rank]
        return ([(r, blocks[comm.rank, lo:hi]) for r in others], [(r, blocks[r, lo:hi]) for r in others], None)

    def hb_phase(p):                               # my rail's pieces to every HB peer, theirs from them
        lo, hi = cuts[p]
        sends, recvs = [], []
        for peer in hb:
            if peer != comm.rank:
                sends += [(peer, blocks[r, lo:hi]) for r in rail]
                recvs += [(peer, blocks[r, lo:hi]) for r in _rail_of(comm, peer)]
        return sends, recvs, None
    _run(comm, k, [rail_phase, hb_phase])
    return out


def _rail_of(comm, rank: int) -> list[int]:
    """The ranks on `rank`'s rail, in server order (as that rank's rail_group lists them)."""
    local = comm.peers[rank].local_rank
    return sorted((p.rank for p in comm.peers if p.local_rank == local), key=lambda r: comm.peers[r].server)
