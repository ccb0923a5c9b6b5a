"""Integration (root): PFC pauses only the ingress ports whose frames fill the congested queue (fabric.pfc).

Rail-only, 4 servers x 1 GPU: one switch, rail0, with four hosts, 10 Mbit/s NICs, 256 KiB queues. Two paced UDP
flows at 0.9 x NIC converge on s1g0 (from s0g0 and s2g0): rail0's port into s1g0 gets 1.8 times what it can send.
A third flow, s3g0 -> s2g0 at 0.9 x NIC, crosses the same switch to another port. Routing lets s3g0's port feed
the queue into s1g0, but none of its frames are there: the switch's flow counters say whose frames are, and
only those ports are paused. Nothing is dropped, and the third flow keeps its rate."""
import pytest

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from tests.integration.test_pfc_fabric import MBPS, all_delivered_in_order, mbps, paced_flows, queue_drops

pytestmark = [pytest.mark.root, pytest.mark.alone]   # paced senders need the CPU for their pace

PFC = {"xoff_kb": 64, "xon_kb": 32}
INCAST = (("s0g0", "s1g0"), ("s2g0", "s1g0"))
THIRD = ("s3g0", "s2g0")


def run_incast_beside_a_third_flow() -> dict:
    fabric = build("rail-only", 4, 1, nic_mbps=10, queue_kb={"nic": 256}, pfc=PFC)
    with Network(fabric) as net:
        return {"flows": paced_flows(net, (*INCAST, THIRD)), "drops": queue_drops(net), "pfc": net.pfc_stats()}


@pytest.fixture(scope="module")
def run():
    return run_incast_beside_a_third_flow()


def test_only_the_ingress_ports_filling_the_queue_are_paused(run):
    stats = run["pfc"]
    gates = stats["gates"]
    assert stats["points"]["rail0>s1g0"]["xoffs"] > 0, stats["points"]
    for port in ("s0g0>rail0", "s2g0>rail0"):
        assert gates[port]["pauses"] > 0 and gates[port]["paused_s"] > 0.5, (port, gates)
    assert gates["s3g0>rail0"] == {"pauses": 0, "paused_s": 0.0}, gates
    assert stats["points"]["rail0>s2g0"]["xoffs"] == 0, stats["points"]      # the third flow's port never fills
    assert stats["unattributed"] == {} and stats["flow_reads"] > 0, stats
    assert stats["errors"] == 0, stats["last_error"]


def test_paused_per_ingress_port_nothing_is_dropped_and_the_third_flow_keeps_its_rate(run):
    assert sum(run["drops"].values()) == 0, {p: d for p, d in run["drops"].items() if d}
    for f, got in run["flows"].items():
        all_delivered_in_order(f, got)
    assert mbps(run["flows"][THIRD]) > 0.8 * MBPS, run["flows"][THIRD]
    incast = sum(mbps(run["flows"][f]) for f in INCAST)
    assert incast < 1.2 * 10, incast        # the two share s1g0's 10 Mbit/s port
