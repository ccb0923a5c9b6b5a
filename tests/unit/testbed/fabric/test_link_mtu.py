"""Link MTUs: the fabric's nic_mtu (9000 by default: jumbo frames; 1500 standard ones) and hb_mtu (32 KiB RoCE packets
by default), the RoCE MTU each carries (as rxe derives it from its netdev), and what depends on them (queueing
delay, capture snaplen, multicast wire bytes)."""
import pytest

from hosts.rdma.mtu import DEFAULT_ROCE_MTU, HB_MTU, roce_mtu
from testbed.scenario import loader
from testbed.fabric import topo
from testbed.fabric.links import roce_mtus, worst_queueing_delay
from testbed.monitor.capture import largest_frame
from testbed.model import multicast_minimum as mm


@pytest.mark.parametrize("link_mtu, want", [(1087, 512), (1088, 1024), (1500, 1024), (2200, 2048), (4159, 2048), (4160, 4096),
                                            (9000, 4096), (9216, 4096)])
def test_roce_mtu_is_the_largest_ib_mtu_whose_packets_fit(link_mtu, want):
    assert roce_mtu(link_mtu) == want


@pytest.mark.parametrize("link_mtu, want", [(4160, 4096), (8255, 4096), (9000, 8192), (8256, 8192), (16447, 8192), (32831, 16384),
                                            (32832, 32768), (65535, 32768)])
def test_hb_links_carry_roce_mtus_beyond_4096(link_mtu, want):
    assert roce_mtu(link_mtu, large=True) == want


def test_jumbo_nic_links_carry_roce_mtu_4096_and_hb_links_32k():
    plain, jumbo = topo.build("rail-optimized", 2, 4, nic_mtu=1500), topo.build("rail-optimized", 2, 4)
    assert jumbo.params.nic_mtu == 9000 and roce_mtus(plain) == {"nic": 1024, "hb": 32768}
    assert roce_mtus(jumbo) == {"nic": 4096, "hb": 32768}
    assert roce_mtus(topo.build("rail-optimized", 2, 4, hb_mtu=9000)) == {"nic": 4096, "hb": 8192}
    for link in jumbo.links:
        assert link.mtu == (HB_MTU if link.kind == "hb" else 9000)
    assert largest_frame(jumbo, "rail0:1") == 9014 and largest_frame(plain, "rail0:1") == 1514
    # deeper tbf bursts on jumbo links lengthen the worst queueing delay the transport timers must outlast
    assert worst_queueing_delay(jumbo) >= worst_queueing_delay(plain)


@pytest.mark.parametrize("bad", [1000, 1083, 9217, 1500.0, "9000", True])
def test_an_impossible_nic_mtu_is_named(bad):
    with pytest.raises(topo.TopologyError, match="nic_mtu"):
        topo.build("rail-only", 2, 2, nic_mtu=bad)


def test_multicast_wire_bytes_follow_the_roce_mtu():
    shard = 1 << 20
    assert mm.wire_bytes(shard, 4096) == shard + 256 * 70 and mm.wire_bytes(shard) == shard + 1024 * 70
    plain, jumbo = topo.build("rail-optimized", 2, 4, nic_mtu=1500), topo.build("rail-optimized", 2, 4)
    hosts = sorted(plain.hosts)
    assert mm.allgather_minimum(jumbo, hosts, shard) < mm.allgather_minimum(plain, hosts, shard)


def test_a_rank_told_no_roce_mtu_falls_back_to_what_the_default_links_carry():
    assert DEFAULT_ROCE_MTU == roce_mtus(topo.build("clos", 2, 2)) == {"nic": 4096, "hb": 32768}


def test_a_fabric_spread_over_machines_keeps_hb_frames_its_underlay_carries():
    doc = {"name": "x", "fabric": {"kind": "rail-only", "servers": 2, "gpus_per_server": 2},
           "workloads": [{"type": "connectivity"}], "machines": [{"name": "m1", "address": "10.0.0.1"}]}
    assert loader.validate(doc)["fabric"]["hb_mtu"] == 9000
    doc["fabric"]["hb_mtu"] = 4200                                  # what the user gives stays
    assert loader.validate(doc)["fabric"]["hb_mtu"] == 4200
    del doc["machines"], doc["fabric"]["hb_mtu"]
    assert "hb_mtu" not in loader.validate(doc)["fabric"]        # one machine: the parameter's default
