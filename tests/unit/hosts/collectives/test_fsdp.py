"""FSDP's layer exchange (hosts/collectives/fsdp.py) against numpy: the parameters gathered and the gradients
reduce-scattered, in sequence and overlapped in one stream, on odd sizes and rank counts and under loss."""
import threading

import numpy as np
import pytest

from hosts.collectives import algorithms, fsdp
from tests.unit.hosts.collectives.test_algorithms import inputs, peers_grid, run_ranks

GRIDS = [(1, 2), (1, 3), (2, 2), (3, 2), (2, 3), (5, 1)]


def check(peers, count, algo, **kw):
    n = len(peers)
    grads = inputs(n, count, np.float32)
    params = [g[::-1].copy() for g in grads]         # other data than the gradients
    segs = algorithms.bounds(count, n)

    def rank(c):
        lo, hi = segs[c.rank]
        c.phase_log = []
        gathered, mine = fsdp.exchange(c, params[c.rank][lo:hi].copy(), grads[c.rank].copy(), np.add, algo)
        return gathered.copy(), mine.copy(), [name for name, _ in c.phase_log]

    got = run_ranks(peers, rank, **kw)
    whole = np.concatenate([params[r][lo:hi] for r, (lo, hi) in enumerate(segs)])
    total = np.sum(np.stack(grads), axis=0)
    for r, (lo, hi) in enumerate(segs):
        gathered, mine, logged = got[r]
        assert np.array_equal(gathered, whole), f"rank {r}: parameters"
        assert np.array_equal(mine, total[lo:hi]), f"rank {r}: gradients"
        assert sorted(logged) == ["allgather", "reduce_scatter"], f"rank {r}: phases {logged}"


@pytest.mark.parametrize("servers,per", GRIDS)
@pytest.mark.parametrize("algo", fsdp.ALGOS)
def test_fsdp_exchange_equals_numpy(servers, per, algo):
    check(peers_grid(servers, per), 1000 + 37, algo)


@pytest.mark.parametrize("algo", fsdp.ALGOS)
def test_fsdp_exchange_with_fewer_elements_than_ranks(algo):
    check(peers_grid(2, 3), 4, algo)          # two ranks own empty segments


def test_overlapped_fsdp_exchange_survives_loss():
    rng, lock, dropped = np.random.default_rng(5), threading.Lock(), []

    def drop(pkt):
        with lock:
            dropped.append(rng.random() < 0.01)
            return dropped[-1]

    check(peers_grid(2, 2), 4 * 40000 + 3, "overlapped", drop=drop)
    assert sum(dropped) > 0


def test_a_shard_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="shard has 3 elements"):
        run_ranks(peers_grid(1, 2), lambda c: fsdp.exchange(c, np.zeros(3, np.float32), np.zeros(10, np.float32),
                                                              np.add, "overlapped"))
