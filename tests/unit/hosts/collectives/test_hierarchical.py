"""Hierarchical collectives: the pipelined variants against numpy (odd counts, grids of 1-3 servers, non-power-
of-two ranks, several pieces in flight), and the per-phase timing the rank program reports."""
import numpy as np
import pytest

from hosts.collectives import algorithms, pipeline
from hosts.collectives.phases import LINKS
from tests.unit.hosts.collectives.test_algorithms import inputs, peers_grid, run_ranks

GRIDS = [(1, 3), (2, 1), (2, 2), (3, 2), (2, 3), (3, 3), (2, 4)]


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(pipeline, "MIN_PIECE", 512)      # several pieces even for a few KiB
    monkeypatch.setattr(pipeline, "MAX_PIECES", 7)


@pytest.mark.parametrize("servers,per", GRIDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_pipelined_allreduce_equals_numpy(servers, per, dtype, small_pieces):
    peers = peers_grid(servers, per)
    n, count = len(peers), 2000 + 37
    xs = inputs(n, count, dtype)
    want = np.sum(np.stack(xs).astype(np.float64), axis=0).astype(dtype)
    got = run_ranks(peers, lambda c: algorithms.allreduce(c, xs[c.rank].copy(), "sum", "hierarchical-pipelined"))
    for r in range(n):
        assert np.array_equal(got[r], want), f"rank {r}"


@pytest.mark.parametrize("servers,per", GRIDS)
def test_pipelined_allgather_equals_numpy(servers, per, small_pieces):
    peers = peers_grid(servers, per)
    xs = inputs(len(peers), 301, np.float32)
    got = run_ranks(peers, lambda c: algorithms.allgather(c, xs[c.rank], "hierarchical-pipelined"))
    want = np.concatenate(xs)
    for r, g in got.items():
        assert np.array_equal(g, want), f"rank {r}"


def test_pipelined_max_reduction(small_pieces):
    peers = peers_grid(3, 2)
    xs = inputs(6, 1501, np.float32)
    got = run_ranks(peers, lambda c: algorithms.allreduce(c, xs[c.rank].copy(), "max", "hierarchical-pipelined"))
    assert all(np.array_equal(g, np.max(np.stack(xs), axis=0)) for g in got.values())


class Chosen:
    pieces = None


def test_pieces_are_bounded_and_the_callers_choice_wins():
    assert pipeline.pieces(Chosen, 1, 1) == 1 and pipeline.pieces(Chosen, pipeline.MIN_PIECE * 3, 10**6) == 3
    assert pipeline.pieces(Chosen, 1 << 30, 1 << 28) == pipeline.MAX_PIECES
    Chosen.pieces = 5
    assert pipeline.pieces(Chosen, 1, 100) == 5 and pipeline.pieces(Chosen, 1 << 30, 3) == 3   # at most one per element


@pytest.mark.parametrize("op,k,per_piece", [("allreduce", 5, 2 * (2 - 1) + 2 * (3 - 1)), ("allgather", 6, (3 - 1) + (2 - 1) * 3)])
def test_the_pipeline_is_one_stream_of_every_pieces_messages(op, k, per_piece):
    """3 servers x 2 GPUs: per piece, AllReduce sends to each HB peer twice (reduce-scatter, all-gather) and to
    each rail peer twice; AllGather sends its block to each rail peer and its rail's blocks to each HB peer."""
    def fn(c):
        c.pieces, calls, real = k, [], c.stream
        c.stream = lambda sends, recvs: calls.append((len(sends), len(recvs))) or real(sends, recvs)
        x = inputs(c.world, 600, np.float32)[c.rank]
        got = algorithms.allgather(c, x, "hierarchical-pipelined") if op == "allgather" else \
            algorithms.allreduce(c, x.copy(), "sum", "hierarchical-pipelined")
        return got, calls
    got = run_ranks(peers_grid(3, 2), fn)
    xs = inputs(6, 600, np.float32)
    want = np.concatenate(xs) if op == "allgather" else np.sum(np.stack(xs), axis=0)
    for rank, (out, calls) in got.items():
        assert calls == [(k * per_piece, k * per_piece)] and np.array_equal(out, want), rank


def timed(op, algo, count):
    def fn(c):
        c.phase_log = []
        x = inputs(c.world, count, np.float32)[c.rank]
        out = algorithms.allgather(c, x, algo) if op == "allgather" else \
            algorithms.alltoall(c, x, algo) if op == "alltoall" else algorithms.allreduce(c, x.copy(), "sum", algo)
        return out, c.phase_log
    return fn


@pytest.mark.parametrize("op,algo,names", [
    ("allreduce", "hierarchical", ["hb_reduce_scatter", "rail_exchange", "hb_allgather"]),
    ("allgather", "hierarchical", ["rail_allgather", "hb_allgather"]),
    ("alltoall", "two-step", ["hb_exchange", "rail_exchange"]),
    ("allreduce", "hierarchical-pipelined", ["pipelined"]),
])
def test_every_rank_logs_each_phase_once_in_order(op, algo, names):
    got = run_ranks(peers_grid(3, 2), timed(op, algo, 6 * 101))
    for rank, (_, log) in got.items():
        assert [name for name, _ in log] == names, rank
        assert all(seconds >= 0 for _, seconds in log)
        assert all(name in LINKS for name in names)


def test_flat_algorithms_log_no_phases():
    got = run_ranks(peers_grid(2, 2), timed("allreduce", "ring", 1000))
    assert all(log == [] for _, log in got.values())


def test_a_communicator_without_a_log_times_nothing():
    got = run_ranks(peers_grid(2, 2), lambda c: (algorithms.allreduce(c, np.ones(64, np.float32), "sum",
                                                                        "hierarchical"), hasattr(c, "phase_log")))
    assert all(not has for _, has in got.values())
