"""Integration (root): two sites joined by a WAN link. A ping across the WAN measures the link's configured round
trip; one transfer across it is held to the WAN's rate, below the NICs'; a lossy WAN link loses pings at its
rate; and a cut WAN link stops the traffic between the sites, and only that, until it is back."""
import os
import statistics

import pytest

from testbed.fabric.delay import delay_paths
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.faults import cut
from testbed.workloads import traffic

pytestmark = [pytest.mark.root, pytest.mark.alone]    # rates and round trips measured: they need CPU headroom

NIC_MBPS = 10
WAN_MBPS = 2
WAN_DELAY_MS = 20
CONSTANT_MS = 2.0           # what the path adds beyond its delays: the fabric's own round trip is measured apart;
                            # this is the delay line's two passes each way (0.1-0.4 ms each, docs/delay.md)


def two_sites(**wan) -> object:
    """Two Clos sites of one server x 2 GPUs, a spine each, their spines joined by one WAN link."""
    return build("clos", 1, 2, spines=1, nic_mbps=NIC_MBPS, sites={"eu": {}, "us": {}},
                 wan=[{"a": "eu", "b": "us", "mbps": WAN_MBPS, "delay_us": WAN_DELAY_MS * 1000} | wan])


def pings(net, src: str, dst: str, count: int, interval: float = 0.05) -> tuple[int, list[float]]:
    """(pings sent, round trips in ms of those answered), after two that warm the path."""
    ping = f"ping -n -W 2 {net.fabric.hosts[dst].ip}"
    net.host(src).cmd(f"{ping} -q -c 2 -i 0.2")
    out = net.host(src).cmd(f"{ping} -c {count} -i {interval}")
    return count, [float(w.split("=")[1]) for w in out.split() if w.startswith("time=")]


def test_a_ping_across_the_wan_measures_its_round_trip_and_one_transfer_its_rate():
    print(f"delay paths here: {', '.join(delay_paths())}")
    fabric = two_sites()
    want = 2 * WAN_DELAY_MS
    with Network(fabric, routing="single") as net:
        _, across = pings(net, "s0g0", "s1g0", 20)
        _, within = pings(net, "s0g0", "s0g1", 20)
        moved = traffic.run(net, {"pattern": "pairs", "pairs": [["s0g0", "s1g1"]], "size": "1MiB",
                                  "protocol": "tcp"})
        net.delays.close()          # the same path without the WAN's delay: the fabric's own round trip
        _, base = pings(net, "s0g0", "s1g0", 20)
    (flow,) = moved["per_flow"]
    print(f"s0g0 -> s1g0 across the WAN: want {want} ms; RTT median {statistics.median(across):.2f} ms "
          f"(min {min(across):.2f}, max {max(across):.2f}, {len(across)} pings); undelayed "
          f"{statistics.median(base):.2f} ms; within the site {statistics.median(within):.2f} ms; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"one TCP transfer across: {flow['mbps']:.2f} Mbit/s = {flow['mbps'] / WAN_MBPS:.2f} of the WAN's "
          f"{WAN_MBPS} Mbit/s (NICs {NIC_MBPS}); {flow['bytes']} of {flow['expected_bytes']} bytes")
    assert len(across) >= 15 and want <= min(across)
    assert statistics.median(across) <= 1.1 * want + statistics.median(base) + CONSTANT_MS
    assert statistics.median(within) < want / 4            # the delay is the WAN's alone
    assert flow["bytes"] == flow["expected_bytes"]
    assert 0.5 * WAN_MBPS <= flow["mbps"] <= 1.05 * WAN_MBPS      # held to the WAN's rate, far below the NICs'


def test_a_lossy_wan_link_loses_pings_at_its_rate():
    """Each direction loses LOSS of its frames, so a round trip is lost with 1 - (1 - LOSS)^2."""
    loss, count = 0.1, 400
    with Network(two_sites(loss=loss, delay_us=2000), routing="single") as net:
        sent, answered = pings(net, "s0g0", "s1g0", count, interval=0.01)
        _, within = pings(net, "s0g0", "s0g1", 100, interval=0.01)
        path, stats = net.delays.path, net.delays.stats()
    want = 1 - (1 - loss) ** 2
    got = 1 - len(answered) / sent
    sd = (want * (1 - want) / sent) ** 0.5
    print(f"WAN loss {loss} each way: round trips lost {got:.3f}, want {want:.3f} (+- {sd:.3f}); "
          f"{path} path {stats}; within the site {100 - len(within)} of 100 lost")
    assert abs(got - want) < 5 * sd
    assert len(within) == 100                           # nothing lost within a site
    if path == "userspace":                             # the delay line counts what it dropped
        assert sum(line["lost"] for line in stats.values()) > 0


def test_a_cut_wan_link_stops_the_traffic_between_sites_and_only_that():
    with Network(two_sites(delay_us=1000), routing="single") as net:
        assert len(pings(net, "s0g0", "s1g0", 5, 0.1)[1]) == 5
        record = cut.inject(net, "euspine0-usspine0")
        assert record["links"] == 1
        _, across = pings(net, "s0g0", "s1g0", 10, 0.1)
        _, within = pings(net, "s0g0", "s0g1", 10, 0.1)
        _, other = pings(net, "s1g0", "s1g1", 10, 0.1)
        cut.inject(net, "site:us", up=True)                  # the site's every WAN link back
        _, back = pings(net, "s0g0", "s1g0", 10, 0.1)
    print(f"WAN cut: {len(across)}/10 across, {len(within)}/10 within eu, {len(other)}/10 within us; "
          f"back up: {len(back)}/10 across")
    assert across == [] and len(within) == len(other) == 10
    assert len(back) >= 8            # the first may go while the controller puts the routes back
