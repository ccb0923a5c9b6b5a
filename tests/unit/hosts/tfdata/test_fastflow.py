"""FastFlow's Algorithm 1 on hand-made profiles (every branch), the ApplyOffRatio mixer and the emulated GPU.
No TensorFlow, no root."""
import itertools
import time

import pytest

from hosts.tfdata.gpu import EmulatedGPU
from hosts.tfdata.mix import Mixer
from hosts.tfdata.policy import Candidate, Profile, decide


def test_no_offload_when_the_gpu_is_not_faster_than_the_local_pipeline():
    d = decide(Profile(gthp=10, lthp=10, pcycle=1, candidates={"p'3": Candidate(50, 0.1)}))
    assert not d["offload"] and d["off_ratio"] == 0 and "Gthp <= Lthp" in d["branch"]
    assert not decide(Profile(gthp=8, lthp=10, pcycle=1, candidates={"p'3": Candidate(50, 0.1)}))["offload"]


def test_no_offload_below_the_speed_up_threshold():
    d = decide(Profile(gthp=10.5, lthp=10, pcycle=1, candidates={"p'3": Candidate(50, 0.1)}), threshold=1.1)
    assert not d["offload"] and "threshold" in d["branch"]
    # the same profile offloads with a lower threshold
    assert decide(Profile(gthp=10.5, lthp=10, pcycle=1, candidates={"p'3": Candidate(50, 0.1)}), 1.04)["offload"]


def test_p_prime_is_the_argmax_of_lthp_times_freed_cycles_plus_rthp():
    # p'2: 4*(1-0.5/1)+6 = 8;  p'3: 4*(1-0.1/1)+5 = 8.6;  p'1: 4*(1-0.9)+7 = 7.4  -> p'3 despite a lower Rthp
    cands = {"p'1": Candidate(7, 0.9), "p'2": Candidate(6, 0.5), "p'3": Candidate(5, 0.1)}
    d = decide(Profile(gthp=20, lthp=4, pcycle=1.0, candidates=cands))
    assert d["pipeline"] == "p'3"
    assert d["scores"] == pytest.approx({"p'1": 7.4, "p'2": 8.0, "p'3": 8.6})


def test_lower_below_upper_offloads_upper_over_gthp():
    # Upper = Rthp = 12; Lower = (20-10)*(1+0.1/0.5) = 12.0 ... make it strictly lower: Gthp 19 -> 10.8
    d = decide(Profile(gthp=19, lthp=10, pcycle=0.5, candidates={"p'3": Candidate(12, 0.1)}))
    assert d["offload"] and d["upper"] == 12 and d["lower"] == pytest.approx(10.8)
    assert d["off_ratio"] == pytest.approx(12 / 19) and "Upper/Gthp" in d["branch"]


def test_lower_not_below_upper_balances_by_capacity():
    # Upper = 6; Lower = (25-5)*(1+0.05/0.05) = 40 -> OffRatio = 6/(5+6)
    d = decide(Profile(gthp=25, lthp=5, pcycle=0.05, candidates={"p'2": Candidate(6, 0.05)}))
    assert d["offload"] and d["lower"] == pytest.approx(40)
    assert d["off_ratio"] == pytest.approx(6 / 11) and "Rthp/(Lthp+Rthp)" in d["branch"]


def test_off_ratio_is_capped_at_one_when_remote_alone_outruns_the_gpu():
    d = decide(Profile(gthp=10, lthp=2, pcycle=1, candidates={"p'3": Candidate(30, 0.01)}))
    assert d["offload"] and d["off_ratio"] == 1.0


def test_no_candidates_means_no_offload():
    assert not decide(Profile(gthp=20, lthp=2, pcycle=1))["offload"]


def slow(period, tag):
    for i in itertools.count():
        time.sleep(period)
        yield (tag, i)


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.8])
def test_mixer_holds_the_ratio_when_both_sources_keep_up(ratio):
    m = Mixer(slow(0.001, "l"), slow(0.001, "r"), ratio)
    got = [m.get()[1] for _ in range(200)]
    m.close()
    assert abs(got.count("remote") / 200 - ratio) <= 0.02


@pytest.mark.alone          # a rate: beside three other workers on 2 cores it measures the machine
def test_mixer_reaches_the_rate_the_ratio_allows():
    # local 50/s, remote 100/s, ratio 2/3: min(50/(1/3), 100/(2/3)) = 150/s; a source waiting for the other
    # at every step would give ~100/s (the margin allows for a loaded machine)
    m = Mixer(slow(0.02, "l"), slow(0.01, "r"), 2 / 3)
    t0 = time.monotonic()
    for _ in range(90):
        m.get()
    rate = 90 / (time.monotonic() - t0)
    m.close()
    assert rate > 110, rate


def test_mixer_with_ratio_zero_or_one_uses_one_source_only():
    for ratio, want in ((0.0, "local"), (1.0, "remote")):
        m = Mixer(slow(0.001, "l"), slow(0.001, "r"), ratio)
        assert {m.get()[1] for _ in range(20)} == {want}
        m.close()


def test_mixer_surfaces_a_failing_source():
    def broken():
        yield 1
        raise OSError("worker gone")
    m = Mixer(broken(), None, 0.0)
    m.get()
    with pytest.raises(RuntimeError, match="worker gone"):
        m.get(timeout=5)


def test_emulated_gpu_holds_its_step_rate():
    """Never faster than its rate (a step is never shortened to catch up), and near it: a late wake-up under
    the first pass's 4 workers costs a step a fraction of a millisecond of its 5 ms (0.87 of the rate seen)."""
    gpu = EmulatedGPU(200)
    t0 = time.monotonic()
    for _ in range(100):
        gpu.step(None)
    rate = 100 / (time.monotonic() - t0)
    assert 0.75 * 200 < rate <= 200 * 1.01, rate
