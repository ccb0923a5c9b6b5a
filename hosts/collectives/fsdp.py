"""FSDP's exchange for one layer: AllGather the parameters' shards and ReduceScatter the gradients.

Fully sharded data parallelism gathers a layer's parameters before it computes the layer and reduce-scatters
the layer's gradients after. With prefetching, one layer's AllGather runs while another's ReduceScatter does, on
the same NICs. Two algorithms:

    sequential   a ring AllGather, then a ring ReduceScatter
    overlapped   both rings in ONE Communicator.stream: per ring step their messages alternate on each link,
                 and each step waits only for its own ring's previous step, never for the other ring's

Both rings follow comm.ring. Rank r owns segment r of the layer (numpy.array_split's segments), as in
algorithms.reduce_scatter. A rank sends the same bytes either way (2 (n-1)/n of the layer), so at the NIC's
bound overlapping saves no time: it shows what the rings' step-by-step waiting costs, and how long the
AllGather (which the next computation waits for) takes when it shares the NIC.
"""
from __future__ import annotations

import time

import numpy as np

from hosts.collectives.comm import Message
from hosts.collectives.groups import bounds, ring_allgather, ring_reduce_scatter
from hosts.collectives.phases import phase

ALGOS = ("sequential", "overlapped")


def exchange(comm, shard: np.ndarray, grads: np.ndarray, fn, algo: str = "overlapped"):
    """(the whole layer's parameters gathered from every rank's shard, this rank's segment of the gradients
    reduced with fn over all ranks). `shard` is this rank's segment of the parameters; `grads` (the whole
    layer) is reduced in place."""
    comm.op = f"fsdp/{algo}"
    if algo not in ALGOS:
        raise ValueError(f"unknown fsdp algorithm {algo!r}")
    n = comm.world
    segs = bounds(len(grads), n)
    lo, hi = segs[comm.rank]
    if len(shard) != hi - lo:
        raise ValueError(f"rank {comm.rank}'s parameter shard has {len(shard)} elements, its segment {hi - lo}")
    params = np.empty_like(grads)
    params[lo:hi] = shard
    if n == 1:
        return params, grads
    ring, pos = comm.ring, comm.ring.index(comm.rank)
    order = [segs[r] for r in ring]                 # ring position p owns (and ends with) segment ring[p]
    if algo == "sequential":
        with phase(comm, "allgather"):
            ring_allgather(comm, ring, params, order)
        with phase(comm, "reduce_scatter"):
            ring_reduce_scatter(comm, ring, grads, order, fn)
    else:
        _overlapped(comm, params, grads, order, pos, fn)
    lo, hi = order[pos]
    return params, grads[lo:hi]


def _overlapped(comm, params, grads, order, i, fn) -> None:
    """The two rings of `sequential`, step for step, as one stream. Step s of the AllGather forwards the segment
    that step s-1 received; step s of the ReduceScatter forwards the segment that step s-1 received and reduced."""
    g = len(order)
    nxt, prv = comm.ring[(i + 1) % g], comm.ring[(i - 1) % g]
    tmp = np.empty_like(grads)

    def seg(arr, k):
        lo, hi = order[k % g]
        return arr[lo:hi]

    gather = [Message(seg(params, i - s), ready=s == 0) for s in range(g - 1)]
    reduce = [Message(seg(grads, i - s - 1), ready=s == 0) for s in range(g - 1)]
    t0 = time.monotonic()
    finished = {}

    def gathered(s):
        def then():
            if s + 1 < g - 1:
                gather[s + 1].ready = True
            else:
                finished["allgather"] = time.monotonic() - t0
        return then

    def reduced(s):
        def then():
            fn(seg(grads, i - s - 2), seg(tmp, i - s - 2), out=seg(grads, i - s - 2))
            if s + 1 < g - 1:
                reduce[s + 1].ready = True
            else:
                finished["reduce_scatter"] = time.monotonic() - t0
        return then

    # per link the two rings' messages alternate, in the same order on both ends
    sends = [(nxt, m) for s in range(g - 1) for m in (gather[s], reduce[s])]
    recvs = [r for s in range(g - 1) for r in ((prv, seg(params, i - s - 1), gathered(s)),
                                                (prv, seg(tmp, i - s - 2), reduced(s)))]
    comm.stream(sends, recvs)
    log = getattr(comm, "phase_log", None)
    if log is not None:                 # both began together: each phase is the time to its own end
        log.extend((name, finished[name]) for name in ("allgather", "reduce_scatter"))
