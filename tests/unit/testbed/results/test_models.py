"""Analytical models: the formulas of the issue and the papers, checked on hand-computed cases."""
import pytest

from testbed.results.models import Cluster, bound_busbw, bus_factor, time_model

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
