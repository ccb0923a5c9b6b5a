"""A program job's traffic as its ranks receive it: the silences found in the sampled byte counters, and which
devices are sampled."""
from testbed.fabric.topo import build
from testbed.workloads import program_traffic as pt


def samples(steps, period=0.05, start=100.0):
    """Counters from per-sample growth: [(t, cumulative bytes)]."""
    out, total = [], 0
    for i, grew in enumerate(steps):
        total += grew
        out.append((round(start + i * period, 3), total))
    return out


def test_a_stall_between_traffic_is_one_silence_that_resumed_and_startup_quiet_is_not_counted():
    # quiet start (imports), traffic, 10 quiet samples (a cut until TCP retransmits), traffic again
    s = samples([0] * 20 + [1500] * 5 + [0] * 10 + [3000] * 5)
    (start, length, resumed), = pt.silences(s)
    assert resumed and start == 101.2                    # the last sample in which bytes arrived
    assert abs(length - 0.5) < 1e-9                       # to the last quiet sample before they came again


def test_acks_and_arp_under_the_quiet_threshold_are_silence_and_short_pauses_are_not_stalls():
    s = samples([1500] * 3 + [80] * 8 + [1500] * 2 + [0] * 2 + [1500] * 2)
    found = pt.silences(s)
    assert len(found) == 1 and abs(found[0][1] - 0.4) < 1e-9       # the 2-sample pause (0.1 s) is not one


def test_a_job_that_hangs_ends_in_a_silence_that_never_resumed():
    s = samples([1500] * 4 + [0] * 40)
    (start, length, resumed), = pt.silences(s)
    assert not resumed and start == 100.15 and abs(length - 2.0) < 1e-9


def test_a_counter_that_went_back_is_traffic_not_a_negative_silence():
    s = [(0.0, 5000), (0.05, 9000), (0.1, 200), (0.15, 900), (0.2, 1600)]
    assert pt.silences(s) == []


def test_the_summary_puts_silences_on_the_jobs_clock_and_names_the_longest():
    s = samples([1500] * 3 + [0] * 6 + [1500] * 2 + [0] * 12, start=50.0)
    out = pt.summary(s, started=49.0)
    assert out["silences"] == [[1.1, 0.3, True], [1.5, 0.6, False]]
    assert out["longest_silence_s"] == 0.6 and out["traffic_samples"] == len(s)
    assert pt.summary([], started=0.0) == {"silences": [], "longest_silence_s": None, "traffic_samples": 0}


def test_the_sampled_devices_are_the_switch_ends_of_the_jobs_nic_links():
    fabric = build("rail-optimized", 2, 2, spines=2)
    devs = pt.nic_devices(fabric, [fabric.hosts["s0g0"], fabric.hosts["s1g1"]])
    assert len(devs) == 2 and devs[0].endswith("rail0-p1") and "rail1" in devs[1]
    assert pt.read_bytes(["tb-no-such-device"]) is None
