"""What crossed sites, by the cross-site ports' own counters sampled over the run rather than by the ranks'
accounting: the bytes the switch ends of the cross-site links sent (their devices' tx_bytes, counted as frames
go on the wire, after a delayed link's delay), summed, every PERIOD_S.

    cross_ports(net, site_hosts)    the switch-side devices whose traffic is exactly what crosses sites, or None
    fits(nbytes, mbps, window_s)    whether a burst of nbytes drains within the window at the ports' rate
    sampler(devs)                   a thread sampling their bytes over time (program_traffic's sampler)
    step_bounds(outs, leaders)      the inner steps' span: the leaders' first start to their last end
    figures(sent, bounds, window_s) bytes per inner step, and the most bytes within any window of window_s

A shaped link always runs at its rate while a burst drains, so a rate over a sample period says only that a
burst was on. The most bytes within a window as long as one inner step's compute says how much had to cross
while one step computed, which is what the variants differ in (DiLoCo all parameters at once every H steps,
Streaming one fragment in turn): it is the peak rate the exchanges need to hide behind the compute. A burst
longer than the window (the link too slow for it) fills the window at the link's rate: the figure then tops
out at rate x window, which says the link, not the compute, sets the pace.
"""
from __future__ import annotations

import time

import numpy as np

from testbed.fabric.links import switch_port
from testbed.monitor.timeline import counter_delta
from testbed.workloads.program_traffic import Sampler

PERIOD_S = 0.02         # a tenth of a short inner step or less: a window's edges are placed within a sample


def cross_ports(net, site_hosts: list[list]) -> list[tuple[str, float]] | None:
    """(device, its link's Mbit/s) of the switch ends of the fabric's WAN links, both ways; on a fabric partitioned by `sites:`, the switch ends
    of the leaders' NIC links, provided every site is one server (its GPUs then talk over their HB domain, so a
    leader's NIC carries only what crosses sites). None where no such ports exist on this machine."""
    fabric = net.fabric
    if fabric.wan_links():
        ends = [(node, port, peer, l) for l in fabric.wan_links()
                for node, port, peer in ((l.a, l.a_port, l.b), (l.b, l.b_port, l.a))]
    else:
        if any(len({h.server for h in site}) != 1 or (len(site) > 1 and site[0].hb_ip is None)
               for site in site_hosts):
            return None
        leaders = {site[0].name for site in site_hosts}
        ends = [(other, port, leader, l) for l in fabric.links if l.kind == "nic" and not l.standby
                for leader, other, port in ((l.a, l.b, l.b_port), (l.b, l.a, l.a_port)) if leader in leaders]
    if not ends or any(net.machine_of(node) is not None or net.is_patch(l) for node, _, _, l in ends):
        return None         # a port on another machine, or a patch port (no device): not sampled here
    return [(switch_port(node, port), l.mbps) for node, port, _, l in ends]


def fits(nbytes: float, mbps: float, window_s: float) -> bool:
    """Whether a burst drains well within the window (80% of it) at the ports' summed rate: only then does the
    window's peak measure the burst rather than the link."""
    return nbytes * 8 <= 0.8 * mbps * 1e6 * window_s


def sampler(devs: list[str]) -> Sampler:
    return Sampler(devs, period=PERIOD_S)


def cumulative(samples: list[tuple[float, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(monotonic times, bytes the devices had sent by then, from the first sample), from the sampler's
    (wall-clock time, devices' summed tx_bytes); a sum that went back (a device re-created by a fault) counts
    from 0 again."""
    shift = time.monotonic() - time.time()          # the ranks' steps are on the monotonic clock
    times, totals, total = [], [], 0
    for i, (t, n) in enumerate(samples):
        if i:
            total += counter_delta(samples[i - 1][1], n)
        times.append(t + shift)
        totals.append(total)
    return np.array(times), np.array(totals, dtype=float)


def step_bounds(outs: list[dict], leaders: list[int]) -> list[float]:
    """Steps + 1 boundaries (monotonic seconds): step t from the first leader's start of step t to the first
    leader's start of step t + 1, the last to the last leader's end. Only leaders send across sites."""
    rows = [o for o in outs if o["rank"] in leaders]
    steps = len(rows[0]["steps"])
    return [min(o["steps"][t]["start"] for o in rows) for t in range(steps)] + \
        [max(o["steps"][-1]["end"] for o in rows)]


def window_peak(times: np.ndarray, totals: np.ndarray, window_s: float) -> float:
    """The most bytes sent within any window of window_s seconds: windows starting and ending at every sample,
    the cumulative count interpolated linearly between samples."""
    starts = times[times + window_s <= times[-1]]
    ends = times[times - window_s >= times[0]]
    gains = [np.interp(starts + window_s, times, totals) - np.interp(starts, times, totals),
             np.interp(ends, times, totals) - np.interp(ends - window_s, times, totals)]
    return float(max((g.max() for g in gains if len(g)), default=totals[-1] - totals[0]))


def figures(sent: list[tuple[float, int]], bounds: list[float], window_s: float) -> dict:
    """The results' sampled figures of one run: bytes per inner step (between the first step's start and the
    last's end), the most bytes within any window of one inner step's compute and that as a rate (what the
    exchanges need to hide behind the compute), and the sampling period kept. Empty unless the samples cover
    the steps."""
    times, totals = cumulative(sent)
    if len(times) < 2 or times[0] > bounds[0] or times[-1] < bounds[-1] or window_s <= 0:
        return {}
    first, last = np.interp([bounds[0], bounds[-1]], times, totals)
    inside = (times >= bounds[0]) & (times <= bounds[-1])
    peak = window_peak(times[inside], totals[inside], window_s)
    return {"sampled_wan_bytes_per_step": float(last - first) / (len(bounds) - 1),
            "sampled_peak_wan_bytes": peak, "sampled_peak_wan_mbps": peak * 8 / window_s / 1e6,
            "sampled_window_s": window_s, "sampled_period_s": float(np.diff(times).mean())}
