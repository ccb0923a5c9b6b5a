"""The reference every rank checks its result against (hosts/collectives/benchmark.expected): built from the
ranks' inputs one at a time, so a 64-rank job does not hold 64 inputs per rank, and equal to numpy on the
stacked inputs for every operation, reduction, dtype and odd world size."""
from types import SimpleNamespace

import numpy as np
import pytest

from hosts.collectives import algorithms
from hosts.collectives.benchmark import expected, make_input


def stacked(spec, world, rank, count, dtype):
    inputs = [make_input(r, count, dtype) for r in range(world)]
    op = spec["op"]
    if op in ("allreduce", "reduce_scatter"):
        total = (np.max if spec.get("reduce") == "max" else np.sum)(np.stack(inputs), axis=0).astype(dtype)
        lo, hi = algorithms.bounds(count, world)[rank]
        return total if op == "allreduce" else total[lo:hi]
    if op == "allgather":
        return np.concatenate(inputs)
    if op == "fsdp":
        segs = algorithms.bounds(count, world)
        total = np.sum(np.stack(inputs), axis=0).astype(dtype)
        lo, hi = segs[rank]
        return np.concatenate([np.concatenate([inputs[r][a:b] for r, (a, b) in enumerate(segs)]), total[lo:hi]])
    if op == "broadcast":
        return inputs[spec.get("root", 0)]
    m = count // world
    return np.concatenate([inputs[src][rank * m:(rank + 1) * m] for src in range(world)])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("world", [1, 3, 7, 64])
@pytest.mark.parametrize("spec", [{"op": "allreduce"}, {"op": "allreduce", "reduce": "max"},
                                  {"op": "reduce_scatter"}, {"op": "allgather"}, {"op": "broadcast", "root": 0},
                                  {"op": "alltoall"}, {"op": "fsdp"}])
def test_the_reference_equals_numpy_on_the_stacked_inputs(spec, world, dtype):
    count = world * 37 + 5 if spec["op"] != "alltoall" else world * 11
    for rank in {0, world // 2, world - 1}:
        got, want = expected(SimpleNamespace(**{"reduce": "sum", "root": 0, **spec}), world, rank, count, dtype), stacked(spec, world, rank, count, dtype)
        assert got.dtype == want.dtype and np.array_equal(got, want)
