"""The rail-ring order (hosts.collectives.comm.rail_order / rail_ring): one definition for the ranks' rings and
the testbed's path check."""
from hosts.collectives.comm import Peer, rail_order, rail_ring


def test_down_rail_zero_then_back_up_rail_one():
    places = [(s, r) for s in range(3) for r in range(2)]           # GPU order: server by server
    assert [places[i] for i in rail_order(places)] == [(0, 0), (1, 0), (2, 0), (2, 1), (1, 1), (0, 1)]


def test_unknown_or_shared_places_have_no_rail_order():
    assert rail_order([(0, 0), (None, 1)]) is None
    assert rail_order([(0, 0), (0, 0)]) is None
    assert rail_order([]) == []


def test_rail_ring_of_peers_and_its_fallback():
    peers = [Peer(rank=i, name=f"h{i}", ip=f"10.0.0.{i}", server=i // 2, local_rank=i % 2) for i in range(4)]
    assert rail_ring(peers) == [0, 2, 3, 1]
    flat = [Peer(rank=i, name=f"h{i}", ip=f"10.0.0.{i}") for i in range(3)]
    assert rail_ring(flat) == [0, 1, 2]
