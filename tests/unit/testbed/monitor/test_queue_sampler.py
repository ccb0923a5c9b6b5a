"""The queue sampler: root qdiscs from netlink messages, the shaped ports of a fabric, samples with gaps, the
devices' drops at their own pace, and the CPU budget stretching the period."""
import time
from types import SimpleNamespace

import struct

from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from testbed.fabric import rtnl
from testbed.fabric.links import switch_port
from testbed.fabric.topo import build
from testbed.monitor.queues import Port, Qdisc, QueueSampler, root_qdiscs, shaped_ports


def message(index: int, kind: str, parent: int = rtnl.TC_H_ROOT, backlog=0, qlen=0, drops=0, limit=None) -> bytes:
    """An RTM_NEWQDISC message as the kernel sends it (encoded by pyroute2)."""
    attrs = [("TCA_KIND", kind)]
    if limit is not None:
        attrs.append(("TCA_OPTIONS", {"attrs": [("TCA_TBF_PARMS", {"limit": limit, "buffer": 5000, "mtu": 0,
                                                                   "rate": 1250000})]}))
    attrs.append(("TCA_STATS2", {"attrs": [("TCA_STATS_BASIC", {"bytes": 1 << 40, "packets": 99}),
                                           ("TCA_STATS_QUEUE", {"qlen": qlen, "backlog": backlog, "drops": drops,
                                                                "requeues": 0, "overlimits": 5})]}))
    m = tcmsg()
    m.setvalue({"header": {"type": rtnl.RTM_NEWQDISC, "flags": 2}, "index": index, "handle": 0x10000,
                "parent": parent, "attrs": attrs})
    m.encode()
    return bytes(m.data)


def device(index: int, name: str, tx_dropped: int) -> bytes:
    m = ifinfmsg()
    stats = {"tx_packets": 5, "rx_dropped": 77, "tx_dropped": tx_dropped}      # the rest 0
    m.setvalue({"header": {"type": rtnl.RTM_NEWLINK, "flags": 2}, "index": index,
                "attrs": [("IFLA_IFNAME", name), ("IFLA_MTU", 1500), ("IFLA_STATS64", stats)]})
    m.encode()
    return bytes(m.data)


DONE = struct.pack("=IHHII", 20, rtnl.NLMSG_DONE, 2, 0, 0) + b"\0" * 4


def test_root_qdiscs_reads_backlog_drops_and_tbfs_limit():
    chunks = [message(2, "noqueue") + message(3, "tbf", backlog=30000, qlen=20, drops=7, limit=1 << 20),
              message(3, "netem", parent=0x10001, backlog=999)             # a child: not the port's root
              + message(4, "pfifo_fast", backlog=1500, qlen=1) + DONE]
    got = root_qdiscs(chunks)
    assert got[3] == Qdisc("tbf", 30000, 20, 7, 1 << 20)
    assert got[4] == Qdisc("pfifo_fast", 1500, 1, 0, None)               # no byte limit to read
    assert got[2].backlog_bytes == 0 and set(got) == {2, 3, 4}


def test_devices_reads_each_ones_index_and_transmit_drops():
    got = rtnl.devices([device(5, "tb-rail0-p2", 42) + device(1, "lo", 0) + message(5, "tbf") + DONE])
    assert got == {"tb-rail0-p2": (5, 42), "lo": (1, 0)}


class FakeNet:
    """A one-machine fabric: hosts with PIDs, patch ports for the 1:1 uplinks."""

    def __init__(self, fabric):
        self.fabric = fabric

    def is_patch(self, link):
        return not link.shaped

    def machine_of(self, node):
        return None

    def host(self, name):
        return SimpleNamespace(pid=1000 + sorted(self.fabric.hosts).index(name))


def test_shaped_ports_are_both_ends_of_every_shaped_link_in_their_namespaces():
    f = build("rail-optimized", 2, 2, spines=2, nic_mbps=10, spares_per_server=1)
    ports = {p.name: p for p in shaped_ports(FakeNet(f))}
    nic = f.attachment("s1g0", "nic")
    assert ports["rail0>s1g0"] == Port("rail0", "s1g0", "s1g0-rail0", "nic", switch_port("rail0", nic.b_port), None)
    host = ports["s1g0>rail0"]
    assert host.dev == "eth0" and host.netns.startswith("/proc/") and host.netns.endswith("/ns/net")
    assert "s0g0>hb0" in ports and ports["s0g0>hb0"].dev == "eth1"            # HB links are shaped too
    assert "rail0>spine1" in ports and "spine1>rail0" in ports                # 1:1 uplinks are shaped too
    ideal = build("rail-optimized", 2, 2, spines=2, nic_mbps=10, ideal_uplinks=True)
    assert not any(p.tier == "uplink" for p in shaped_ports(FakeNet(ideal)))  # patch ports with ideal_uplinks
    assert "rail1>s0spare0" in ports                                          # a spare's reserved circuit
    assert len(ports) == len({(p.node, p.dev, p.netns) for p in ports.values()})


class FakeNamespace:
    """Backlog grows by 1000 bytes a read; the second port is missing from the second read."""

    def __init__(self):
        self.reads = self.device_reads = 0

    def read(self):
        self.reads += 1
        out = {"a>b": Qdisc("tbf", 1000 * self.reads, self.reads, self.reads // 2, 5000)}
        if self.reads != 2:
            out["b>a"] = Qdisc("tbf", 0, 0, 0, 7000)
        return out

    def device_drops(self):
        self.device_reads += 1
        return {"a>b": 3 * self.device_reads}

    def close(self):
        pass


def test_samples_keep_what_each_read_found_and_the_devices_drops_when_asked():
    s = QueueSampler([])
    ns = FakeNamespace()
    for k in range(3):
        s.sample([ns], devices=k == 0)
    assert [sorted(q) for _, q in s.samples] == [["a>b", "b>a"], ["a>b"], ["a>b", "b>a"]]
    assert [q["a>b"] for _, q in s.samples] == [(1000, 1, 0), (2000, 2, 1), (3000, 3, 1)]
    assert [d for _, d in s.device_drops] == [{"a>b": 3}]
    assert s.limits == {"a>b": 5000, "b>a": 7000} and s.kinds["a>b"] == "tbf"


def test_the_thread_samples_until_stopped_and_ends_with_the_devices(monkeypatch):
    ns = FakeNamespace()
    monkeypatch.setattr(QueueSampler, "_open", lambda self: [ns])
    s = QueueSampler([], period=0.01, device_every=1000).start()
    time.sleep(0.15)
    s.stop()
    s.stop()                                         # idempotent
    assert len(s.samples) >= 5 and ns.device_reads == 2          # the first sample's and the last one's
    assert 0.005 <= s.mean_period() <= 0.05
    assert s.cpu_share() is not None and 0 <= s.cpu_share() < 1


def test_a_costly_sample_stretches_the_period_to_the_cpu_budget(monkeypatch):
    class Costly(FakeNamespace):
        def read(self):
            end = time.thread_time() + 0.004                     # 4 ms of CPU a sample
            while time.thread_time() < end:
                pass
            return super().read()
    monkeypatch.setattr(QueueSampler, "_open", lambda self: [Costly()])
    s = QueueSampler([], period=0.01, cpu_budget=0.1).start()    # 4 ms within 10% of a core: every 40 ms
    time.sleep(0.5)
    s.stop()
    assert s.mean_period() >= 0.035, s.mean_period()
    assert s.cpu_share() <= 0.15, s.cpu_share()
