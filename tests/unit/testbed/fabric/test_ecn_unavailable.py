"""Where the machine cannot mark ECN, a fabric with fabric.ecn stops before anything is made, with one line that
names what is missing; without fabric.ecn nothing is asked of the machine."""
import pytest

from testbed.fabric import ecn
from testbed.fabric.network import Network
from testbed.fabric.topo import build

RED = {"kmin_kb": 20, "kmax_kb": 200, "pmax": 0.2}


@pytest.fixture
def no_clang(monkeypatch):
    real = ecn.shutil.which
    monkeypatch.setattr(ecn.shutil, "which", lambda tool: None if tool == "clang" else real(tool))


def test_a_machine_without_clang_is_named(no_clang):
    assert ecn.missing().startswith("clang is not installed")
    with pytest.raises(ecn.EcnUnavailable, match=r"^fabric.ecn: this machine cannot mark ECN: clang is not installed"):
        ecn.require()


def test_bring_up_with_ecn_stops_before_anything_is_made(no_clang, tmp_path):
    with pytest.raises(ecn.EcnUnavailable, match="clang") as err:
        Network(build("rail-only", 2, 2, ecn=RED), run_dir=str(tmp_path / "run"))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_without_ecn_nothing_is_asked(no_clang, tmp_path):
    net = Network(build("rail-only", 2, 2), run_dir=str(tmp_path / "run"))
    assert net.ecn_object is None and net.ecn_counters() == {}


def test_ecn_is_not_made_over_machines():
    from testbed.fabric.machines import Machine
    with pytest.raises(ecn.EcnUnavailable, match="spread over machines"):
        Network(build("rail-only", 2, 2, ecn=RED), machines=[Machine("m0", "10.0.0.1"), Machine("m1", "10.0.0.2")])
