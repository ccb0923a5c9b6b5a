"""`testbed fault` strikes the fabric up under its own fabric tag, never another user's beside it."""
import pytest

from testbed.faults import running
from testbed.faults.running import HandFaultError, running_fabric


@pytest.fixture
def two_fabrics(monkeypatch):
    fabrics = {"": ("/run/testbed/run-1", {"tag": ""}), "m": ("/run/testbed/run-2", {"tag": "m"})}
    monkeypatch.setattr(running.runstate, "live_fabrics", lambda: dict(fabrics))
    monkeypatch.setattr(running, "RunningFabric", lambda state, run_dir: (run_dir, state))
    return fabrics


@pytest.mark.parametrize("tag, run_dir", [("", "/run/testbed/run-1"), ("m", "/run/testbed/run-2")])
def test_a_fault_by_hand_finds_the_fabric_of_its_own_tag(two_fabrics, monkeypatch, tag, run_dir):
    monkeypatch.setenv("TESTBED_FABRIC_TAG", tag)
    assert running_fabric()[0] == run_dir


def test_no_fabric_under_its_tag_is_one_line_naming_the_others(two_fabrics, monkeypatch):
    monkeypatch.setenv("TESTBED_FABRIC_TAG", "q")
    with pytest.raises(HandFaultError, match=r"under this fabric tag \(fabrics up under other tags: \(none\), m;"):
        running_fabric()
