"""Liveness defaults at the machine's pace: scaled under software CPU emulation, a scenario's own values kept."""
import subprocess

import pytest

from testbed.cli import main
from testbed.runtime import pace
from testbed.workloads import collective


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    pace.liveness_scale.cache_clear()
    yield
    pace.liveness_scale.cache_clear()


def virt(monkeypatch, says: str):
    monkeypatch.delenv("TESTBED_LIVENESS_SCALE", raising=False)
    monkeypatch.setattr(pace.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0 if says != "none" else 1, f"{says}\n", ""))


@pytest.mark.parametrize("says, scale", [("qemu", pace.LIVENESS_SCALE), ("kvm", 1), ("none", 1), ("docker", 1)])
def test_only_software_emulation_scales_the_liveness_defaults(monkeypatch, says, scale):
    virt(monkeypatch, says)
    assert pace.liveness_scale() == scale
    assert (pace.warning() is None) == (scale == 1)


def test_without_systemd_detect_virt_the_machine_is_taken_as_real(monkeypatch):
    monkeypatch.delenv("TESTBED_LIVENESS_SCALE", raising=False)

    def missing(*a, **k):
        raise FileNotFoundError("systemd-detect-virt")
    monkeypatch.setattr(pace.subprocess, "run", missing)
    assert pace.liveness_scale() == 1


def test_under_emulation_the_defaults_scale_and_a_scenarios_values_are_kept(monkeypatch):
    virt(monkeypatch, "qemu")
    k, d = pace.LIVENESS_SCALE, pace.DEFAULT_BEAT
    beat = pace.heartbeat({})
    assert (beat.period_s, beat.timeout_s, beat.stall_s) == pytest.approx((d.period_s * k, d.timeout_s * k, d.stall_s * k))
    # a timeout the scenario set keeps the real machine's period under it
    beat = pace.heartbeat({"timeout_s": 0.5})
    assert (beat.period_s, beat.timeout_s, beat.stall_s) == pytest.approx((d.period_s, 0.5, d.stall_s * k))
    beat = pace.heartbeat({"period_s": 0.5, "stall_s": 3})
    assert (beat.period_s, beat.timeout_s, beat.stall_s) == pytest.approx((0.5, d.timeout_s * k, 3))
    assert "emulated in software" in pace.warning() and f"timeout {d.timeout_s * k:g} s" in pace.warning()


def test_on_a_real_machine_the_defaults_are_the_specs(monkeypatch):
    virt(monkeypatch, "none")
    assert pace.heartbeat({}) == pace.DEFAULT_BEAT
    assert pace.heartbeat({"timeout_s": 2.0}).timeout_s == 2.0


def test_the_collective_rank_spec_carries_the_paced_heartbeat(monkeypatch):
    monkeypatch.setenv("TESTBED_LIVENESS_SCALE", "3")

    class Net:
        from testbed.fabric import topo
        fabric = topo.build("rail-optimized", servers=2, gpus_per_server=2, spines=1)
        routing = "ecmp"
    spec = collective._base_spec(Net, {"op": "allreduce", "algo": "ring", "heartbeat": {}}, (), "/tmp/x", 1024)
    assert spec.heartbeat.timeout_s == pytest.approx(3 * pace.DEFAULT_BEAT.timeout_s)
    assert "TESTBED_LIVENESS_SCALE" in pace.warning()


@pytest.mark.parametrize("bad", ["fast", "0.5", "1000"])
def test_a_bad_override_is_one_line_and_exit_2(monkeypatch, capsys, bad):
    monkeypatch.setenv("TESTBED_LIVENESS_SCALE", bad)
    with pytest.raises(pace.PaceError, match="TESTBED_LIVENESS_SCALE"):
        pace.liveness_scale()
    pace.liveness_scale.cache_clear()
    assert main(["validate", "scenarios/demo.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "TESTBED_LIVENESS_SCALE" in err and "Traceback" not in err
