"""Integration (root): background RoCE traffic (the `traffic` workload with protocol roce). A 3-to-1 incast at
offered load 1.0 onto one receiver whose NIC link is the bottleneck: the queue pairs' delay-based congestion
control shares it, so the aggregate goodput stays near the NIC's rate and every byte arrives as sent. And a RoCE
traffic job beside a ring AllReduce job (the `concurrent` workload): the bytes by job add up to the port
counters, the AllReduce is exact and so is the traffic. With `congestion: dcqcn` on a fabric whose switch ports mark
ECN, an incast's RoCEv2 packets are marked and the senders get CNPs."""
import os
import sys

import pytest

from testbed.fabric import ecn

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import concurrent, traffic
from tests.paths import ROOT

pytestmark = [pytest.mark.root, pytest.mark.alone]     # paced senders need the CPU to keep their pace

NIC_MBPS = 5
INCAST = {"type": "traffic", "pattern": "incast", "protocol": "roce", "load": 1.0, "size": "512KiB",
          "congestion": "delay"}


def test_roce_incast_fills_the_receivers_nic_with_exact_data():
    fabric = build("rail-optimized", 4, 1, spines=1, oversubscription=1, nic_mbps=NIC_MBPS)
    traffic.validate(fabric, INCAST, {})
    with Network(fabric) as net:
        result = traffic.run(net, INCAST)
    print(traffic.summary(result), [(f["src"], f["seconds"], f["retransmits"]) for f in result["per_flow"]])
    assert result["ok"], result["checks"]
    assert result["flows"] == 3 and result["data_exact"]
    assert all(f["correct"] and f["bytes"] == f["expected_bytes"] for f in result["per_flow"])
    # the receiver's NIC carried the three flows: their bytes over the time the last one took
    last = max(f["seconds"] for f in result["per_flow"])
    goodput_mbps = result["delivered_bytes"] * 8 / last / 1e6
    print(f"aggregate goodput {goodput_mbps:.2f} Mbit/s = {goodput_mbps / NIC_MBPS:.2f} of the NIC rate")
    assert goodput_mbps >= 0.8 * NIC_MBPS


def test_roce_traffic_job_beside_a_ring_allreduce():
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=NIC_MBPS)
    spec = {"type": "concurrent", "alone": False, "jobs": [
        {"type": "collective", "name": "ring", "op": "allreduce", "algo": "ring", "sizes": ["256KiB"],
         "iterations": 2, "placement": {"hosts": ["s0g0", "s1g1"]}},
        {"type": "traffic", "name": "noise", "protocol": "roce", "pattern": "pairs", "size": "512KiB",
         "load": 0.8, "pairs": [["s0g1", "s1g0"], ["s1g0", "s0g1"]], "placement": {"hosts": ["s0g1", "s1g0"]}}]}
    concurrent.validate(fabric, spec, {})
    with Network(fabric, route_groups=True) as net:
        result = concurrent.run(net, spec)
    print([(j["job"], j["seconds_together"]) for j in result["jobs"]], result["job_bytes_deviation"],
          [c for c in result["checks"] if not c["ok"]])
    assert result["ok"], result["checks"]
    ring, noise = (j["together"] for j in result["jobs"])
    assert ring["rows"] and all(r["correct"] for r in ring["rows"])
    assert noise["data_exact"] and noise["protocol"] == "roce"
    assert result["job_bytes_deviation"] <= 0.02
    # the traffic's bytes are its own: they crossed its hosts' rail switches under its name
    assert any(by.get("noise") for by in result["switch_bytes_by_job"].values())


def test_roce_incast_under_dcqcn_is_marked_and_answered_with_cnps():
    """benchmarks/congestion.py's 7-to-1 incast fabric (ECN marking from 8 KiB of the receiver port's queue)."""
    if (lacking := ecn.missing()):
        pytest.skip(f"cannot mark ECN here: {lacking}")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import congestion
    fabric = congestion.incast_fabric(queue_kb=1024, mtu=1500)
    spec = {**INCAST, "congestion": "dcqcn", "size": "256KiB", "target": "s7g0"}
    traffic.validate(fabric, spec, {})
    with Network(fabric) as net:
        result = traffic.run(net, spec)
    print(traffic.summary(result), "CNPs", result["cnp_received"])
    assert result["ok"] and result["data_exact"] and result["flows"] == 7, result["checks"]
    assert result["congestion"] == "dcqcn"
    assert result["ecn_marked_packets"] > 0 and result["cnp_received"] > 0
