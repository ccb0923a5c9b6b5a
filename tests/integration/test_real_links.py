"""Integration (root): every link a real link. On a fabric brought up from the link model, a ping across links
with a propagation delay measures the configured round trip, on the delay path that runs here; and on a 1:1
fabric (no oversubscription) the uplinks are shaped, so two flows routed onto one uplink share it, while the
same flows spread over two uplinks each run at their NIC's rate."""
import os
import statistics

import pytest

from testbed.fabric.delay import delay_paths
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import traffic

pytestmark = [pytest.mark.root, pytest.mark.alone]    # rates measured: they need CPU headroom

CONSTANT_MS_PER_LINK = 0.5      # what a delayed link adds to a round trip beyond its delay (its two delay-line
                                # passes: 0.1-0.4 ms measured in docs/delay.md), over the fabric's own round trip
NIC_MBPS = 10


def rtts(net, src: str, dst: str, count: int = 20) -> list[float]:
    """Round trips in ms, after two pings that warm the path."""
    ping = f"ping -n -i 0.05 -W 2 {net.fabric.hosts[dst].ip}"
    net.host(src).cmd(f"{ping} -q -c 2")
    out = net.host(src).cmd(f"{ping} -c {count}")
    return [float(w.split("=")[1]) for w in out.split() if w.startswith("time=")]


def test_a_ping_across_delayed_links_measures_the_configured_round_trip():
    """s0g0's round trips to s1g0 (the same rail: two NIC links each way) and to s1g1 (over a spine: two NIC links
    and two uplinks each way), with the delays on and then, on the same fabric, taken off: the fabric's own
    round trip, which the constant is counted from."""
    print(f"delay paths here: {', '.join(delay_paths())}")
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=NIC_MBPS, delay_us={"nic": 1000, "uplink": 2000})
    wants = {"s1g0": 2 * 2 * 1.0, "s1g1": 2 * (2 * 1.0 + 2 * 2.0)}
    links = {"s1g0": 2, "s1g1": 4}          # delayed links on the path
    with Network(fabric, routing="single") as net:
        delayed = {dst: rtts(net, "s0g0", dst) for dst in wants}
        net.delays.close()
        base = {dst: statistics.median(rtts(net, "s0g0", dst)) for dst in wants}
    for dst, want in wants.items():
        got = delayed[dst]
        print(f"s0g0 -> {dst}: want {want:.1f} ms; RTT median {statistics.median(got):.2f} ms (min {min(got):.2f}, "
              f"max {max(got):.2f}, {len(got)} pings); undelayed median {base[dst]:.2f} ms; "
              f"load average {os.getloadavg()[0]:.1f}")
    for dst, want in wants.items():
        got = delayed[dst]
        assert len(got) >= 15
        assert want <= min(got)
        assert statistics.median(got) <= 1.1 * want + base[dst] + CONSTANT_MS_PER_LINK * links[dst]


def flows(mode: str) -> dict:
    """Two UDP flows leaving rail0 for rail1, each paced just below its NIC's rate. With `single` routing both
    take the same uplink (the preferred port rotates with the destination, and s0g1 and s1g1 are both odd);
    with `rr` every flow is spread packet by packet over both uplinks. The uplinks' queues hold both flows
    whole, so the shared one serves them first come, first served (a full drop-tail queue shares itself out
    between paced flows by the phase of their packets: 0.28 and 0.64 of the rate in one run)."""
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=NIC_MBPS, queue_kb={"uplink": 8192})
    assert all(l.shaped for l in fabric.links if l.kind == "uplink")
    with Network(fabric, routing=mode) as net:
        return traffic.run(net, {"pattern": "pairs", "pairs": [["s0g0", "s1g1"], ["s1g0", "s0g1"]],
                                 "size": "3MiB", "protocol": "udp", "rate_mbps": 0.95 * NIC_MBPS})


def test_flows_sharing_a_one_to_one_uplink_share_its_rate_and_spread_ones_do_not():
    shared, spread = flows("single"), flows("rr")
    for name, result in (("one uplink", shared), ("two uplinks", spread)):
        rates = [f["mbps"] / NIC_MBPS for f in result["per_flow"]]
        print(f"{name}: flows at {', '.join(f'{r:.2f}' for r in rates)} of the NIC rate, "
              f"{result['delivered_bytes']} of {2 * 3 * 2**20} bytes; uplinks {result['uplink_bytes']}; "
              f"load average {os.getloadavg()[0]:.1f}")
    # the flows ran (a machine loaded by other work loses some UDP frames in the switches, shaped or not); their
    # rates are what is measured
    assert all(f["bytes"] >= 0.5 * f["expected_bytes"] for f in shared["per_flow"] + spread["per_flow"])
    a, b = shared["uplink_bytes"]["rail0-spine0"], shared["uplink_bytes"]["rail0-spine1"]
    assert min(a, b) < 0.01 * max(a, b)                   # both flows on one uplink (the other: a few stray frames)
    assert all(f["mbps"] <= 0.6 * NIC_MBPS for f in shared["per_flow"])
    assert all(f["mbps"] >= 0.85 * NIC_MBPS for f in spread["per_flow"])
