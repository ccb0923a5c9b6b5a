"""Links carry everything about a cable: rate, MTU, shaping, queue and delay, worked out once (links.new_link)
from the fabric's parameters: tiers, per-link overrides, ideal_uplinks and time_scale."""
import pytest

from hosts.rdma.mtu import HB_MTU
from hosts.recovery.beats import PORT as BEAT_PORT
from testbed.fabric import kinds, links
from testbed.fabric.topo import TopologyError, build


def every_link(f):
    return f.links + [c for cs in f.circuits.values() for c in cs]


@pytest.mark.parametrize("kind", kinds.NAMES)
@pytest.mark.parametrize("oversubscription", [1, 2])
def test_every_link_but_front_end_ones_is_shaped_with_its_queue_and_no_delay(kind, oversubscription):
    f = build(kind, 3, 2, nic_mtu=1500, oversubscription=oversubscription, cpu_hosts=1, spares_per_server=1)
    for l in every_link(f):
        assert l.mtu == (HB_MTU if l.kind == "hb" else 1500)
        unshaped = l.kind == "frontend"
        assert l.shaped is not unshaped and links.is_patch(f, l) is unshaped
        assert l.queue_bytes == (None if unshaped else links.tbf_limit(l.mbps, l.mtu))
        assert l.delay_us == 0


@pytest.mark.parametrize("kind", ["rail-optimized", "clos"])
def test_ideal_uplinks_leaves_the_uplinks_patch_ports(kind):
    f = build(kind, 2, 2, ideal_uplinks=True)
    uplinks = [l for l in f.links if l.kind == "uplink"]
    assert uplinks and all(links.is_patch(f, l) and l.queue_bytes is None for l in uplinks)
    assert all(l.shaped for l in f.links if l.kind in ("nic", "hb")) and not f.params.faithful
    assert build(kind, 2, 2).params.faithful


def test_tiers_give_delays_and_queues_and_tiers_left_out_keep_the_default():
    f = build("rail-optimized", 2, 2, delay_us={"nic": 100, "uplink": 250}, queue_kb={"uplink": 64})
    for l in every_link(f):
        assert l.delay_us == {"nic": 100, "uplink": 250, "hb": 0}[l.kind]
        assert l.queue_bytes == (64 * 1024 if l.kind == "uplink" else links.tbf_limit(l.mbps, l.mtu))
    f = build("rail-optimized", 2, 2, delay_us=7, queue_kb=200)
    assert {(l.delay_us, l.queue_bytes) for l in f.links} == {(7.0, 200 * 1024)}


def test_a_per_link_override_wins_over_its_tier_and_shapes_an_ideal_uplink():
    f = build("rail-optimized", 2, 2, delay_us=10, ideal_uplinks=True,
              links={"rail0-spine1": {"mbps": 3, "delay_us": 40, "queue_kb": 16}, "s0g0-rail0": {"delay_us": 0}})
    named = {l.name: l for l in f.links}
    assert (named["rail0-spine1"].mbps, named["rail0-spine1"].delay_us, named["rail0-spine1"].queue_bytes) == \
        (3.0, 40.0, 16 * 1024)
    assert named["rail0-spine1"].shaped and not links.is_patch(f, named["rail0-spine1"])
    assert named["s0g0-rail0"].delay_us == 0 and named["s1g0-rail0"].delay_us == 10
    assert named["rail0-spine0"].delay_us == 10 and not named["rail0-spine0"].shaped
    assert not links.is_patch(f, named["rail0-spine0"])          # a delay needs a veth


def test_the_default_queue_is_a_switch_ports_buffer_at_the_real_rate_above_the_floor():
    assert links.default_queue(5, 9000) == links.tbf_limit(5, 9000) == 1 << 20
    # 400 Gbit/s emulated at 10 Mbit/s: 32 us of 400 Gbit/s = 1.6 MB
    assert links.default_queue(10, 9000, time_scale=40_000) == 32 * 400_000 // 8 == 1_600_000
    f = build("clos", 2, 4, nic_mbps=400_000, time_scale=40_000)
    uplink = next(l for l in f.links if l.kind == "uplink")     # a ToR's 4 x 400 Gbit/s over 2 spines: 800
    assert uplink.mbps == 20.0 and uplink.queue_bytes == 3_200_000


@pytest.mark.parametrize("values, message", [
    (dict(delay_us=-1), r"delay_us must be a delay in us in \[0, 10000000\], got -1"),
    (dict(delay_us={"spine": 5}), "delay_us: unknown tier 'spine'; tiers are nic, uplink, hb"),
    (dict(delay_us={"nic": "far"}), "delay_us.nic must be a delay in us"),
    (dict(queue_kb=0), r"queue_kb must be a queue in KiB in \(0, 1048576\], got 0"),
    (dict(queue_kb={"hb": -4}), "queue_kb.hb must be a queue in KiB"),
    (dict(queue_kb=1), "the queue of s0g0-rail0, 1024 bytes, holds no 9000-byte frame"),
    (dict(links={"rail9-spine0": {"delay_us": 5}}), "links: no link named 'rail9-spine0' in this fabric"),
    (dict(links={"rail0-spine0": {"latency": 5}}), "links.rail0-spine0: unknown key 'latency'"),
    (dict(links={"rail0-spine0": {"mbps": 0}}), r"links.rail0-spine0.mbps must be a rate in Mbit/s"),
    (dict(links={"rail0-spine0": {}}), "links.rail0-spine0 must be a map with some of mbps, delay_us, queue_kb"),
    (dict(ideal_uplinks="yes"), "ideal_uplinks must be true or false, got 'yes'"),
    (dict(time_scale=0.5), "time_scale must be a ratio between 1 and"),
    (dict(nic_mbps=400_000), r"nic_mbps must be a rate in Mbit/s in \(0, 100000\]"),
])
def test_a_bad_link_value_is_named(values, message):
    with pytest.raises(TopologyError, match=message):
        build("rail-optimized", 2, 2, **values)


def test_a_shaped_links_qdisc_uses_its_queue():
    link = build("rail-optimized", 2, 2).links[0]
    assert links.tbf_of("eth0", link) == links.tbf("eth0", link.mbps, link.mtu)
    assert f"limit {link.queue_bytes}" in links.tbf_of("eth0", link)


def test_transport_timers_outlast_the_uplink_queues_and_the_round_trips_delay():
    plain = links.worst_queueing_delay(build("rail-optimized", 2, 2))
    delayed = links.worst_queueing_delay(build("rail-optimized", 2, 2, delay_us={"nic": 1000, "uplink": 2000}))
    assert delayed == pytest.approx(plain + 2 * (2 * 1000 + 2 * 2000) / 1e6)
    ideal = links.worst_queueing_delay(build("rail-optimized", 2, 2, ideal_uplinks=True))
    assert ideal < plain


def test_a_shaped_end_serves_heartbeats_ahead_of_its_data_queue():
    """tbf sets the rate; under it an htb serves the beats' class first and the data from a byte FIFO of the
    link's own queue; the filter matches the beats' UDP port and hands them to that class (-1: its classid)."""
    link = build("rail-optimized", 2, 2).links[0]
    cmds = links.shape("eth0", link)
    assert cmds[0] == links.tbf_of("eth0", link) and " root handle 1: tbf " in cmds[0]
    assert cmds[1] == "tc qdisc add dev eth0 parent 1:1 handle 10: htb default 2"
    assert "classid 10:1 htb" in cmds[2] and cmds[2].endswith("prio 0")
    assert "classid 10:2 htb" in cmds[3] and cmds[3].endswith("prio 1")
    assert cmds[4] == f"tc qdisc add dev eth0 parent 10:2 handle 12: bfifo limit {link.queue_bytes}"
    assert cmds[5].endswith("classid 10:1") and f"'{links.BEAT_MATCH}'" in cmds[5]
    program = links.BEAT_MATCH.split(",")
    assert int(program[0]) == len(program) - 1
    assert f"21 0 1 {BEAT_PORT}" in program and "6 0 0 4294967295" in program
