"""benchmarks/congestion.py's readings of the sampled bottleneck: the link's busy share late in a run, the intervals
over Kmax in which frames arrived and the port marked nothing, the rate the queue drains at, the marking program's
virtual queue against the real one, and the bursts a stalled datapath releases."""
import math
import os
import sys

from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import congestion  # noqa: E402

KMAX = congestion.ECN["kmax_kb"] * 1024


def test_link_busy_reads_the_bytes_sent_over_the_second_half():
    bps = 8000.0                                          # 1000 bytes/s
    # (time, backlog, bytes sent, marks): idle for 2 s, then sending at the full rate for 2 s
    samples = [(t, 0, 0 if t <= 2 else (t - 2) * 1000, 0) for t in (0, 1, 2, 3, 4)]
    assert congestion.link_busy(samples, bps) == 1.0      # from the middle sample (t = 2) on
    assert congestion.link_busy(samples, bps, start=0) == 0.5
    assert math.isnan(congestion.link_busy(samples[:3], bps))


def test_unmarked_over_kmax_counts_intervals_with_a_full_queue_arrivals_and_no_mark():
    # (time, backlog, bytes sent, marks): 10 KB arrive in each interval but the last
    samples = [(0, KMAX, 0, 0), (1, KMAX * 2, 10_000, 5), (2, KMAX * 2, 20_000, 5), (3, KMAX * 2, 30_000, 9),
               (4, KMAX * 2 - 10_000, 40_000, 9)]
    assert congestion.unmarked_over_kmax(samples) == 1 / 3      # t 1-2 got frames over Kmax without a new mark
    assert congestion.unmarked_over_kmax([(0, 0, 0, 0), (1, 10, 0, 0)]) == 0.0
    assert math.isnan(congestion.unmarked_over_kmax([(0, 0, 0, None), (1, KMAX, 0, None)]))   # not sampled


def test_an_interval_in_which_nothing_arrived_has_nothing_to_mark():
    # the queue drains over Kmax at the link's rate, nothing arriving: the senders have cut, no frame to mark
    draining = [(t, KMAX * 3 - t * 10_000, t * 10_000, 7) for t in range(4)]
    assert congestion.unmarked_over_kmax(draining) == 0.0


def test_drain_rate_reads_the_sending_rate_while_the_queue_is_backlogged():
    bps = 8000.0                                          # 1000 bytes/s
    # backlogged from t 0 to 2 at 900 bytes/s, then empty and idle
    samples = [(0, 20_000, 0, 0), (1, 19_100, 900, 0), (2, 18_200, 1800, 0), (3, 0, 1800, 0)]
    assert abs(congestion.drain_rate(samples, bps) - 0.9) < 1e-9
    assert math.isnan(congestion.drain_rate(samples[2:], bps))   # never backlogged at both ends


def test_virtual_lag_is_the_median_real_minus_virtual_queue_over_kmin():
    kmin = congestion.ECN["kmin_kb"] * 1024
    samples = [(0, 0, 0, 0, 0), (1, kmin, 0, 0, kmin - 1024), (2, kmin * 2, 0, 0, kmin * 2 - 3072),
               (3, kmin * 3, 0, 0, kmin * 3 - 2048)]
    assert congestion.virtual_lag(samples) == 2.0         # KiB; the sample under Kmin left out
    assert math.isnan(congestion.virtual_lag([(0, kmin, 0, None, None)]))


def test_held_bursts_finds_the_idle_link_and_the_burst_a_stalled_datapath_releases():
    # sending at 35 KB per 50 ms interval, then 0.4 s with nothing got or sent, then 300 KB at once
    t = [i * 0.05 for i in range(20)]
    sent, backlog, samples = 0, 10_000, []
    for i, ti in enumerate(t):
        if 5 <= i < 13:
            pass                                          # held: nothing arrives, nothing is sent
        elif i == 13:
            backlog, sent = backlog + 300_000 - 35_000, sent + 35_000
        elif i > 0:
            sent += 35_000
            backlog = max(backlog - 35_000, 0) if backlog > 10_000 else backlog
        samples.append((ti, backlog if 5 > i or i >= 13 else 0, sent, 0))
    count, idle = congestion.held_bursts(samples)
    assert count == 1 and 0.3 <= idle <= 0.45, (count, idle)
    # the same idle link with no burst after it (the senders had stopped) is not counted
    quiet = [s if s[0] < 0.65 else (s[0], 0, samples[12][2], 0) for s in samples]
    assert congestion.held_bursts(quiet) == (0, 0.0)


def test_held_bursts_finds_more_in_one_interval_than_the_senders_could_send():
    # two senders at 8000 bit/s (1000 bytes/s each) can offer 2000 bytes a second, not 200 KB
    samples = [(0, 0, 0, 0), (1, 1000, 1000, 0), (2, 200_000, 2000, 0), (3, 199_000, 3000, 0)]
    assert congestion.held_bursts(samples, offered_bps=2 * 8000) == (1, 0.0)
    steady = [(0, 0, 0, 0), (1, 1000, 1000, 0), (2, 1500, 2500, 0)]      # 2000 and 2000 bytes arrived
    assert congestion.held_bursts(steady, offered_bps=2 * 8000) == (0, 0.0)
