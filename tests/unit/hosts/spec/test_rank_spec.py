"""The rank programs' specs (hosts/spec/rank.py): each round-trips through JSON, reads what the testbed wrote
before there was a spec class (a subset of the keys: the rest take their defaults), and rejects what is wrong."""
import dataclasses

import pytest

from hosts.spec import (CollectiveRankSpec, HeartbeatSpec, Join, Member, Parallelism, Peer, PortMtus, PortRates,
                        Rejoin, SpecError, TrainingRankSpec)

PEERS = (Peer(rank=0, name="s0g0", ip="10.11.0.1", hb_ip="10.12.0.1", server=0, local_rank=0),
         Peer(rank=1, name="s1g0", ip="10.11.1.1", hb_ip="10.12.1.1", server=1, local_rank=0))


def collective(**extra) -> CollectiveRankSpec:
    return CollectiveRankSpec(**{"rank": 1, "peers": PEERS, "store": "/run/store", "op": "allreduce",
                                 "algo": "ring", "bytes": 4096, **extra})


def training(**extra) -> TrainingRankSpec:
    return TrainingRankSpec(rank=0, peers=PEERS, store="/run/store", plan=Parallelism(tp=1, pp=2, dp=1),
                            micro_batches=4, layers=2, activation_count=100, gradient_count=200, compute_s=0.5,
                            **extra)


@pytest.mark.parametrize("spec", [
    collective(),
    collective(heartbeat=False, recovery="spare", admit=True, state=True, until=1.7e9, congestion="delay",
               rate_limit_bps=PortRates(nic=4.85e6, hb=43.65e6), roce_mtu=PortMtus(nic=4096, hb=4096),
               sport_mode="packet", ring="rank", pieces=4, multicast_scope="rail"),
    collective(join=Join(epoch=2, me=Member(name="s0g2", ip="10.11.0.3", server=0, local_rank=2))),
    collective(rejoin=Rejoin(me=Member(name="s1g0", ip="10.11.1.1")), rejoin_wait_s=5.0,
               heartbeat=HeartbeatSpec(period_s=0.3)),
    training(),
    training(schedule="gpipe", recompute=False, dp_algo="hierarchical", iterations=3, split=2),
])
def test_round_trip(spec):
    assert type(spec).from_json(spec.to_json()) == spec


def test_what_the_testbed_wrote_before_reads_with_the_same_defaults():
    old = {"peers": [dataclasses.asdict(p) for p in PEERS], "store": "s", "op": "allgather", "algo": "multicast",
           "bytes": 4096, "heartbeat": {}, "rank": 0, "roce_mtu": {"nic": 1024, "hb": 4096}}
    spec = CollectiveRankSpec.from_dict(old)
    assert spec.heartbeat == HeartbeatSpec() and spec.backend == "uroce" and spec.timeout_s == 60
    assert set(old) <= set(spec.to_dict())         # the JSON now holds every key: a superset
    assert CollectiveRankSpec.from_dict(spec.to_dict()) == spec


def test_a_heartbeat_of_false_turns_them_off_and_stays_false():
    spec = collective(heartbeat=False)
    assert spec.to_dict()["heartbeat"] is False and CollectiveRankSpec.from_json(spec.to_json()).heartbeat is False


def test_peers_are_the_communicators_and_their_entries_have_no_number():
    from hosts.collectives.comm import Peer as CommPeer
    assert CommPeer is Peer
    assert PEERS[1].entry() == {"name": "s1g0", "ip": "10.11.1.1", "hb_ip": "10.12.1.1", "server": 1, "local_rank": 0}


@pytest.mark.parametrize("key,value,named", [
    ("recovery", "restart", "recovery: 'restart' is not one of"),
    ("heartbeat", {"period": 1}, "heartbeat.period: unknown key in HeartbeatSpec"),
    ("peers", [{"rank": 0, "name": "a"}], r"peers\[0\].ip: required key of Peer missing"),
    ("join", {"epoch": "2", "me": {"name": "a", "ip": "b"}}, "join.epoch: expected int"),
    ("rate_limit_bps", {"nic": 1.0}, "rate_limit_bps.hb: required key"),
    ("timeout", 60, "timeout: unknown key in CollectiveRankSpec"),
])
def test_collective_spec_rejects_naming_the_key(key, value, named):
    doc = {**collective().to_dict(), key: value}
    with pytest.raises(SpecError, match="^" + named):
        CollectiveRankSpec.from_dict(doc)


def test_training_spec_rejects_naming_the_key():
    with pytest.raises(SpecError, match=r"^plan.tp: expected int"):
        TrainingRankSpec.from_dict({**training().to_dict(), "plan": {"tp": "2", "pp": 1, "dp": 1}})
    with pytest.raises(SpecError, match=r"^op: unknown key in TrainingRankSpec"):
        TrainingRankSpec.from_dict({**training().to_dict(), "op": "allreduce"})
    with pytest.raises(SpecError, match=r"^compute_s: required key"):
        TrainingRankSpec.from_dict({k: v for k, v in training().to_dict().items() if k != "compute_s"})


def test_a_rank_told_no_roce_mtu_takes_what_the_default_links_carry():
    from hosts.rdma.mtu import DEFAULT_ROCE_MTU
    assert collective().roce_mtu.to_dict() == DEFAULT_ROCE_MTU


def test_backends():
    assert collective().backend == "auto" and collective(algo="multicast").backend == "uroce"
    assert training().backend == "auto"
