"""What crossed sites seen on the wire: which ports carry exactly the cross-site traffic, and the bytes per step
and the peak over a window of one step's compute from their sampled counters."""
import time
from types import SimpleNamespace

import pytest

from testbed.fabric.links import is_patch, switch_port
from testbed.fabric.topo import build
from testbed.workloads import diloco, diloco_wire
from testbed.workloads.diloco_sites import sites_of


def local_net(fabric):
    return SimpleNamespace(fabric=fabric, machine_of=lambda node: None, is_patch=lambda l: is_patch(fabric, l))


def test_the_wan_links_both_ends_are_the_cross_site_ports():
    sited = build("clos", 1, 2, spines=1, nic_mbps=20, sites={"eu": {}, "us": {}},
                  wan=[{"a": "eu", "b": "us", "mbps": 5, "delay_us": 10000}])
    (link,) = sited.wan_links()
    got = diloco_wire.cross_ports(local_net(sited), sites_of(sited, {}))
    assert got == [(switch_port(link.a, link.a_port), 5), (switch_port(link.b, link.b_port), 5)]


def test_a_partition_by_servers_samples_the_leaders_nic_ports_and_another_partition_nothing():
    fabric = build("rail-optimized", 2, 2, nic_mbps=20)
    net = local_net(fabric)
    got = diloco_wire.cross_ports(net, sites_of(fabric, {"sites": [["s0g0", "s0g1"], ["s1g0", "s1g1"]]}))
    nics = [fabric.attachment(h, "nic") for h in ("s0g0", "s1g0")]
    assert sorted(got) == sorted((switch_port(l.b, l.b_port) if l.a in fabric.hosts else switch_port(l.a, l.a_port),
                                  20) for l in nics)
    # a site across servers: its GPUs' own ring crosses the NICs too, so no port carries only the WAN's bytes
    assert diloco_wire.cross_ports(net, sites_of(fabric, {"sites": [["s0g0", "s1g1"], ["s1g0", "s0g1"]]})) is None
    remote = SimpleNamespace(**{**vars(net), "machine_of": lambda node: "elsewhere"})
    assert diloco_wire.cross_ports(remote, sites_of(fabric, {"sites": [["s0g0"], ["s1g0"]]})) is None


def wall(t: float) -> float:
    """A monotonic instant on the sampler's wall clock."""
    return t + time.time() - time.monotonic()


def bursts(at: list[tuple[float, float, int]], end: float, period: float = 0.02, restart_at: float | None = None):
    """Samples of a counter that grows by n bytes evenly over [start, start + length] for each burst."""
    out, t0 = [], time.monotonic()
    t = 0.0
    while t <= end + 1e-9:
        n = sum(min(max((t - s) / length, 0.0), 1.0) * b for s, length, b in at)
        if restart_at is not None and t >= restart_at:
            n -= sum(min(max((restart_at - s) / length, 0.0), 1.0) * b for s, length, b in at)
        out.append((wall(t0 + t), int(n)))
        t += period
    return out, t0


def test_the_peak_is_the_biggest_burst_within_a_window_of_one_step():
    # DiLoCo-like: 200 kB in 0.1 s once per 4 steps of 0.4 s; Streaming-like: 100 kB every 2 steps
    di, t0 = bursts([(1.5, 0.1, 200_000)], end=3.3)
    st, t1 = bursts([(0.8, 0.05, 100_000), (1.6, 0.05, 100_000), (2.4, 0.05, 100_000)], end=3.3)
    bounds = [0.05, 1.65, 3.25]                  # two steps
    fd = diloco_wire.figures(di, [t0 + b for b in bounds], 0.4)
    fs = diloco_wire.figures(st, [t1 + b for b in bounds], 0.4)
    assert fd["sampled_peak_wan_bytes"] == pytest.approx(200_000, rel=0.01)
    assert fs["sampled_peak_wan_bytes"] == pytest.approx(100_000, rel=0.01)
    assert fd["sampled_peak_wan_mbps"] == pytest.approx(200_000 * 8 / 0.4 / 1e6, rel=0.01)
    assert fs["sampled_wan_bytes_per_step"] == pytest.approx(300_000 / 2, rel=0.01)
    assert fd["sampled_period_s"] == pytest.approx(0.02, rel=0.05) and fd["sampled_window_s"] == 0.4
    # a burst longer than the window fills it at the link's rate: the figure tops out at rate x window
    slow, t2 = bursts([(1.0, 2.0, 200_000)], end=3.3)
    assert diloco_wire.figures(slow, [t2 + b for b in bounds], 0.4)["sampled_peak_wan_bytes"] == \
        pytest.approx(200_000 * 0.4 / 2.0, rel=0.01)


def test_a_counter_that_restarts_counts_from_zero_and_uncovered_steps_give_nothing():
    samples, t0 = bursts([(0.5, 0.1, 50_000), (1.5, 0.1, 80_000)], end=2.0, restart_at=1.0)
    got = diloco_wire.figures(samples, [t0 + 0.1, t0 + 1.9], 0.4)
    assert got["sampled_peak_wan_bytes"] == pytest.approx(80_000, rel=0.01)
    assert got["sampled_wan_bytes_per_step"] == pytest.approx(130_000, rel=0.01)
    assert diloco_wire.figures(samples, [t0 - 1.0, t0 + 1.9], 0.4) == {}        # started before the samples
    assert diloco_wire.figures(samples[:1], [t0, t0], 0.4) == {}


def test_the_streaming_peak_check_holds_the_sampled_ratio_too():
    s = diloco.settings({"type": "diloco", "sites": [["s0g0"], ["s1g0"]], "variants": ["diloco", "streaming"]})
    base = {"replicas": {"wrong": [], "outer_agree": True}, "quantize": 0, "wan_bytes_per_step": 1.0,
            "wan_wire_bytes_per_step": 1.0}
    di = {**base, "variant": "diloco", "peak_wan_wire_bytes": 200.0, "sampled_peak_wan_bytes": 210.0}
    st = {**base, "variant": "streaming", "peak_wan_wire_bytes": 100.0, "sampled_peak_wan_bytes": 105.0}
    # 200 B drain in 8 us at the ports' 200 Mbit/s: well within the window of 0.4 s
    result = {"sites": s["sites"], "gpus": 2, "variants": [di, st], "sampled_ports_mbps": 200.0, "compute_s": 0.4}
    check = next(c for c in diloco.checks(result, s) if c["name"] == "streaming peak")
    assert check["ok"] and "0.500 by the cross-site ports' sampled counters (1/P" in check["detail"]
    result["variants"][1] = {**st, "sampled_peak_wan_bytes": 190.0}      # on the wire, Streaming's burst as big
    check = next(c for c in diloco.checks(result, s) if c["name"] == "streaming peak")
    assert not check["ok"] and "0.905 by the cross-site ports' sampled counters (1/P" in check["detail"]
    # a link too slow to drain DiLoCo's sync within the window: both peaks fill it, and the ratio is not held
    check = next(c for c in diloco.checks({**result, "sampled_ports_mbps": 4e-6}, s) if c["name"] == "streaming peak")
    assert check["ok"] and "not held: DiLoCo's sync does not drain within 80% of a step's compute" in check["detail"]
    assert diloco_wire.fits(100_000, 20.0, 0.4) and not diloco_wire.fits(265_000, 4.0, 0.4)
