"""The multicast app against a hostile host, without a switch: joins past the per-host cap, joins of addresses
that are not multicast and messages that do not parse are ignored and counted; other hosts still join."""
import types

from os_ken.lib.packet import ethernet, igmp, ipv4, packet

from controllers import multicast_app
from controllers.multicast_app import MAX_GROUPS_PER_HOST, MulticastTrees


def frame(msg) -> bytes:
    p = packet.Packet()
    p.add_protocol(ethernet.ethernet(ethertype=0x0800))
    p.add_protocol(ipv4.ipv4(proto=2, src="10.11.0.1", dst="224.0.0.22"))
    p.add_protocol(msg)
    p.serialize()
    return bytes(p.data)


def app():
    """The app's packet-in path with its state in memory: no os-ken manager, no switch."""
    a = object.__new__(MulticastTrees)
    a.topo = types.SimpleNamespace(by_dpid=lambda dpid: "rail0",
                                   host_port={"s0g0": ("rail0", 1), "s1g0": ("rail0", 2)})
    a.members, a.history, a.errors, a.ignored, a.unsaved, a.group_hosts = {}, [], [], {}, False, {}
    a.sync = a.save_state = lambda: None
    return a


def packet_in(a, port, data):
    msg = types.SimpleNamespace(datapath=types.SimpleNamespace(id=1), data=data, match={"in_port": port})
    a.packet_in(types.SimpleNamespace(msg=msg))


def join(group):
    return frame(igmp.igmp(msgtype=igmp.IGMP_TYPE_REPORT_V2, address=group))


def test_joins_past_the_cap_and_of_unicast_addresses_are_ignored_and_counted():
    a = app()
    for i in range(MAX_GROUPS_PER_HOST + 50):
        packet_in(a, 1, join(f"239.1.{i // 256}.{i % 256}"))
    packet_in(a, 1, join("239.1.0.0"))                          # a group it has: no change, not counted
    for unicast in ("10.11.0.2", "0.0.0.0", "255.255.255.255"):
        packet_in(a, 1, join(unicast))
    packet_in(a, 1, frame(igmp.igmp(msgtype=igmp.IGMP_TYPE_REPORT_V2, address="239.1.0.0"))[:36])   # cut short
    assert sum(1 for m in a.members.values() if "s0g0" in m) == MAX_GROUPS_PER_HOST
    assert a.ignored["s0g0"]["over_cap"] == 50 and a.ignored["s0g0"]["not_multicast"] == 3
    assert not {"10.11.0.2", "0.0.0.0", "255.255.255.255"} & set(a.members)
    packet_in(a, 2, join("239.1.0.0"))                          # another host is not held back by the first
    packet_in(a, 2, join("239.9.9.9"))
    assert a.members["239.1.0.0"] == {"s0g0", "s1g0"} and a.members["239.9.9.9"] == {"s1g0"}
    assert "s1g0" not in a.ignored and a.unsaved                # the counts are saved by the app's flush loop


def test_errors_kept_are_bounded():
    a = app()
    a.errors = ["x"] * multicast_app.MAX_ERRORS
    a.ignore("s0g0", "malformed", "one more")
    assert len(a.errors) == multicast_app.MAX_ERRORS and a.ignored["s0g0"]["malformed"] == 1
