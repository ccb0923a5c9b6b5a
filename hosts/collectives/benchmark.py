"""The collective benchmark's arithmetic, shared by its rank program (hosts/agents/collective_rank.py) and the
testbed's collective workload: the element count a message size means, each rank's seeded input, the
operation by name, and the exact result numpy expects.

A reduction's expected result is every rank's input reduced: the same for every rank, and O(world) inputs to
make. The launcher makes it once into the job's store (save_reduced) and the ranks read it; a rank that finds
no file (another world after a failure, a store it cannot see) makes it itself. 64 ranks making 64 inputs of
1 MiB each took ~50 s of two cores at a 64-GPU job's start, starving some ranks' heartbeats.
"""
from __future__ import annotations

import os

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
    # small integers, exact in every dtype and in any order of summation; drawn as int8, twice as fast as int64
    return np.random.default_rng(1000 + rank).integers(-8, 8, count, dtype=np.int8).astype(dtype)


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
    if op in REDUCING:
        total = _saved_reduced(spec.store, spec.reduce, world, count, dtype)
        if total is None:
            total = _reduced(spec.reduce, world, count, dtype)
    if op == "allreduce":
        return total
    if op == "reduce_scatter":
        lo, hi = algorithms.bounds(count, world)[rank]
        return total[lo:hi]
    if op == "fsdp":      # the parameters gathered from every rank's segment, then this rank's reduced gradients
        segs = algorithms.bounds(count, world)
        params = np.concatenate([make_input(r, count, dtype)[lo:hi] for r, (lo, hi) in enumerate(segs)])
        lo, hi = segs[rank]
        return np.concatenate([params, total[lo:hi]])
    if op == "allgather":
        return np.concatenate([make_input(r, count, dtype) for r in range(world)])
    if op == "broadcast":
        return make_input(spec.root, count, dtype)
    m = count // world
    return np.concatenate([make_input(src, count, dtype)[rank * m:(rank + 1) * m] for src in range(world)])


REDUCING = ("allreduce", "reduce_scatter", "fsdp")
REDUCED = "expected-{reduce}-{world}x{count}-{dtype}.npy"


def _reduced_path(directory: str, reduce: str, world: int, count: int, dtype) -> str:
    return os.path.join(directory, REDUCED.format(reduce=reduce, world=world, count=count, dtype=np.dtype(dtype).name))


def save_reduced(spec: CollectiveRankSpec, world: int) -> None:
    """The launcher's part: the reduction every rank of this launch expects, into the job's store."""
    if not spec.check or spec.op not in REDUCING:
        return
    dtype = np.dtype(spec.dtype)
    count = elements(spec.op, spec.bytes, dtype.itemsize, world)
    path = _reduced_path(spec.store, spec.reduce, world, count, dtype)
    with open(path + ".tmp", "wb") as f:
        np.save(f, _reduced(spec.reduce, world, count, dtype))
    os.replace(path + ".tmp", path)


def _saved_reduced(directory: str, reduce: str, world: int, count: int, dtype) -> np.ndarray | None:
    try:
        total = np.load(_reduced_path(directory, reduce, world, count, dtype))
    except (OSError, ValueError):
        return None
    return total if total.shape == (count,) and total.dtype == np.dtype(dtype) else None


def _reduced(reduce: str, world: int, count: int, dtype) -> np.ndarray:
    """Every rank's input reduced. The inputs are small integers: a wide accumulator gives the exact sum numpy's
    own would, in any order."""
    wide = np.int64 if np.issubdtype(np.dtype(dtype), np.integer) else np.float64
    combine = np.maximum if reduce == "max" else np.add
    total = make_input(0, count, dtype).astype(wide)
    for r in range(1, world):
        combine(total, make_input(r, count, dtype), out=total, casting="unsafe")
    return total.astype(dtype)
