"""Rings over groups of ranks, and the server/rail groups of a rail-optimized job: the building blocks that
the collective algorithms (algorithms.py) and the multicast ones (mcast_allgather.py) share.

    bounds(count, parts)                 numpy.array_split's segments as (lo, hi)
    ring_reduce_scatter / ring_allgather  a ring over any group of ranks, in place
    rail_group / hb_group / check_grid / hb_rows   who shares this rank's rail, its server (HB domain)
    gather_hb_stage                       the HB stage of a hierarchical AllGather, into rank order
"""
from __future__ import annotations

import numpy as np


def bounds(count: int, parts: int) -> list[tuple[int, int]]:
    edges = np.cumsum([0] + [len(a) for a in np.array_split(np.empty(count, dtype=np.uint8), parts)])
    return [(int(edges[i]), int(edges[i + 1])) for i in range(parts)]


# -- rings over any group of ranks -----------------------------------------------------------

def ring_reduce_scatter(comm, group: list[int], x: np.ndarray, segs, op) -> int:
    """Reduce x over the group in place; afterwards this rank's position i holds segment i reduced."""
    g, i = len(group), group.index(comm.rank)
    nxt, prv = group[(i + 1) % g], group[(i - 1) % g]
    tmp = np.empty_like(x)
    for s in range(g - 1):
        lo, hi = segs[(i - s - 1) % g]
        rlo, rhi = segs[(i - s - 2) % g]
        comm.exchange(sends=[(nxt, x[lo:hi])], recvs=[(prv, tmp[rlo:rhi])])
        op(x[rlo:rhi], tmp[rlo:rhi], out=x[rlo:rhi])
    return i


def ring_allgather(comm, group: list[int], x: np.ndarray, segs) -> None:
    """Each position i of the group owns segment i of x; afterwards every rank has all of x."""
    g, i = len(group), group.index(comm.rank)
    nxt, prv = group[(i + 1) % g], group[(i - 1) % g]
    for s in range(g - 1):
        lo, hi = segs[(i - s) % g]
        rlo, rhi = segs[(i - s - 1) % g]
        comm.exchange(sends=[(nxt, x[lo:hi])], recvs=[(prv, x[rlo:rhi])])


# -- rails and servers -----------------------------------------------------------------------

def rail_group(comm) -> list[int]:
    me = comm.me
    return sorted((p.rank for p in comm.peers if p.local_rank == me.local_rank), key=lambda r: comm.peers[r].server)


def hb_group(comm) -> list[int]:
    me = comm.me
    return sorted((p.rank for p in comm.peers if p.server == me.server), key=lambda r: comm.peers[r].local_rank)


def check_grid(comm) -> tuple[int, int]:
    """(servers, GPUs per server) for hierarchical algorithms, which need a full grid."""
    servers = sorted({p.server for p in comm.peers})
    per = {s: sum(p.server == s for p in comm.peers) for s in servers}
    if None in servers or len(set(per.values())) != 1:
        raise ValueError("hierarchical algorithms need every rank's server, and the same GPU count per server")
    return len(servers), per[servers[0]]


def hb_rows(comm, per: int, servers: int) -> list[list[int]]:
    """rows[local rank][server index] = rank."""
    srv = sorted({p.server for p in comm.peers})
    rows = [[0] * servers for _ in range(per)]
    for p in comm.peers:
        rows[p.local_rank][srv.index(p.server)] = p.rank
    return rows


def gather_hb_stage(comm, mid: np.ndarray, out: np.ndarray, servers: int, per: int, m: int) -> np.ndarray:
    """Second stage of a hierarchical AllGather: `mid` holds this rail's shards (server order, m elements
    each); a ring over the HB domain gathers every rail's, and `out` receives them in rank order."""
    hb = hb_group(comm)
    full = np.empty(per * servers * m, dtype=mid.dtype)     # [local rank][server] blocks
    j = hb.index(comm.rank)
    full[j * servers * m:(j + 1) * servers * m] = mid
    ring_allgather(comm, hb, full, [(q * servers * m, (q + 1) * servers * m) for q in range(per)])
    blocks = full.reshape(per, servers, m)
    for j2, rank_row in enumerate(hb_rows(comm, per, servers)):
        for i2, rank in enumerate(rank_row):
            out[rank * m:(rank + 1) * m] = blocks[j2, i2]
    return out
