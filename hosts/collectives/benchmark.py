"""The collective benchmark's arithmetic, shared by its rank program (hosts/agents/collective_rank.py) and the
testbed's collective workload: the element count a message size means, each rank's seeded input, the
operation by name, and the exact result numpy expects.
"""
from __future__ import annotations

import numpy as np

from hosts.collectives import algorithms, fsdp
from hosts.spec.rank import CollectiveRankSpec


def elements(op: str, nbytes: int, itemsize: int, world: int) -> int:
    """Element count per rank for a message of nbytes (nccl-tests: the op's total size)."""
    count = max(1, nbytes // itemsize)
    if op in ("allgather", "alltoall"):
        count = max(1, count // world) * (1 if op == "allgather" else world)
    return count


def make_input(rank: int, count: int, dtype) -> np.ndarray:
    return np.random.default_rng(1000 + rank).integers(-8, 8, count).astype(dtype)


def run_op(comm, spec: CollectiveRankSpec, x: np.ndarray) -> np.ndarray:
    op, algo = spec.op, spec.algo
    if op == "allreduce":
        return algorithms.allreduce(comm, x, spec.reduce, algo)
    if op == "allgather":
        return algorithms.allgather(comm, x, algo)
    if op == "reduce_scatter":
        return algorithms.reduce_scatter(comm, x, spec.reduce, algo)
    if op == "broadcast":
        return algorithms.broadcast(comm, x, spec.root, algo)
    if op == "alltoall":
        return algorithms.alltoall(comm, x, algo)
    if op == "fsdp":      # x is the layer's gradients; this rank's segment of x doubles as its parameter shard
        lo, hi = algorithms.bounds(len(x), comm.world)[comm.rank]
        params, mine = fsdp.exchange(comm, x[lo:hi].copy(), x, algorithms.OPS[spec.reduce], algo)
        return np.concatenate([params, mine])
    raise ValueError(f"unknown operation {op!r}")


def expected(spec: CollectiveRankSpec, world: int, rank: int, count: int, dtype) -> np.ndarray:
    """What rank `rank` must hold after the operation, from every rank's input made one at a time (memory of
    one input and the result, whatever the world size)."""
    op = spec.op
    if op == "allreduce":
        return _reduced(spec.reduce, world, count, dtype)
    if op == "reduce_scatter":
        lo, hi = algorithms.bounds(count, world)[rank]
        return _reduced(spec.reduce, world, count, dtype)[lo:hi]
    if op == "fsdp":      # the parameters gathered from every rank's segment, then this rank's reduced gradients
        segs = algorithms.bounds(count, world)
        params = np.concatenate([make_input(r, count, dtype)[lo:hi] for r, (lo, hi) in enumerate(segs)])
        lo, hi = segs[rank]
        return np.concatenate([params, _reduced(spec.reduce, world, count, dtype)[lo:hi]])
    if op == "allgather":
        return np.concatenate([make_input(r, count, dtype) for r in range(world)])
    if op == "broadcast":
        return make_input(spec.root, count, dtype)
    m = count // world
    return np.concatenate([make_input(src, count, dtype)[rank * m:(rank + 1) * m] for src in range(world)])


def _reduced(reduce: str, world: int, count: int, dtype) -> np.ndarray:
    """Every rank's input reduced. The inputs are small integers: a wide accumulator gives the exact sum numpy's
    own would, in any order."""
    wide = np.int64 if np.issubdtype(np.dtype(dtype), np.integer) else np.float64
    combine = np.maximum if reduce == "max" else np.add
    total = make_input(0, count, dtype).astype(wide)
    for r in range(1, world):
        combine(total, make_input(r, count, dtype), out=total, casting="unsafe")
    return total.astype(dtype)
