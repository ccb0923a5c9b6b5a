"""Integration (root): how each routing mode spreads traffic over the spines, proven by switch counters."""
import pytest

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import traffic

pytestmark = [pytest.mark.root, pytest.mark.alone]   # beside another fabric (2 cores) a UDP flow lost 4% of its packets


def one_flow(mode, **extra):
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=10)
    with Network(fabric, routing=mode) as net:
        return traffic.run(net, {"pattern": "pairs", "pairs": [["s0g0", "s1g1"]], "size": "512KiB",
                                 "protocol": "udp", "rate_mbps": 4, **extra})


def up_bytes(result):
    return result["uplink_bytes"]["rail0-spine0"], result["uplink_bytes"]["rail0-spine1"]


@pytest.mark.parametrize("mode", ["spray", "rr"])
def test_per_packet_modes_split_one_flow_evenly(mode):
    result = one_flow(mode)
    assert result["ok"], result["checks"]
    a, b = up_bytes(result)
    mean = (a + b) / 2
    assert abs(a - mean) <= 0.2 * mean, (a, b)          # within 20% of even
    if mode == "rr":                                     # the controller's round robin is exact
        assert abs(a - b) <= 4 * 1100, (a, b)
    print(f"{mode}: one flow over the spines {a} / {b} bytes, {result['reordered_packets']} reordered")


def test_ecmp_keeps_one_flow_on_one_path():
    result = one_flow("ecmp")
    a, b = up_bytes(result)
    assert min(a, b) == 0 and max(a, b) > 512 * 1024


def test_split_delivers_a_flow_over_k_subflows():
    # Subflows take ephemeral source ports, so the switches' hash places each at random: with K = 16 all land
    # on one spine with probability 2^-15 (with K = 4 it was 1/8, and the test failed that often).
    result = one_flow("split:16")
    assert result["ok"], result["checks"]
    a, b = up_bytes(result)
    assert a + b >= 512 * 1024
    assert min(a, b) >= 0.1 * (a + b), (a, b)            # the subflows hash onto both spines


def test_spray_spreads_the_same_flows_more_evenly_than_ecmp():
    """Three equal flows of one pair over two spines. ECMP places whole flows, so one spine carries at least
    two of the three (4/3 of the mean or more, whatever the hash); spraying splits every flow per packet."""
    imbalance = {}
    for mode in ("ecmp", "spray"):
        result = one_flow(mode, flows_per_pair=3, rate_mbps=3)
        assert result["ok"], result["checks"]
        a, b = up_bytes(result)
        assert a + b >= 3 * 512 * 1024
        imbalance[mode] = max(a, b) / ((a + b) / 2)
        print(f"{mode}: 3 flows over the spines {a} / {b} bytes, busiest spine {imbalance[mode]:.3f} x the mean")
    assert imbalance["ecmp"] >= 1.3                       # the arithmetic of whole flows, if counters are right
    assert imbalance["spray"] < 1.15 and imbalance["spray"] < imbalance["ecmp"] - 0.15, imbalance
