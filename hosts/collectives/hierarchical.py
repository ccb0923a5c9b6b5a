"""Rail-aware hierarchical AllReduce and AllGather (the rail-only fabric's collectives: cross-rail bytes go
through the HB domain, never through a spine).

    allreduce(comm, x, fn)   HB reduce-scatter (ring over the server) -> rail allreduce of this GPU's 1/K
                             (ring over the rail) -> HB all-gather; each phase timed (phases.py)
    allgather(comm, shard)   rail all-gather (ring over the rail) -> HB all-gather of the rail's shards
    pipeline.py has the pipelined variants (algo hierarchical-pipelined): the same phases on pieces that
    flow HB -> rail -> HB concurrently, as NCCL overlaps NVLink and the NIC
"""
from __future__ import annotations

import numpy as np

from hosts.collectives.groups import (
    bounds,
    check_grid,
    gather_hb_stage,
    hb_group,
    rail_group,
    ring_allgather,
    ring_reduce_scatter,
)
from hosts.collectives.phases import phase


def allreduce(comm, x: np.ndarray, fn) -> np.ndarray:
    check_grid(comm)
    hb, rail = hb_group(comm), rail_group(comm)
    segs = bounds(len(x), len(hb))
    with phase(comm, "hb_reduce_scatter"):                      # HB: each GPU reduces 1/K of x
        mine = ring_reduce_scatter(comm, hb, x, segs, fn) if len(hb) > 1 else 0
    lo, hi = segs[mine]
    part = x[lo:hi]
    with phase(comm, "rail_exchange"):                          # rail: allreduce that part across servers
        if len(rail) > 1:
            rsegs = bounds(len(part), len(rail))
            ring_reduce_scatter(comm, rail, part, rsegs, fn)
            ring_allgather(comm, rail, part, rsegs)
    with phase(comm, "hb_allgather"):                           # HB: everyone gets every part
        ring_allgather(comm, hb, x, segs)
    return x


def allgather(comm, shard: np.ndarray) -> np.ndarray:
    servers, per = check_grid(comm)
    m = len(shard)
    out = np.empty(comm.world * m, dtype=shard.dtype)
    rail = rail_group(comm)
    mid = np.empty(servers * m, dtype=shard.dtype)            # rail stage: this rail's shards
    i = rail.index(comm.rank)
    mid[i * m:(i + 1) * m] = shard
    with phase(comm, "rail_allgather"):
        ring_allgather(comm, rail, mid, [(q * m, (q + 1) * m) for q in range(servers)])
    with phase(comm, "hb_allgather"):                         # HB stage: every rail's shards, into rank order
        return gather_hb_stage(comm, mid, out, servers, per, m)
