"""A collective row counts bytes on all links as SPCL does (NIC sends + switch egress + HB links), and a
multicast row compares the network's bytes with the minimal trees' for as many operations as ran."""
import pytest

from testbed.fabric import hb_counters
from testbed.fabric.links import roce_mtus
from testbed.fabric.topo import build
from testbed.model import multicast_minimum as mm
from testbed.scenario.schema import ScenarioError
from testbed.workloads import collective, collective_rows

FABRIC = build("rail-optimized", 2, 4, spines=2)
CHUNK = roce_mtus(FABRIC)["nic"]


def counters(nic_rx: int, egress: int) -> dict:
    """Every switch port: the GPU-facing ones received nic_rx, one port sent all the egress."""
    out = {}
    for l in FABRIC.links:
        for node, port in ((l.a, l.a_port), (l.b, l.b_port)):
            if node in FABRIC.switches and FABRIC.switches[node].sdn:
                out[f"{node}:{port}"] = {"rx_bytes": nic_rx if l.kind == "nic" else 0, "tx_bytes": 0}
    out["spine0:1"]["tx_bytes"] = egress
    return out


def outs(count: int, times=(1.0, 1.0)) -> list[dict]:
    return [{"count": count, "times": list(times), "correct": True} for _ in range(8)]


def test_a_multicast_row_is_measured_against_warmup_plus_iterations_of_minimal_trees():
    shard = 128 * 1024
    per_op = 8 * 12 * mm.wire_bytes(shard, CHUNK)          # 8 shards, 12 tree links each (2 x 4 rail-optimized)
    before = counters(0, 0)
    after = counters(3 * mm.wire_bytes(shard, CHUNK), 3 * per_op - 8 * 3 * mm.wire_bytes(shard, CHUNK) + 1000)
    spec = {"op": "allgather", "algo": "multicast", "iterations": 2, "warmup": 1}
    row = collective_rows.row(FABRIC, spec, 1 << 20, outs(shard // 4), before, after, hb_bytes=500)
    assert row["tree_min_bytes"] == 3 * per_op
    assert row["link_bytes"] == 3 * per_op + 1000 + 500
    assert row["tree_ratio"] == pytest.approx((3 * per_op + 1000) / (3 * per_op), abs=1e-4)
    assert "network" in collective_rows.table_row(row).splitlines()[-1]


def test_a_ring_row_has_link_bytes_but_no_tree():
    spec = {"op": "allgather", "algo": "ring", "iterations": 2}
    row = collective_rows.row(FABRIC, spec, 1 << 20, outs(32768), counters(0, 0), counters(10, 20), hb_bytes=7)
    assert row["link_bytes"] == 8 * 10 + 20 + 7 and row["hb_bytes"] == 7
    assert "tree_ratio" not in row


def test_the_tree_check_fails_above_its_ceiling_and_is_refused_off_multicast():
    spec = {"op": "allgather", "algo": "multicast", "expect": {"max_tree_ratio": 1.2}}
    good = {"bytes": 1, "correct": True, "tree_ratio": 1.05}
    assert collective_rows.summarize(spec, 8, [good], [])["ok"]
    bad = collective_rows.summarize(spec, 8, [good, {**good, "tree_ratio": 1.3}], [])
    assert not bad["ok"] and "1.30" in next(c["detail"] for c in bad["checks"] if c["name"] == "tree_minimum")
    with pytest.raises(ScenarioError, match="max_tree_ratio"):
        collective.validate(FABRIC, {"op": "allgather", "algo": "ring", "expect": {"max_tree_ratio": 1.2}})


def test_hb_counters_name_each_bridge_port_and_survive_a_recreated_device():
    devs = hb_counters.devices(FABRIC)
    assert len(devs) == 8 and all("hb" in d for d in devs)
    assert hb_counters.growth({"a": 100, "b": 50}, {"a": 150, "b": 20}) == 50 + 20
