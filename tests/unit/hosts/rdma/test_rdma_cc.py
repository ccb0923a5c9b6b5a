"""Delay-based congestion control: its rules on synthetic round trips, and a sender paced at four times
a bottleneck's rate keeping that bottleneck's queue short (in-process fabric, no privileges)."""
import statistics
import threading
import time

import pytest

from hosts.rdma import RdmaError, SendWR, WROpcode
from hosts.rdma.cc import DelayCC
from hosts.rdma.transport import MemoryFabric


def feed(cc, rtt, now, seq=None):
    cc.rtt_sample(rtt, now + rtt)
    return now + rtt


def test_rate_falls_above_target_and_recovers_below_it():
    cc = DelayCC(100e6, 1100)
    now = feed(cc, 0.001, 0.0, 0)                # base round trip 1 ms, target 1 ms + 8 x 88 us
    assert cc.rate_bps == 100e6 and cc.base_rtt == pytest.approx(0.001)
    now = feed(cc, 0.010, now, 1)                 # 10 ms: far above target, cut by at most half
    assert cc.rate_bps == pytest.approx(50e6)
    now = feed(cc, 0.0019, now, 2)                # slightly above target: a proportional cut
    assert 40e6 < cc.rate_bps < 50e6
    low = cc.rate_bps
    for seq in range(3, 13):                      # below target: +5% of line rate per round trip
        now = feed(cc, 0.001, now, seq)
    assert cc.rate_bps == pytest.approx(min(100e6, low + 10 * 5e6))


def test_one_cut_per_round_trip_and_a_floor():
    cc = DelayCC(100e6, 1100)
    feed(cc, 0.001, 0.0, 0)
    cc.lost(1.0)
    cc.lost(1.0005)                               # the same round trip: no second cut
    assert cc.rate_bps == pytest.approx(50e6) and cc.decreases == 1
    t = 2.0
    for _ in range(50):
        t += 1
        cc.lost(t)
    assert cc.rate_bps == pytest.approx(1e6)      # never below 1% of line rate


def test_round_trips_are_measured_and_repeated_naks_ignored(make_pair):
    """A probe per round trip feeds srtt; with 1% loss the responder repeats NAKs for an open gap,
    and the requester goes back only once per gap and round trip, yet the data arrives intact."""
    import random
    rnd = random.Random(7)
    p = make_pair(fabric=MemoryFabric(drop=lambda pkt: len(pkt) > 200 and rnd.random() < 0.01,
                                      delay=lambda pkt: 0.02), rate_limit_bps=50e6, cc="delay")
    size = 1 << 20
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [p.ma.sge(0, size)], wr_id=1, remote_addr=p.mb.addr,
                          rkey=p.mb.rkey))
    wc = p.ca.wait(1, 60)
    assert wc and wc[0].ok, wc
    assert p.dst == p.src
    assert p.qa.srtt is not None and 0.02 <= p.qa.srtt < 0.5     # 20 ms each way, plus pacing
    assert p.qa.cc.samples >= 3
    assert p.qa.counters["retransmits"] < size // 1024            # no retransmission storm


def test_needs_a_line_rate(make_pair):
    with pytest.raises(RdmaError, match="rate limit"):
        make_pair(cc="delay")
    with pytest.raises(RdmaError, match="congestion control must be"):
        make_pair(cc="swift", rate_limit_bps=1e6)


class Bottleneck:
    """A FIFO link of `bps` inside the in-process fabric: each packet waits for those before it."""

    def __init__(self, bps):
        self.bps, self.free_at, self.max_queue = bps, 0.0, 0.0
        self.lock = threading.Lock()

    def delay(self, pkt):
        if len(pkt) < 200:                        # ACKs travel the reverse path, not this queue
            return 0
        with self.lock:
            now = time.monotonic()
            start = max(now, self.free_at)
            self.free_at = start + len(pkt) * 8 / self.bps
            self.max_queue = max(self.max_queue, start - now)
            return self.free_at - now


def bottleneck_queue(make_pair, size, cc) -> float:
    """The longest queue a 5 Mbit/s bottleneck builds under one WRITE from a sender paced at 20 Mbit/s."""
    link = Bottleneck(5e6)
    p = make_pair(fabric=MemoryFabric(delay=link.delay), rate_limit_bps=20e6, cc=cc, timeout=5.0)
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [p.ma.sge(0, size)], wr_id=1, remote_addr=p.mb.addr,
                          rkey=p.mb.rkey))
    wc = p.ca.wait(1, 60)
    assert wc and wc[0].ok, wc
    assert p.dst[:size] == p.src[:size]
    if cc:
        assert p.qa.counters["cc_rate_cuts"] >= 1
    return link.max_queue


@pytest.mark.alone      # beside three other workers on 2 cores the paced queue doubled in 4 of 7 pairs (0.60 median)
@pytest.mark.parametrize("size", [512 * 1024])
def test_queue_stays_short_under_congestion_control(make_pair, size):
    # Without congestion control the queue grows to most of the transfer (3/4 of 0.84 s) when the sender keeps
    # its 20 Mbit/s; on a loaded machine the Python sender falls short of that and both queues shrink, so the
    # comparison is made on the median of seven pairs of runs: one lucky pair cannot pass it, one starved pair
    # cannot fail it. Measured with other work on the machine (41 pairs): the unpaced queue 400-411 ms, the paced
    # one 0.08-0.98 of it, above 0.5 in 8 pairs; medians of seven 0.29-0.38. Broken congestion control reads ~1.
    ratios = []
    for _ in range(7):
        unpaced, paced = (bottleneck_queue(make_pair, size, cc) for cc in (None, "delay"))
        ratios.append(paced / unpaced)
        print(f"max bottleneck queue: {unpaced * 1e3:.0f} ms unpaced by CC, {paced * 1e3:.0f} ms with it")
    assert statistics.median(ratios) < 0.5, ratios
