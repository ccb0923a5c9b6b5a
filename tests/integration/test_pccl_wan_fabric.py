"""Integration (root): one transfer across a long fat pipe, as PCCL's figure has it. Two sites joined by a WAN link
with a long delay; each TCP connection's receive window is clamped well below the pipe's bandwidth-delay product.
One connection is window-bound: it carries about window / round trip, far below the pipe. Enough parallel
connections to cover the bandwidth-delay product fill the pipe."""
import os

import pytest

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import traffic

pytestmark = [pytest.mark.root, pytest.mark.alone]    # rates measured: they need CPU headroom

NIC_MBPS = 20
WAN_MBPS = 8
DELAY_MS = 40                  # one way: a round trip of 80 ms, a bandwidth-delay product of 80 kB
WINDOW = 16384                 # a fifth of it: one connection carries a fifth of the pipe at most
SIZE = 2 << 20                 # the transfer, split over the connections


def transfer(net, connections: int) -> dict:
    out = traffic.run(net, {"pattern": "pairs", "pairs": [["s0g0", "s1g0"]], "protocol": "tcp",
                            "flows_per_pair": connections, "size": SIZE // connections, "window": WINDOW})
    assert out["ok"], out["checks"]                 # every byte of every connection delivered
    return out["wan"]


def test_one_connection_is_window_bound_and_several_fill_the_pipe():
    fabric = build("clos", 1, 2, spines=1, nic_mbps=NIC_MBPS, sites={"eu": {}, "us": {}},
                   wan=[{"a": "eu", "b": "us", "mbps": WAN_MBPS, "delay_us": DELAY_MS * 1000, "queue_kb": 256}])
    with Network(fabric, routing="single") as net:
        one, eight = transfer(net, 1), transfer(net, 8)
    rtt_s = 2 * DELAY_MS / 1e3
    window_bound = WINDOW * 8 / rtt_s / 1e6          # Mbit/s: one window per round trip
    print(f"WAN {WAN_MBPS} Mbit/s, round trip {one['rtt_ms']:g} ms, BDP {one['bdp_bytes']} B, window {WINDOW} B: "
          f"1 connection {one['goodput_mbps']:.2f} Mbit/s ({one['of_pipe']:.2f} of the pipe, "
          f"{one['goodput_mbps'] / window_bound:.2f} of window / RTT = {window_bound:.2f}); 8 connections "
          f"{eight['goodput_mbps']:.2f} Mbit/s ({eight['of_pipe']:.2f} of the pipe; their windows' bound "
          f"{eight['window_bound_mbps']:.2f}); WAN wire bytes {one['wire_bytes']} / {eight['wire_bytes']}; "
          f"load average {os.getloadavg()[0]:.1f}")
    assert one["rtt_ms"] == 2 * DELAY_MS and one["bdp_bytes"] == int(WAN_MBPS * 1e6 / 8 * rtt_s)
    assert one["window_bound_mbps"] == pytest.approx(window_bound)
    # one connection: held to its window per round trip (the real round trip is longer than the WAN's, never
    # shorter), far below the pipe
    assert 0.5 * window_bound <= one["goodput_mbps"] <= 1.05 * window_bound
    assert one["goodput_mbps"] < 0.3 * WAN_MBPS
    # eight: their windows (1.6 x the BDP) cover the pipe, and they fill most of it
    assert eight["window_bound_mbps"] > WAN_MBPS
    assert eight["goodput_mbps"] >= 0.7 * WAN_MBPS
    assert eight["goodput_mbps"] >= 3 * one["goodput_mbps"]
    # the WAN link's own counters saw the transfer (headers and acknowledgements on top)
    for pipe in (one, eight):
        assert SIZE <= pipe["wire_bytes"] <= 1.2 * SIZE
