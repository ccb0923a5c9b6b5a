"""The reference every rank checks its result against (hosts/collectives/benchmark.expected): built from the
ranks' inputs one at a time, so a 64-rank job does not hold 64 inputs per rank, and equal to numpy on the
stacked inputs for every operation, reduction, dtype and odd world size."""
from types import SimpleNamespace

import numpy as np
import pytest

from hosts.collectives import algorithms
from hosts.collectives import benchmark
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
def test_the_reference_equals_numpy_on_the_stacked_inputs(spec, world, dtype, tmp_path):
    count = world * 37 + 5 if spec["op"] != "alltoall" else world * 11
    for rank in {0, world // 2, world - 1}:
        got = expected(SimpleNamespace(**{"reduce": "sum", "root": 0, "store": str(tmp_path), **spec}), world, rank,
                       count, dtype)
        want = stacked(spec, world, rank, count, dtype)
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("op", ["allreduce", "reduce_scatter", "fsdp"])
def test_the_launchers_reduction_is_what_every_rank_reads_and_a_rank_without_it_makes_its_own(op, tmp_path,
                                                                                               monkeypatch):
    """The launcher makes the reduction once into the store (save_reduced); the ranks read it instead of making
    world inputs each. For another world (after a failure) or without the file, a rank makes it itself."""
    world, nbytes = 5, 4 * 1003
    spec = SimpleNamespace(op=op, reduce="sum", root=0, check=True, dtype="float32", bytes=nbytes,
                           store=str(tmp_path))
    count = benchmark.elements(op, nbytes, 4, world)
    want = [stacked({"op": op}, world, rank, count, np.float32) for rank in range(world)]
    benchmark.save_reduced(spec, world)
    assert len(list(tmp_path.glob("expected-*.npy"))) == 1
    made = []
    real = benchmark._reduced
    monkeypatch.setattr(benchmark, "_reduced", lambda *a: (made.append(a), real(*a))[1])
    assert all(np.array_equal(expected(spec, world, r, count, np.float32), want[r]) for r in range(world))
    assert made == []                                   # every rank read the launcher's
    assert np.array_equal(expected(spec, world - 1, 0, count, np.float32),
                          stacked({"op": op}, world - 1, 0, count, np.float32))
    assert made == [("sum", world - 1, count, np.float32)]          # another world: made by the rank
    for f in tmp_path.glob("expected-*.npy"):
        f.write_bytes(b"not an array")
    assert np.array_equal(expected(spec, world, 1, count, np.float32), want[1]) and len(made) == 2


def test_no_reduction_is_saved_for_operations_that_reduce_nothing_or_are_not_checked(tmp_path):
    for op, check in (("allgather", True), ("alltoall", True), ("broadcast", True), ("allreduce", False)):
        benchmark.save_reduced(SimpleNamespace(op=op, reduce="sum", check=check, dtype="float32", bytes=4096,
                                               store=str(tmp_path)), 4)
    assert list(tmp_path.iterdir()) == []
