"""Jumbo frames (fabric nic_mtu 9000): the NIC links take 9000-byte frames end to end, the ranks' RoCE MTU is
4096 (a quarter of the packets per byte of the default 1500), the HB links carry 32 KiB RoCE packets, and ring and
multicast collectives stay exact."""
import subprocess

import pytest

from hosts.rdma.mtu import HB_MTU
from testbed.fabric import hb_counters
from testbed.fabric.links import switch_port
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import collective

pytestmark = [pytest.mark.root]


def frame_size(before: dict, after: dict) -> float:
    """Mean bytes per packet the switches sent between two counter readings."""
    nbytes = sum(after[p]["tx_bytes"] - before[p]["tx_bytes"] for p in after)
    packets = sum(after[p]["tx_packets"] - before[p]["tx_packets"] for p in after)
    return nbytes / max(1, packets)


def hb_frames() -> dict:
    """The HB links' bridge-side devices' transmitted bytes and packets, now."""
    def stat(dev, key):
        with open(f"/sys/class/net/{dev}/statistics/{key}") as f:
            return int(f.read())
    return {dev: {k: stat(dev, k) for k in ("tx_bytes", "tx_packets")} for dev in hb_counters.devices(FABRIC)}


FABRIC = build("rail-optimized", 2, 2, spines=1, nic_mbps=20, nic_mtu=9000)


def test_jumbo_nic_links_carry_roce_mtu_4096_and_collectives_stay_exact():
    with Network(FABRIC) as net:
        host = net.host("s0g0")
        assert "mtu 9000" in host.cmd("ip link show eth0") and f"mtu {HB_MTU}" in host.cmd("ip link show eth1")
        port = subprocess.run(["ip", "link", "show", switch_port("rail0", 1)], capture_output=True, text=True).stdout
        assert "mtu 9000" in port, port
        before, hb_before = net.counters(), hb_frames()
        ring = collective.run(net, {"op": "allreduce", "algo": "ring", "ring": "rank", "sizes": ["1MiB"],
                                    "iterations": 2})
        after, hb_after = net.counters(), hb_frames()
        assert ring["ok"], ring["checks"]
        # data frames of 4096 B of RoCE payload (4154 on the wire) among small ACKs: far above what 1500 allows
        assert frame_size(before, after) > 2000, frame_size(before, after)
        # on the HB links, 32 KiB of RoCE payload per data frame: far above what a 9000-byte link allows
        assert frame_size(hb_before, hb_after) > 9000, frame_size(hb_before, hb_after)
        mcast = collective.run(net, {"op": "allgather", "algo": "multicast", "sizes": ["256KiB"], "iterations": 2,
                                     "expect": {"max_tree_ratio": 1.15}})
        assert mcast["ok"], mcast["checks"]
        # chunks of 4096 B, counted so by the minimum too (with 1024-byte chunks' headers it would read ~0.95)
        assert 0.98 <= mcast["rows"][0]["tree_ratio"] <= 1.15, mcast["rows"][0]
