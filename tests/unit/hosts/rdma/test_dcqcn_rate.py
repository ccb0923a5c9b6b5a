"""DCQCN's reaction point against the paper's equations, step by step on a fake clock (hosts/rdma/dcqcn.py)."""
import pytest

from hosts.rdma.dcqcn import DcqcnCC, DcqcnParams, cnp_interval

L = 100e6          # line rate
US = 1e-6


def make(**kw):
    # g = 1/16, F = 2 and round timer periods keep the arithmetic readable; the equations are the defaults'
    p = dict(dce_tcp_g=1024 - 64, dce_tcp_rtt_us=10, rpg_threshold=2, rpg_time_reset_us=100,
             rpg_byte_reset=10_000, rpg_ai_rate_mbps=5, rpg_hai_rate_mbps=20, rpg_min_rate_mbps=1,
             rate_reduce_monitor_period_us=4)
    p.update(kw)
    return DcqcnCC(L, **p)


def test_cut_alpha_and_the_three_increase_phases():
    cc = make()
    g, a = 1 / 16, 1023 / 1024
    assert cc.rate_bps == L and not cc.recovering
    cc.sent(10 ** 6, 0.0)                          # no cut yet: the byte counter does not run
    assert cc.b_stage == 0 and cc.rate_bps == L

    # first CNP: Rt <- Rc, Rc <- Rc (1 - alpha/2), then alpha <- (1 - g) alpha + g
    cc.cnp(0.0)
    rc, rt = L * (1 - a / 2), L
    a = (1 - g) * a + g
    assert (cc.rate_bps, cc.target_bps, cc.alpha) == pytest.approx((rc, rt, a))
    # another CNP inside the rate-reduce monitor period: alpha rises, the rate does not fall again
    cc.cnp(2 * US)
    a = (1 - g) * a + g
    assert (cc.rate_bps, cc.alpha, cc.decreases) == pytest.approx((rc, a, 1))
    # alpha timer: three periods without a CNP (at 12, 22 and 32 us) decay it three times
    cc.advance(37 * US)
    a *= (1 - g) ** 3
    assert cc.alpha == pytest.approx(a)

    # rate-increase timer, T = 1 and 2 <= F: fast recovery halves the distance to the target
    for t in (100, 200):
        cc.advance(t * US)
        rc = (rt + rc) / 2
        assert (cc.rate_bps, cc.target_bps) == pytest.approx((rc, rt))
    assert cc.t_stage == 2
    # T = 3 > F, BC = 0: additive increase, the target grows by R_AI
    cc.advance(300 * US)
    rt = min(L, rt + 5e6)
    rc = (rt + rc) / 2
    assert (cc.rate_bps, cc.target_bps) == pytest.approx((rc, rt))


def test_byte_counter_and_hyper_increase():
    cc = make(rpg_threshold=1, clamp_tgt_rate=1)     # the paper's rule: Rt <- Rc on every cut
    cc.cnp(0.0)
    cc.cnp(10 * US)                                  # a second cut: the target is the first cut's rate
    rc, rt = cc.rate_bps, cc.target_bps
    assert cc.decreases == 2 and rt < L
    # bytes alone: BC = 1 <= F, fast recovery
    cc.sent(10_000, 20 * US)
    rc = (rt + rc) / 2
    assert (cc.b_stage, cc.rate_bps, cc.target_bps) == (1, pytest.approx(rc), pytest.approx(rt))
    # BC = 2 > F while T = 0: additive
    cc.sent(9_999, 21 * US)
    assert cc.b_stage == 1                            # 19 999 bytes: not yet a second stage
    cc.sent(1, 22 * US)
    rt += 5e6
    rc = (rt + rc) / 2
    assert (cc.b_stage, cc.rate_bps, cc.target_bps) == (2, pytest.approx(rc), pytest.approx(rt))
    # the timer takes T to 2 (at 110 and 210 us): min(T, BC) = 2 > F: hyper increase, R_HAI per stage
    cc.advance(110 * US)
    rt += 5e6                                         # T = 1: additive (BC = 2 > F, T = 1 = F)
    rc = (rt + rc) / 2
    assert cc.rate_bps == pytest.approx(rc)
    cc.advance(210 * US)
    rt = min(L, rt + 20e6)
    rc = (rt + rc) / 2
    assert (cc.t_stage, cc.rate_bps, cc.target_bps) == (2, pytest.approx(rc), pytest.approx(rt))
    # a cut resets both counters
    cc.cnp(300 * US)
    assert (cc.t_stage, cc.b_stage) == (0, 0)


def test_target_clamped_only_after_a_timer_increase():
    """ConnectX's rule (clamp_tgt_rate 0): a run of cuts keeps the rate before the first as the target; once the
    timer has raised the rate, the next cut takes the current rate as the target, as the paper's rule does."""
    cc = make()
    g, a = 1 / 16, 1023 / 1024
    rc = L
    for t in (0, 5, 10):                              # three cuts, past the monitor period, no timer stage between
        cc.cnp(t * US)
        rc *= 1 - a / 2
        a = (1 - g) * a + g
        assert (cc.rate_bps, cc.target_bps) == pytest.approx((rc, L))
    cc.advance(110 * US)                              # T = 1 (at 110 us): fast recovery towards the line rate
    rc = (L + rc) / 2
    assert (cc.t_stage, cc.rate_bps, cc.target_bps) == (1, pytest.approx(rc), pytest.approx(L))
    a *= (1 - g) ** 11                                # alpha periods at 20, 30 .. 120 us
    cc.cnp(125 * US)                                  # after a timer increase: Rt <- Rc
    assert (cc.target_bps, cc.rate_bps) == pytest.approx((rc, rc * (1 - a / 2)))


def test_recovers_to_line_rate_then_stops_and_has_a_floor():
    cc = make()
    cc.cnp(0.0)
    cc.advance(1.0)                                   # 10 000 timer periods: back at line rate
    assert cc.rate_bps == cc.target_bps == L and not cc.recovering
    n = cc.increases
    cc.advance(2.0)
    assert cc.increases == n                          # nothing left to do
    # many CNPs: alpha -> 1, each cut at most rpg_min_dec_fac (50%), never below the minimum rate
    t = 2.0
    prev = cc.rate_bps
    for _ in range(40):
        t += 5 * US
        cc.cnp(t)
        assert cc.rate_bps >= prev * 0.5 - 1e-6
        prev = cc.rate_bps
    assert cc.rate_bps == pytest.approx(1e6) and cc.alpha > 0.9


def test_line_rate_changes():
    cc = make()
    cc.set_line_rate(50e6)                            # not congested: follow the new line rate
    assert cc.rate_bps == 50e6
    cc.set_line_rate(80e6)
    assert cc.rate_bps == 80e6
    cc.cnp(0.0)
    cut = cc.rate_bps
    cc.set_line_rate(200e6)                           # recovering: stays where DCQCN put it
    assert cc.rate_bps == cut and cc.line_bps == 200e6


def test_time_scale_scales_timers_and_rates_not_bytes():
    k = 10_000
    p = DcqcnParams()
    cc = DcqcnCC(10e6, time_scale=k)
    assert cc.time_reset == pytest.approx(p.rpg_time_reset_us * 1e-6 * k)      # 300 us -> 3 s
    assert cc.alpha_period == pytest.approx(p.dce_tcp_rtt_us * 1e-6 * k)
    assert cc.ai_bps == pytest.approx(5e6 / k) and cc.hai_bps == pytest.approx(50e6 / k)
    assert cc.min_bps == pytest.approx(1e6 / k) and cc.byte_reset == 32767
    assert cnp_interval(k) == pytest.approx(0.5)                                # 50 us -> 0.5 s
    assert cc.g == pytest.approx(5 / 1024)
    with pytest.raises(ValueError):
        DcqcnCC(10e6, time_scale=0.5)
    with pytest.raises(TypeError):
        DcqcnCC(10e6, no_such_parameter=1)
