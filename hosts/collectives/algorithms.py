"""Collective algorithms over a Communicator, on numpy arrays.

    allreduce(comm, x, op, algo)        ring | rhd (recursive halving-doubling) | hierarchical (rail-aware,
                                        hierarchical.py) | hierarchical-pipelined (its phases overlapped, pipeline.py)
    allgather(comm, shard, algo)        ring | rd (recursive doubling, Bruck's form for any n) | hierarchical
                                        | hierarchical-pipelined
                                        | multicast (switch replication, mcast_allgather.py)
    reduce_scatter(comm, x, op, algo)   ring            -> this rank's segment of the reduced x
    broadcast(comm, x, root, algo)      chain (pipelined) | multicast
    alltoall(comm, x, algo)             direct | two-step (rail-only: over the HB domain, then the rail)
    fsdp.exchange(comm, shard, grads)   sequential | overlapped: FSDP's AllGather of parameters and
                                        ReduceScatter of gradients (fsdp.py)

Flat rings follow `comm.ring` (a cycle of ranks whose neighbours can reach each other: the launcher
passes one that keeps NIC hops inside a rail). Hierarchical algorithms use the server / local rank
of each peer: the HB stage runs inside a server, the rail stage across servers on one rail.
Segments of counts that do not divide evenly follow numpy.array_split.
"""
from __future__ import annotations

import numpy as np

from hosts.collectives import fsdp, hierarchical, mcast_allgather, pipeline
from hosts.collectives.groups import bounds, check_grid, hb_rows, ring_allgather, ring_reduce_scatter
from hosts.collectives.phases import phase

OPS = {"sum": np.add, "max": np.maximum}
ALGOS = {"allreduce": ("ring", "rhd", "hierarchical", "hierarchical-pipelined"),
         "allgather": ("ring", "rd", "hierarchical", "hierarchical-pipelined", "multicast"),
         "reduce_scatter": ("ring",), "broadcast": ("chain", "multicast"), "alltoall": ("direct", "two-step"), "fsdp": fsdp.ALGOS}


# -- operations ------------------------------------------------------------------------------

def allreduce(comm, x: np.ndarray, op: str = "sum", algo: str = "ring") -> np.ndarray:
    comm.op = f"allreduce/{algo}"
    fn = OPS[op]
    if comm.world == 1:
        return x
    if algo == "ring":
        segs = bounds(len(x), comm.world)
        ring_reduce_scatter(comm, comm.ring, x, segs, fn)
        ring_allgather(comm, comm.ring, x, segs)
    elif algo == "rhd":
        _rhd_allreduce(comm, x, fn)
    elif algo == "hierarchical":
        hierarchical.allreduce(comm, x, fn)
    elif algo == "hierarchical-pipelined":
        pipeline.allreduce(comm, x, fn)
    else:
        raise ValueError(f"unknown allreduce algorithm {algo!r}")
    return x


def _rhd_allreduce(comm, x: np.ndarray, fn) -> None:
    """Rabenseifner: fold the ranks beyond a power of two, halve-reduce, double-gather, unfold."""
    n, r = comm.world, comm.ring.index(comm.rank)       # positions along comm.ring
    at = comm.ring
    p2 = 1 << (n.bit_length() - 1)
    rem = n - p2
    tmp = np.empty_like(x)
    if r < 2 * rem:
        if r % 2 == 0:
            comm.exchange(sends=[(at[r + 1], x)])
            comm.exchange(recvs=[(at[r + 1], x)])
            return
        comm.exchange(recvs=[(at[r - 1], tmp)])
        fn(x, tmp, out=x)
        v = r // 2
    else:
        v = r - rem

    def real(virtual: int) -> int:
        return at[virtual * 2 + 1] if virtual < rem else at[virtual + rem]

    lo, hi = 0, len(x)
    steps = []
    d = p2 // 2
    while d:
        partner = real(v ^ d)
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if v & d == 0 else ((mid, hi), (lo, mid))
        comm.exchange(sends=[(partner, x[give[0]:give[1]])], recvs=[(partner, tmp[keep[0]:keep[1]])])
        fn(x[keep[0]:keep[1]], tmp[keep[0]:keep[1]], out=x[keep[0]:keep[1]])
        steps.append((partner, keep, give))
        lo, hi = keep
        d //= 2
    for partner, keep, give in reversed(steps):
        comm.exchange(sends=[(partner, x[keep[0]:keep[1]])], recvs=[(partner, x[give[0]:give[1]])])
    if r < 2 * rem:
        comm.exchange(sends=[(at[r - 1], x)])


def allgather(comm, shard: np.ndarray, algo: str = "ring") -> np.ndarray:
    comm.op = f"allgather/{algo}"
    n, m = comm.world, len(shard)
    out = np.empty(n * m, dtype=shard.dtype)
    if algo == "ring":
        out[comm.rank * m:(comm.rank + 1) * m] = shard
        # ring position p owns the slot of rank ring[p]
        ring_allgather(comm, comm.ring, out, [(r * m, (r + 1) * m) for r in comm.ring])
        return out
    if algo == "rd":
        return _bruck_allgather(comm, shard)
    if algo == "multicast":   # comm.multicast_scope "rail": the fabric replicates only inside a rail
        return mcast_allgather.allgather(comm, shard, comm.multicast_scope)
    if algo == "hierarchical":
        return hierarchical.allgather(comm, shard)
    if algo == "hierarchical-pipelined":
        return pipeline.allgather(comm, shard)
    raise ValueError(f"unknown allgather algorithm {algo!r}")


def _bruck_allgather(comm, shard: np.ndarray) -> np.ndarray:
    n, r, m = comm.world, comm.rank, len(shard)
    tmp = np.empty(n * m, dtype=shard.dtype)
    tmp[:m] = shard                                  # tmp block j = shard of rank (r + j) % n
    d = 1
    while d < n:
        cnt = min(d, n - d)
        comm.exchange(sends=[((r - d) % n, tmp[:cnt * m])], recvs=[((r + d) % n, tmp[d * m:(d + cnt) * m])])
        d *= 2
    return np.roll(tmp, r * m)


def reduce_scatter(comm, x: np.ndarray, op: str = "sum", algo: str = "ring") -> np.ndarray:
    comm.op = f"reduce_scatter/{algo}"
    if algo != "ring":
        raise ValueError(f"unknown reduce_scatter algorithm {algo!r}")
    segs = bounds(len(x), comm.world)
    if comm.world > 1:
        # segment q ends on ring position q; map positions to ranks so rank r gets segment r
        pos = comm.ring.index(comm.rank)
        order = [segs[comm.ring[p]] for p in range(comm.world)]
        ring_reduce_scatter(comm, comm.ring, x, order, OPS[op])
        lo, hi = order[pos]
        return x[lo:hi]
    return x


def broadcast(comm, x: np.ndarray, root: int = 0, algo: str = "chain", piece: int | None = None) -> np.ndarray:
    """Pipelined chain along the ring starting at root: receive piece k while forwarding piece k-1."""
    comm.op = f"broadcast/{algo}"
    if algo == "multicast":
        return mcast_allgather.broadcast(comm, x, root)
    if algo != "chain":
        raise ValueError(f"unknown broadcast algorithm {algo!r}")
    n = comm.world
    if n == 1:
        return x
    start = comm.ring.index(root)
    chain = comm.ring[start:] + comm.ring[:start]
    i = chain.index(comm.rank)
    prv = chain[i - 1] if i > 0 else None
    nxt = chain[i + 1] if i + 1 < n else None
    piece = piece or max(1, comm.chunk // x.itemsize)
    pieces = [slice(lo, min(lo + piece, len(x))) for lo in range(0, len(x), piece)]
    if i == 0:
        comm.exchange(sends=[(nxt, x[p]) for p in pieces])    # chunked per piece, as forwarded
    elif nxt is None:
        comm.exchange(recvs=[(prv, x)])
    else:
        for k in range(len(pieces) + 1):
            comm.exchange(sends=[(nxt, x[pieces[k - 1]])] if k >= 1 else [],
                          recvs=[(prv, x[pieces[k]])] if k < len(pieces) else [])
    return x


def alltoall(comm, x: np.ndarray, algo: str = "direct") -> np.ndarray:
    """x holds world blocks, block p for rank p; returns world blocks, block p from rank p."""
    comm.op = f"alltoall/{algo}"
    n = comm.world
    if len(x) % n:
        raise ValueError(f"alltoall needs a count divisible by the {n} ranks, got {len(x)}")
    m = len(x) // n
    out = np.empty_like(x)
    me = comm.rank
    out[me * m:(me + 1) * m] = x[me * m:(me + 1) * m]
    if algo == "direct":
        peers = [p for p in range(n) if p != me]
        comm.exchange(sends=[(p, x[p * m:(p + 1) * m]) for p in peers],
                      recvs=[(p, out[p * m:(p + 1) * m]) for p in peers])
        return out
    if algo != "two-step":
        raise ValueError(f"unknown alltoall algorithm {algo!r}")
    servers, per = check_grid(comm)
    rows = hb_rows(comm, per, servers)               # rows[local rank][server index] = rank
    srv = sorted({p.server for p in comm.peers})
    si, lj = srv.index(comm.me.server), comm.me.local_rank
    # Step 1, HB domain: hand every local peer j2 the blocks for all ranks on rail j2.
    stage = np.empty((per, servers, m), dtype=x.dtype)        # [source local rank][dest server] for my rail
    for i2 in range(servers):
        stage[lj, i2] = x[rows[lj][i2] * m:(rows[lj][i2] + 1) * m]
    sends, recvs = [], []
    for j2 in range(per):
        if j2 == lj:
            continue
        blocks = np.concatenate([x[rows[j2][i2] * m:(rows[j2][i2] + 1) * m] for i2 in range(servers)])
        sends.append((rows[j2][si], blocks))
        recvs.append((rows[j2][si], stage[j2]))
    with phase(comm, "hb_exchange"):
        comm.exchange(sends=sends, recvs=recvs)
    # Step 2, the rail: send each server on my rail the blocks of every local source for it.
    back = np.empty((servers, per, m), dtype=x.dtype)         # [source server][source local rank]
    back[si] = stage[:, si]
    sends, recvs = [], []
    for i2 in range(servers):
        if i2 == si:
            continue
        sends.append((rows[lj][i2], np.ascontiguousarray(stage[:, i2])))
        recvs.append((rows[lj][i2], back[i2]))
    with phase(comm, "rail_exchange"):
        comm.exchange(sends=sends, recvs=recvs)
    for i2 in range(servers):
        for j2 in range(per):
            src = rows[j2][i2]
            out[src * m:(src + 1) * m] = back[i2, j2]
    return out
