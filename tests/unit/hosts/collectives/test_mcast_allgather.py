"""Multicast AllGather / Broadcast: bitmap and gap logic, and results against numpy in-process over the
user-space RoCEv2 engine (MemoryFabric replicates multicast), with random loss to force recovery."""
import itertools
import random

import numpy as np
import pytest

from hosts.collectives import mcast_allgather as mc
from tests.unit.hosts.collectives.test_algorithms import peers_grid, run_ranks


def test_gaps_are_the_runs_of_missing_chunks():
    have = np.array([1, 0, 0, 1, 1, 0, 1, 0], bool)
    assert mc.gaps(have) == [(1, 3), (5, 6), (7, 8)]
    assert mc.gaps(np.ones(4, bool)) == []
    assert mc.gaps(np.zeros(3, bool)) == [(0, 3)]


def test_group_address_is_deterministic_and_administratively_scoped():
    a = mc.group_address("/store/x", "allgather", 0, 1, 2)
    assert a == mc.group_address("/store/x", "allgather", 0, 1, 2)
    assert a != mc.group_address("/store/x", "broadcast", 0, 1, 2)
    assert a.startswith("239.") and not a.startswith("239.0.0.")


def test_chains_split_the_ring_into_contiguous_runs_and_imm_fields_round_trip():
    assert mc.chains_of(8, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert mc.chains_of(1, 2) == [[0]]
    imm = mc.data_imm(13, 700, 123456)
    assert (imm >> 28, imm >> 18 & 1023, imm & ((1 << 18) - 1)) == (13, 700, 123456)
    assert mc.deadline_s(10 ** 6, 10e6) == pytest.approx(1.4)


def lossy(p):
    """Random loss p on every packet, and always the fourth multicast packet (pkt is an IPv4 packet: byte 16
    is the first octet of its destination), so that a lossy run loses at least one chunk, whatever the
    thread scheduling gives the random draws."""
    rng, multicast_seen = random.Random(5), itertools.count()

    def drop(pkt) -> bool:
        if 224 <= pkt[16] <= 239 and next(multicast_seen) == 3:
            return True
        return rng.random() < p
    return drop


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("loss", [0, 0.01, 0.05])
def test_allgather_equals_numpy(world, loss):
    count = 3000                                          # 11.7 KiB per shard: 12 chunks, the last short
    shards = [np.random.default_rng(r).integers(-9, 9, count).astype(np.float32) for r in range(world)]
    res = run_ranks(peers_grid(1, world), lambda c: (mc.allgather(c, shards[c.rank]), mc.allgather(c, shards[c.rank]),
                                                     mc.stats(c)), drop=lossy(loss) if loss else None)
    want = np.concatenate(shards)
    recovered = 0
    for r, (first, second, st) in res.items():
        assert np.array_equal(first, want) and np.array_equal(second, want), r
        recovered += st["recovered_chunks"]
    if loss:
        assert recovered > 0
    print(f"allgather {world} ranks, loss {loss}: {recovered} chunks recovered by RDMA READ")


def drop_last_chunks(also_the_end: bool):
    """Drop every shard's last (short) chunk at its sender, and its END (a packet without payload: IPv4
    total length 56) if asked; pkt is an IPv4 packet."""
    full = []

    def drop(pkt) -> bool:
        if not 224 <= pkt[16] <= 239:
            return False
        length = int.from_bytes(pkt[2:4], "big")
        full.append(length)
        return length < max(full) and (also_the_end or length > 56)
    return drop


def gather_checked(world: int, drop) -> dict:
    """An AllGather of 3000 floats per rank with `drop` on the wire, every result checked against numpy: each
    rank's multicast stats."""
    shards = [np.random.default_rng(r).integers(-9, 9, 3000).astype(np.float32) for r in range(world)]
    res = run_ranks(peers_grid(1, world), lambda c: (mc.allgather(c, shards[c.rank]), mc.stats(c)), drop=drop)
    for r, (out, _) in res.items():
        assert np.array_equal(out, np.concatenate(shards)), r
    return {r: st for r, (_, st) in res.items()}


def test_a_shard_whose_last_chunk_is_lost_is_read_on_its_end_without_a_guess(monkeypatch):
    """No receiver gets a shard's last chunk, but every one gets the END behind it: the reads start on the
    END, with neither the grace nor the deadline (made 30 s and longer here, so that waiting would show)."""
    monkeypatch.setattr(mc, "deadline_s", lambda *_: 30.0)
    monkeypatch.setattr(mc, "GRACE_CHUNKS", 10 ** 9)
    world = 4
    for r, st in gather_checked(world, drop_last_chunks(also_the_end=False)).items():
        assert st["recovered_chunks"] == world - 1, (r, st)
        assert st["reads_after_grace"] == st["reads_at_deadline"] == 0, (r, st)


def test_a_shard_whose_last_chunk_and_end_are_lost_is_read_after_the_grace_not_the_deadline(monkeypatch):
    """Nothing tells a receiver that the sender is done: the right neighbour's COMPLETE and a grace do,
    long before the deadline (made 30 s)."""
    monkeypatch.setattr(mc, "deadline_s", lambda *_: 30.0)
    world = 4
    for r, st in gather_checked(world, drop_last_chunks(also_the_end=True)).items():
        assert st["recovered_chunks"] == world - 1 and st["reads_at_deadline"] == 0, (r, st)
        assert st["reads_after_grace"] >= 1, (r, st)


def test_hierarchical_allgather_on_a_grid():
    servers, per = 2, 2
    shards = [np.arange(500, dtype=np.float32) + 1000 * r for r in range(servers * per)]
    res = run_ranks(peers_grid(servers, per), lambda c: mc.allgather(c, shards[c.rank], scope="rail"),
                    drop=lossy(0.02))
    for r, out in res.items():
        assert np.array_equal(out, np.concatenate(shards)), r


@pytest.mark.parametrize("loss", [0, 0.05])
def test_broadcast_equals_numpy(loss):
    world, root = 4, 2
    data = np.random.default_rng(3).integers(-9, 9, 5000).astype(np.float32)

    def fn(c):
        x = data.copy() if c.rank == root else np.zeros_like(data)
        return mc.broadcast(c, x, root), mc.stats(c)
    res = run_ranks(peers_grid(1, world), fn, drop=lossy(loss) if loss else None)
    assert all(np.array_equal(out, data) for out, _ in res.values())
    if loss:
        assert sum(st["recovered_chunks"] for _, st in res.values()) > 0
