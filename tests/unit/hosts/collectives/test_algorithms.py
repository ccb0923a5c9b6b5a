"""Every collective and algorithm against numpy, in-process over the user-space RoCEv2 engine.

Ranks are threads; their devices are joined by the transport's in-memory fabric (real RoCEv2
packets, ICRC and all, but no namespaces), which can drop packets to test recovery. Inputs are
integer-valued floats, so any summation order gives numpy's result bit for bit.
"""
import itertools
import tempfile
import threading

import numpy as np
import pytest

from hosts.collectives import CollectiveError, Communicator, FileStore, Peer, algorithms
from hosts.rdma import open_device
from hosts.rdma.transport import MemoryFabric


def peers_grid(servers, per):
    return [Peer(rank=i * per + j, name=f"s{i}g{j}", ip=f"10.11.{i}.{j + 1}", hb_ip=f"10.12.{i}.{j + 1}",
                 server=i, local_rank=j) for i in range(servers) for j in range(per)]


def run_ranks(peers, fn, drop=None, timeout=20.0, delay=None, fabric=None, **comm_options):
    fabric = fabric or MemoryFabric(drop=drop, delay=delay)
    with tempfile.TemporaryDirectory(prefix="tb-store-") as store_dir:
        results, errors = {}, {}

        def rank_main(me):
            comm = Communicator(me, peers, FileStore(store_dir, timeout=timeout),
                                lambda ip: open_device(ip, backend="uroce", transport=fabric.attach(ip)),
                                timeout=timeout, chunk=8192, **comm_options)
            try:
                results[me.rank] = fn(comm)
            except Exception as exc:  # reported to the test
                errors[me.rank] = exc
            finally:
                comm.close()

        threads = [threading.Thread(target=rank_main, args=(p,)) for p in peers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        if errors:
            raise next(iter(errors.values()))
    return results


def inputs(world, count, dtype):
    rng = np.random.default_rng(7)
    return [rng.integers(-50, 50, count).astype(dtype) for _ in range(world)]


GRIDS = [(1, 2), (2, 1), (1, 3), (2, 2), (3, 2), (2, 3), (5, 1), (4, 2), (2, 4)]


@pytest.mark.parametrize("servers,per", GRIDS)
@pytest.mark.parametrize("algo", ["ring", "rhd", "hierarchical"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_allreduce_sum(servers, per, algo, dtype):
    peers = peers_grid(servers, per)
    n, count = len(peers), 1000 + 37          # not divisible by the world size
    xs = inputs(n, count, dtype)
    want = np.sum(np.stack(xs).astype(np.float64), axis=0).astype(dtype)
    got = run_ranks(peers, lambda c: algorithms.allreduce(c, xs[c.rank].copy(), "sum", algo))
    for r in range(n):
        assert np.array_equal(got[r], want), f"rank {r}"


@pytest.mark.parametrize("servers,per", [(2, 2), (3, 1), (1, 5)])
def test_allreduce_max(servers, per):
    peers = peers_grid(servers, per)
    xs = inputs(len(peers), 513, np.float32)
    want = np.max(np.stack(xs), axis=0)
    got = run_ranks(peers, lambda c: algorithms.allreduce(c, xs[c.rank].copy(), "max", "ring"))
    assert all(np.array_equal(g, want) for g in got.values())


@pytest.mark.parametrize("servers,per", GRIDS)
@pytest.mark.parametrize("algo", ["ring", "rd", "hierarchical"])
def test_allgather(servers, per, algo):
    peers = peers_grid(servers, per)
    xs = inputs(len(peers), 301, np.float32)
    got = run_ranks(peers, lambda c: algorithms.allgather(c, xs[c.rank], algo))
    want = np.concatenate(xs)
    assert all(np.array_equal(g, want) for g in got.values())


@pytest.mark.parametrize("servers,per", GRIDS)
def test_reduce_scatter(servers, per):
    peers = peers_grid(servers, per)
    n = len(peers)
    xs = inputs(n, 999, np.float32)
    total = np.sum(np.stack(xs), axis=0)
    got = run_ranks(peers, lambda c: algorithms.reduce_scatter(c, xs[c.rank].copy(), "sum", "ring").copy())
    for r, (lo, hi) in enumerate(algorithms.bounds(999, n)):
        assert np.array_equal(got[r], total[lo:hi])


@pytest.mark.parametrize("servers,per,root", [(2, 2, 0), (3, 2, 4), (1, 5, 2), (2, 1, 1)])
def test_broadcast(servers, per, root):
    peers = peers_grid(servers, per)
    xs = inputs(len(peers), 20000, np.float32)
    got = run_ranks(peers, lambda c: algorithms.broadcast(c, xs[c.rank].copy(), root, "chain", piece=3000))
    assert all(np.array_equal(g, xs[root]) for g in got.values())


@pytest.mark.parametrize("servers,per", GRIDS)
@pytest.mark.parametrize("algo", ["direct", "two-step"])
def test_alltoall(servers, per, algo):
    peers = peers_grid(servers, per)
    n, m = len(peers), 77
    xs = inputs(n, n * m, np.float32)
    got = run_ranks(peers, lambda c: algorithms.alltoall(c, xs[c.rank], algo))
    for r in range(n):
        want = np.concatenate([xs[src][r * m:(r + 1) * m] for src in range(n)])
        assert np.array_equal(got[r], want), f"rank {r}"


@pytest.mark.parametrize("op,algo", [("allreduce", "ring"), ("allreduce", "hierarchical"),
                                     ("allgather", "hierarchical"), ("alltoall", "two-step")])
def test_correct_under_one_percent_loss(op, algo):
    peers = peers_grid(2, 2)
    rng = np.random.default_rng(3)
    lock = threading.Lock()
    dropped = []

    def drop(pkt):
        with lock:
            d = rng.random() < 0.01
            dropped.append(d)
            return d

    n, count = len(peers), 4 * 40000
    xs = inputs(n, count, np.float32)
    fn = {"allreduce": lambda c: algorithms.allreduce(c, xs[c.rank].copy(), "sum", algo),
          "allgather": lambda c: algorithms.allgather(c, xs[c.rank], algo),
          "alltoall": lambda c: algorithms.alltoall(c, xs[c.rank], algo)}[op]
    got = run_ranks(peers, fn, drop=drop)
    assert sum(dropped) > 0
    if op == "allreduce":
        want = [np.sum(np.stack(xs), axis=0)] * n
    elif op == "allgather":
        want = [np.concatenate(xs)] * n
    else:
        m = count // n
        want = [np.concatenate([xs[s][r * m:(r + 1) * m] for s in range(n)]) for r in range(n)]
    for r in range(n):
        assert np.array_equal(got[r], want[r])


def test_rank_that_never_joins_gives_a_clear_error_not_a_hang():
    peers = peers_grid(1, 3)

    def fn(c):
        if c.rank == 2:
            return None                      # rank 2 never joins the collective
        return algorithms.allreduce(c, np.ones(5000, np.float32), "sum", "ring")

    with pytest.raises(CollectiveError, match=r"rank \d \(s0g\d\): allreduce/ring: .*rank 2 \(s0g2\)"):
        run_ranks(peers, fn, timeout=3.0)


def test_rank_dying_mid_job_gives_a_clear_error_not_a_hang():
    peers = peers_grid(2, 2)

    def fn(c):
        x = algorithms.allreduce(c, np.ones(5000, np.float32), "sum", "ring")
        if c.rank == 3:
            c.close()                        # its device goes away: nothing answers any more
            return x
        return algorithms.allreduce(c, np.ones(50000, np.float32), "sum", "ring")

    with pytest.raises(CollectiveError, match=r"allreduce/ring: .*rank 3 \(s1g1\)"):
        run_ranks(peers, fn, timeout=5.0)


@pytest.mark.parametrize("split", [2, 3])
def test_split_stripes_each_message_over_k_queue_pairs_in_order(split):
    """split:K: chunks alternate over K queue pairs whose packets race each other (random delays)."""
    peers = peers_grid(2, 2)
    rng = np.random.default_rng(11)
    lock = threading.Lock()

    def delay(pkt):
        with lock:
            return float(rng.random()) * 0.002

    xs = inputs(4, 30000, np.float32)
    got = run_ranks(peers, lambda c: algorithms.allreduce(c, xs[c.rank].copy(), "sum", "ring"),
                    delay=delay, split=split, sport_mode="packet")
    want = np.sum(np.stack(xs), axis=0)
    assert all(np.array_equal(g, want) for g in got.values())


def test_dcqcn_ranks_answer_marks_and_cut_their_rate():
    """congestion dcqcn: a fabric that marks CE on every fourth data packet; the AllReduce stays exact, the
    ranks answer the marks with CNPs and their queue pairs cut their rate on them."""
    peers = peers_grid(2, 2)
    xs = inputs(4, 60000, np.float32)
    fabric = MemoryFabric()
    seen = itertools.count()
    fabric.mark = lambda pkt: len(pkt) > 200 and next(seen) % 4 == 0
    counters = {}

    def fn(c):
        c.congestion, c.time_scale = "dcqcn", 100
        out = algorithms.allreduce(c, xs[c.rank].copy(), "sum", "ring")
        counters[c.rank] = c.counters()
        return out

    got = run_ranks(peers, fn, fabric=fabric, rate_limit_bps={"nic": 40e6, "hb": 40e6})
    want = np.sum(np.stack(xs), axis=0)
    assert all(np.allclose(g, want) for g in got.values())
    total = {k: sum(c.get(k, 0) for c in counters.values())
             for k in ("ecn_ce_received", "cnp_sent", "cnp_received", "cc_rate_cuts")}
    assert total["ecn_ce_received"] == fabric.marked > 0, total
    assert 0 < total["cnp_sent"] <= total["ecn_ce_received"] and total["cnp_received"] > 0, total
    assert total["cc_rate_cuts"] > 0, total
