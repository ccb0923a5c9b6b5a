"""benchmarks/congestion.py's readings of the sampled bottleneck: the link's busy share late in a run, and the
intervals over Kmax in which the port marked nothing."""
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


def test_unmarked_over_kmax_counts_intervals_with_a_full_queue_and_no_mark():
    samples = [(0, 0, 0, 0), (1, KMAX, 0, 5), (2, KMAX * 2, 0, 5), (3, KMAX, 0, 9), (4, 0, 0, 9)]
    assert congestion.unmarked_over_kmax(samples) == 1 / 3      # t 1-2 over Kmax without a new mark
    assert congestion.unmarked_over_kmax([(0, 0, 0, 0), (1, 10, 0, 0)]) == 0.0
    assert math.isnan(congestion.unmarked_over_kmax([(0, 0, 0, None), (1, KMAX, 0, None)]))   # not sampled
