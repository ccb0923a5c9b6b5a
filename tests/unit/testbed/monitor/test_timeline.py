"""The port-counter timeline: one dump per switch per sample, a vanished switch is a gap, resets count."""
import time

import pytest

from testbed.fabric import ovs
from testbed.monitor import timeline
from testbed.monitor.timeline import Timeline, counter_delta


class FakeNet:
    def sdn_bridges(self):
        return {"tb-rail0": "rail0", "tb-spine0": "spine0"}

    def bridges_by_machine(self):
        return {None: list(self.sdn_bridges())}


@pytest.fixture
def counters(monkeypatch):
    """tb-rail0 counts up by 1000 bytes out and 10 in per dump; tb-spine0 is gone (ovs-ofctl fails)."""
    calls = {"dumps": [], "waits": 0}

    def dump_ports(bridge, run=None):
        calls["dumps"].append(bridge)
        if bridge == "tb-spine0":
            raise ovs.OVSError("ovs-ofctl dump-ports tb-spine0: no such bridge")
        n = calls["dumps"].count(bridge)
        return {1: {"tx_bytes": 1000 * n, "rx_bytes": 10 * n, "tx_packets": n, "rx_packets": n}}

    def wait(run=None):
        calls["waits"] += 1
    monkeypatch.setattr(timeline.ovs, "dump_ports", dump_ports)
    monkeypatch.setattr(timeline.ovs, "wait_revalidators", wait)
    return calls


def test_a_sample_reads_each_switch_once_and_skips_one_that_is_gone(counters):
    t = Timeline(FakeNet())
    t.sample()
    t.sample()
    assert counters["dumps"] == ["tb-rail0", "tb-spine0"] * 2 and counters["waits"] == 2
    assert [s for _, s in t.samples] == [{"rail0:1": (1000, 10)}, {"rail0:1": (2000, 20)}]


def test_the_thread_samples_until_stopped(counters):
    t = Timeline(FakeNet(), period=0.02).start()
    time.sleep(0.3)
    t.stop()
    n = len(t.samples)
    assert n >= 5
    time.sleep(0.1)
    assert len(t.samples) == n                    # stopped means stopped
    t.stop()                                      # and stopping again is harmless
    times = [s[0] for s in t.samples]
    assert times == sorted(times)


def test_counter_delta_counts_a_reset_port_from_zero():
    assert counter_delta(1000, 1500) == 500
    assert counter_delta(1000, 300) == 300        # the port was re-created: 300 bytes since


def test_rates_sum_the_ports_out_of_a_switch():
    t = Timeline(FakeNet())
    t.samples = [(10.0, {"rail0:1": (0, 0), "rail0:2": (0, 0)}),
                 (10.5, {"rail0:1": (62_500, 0), "rail0:2": (62_500, 9)}),
                 (11.0, {"rail0:1": (1_000, 0)})]             # rail0:1 reset, rail0:2 not sampled
    times, mbps = t.rates(["rail0:1", "rail0:2"])
    assert times == [10.25, 10.75]
    assert mbps == pytest.approx([2.0, 1_000 * 8 / 0.5 / 1e6])
