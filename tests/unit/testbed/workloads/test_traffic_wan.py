"""The traffic workload across a long fat pipe: flows between two sites set against the WAN link they share (its
rate, round trip, bandwidth-delay product, the bound the connections' windows set), the bytes it carried read
from its ports' counters, and the receive window reaching every TCP receiver."""
import pytest

from testbed.fabric.topo import build
from testbed.scenario.schema import ScenarioError
from testbed.workloads import traffic

WAN = {"a": "eu", "b": "us", "mbps": 8, "delay_us": 40000, "queue_kb": 256}


@pytest.fixture(scope="module")
def fabric():
    return build("clos", 1, 2, spines=1, nic_mbps=20, sites={"eu": {}, "us": {}}, wan=[WAN])


def flow(src, dst, size, seconds):
    return {"src": src, "dst": dst, "bytes": size, "seconds": seconds}


def test_the_pipe_is_the_wan_link_with_its_bdp_and_the_windows_bound(fabric):
    (link,) = fabric.wan_links()
    ends = [f"{link.a}:{link.a_port}", f"{link.b}:{link.b_port}"]
    before = {p: {"tx_bytes": 100} for p in ends}
    after = {ends[0]: {"tx_bytes": 1_100_100}, ends[1]: {"tx_bytes": 40_100}}
    flows = [flow("s0g0", "s1g0", 500_000, 2.0), flow("s0g0", "s1g0", 500_000, 2.5)]
    pipe = traffic.long_fat_pipe(fabric, {"window": "16KiB"}, flows, before, after)
    rtt = 2 * 0.040
    assert pipe["links"] == ["euspine0-usspine0"] and pipe["mbps"] == 8
    assert pipe["rtt_ms"] == pytest.approx(rtt * 1e3)
    assert pipe["bdp_bytes"] == int(8e6 / 8 * rtt)                        # 80 kB in flight fill it
    assert pipe["window_bound_mbps"] == pytest.approx(2 * 16384 * 8 / rtt / 1e6)
    assert pipe["goodput_mbps"] == pytest.approx(1e6 * 8 / 2.5 / 1e6)      # all bytes over the last one's time
    assert pipe["of_pipe"] == pytest.approx(3.2 / 8, abs=1e-3)
    assert pipe["of_window_bound"] == pytest.approx(3.2 / pipe["window_bound_mbps"], abs=1e-3)
    assert pipe["wire_bytes"] == 1_100_000 + 40_000


def test_no_window_no_bound_and_flows_within_a_site_have_no_pipe(fabric):
    across = traffic.long_fat_pipe(fabric, {}, [flow("s0g0", "s1g1", 10, 1.0)], {}, {})
    assert across["window_bound_mbps"] is None and across["of_window_bound"] is None
    assert traffic.long_fat_pipe(fabric, {}, [flow("s0g0", "s0g1", 10, 1.0)], {}, {}) is None
    mixed = [flow("s0g0", "s1g1", 10, 1.0), flow("s0g0", "s0g1", 10, 1.0)]
    assert traffic.long_fat_pipe(fabric, {}, mixed, {}, {}) is None


def test_a_fabric_without_sites_has_no_pipe():
    plain = build("clos", 2, 2, spines=1, nic_mbps=20)
    assert traffic.long_fat_pipe(plain, {}, [flow("s0g0", "s1g1", 10, 1.0)], {}, {}) is None


def test_the_window_reaches_every_tcp_receiver_and_udp_refuses_it(fabric, tmp_path):
    spec = {"pattern": "pairs", "pairs": [["s0g0", "s1g0"]], "protocol": "tcp", "flows_per_pair": 4,
            "window": "16KiB"}
    traffic.validate(fabric, spec, {})
    assert len(traffic.plan_flows(fabric, spec)) == 4 and traffic.window(spec) == 16384
    with pytest.raises(ScenarioError, match="window is a TCP connection's"):
        traffic.validate(fabric, spec | {"protocol": "udp"}, {})
