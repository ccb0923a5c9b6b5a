"""What the rank workloads tell every rank (testbed/workloads/rank_setup.py and the specs built on it): the
transport is links.rank_transport's, typed, and every rank's spec reads back on the host as it was built."""
import dataclasses
from types import SimpleNamespace

import pytest

from hosts.spec import CollectiveRankSpec, HeartbeatSpec, TrainingRankSpec
from testbed import runner
from testbed.fabric.links import rank_transport
from testbed.workloads import collective, rank_setup, training
from testbed.workloads.training_plan import make_plan, settings

KINDS = ["rail-optimized", "rail-only", "clos"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("routing", ["ecmp", "spray", "split:2"])
def test_the_transport_is_the_links_one_typed(kind, routing):
    fabric = runner.fabric_of({"fabric": {"kind": kind}})
    typed = rank_setup.transport(fabric, routing)
    plain = rank_transport(fabric, routing)
    assert {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in typed.items()} == plain
    # ranks pace at line rate: the shaped link, not the sender, holds the rate
    assert plain["rate_limit_bps"] == {"nic": pytest.approx(fabric.params.nic_mbps * 1e6),
                                       "hb": pytest.approx(fabric.params.hb_mbps * 1e6)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("extra", [{}, {"algo": "multicast", "op": "allgather"}, {"recovery": "spare", "heartbeat": False},
                                   {"heartbeat": {"period_s": 0.3}, "congestion": "delay", "ring": "rank"}])
def test_a_collective_ranks_spec_reads_back_as_built(kind, extra):
    fabric = runner.fabric_of({"fabric": {"kind": kind, "spares_per_server": 1}})
    spec = {"type": "collective", "op": "allreduce", "algo": "ring", **extra}
    peers = rank_setup.peers(fabric.gpus())
    base = collective._base_spec(SimpleNamespace(fabric=fabric, routing="ecmp"), spec, peers, "store", 65536)
    for r in range(len(peers)):
        mine = dataclasses.replace(base, rank=r)
        assert CollectiveRankSpec.from_json(mine.to_json()) == mine
    beat = extra.get("heartbeat", {})
    assert base.heartbeat == (False if beat is False else HeartbeatSpec(**beat))
    assert base.admit == (extra.get("recovery", "abort") != "abort")


@pytest.mark.parametrize("kind", KINDS)
def test_a_training_ranks_spec_reads_back_as_built(kind):
    fabric = runner.fabric_of({"fabric": {"kind": kind, "servers": 4, "gpus_per_server": 2}})
    spec = {"type": "training_iteration", "plan": {"tp": 2, "pp": 2, "dp": 2}}
    plan, s = make_plan(fabric, spec), settings(spec)
    built = training.rank_spec(plan, s, fabric, "ecmp", rank_setup.peers(fabric.gpus()), "store")
    assert TrainingRankSpec.from_json(built.to_json()) == built
    assert built.plan.to_dict() == s["plan"] and len(built.peers) == 8


def test_dcqcn_reaches_the_ranks_with_the_fabrics_time_scale():
    fabric = runner.fabric_of({"fabric": {"kind": "rail-only", "nic_mbps": 400000, "time_scale": 40000}})
    spec = {"type": "collective", "op": "allreduce", "algo": "ring", "congestion": "dcqcn"}
    base = collective._base_spec(SimpleNamespace(fabric=fabric, routing="ecmp"), spec,
                                 rank_setup.peers(fabric.gpus()), "store", 65536)
    assert (base.congestion, base.time_scale) == ("dcqcn", 40000)
    assert CollectiveRankSpec.from_json(base.to_json()) == base
    none = collective._base_spec(SimpleNamespace(fabric=fabric, routing="ecmp"), {**spec, "congestion": "none"},
                                 rank_setup.peers(fabric.gpus()), "store", 65536)
    assert none.congestion is None
