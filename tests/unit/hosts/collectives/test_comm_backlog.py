"""Chunks that arrive ahead of the step that consumes them are copied aside and their receive slots re-posted
(hosts/collectives/comm.py, BACKLOG), so a sender a step ahead is not refused with RNR NAKs; beyond the backlog the
slots stay taken and RNR is the flow control again. Two ranks in-process over the user-space RoCEv2 engine."""
import numpy as np

from hosts.collectives import comm as comm_module
from tests.unit.hosts.collectives.test_algorithms import peers_grid, run_ranks

CHUNK = 8192        # run_ranks' chunk


def ahead(chunks_ahead):
    """Rank 0 sends two messages in one exchange; rank 1 takes the first in an exchange that also sends twice as
    much back, paced, so the second message's chunks all arrive while rank 1 is still in that step (as a ring
    rank fed over fast links runs ahead of a neighbour gated by its NIC); rank 1 then takes the second. Returns
    rank 1's (everything exact, RNR NAKs it sent)."""
    first = np.arange(4 * CHUNK // 4, dtype=np.int32)
    second = np.arange(chunks_ahead * CHUNK // 4, dtype=np.int32) * 3
    back = np.arange(2 * (len(first) + len(second)), dtype=np.int32) * 7

    def fn(comm):
        if comm.rank == 0:
            got = np.zeros_like(back)
            comm.exchange(sends=[(1, first), (1, second)], recvs=[(1, got)])
            return np.array_equal(got, back)
        a, b = np.zeros_like(first), np.zeros_like(second)
        comm.exchange(sends=[(0, back)], recvs=[(0, a)])
        comm.exchange(recvs=[(0, b)])
        return np.array_equal(a, first) and np.array_equal(b, second), comm.counters().get("rnr_naks_sent", 0)

    out = run_ranks(peers_grid(1, 2), fn, rate_limit_bps={"hb": 50e6, "nic": 50e6})
    assert out[0]
    return out[1]


def test_a_sender_a_step_ahead_is_not_refused():
    exact, rnr = ahead(comm_module.SLOTS + 8)           # more chunks ahead than the receive slots
    assert exact and rnr == 0


def test_beyond_the_backlog_rnr_holds_the_sender_back_and_nothing_is_lost():
    exact, rnr = ahead(comm_module.SLOTS + comm_module.BACKLOG + 8)
    assert exact and rnr > 0
