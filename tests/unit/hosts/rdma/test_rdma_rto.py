"""The adaptive retransmission timeout (hosts/rdma/rto.py): RFC 6298's estimator, its bounds and backoff, and in a
queue pair over an in-process fabric: Karn's rule, backoff while the peer is gone, a lost tail recovered after the
estimate rather than after the ceiling."""
import time

import pytest

from hosts.rdma import Access, QPType, RdmaError, SendWR, WCStatus, WROpcode, open_device
from hosts.rdma import headers as H
from hosts.rdma.rto import FIRST_RTO, RetransmitTimeout
from hosts.rdma.transport import MemoryFabric


def test_first_sample_sets_srtt_and_half_of_it_as_variance():
    t = RetransmitTimeout(3.0, lo=0.01)
    assert t.rto == FIRST_RTO == 1.0 and t.srtt is None     # before any sample: the initial value, at most 1 s
    assert RetransmitTimeout(0.4, lo=0.01).rto == 0.4       # an initial value under 1 s is kept
    t.sample(0.1)
    assert t.srtt == pytest.approx(0.1) and t.rttvar == pytest.approx(0.05)
    assert t.rto == pytest.approx(0.1 + 4 * 0.05)


def test_later_samples_update_variance_then_srtt_with_rfc_6298_gains():
    t = RetransmitTimeout(3.0, lo=0.01)
    t.sample(0.1)
    t.sample(0.3)
    # RTTVAR from the old SRTT: 3/4 * 0.05 + 1/4 * |0.1 - 0.3|; SRTT: 7/8 * 0.1 + 1/8 * 0.3
    assert t.rttvar == pytest.approx(0.0875) and t.srtt == pytest.approx(0.125)
    assert t.rto == pytest.approx(0.125 + 4 * 0.0875)
    for _ in range(200):            # a steady round trip: the variance decays, the RTO converges on it
        t.sample(0.2)
    assert t.srtt == pytest.approx(0.2, rel=1e-3) and t.rto == pytest.approx(0.2, rel=1e-2)


def test_bounds_clamp_the_estimate():
    t = RetransmitTimeout(5.0, lo=0.2, hi=2.0)
    t.sample(0.001)
    assert t.rto == 0.2                      # a short round trip: the floor
    t = RetransmitTimeout(5.0, lo=0.2, hi=2.0)
    t.sample(4.0)
    assert t.rto == 2.0                      # a long one: the ceiling
    t = RetransmitTimeout(5.0, lo=0.2)
    assert t.hi == 5.0 and t.rto == 1.0      # no ceiling given: the initial (fixed) timeout is it
    t.timed_out(), t.timed_out(), t.timed_out()
    assert t.rto == 5.0                      # 1, 2, 4, then the ceiling: no sample yet, the backoff still doubles
    assert RetransmitTimeout(5.0, lo=2.0).rto == 2.0    # a floor above 1 s holds before the first sample too


def test_backoff_doubles_up_to_the_ceiling_until_a_new_sample():
    t = RetransmitTimeout(1.0, lo=0.05, hi=1.0)
    t.sample(0.02)                          # 0.02 + 4 * 0.01 = 0.06
    seen = []
    for _ in range(6):
        t.timed_out()
        seen.append(round(t.rto, 3))
    assert seen == [0.12, 0.24, 0.48, 0.96, 1.0, 1.0]
    assert t.backoff == 5 and t.timeouts == 6    # the doublings stop at the ceiling, the count of timeouts does not
    # only a round trip measured on new data ends the backoff (RFC 6298 5.7): 0.02 + 4 * 0.0075, at the floor
    t.sample(0.02)
    assert t.backoff == t.timeouts == 0 and t.rto == pytest.approx(0.05)


def test_fixed_timeout_ignores_samples_and_timeouts():
    t = RetransmitTimeout(6.8, adaptive=False)
    t.sample(0.01)
    t.timed_out()
    assert t.rto == 6.8 and t.srtt == pytest.approx(0.01)    # SRTT is still measured (NAK filter, reports)


@pytest.mark.parametrize("bad", [dict(initial=0), dict(initial=1.0, lo=2.0, hi=1.0), dict(initial=1.0, lo=0)])
def test_impossible_settings_are_refused(bad):
    with pytest.raises(ValueError):
        RetransmitTimeout(**bad)


def test_create_qp_refuses_an_unknown_mode_and_bad_bounds():
    dev = open_device("10.9.3.1", backend="uroce", transport=MemoryFabric().attach("10.9.3.1"))
    try:
        pd, cq = dev.alloc_pd(), dev.create_cq()
        with pytest.raises(RdmaError, match="rto must be"):
            dev.create_qp(pd, QPType.RC, cq, rto="tcp")
        with pytest.raises(RdmaError, match="bounds"):
            dev.create_qp(pd, QPType.RC, cq, timeout=1.0, rto="adaptive", rto_min=2.0, rto_max=1.0)
    finally:
        dev.close()


def write(p, n, wr_id=1):
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [p.ma.sge(0, n)], remote_addr=p.mb.addr, rkey=p.mb.rkey, wr_id=wr_id))
    wc, = p.ca.wait(1, 20)
    return wc


def delayed(seconds):
    return MemoryFabric(delay=lambda pkt: seconds)


@pytest.mark.alone      # its timer sits near a 50 ms floor: three other workers' load once added a spurious timeout
def test_a_lost_tail_costs_the_estimate_not_the_ceiling(make_pair):
    """A 10 ms round trip under a 2 s ceiling: after a few messages the timer is near the floor, so losing the
    last packet of a message (nothing follows to reveal it) costs ~0.05 s; a fixed timer would cost 2 s."""
    p = make_pair(fabric=delayed(0.005), timeout=2.0, rto="adaptive", rto_min=0.05)
    for i in range(5):
        assert write(p, 64 * 1024, wr_id=i).ok
    assert p.qa.srtt is not None and p.qa.timeout < 0.2
    lost = []
    p.a.tx_drop_hook = lambda pkt: pkt[28] == H.WRITE_LAST and not lost and not lost.append(1)
    t = time.monotonic()
    assert write(p, 64 * 1024, wr_id=9).ok
    dt = time.monotonic() - t
    # the first timeout resends the oldest unacknowledged packet, the second goes back N to the lost one; one is
    # enough where an ACK asked for mid-message (a slow machine's gap past a quarter of the timeout) covered all
    # but the lost packet, which is then the oldest
    assert lost and 1 <= p.qa.counters["timeouts"] <= 2 and p.dst[:65536] == p.src[:65536]
    assert dt < 1.0, dt                     # well under the 2 s ceiling
    # the ACK of the retransmission is no sample: the backoff holds until new data is timed (Karn)
    assert p.qa._rto.backoff == p.qa.counters["timeouts"]
    assert write(p, 64 * 1024, wr_id=10).ok and p.qa._rto.backoff == 0


def test_karn_no_sample_from_a_retransmitted_packet(make_pair):
    """The packet lost and retransmitted is the one being timed: its ACK must not be taken as its round trip
    (it would include the timeout), so every sample stays below the floor the timeout cannot be shorter than."""
    p = make_pair(fabric=delayed(0.002), timeout=0.4, rto="adaptive", rto_min=0.3)
    samples = []
    sample = p.qa._rto.sample
    p.qa._rto.sample = lambda rtt: samples.append(rtt) or sample(rtt)
    lost = []
    p.a.tx_drop_hook = lambda pkt: pkt[28] == H.WRITE_LAST and len(lost) < 3 and not lost.append(1)
    for i in range(6):
        assert write(p, 16 * 1024, wr_id=i).ok
    assert len(lost) == 3 and p.qa.counters["timeouts"] >= 3
    assert samples and max(samples) < 0.3, samples


def test_backoff_while_the_peer_is_gone_then_retry_exceeded():
    """Every timeout doubles the wait, up to the ceiling, until retry_cnt is exhausted."""
    fab = MemoryFabric()
    sent = []
    fab.tap = lambda pkt: pkt[28] == H.WRITE_ONLY and sent.append(time.monotonic())
    a = open_device("10.9.4.1", backend="uroce", transport=fab.attach("10.9.4.1"))
    try:
        pd, cq = a.alloc_pd(), a.create_cq()
        mr = pd.reg_mr(bytearray(4096), Access.ALL)
        qp = a.create_qp(pd, QPType.RC, cq, timeout=0.4, rto="adaptive", rto_min=0.025, retry_cnt=5)
        qp._rto.sample(0.001)                     # as if it had seen a short round trip: the floor, 25 ms
        qp.connect({"ip": "10.9.4.2", "qpn": 0x11, "psn": 0})
        qp.post_send(SendWR(WROpcode.RDMA_WRITE, [mr.sge(0, 100)], remote_addr=0x1000, rkey=1, wr_id=1))
        wc, = cq.wait(1, 10)
        assert wc.status == WCStatus.RETRY_EXC_ERR and len(sent) == 6
        gaps = [b - a for a, b in zip(sent, sent[1:])]
        # 25, 50, 100, 200, 400 ms (capped at the 0.4 s ceiling); loose bounds for a busy machine
        for gap, want in zip(gaps, (0.025, 0.05, 0.1, 0.2, 0.4)):
            assert want * 0.9 <= gap <= want + 0.15, gaps
    finally:
        a.close()


def test_a_flap_with_the_estimate_near_the_ceiling_goes_back_n(make_pair):
    """A floor of 0.3 s under a 0.4 s ceiling: the backoff stops after one doubling. A 0.5 s flap loses most of a
    window; the first timeout resends the oldest packet alone and the second must go back N (before, each timeout
    resent one packet: 64 packets cost ~25 s)."""
    window = []
    fab = MemoryFabric(delay=lambda pkt: 0.002,
                       drop=lambda pkt: bool(window) and window[0] <= time.monotonic() < window[1])
    p = make_pair(fabric=fab, size=256 * 1024, timeout=0.4, rto="adaptive", rto_min=0.3, rate_limit_bps=20e6)
    for i in range(3):
        assert write(p, 256 * 1024, wr_id=i).ok
    t = time.monotonic()
    window[:] = [t + 0.02, t + 0.52]           # everything lost, both ways, while the write is on the wire
    assert write(p, 256 * 1024, wr_id=9).ok
    dt = time.monotonic() - t
    assert fab.dropped > 10 and p.dst == p.src
    assert p.qa._rto.backoff == 1 and p.qa.counters["timeouts"] <= 4, dict(p.qa.counters)
    assert dt < 5.0, dt                         # 0.5 s flap + two timeouts; generous for a busy machine


def test_a_cut_before_the_first_sample_costs_about_a_second_not_the_ceiling(make_pair):
    """A ceiling of 6 s (sized for full queues on a slow link) and a cut as the first write starts, before any round
    trip is measured: the first timeout comes after 1 s (RFC 6298's initial RTO) and the second, which goes back N,
    after 2 more. With the ceiling as the first RTO the same cut cost 12 s."""
    window = []
    fab = MemoryFabric(delay=lambda pkt: 0.002,
                       drop=lambda pkt: bool(window) and window[0] <= time.monotonic() < window[1])
    p = make_pair(fabric=fab, size=256 * 1024, timeout=6.0, rto="adaptive", rate_limit_bps=20e6)
    t = time.monotonic()
    window[:] = [t, t + 0.5]                   # everything lost, both ways, from the first packet on
    assert write(p, 256 * 1024).ok
    dt = time.monotonic() - t
    assert fab.dropped > 10 and p.dst == p.src
    assert p.qa.counters["timeouts"] == 2, dict(p.qa.counters)
    assert dt < 4.5, dt                         # 1 + 2 s of timeouts and 0.1 s of data; 12 s with the ceiling
