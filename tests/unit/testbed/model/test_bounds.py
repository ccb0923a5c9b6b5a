"""Analytical models: the formulas of the issue and the papers, checked on hand-computed cases."""
import itertools

import pytest

from testbed.model.bounds import (
    MAX_PIECES,
    Cluster,
    bound_busbw,
    bus_factor,
    phases,
    pipeline_pieces,
    pipeline_stages,
    pipelined_limit,
    pipelined_time,
    time_model,
)

C = Cluster(x=4, y=2, c_s=1.25e6, c_f=11.25e6)     # 2 servers x 4 GPUs, 10 / 90 Mbit/s


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("allreduce", 8) == 2 * 7 / 8
    assert bus_factor("allgather", 8) == bus_factor("alltoall", 8) == bus_factor("reduce_scatter", 8) == 7 / 8
    assert bus_factor("broadcast", 8) == 1


def test_ring_bound_is_the_slowest_link():
    assert bound_busbw("allreduce", "ring", 4 << 20, C) == pytest.approx(C.c_s)
    assert bound_busbw("allreduce", "ring", 4 << 20, Cluster(4, 1, 1.25e6, 11.25e6)) == pytest.approx(11.25e6)


def test_hierarchical_allgather_is_wang_et_al():
    d = 8 << 20
    assert time_model("allgather", "hierarchical", d, C) == pytest.approx((2 - 1) * d / (4 * 2 * C.c_s)
                                                                          + (4 - 1) * d / (4 * C.c_f))


def test_alltoall_rail_only_pays_the_hb_hop():
    size = 1 << 20
    d = size / 8
    assert time_model("alltoall", "direct", size, C) == pytest.approx(4 * 1 * d / C.c_s)
    assert time_model("alltoall", "two-step", size, C) == pytest.approx(4 * 1 * d / C.c_s + 2 * 3 * d / C.c_f)


def test_hierarchical_allreduce_sends_a_quarter_over_the_nic():
    size = 4 << 20
    t = time_model("allreduce", "hierarchical", size, C)
    assert t == pytest.approx(2 * 3 / 4 * size / C.c_f + 2 * 1 / 2 * size / 4 / C.c_s)
    assert t < time_model("allreduce", "ring", size, C)


# -- hierarchical algorithms phase by phase, and the pipelined model ---------------------------------------------


GRIDS = [(4, 2), (2, 4), (2, 3), (3, 3), (3, 2), (1, 4), (4, 1), (5, 3)]     # (x GPUs per server, y servers)


@pytest.mark.parametrize("x,y", GRIDS)
@pytest.mark.parametrize("size", [4 << 20, 3 * 1000 * 1000 + 7])          # odd sizes too
def test_the_sequential_model_is_the_sum_of_its_phases(x, y, size):
    c = Cluster(x=x, y=y, c_s=1.25e6, c_f=11.25e6)
    for op, algo in (("allreduce", "hierarchical"), ("allgather", "hierarchical"), ("alltoall", "two-step")):
        ph = phases(op, algo, size, c)
        assert ph and time_model(op, algo, size, c) == pytest.approx(sum(p.seconds for p in ph))
        assert all(p.link in ("hb", "nic") and p.bytes >= 0 for p in ph)
        assert all(p.rate == (c.c_f if p.link == "hb" else c.c_s) for p in ph)


def test_allreduce_phases_are_the_hb_rail_hb_split():
    size = 4 << 20
    rs, rail, ag = phases("allreduce", "hierarchical", size, C)
    assert [p.name for p in (rs, rail, ag)] == ["hb_reduce_scatter", "rail_exchange", "hb_allgather"]
    assert rs.bytes == ag.bytes == 3 / 4 * size and rs.seconds == pytest.approx(3 / 4 * size / C.c_f)
    assert rail.bytes == 2 * 1 / 2 * size / 4 and rail.link == "nic"
    # the old closed form, term by term
    assert time_model("allreduce", "hierarchical", size, C) == pytest.approx(
        2 * 3 / 4 * size / C.c_f + 2 * 1 / 2 * size / 4 / C.c_s)


def test_flat_algorithms_have_no_phases():
    assert phases("allreduce", "ring", 1 << 20, C) == [] and phases("alltoall", "direct", 1 << 20, C) == []


@pytest.mark.parametrize("x,y", GRIDS)
@pytest.mark.parametrize("op", ["allreduce", "allgather"])
def test_one_piece_is_the_sequential_model_and_more_pieces_approach_the_busiest_link(x, y, op):
    c = Cluster(x=x, y=y, c_s=1.25e6, c_f=11.25e6)
    size = 5 * 1000 * 1000 + 3
    seq = time_model(op, "hierarchical", size, c)
    assert pipelined_time(op, size, c, 1) == pytest.approx(seq)
    times = [pipelined_time(op, size, c, k) for k in (1, 2, 4, 8, 16, 32)]
    limit = pipelined_limit(op, size, c)
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(times))        # never worse with more pieces
    assert all(t >= limit - 1e-12 for t in times)                         # never better than the busiest link
    assert times[-1] <= limit + seq / 32 + 1e-12                          # fill and drain: about one piece


def test_pipelined_allreduce_on_2x4_is_the_rail_plus_a_piece():
    # 2 servers x 4 GPUs, HB 9x the NIC: the rail carries 1/4 of the buffer twice over; the HB phases hide
    c = Cluster(x=4, y=2, c_s=0.625e6, c_f=5.625e6)
    size = 4 << 20
    rail = 2 * 1 / 2 * size / 4 / c.c_s
    assert pipelined_limit("allreduce", size, c) == pytest.approx(rail)
    k = 8
    hb_piece = 3 / 4 * size / c.c_f / k
    # the first piece's HB reduce-scatter, then the rail back to back, then the last piece's HB all-gather
    assert pipelined_time("allreduce", size, c, k) == pytest.approx(hb_piece + rail + hb_piece)
    assert time_model("allreduce", "hierarchical-pipelined", size, c) < time_model("allreduce", "hierarchical",
                                                                                   size, c)


def test_pipeline_stages_split_the_rail_allreduce_in_two():
    st = pipeline_stages("allreduce", 1 << 20, C)
    assert [s.link for s in st] == ["hb", "nic", "nic", "hb"]
    assert st[1].bytes + st[2].bytes == pytest.approx(phases("allreduce", "hierarchical", 1 << 20, C)[1].bytes)
    assert [s.name for s in pipeline_stages("allgather", 1 << 20, C)] == ["rail_allgather", "hb_allgather"]


@pytest.mark.parametrize("size", [1, 4096, 1 << 20, 64 << 20])
def test_the_piece_count_is_bounded_and_grows_with_the_size(size):
    k = pipeline_pieces("allreduce", size, C)
    assert 1 <= k <= MAX_PIECES
    assert pipeline_pieces("allreduce", 64 << 20, C) >= pipeline_pieces("allreduce", 1 << 20, C)


@pytest.mark.parametrize("x,y", [(4, 2), (3, 1), (1, 5)])
def test_fsdp_exchange_is_bound_like_an_allreduce_and_its_phases_add_up_in_sequence(x, y):
    """A rank sends the same 2(n-1)/n of the layer either way: the bound of an AllReduce of the same size; in
    sequence its two phases add up to it, overlapped each phase spans it."""
    c = Cluster(x=x, y=y, c_s=625_000, c_f=5_625_000)
    size = 4 * 2**20
    want = time_model("allreduce", "ring", size, c)
    for algo in ("sequential", "overlapped"):
        assert time_model("fsdp", algo, size, c) == pytest.approx(want)
    seq = phases("fsdp", "sequential", size, c)
    assert [p.name for p in seq] == ["allgather", "reduce_scatter"]
    assert sum(p.seconds for p in seq) == pytest.approx(want)
    assert all(p.seconds == pytest.approx(want) for p in phases("fsdp", "overlapped", size, c))
    assert {p.link for p in seq} == {"hb" if y == 1 else "nic"}
