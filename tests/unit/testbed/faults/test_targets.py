"""A target that a fault's kind cannot hit in the fabric is refused before bring-up, with an error that names
the target and what the kind expects."""
import pytest

from testbed import runner
from testbed.fabric.topo import build
from testbed.faults import REGISTRY, FaultError
from testbed.faults.targets import resolve
from testbed.scenario.schema import ScenarioError

FABRIC = build("rail-optimized", 2, 2, spines=2, spares_per_server=1)


@pytest.mark.parametrize("name, target, message", [
    ("link-down", "rail7-spine0", "unknown fault target 'rail7-spine0': expected a link like rail0-spine1, "
                                  "HOST/nic, HOST/hb, path:SRC>DST, a switch name or site:NAME"),
    ("link-flap", "s0g0/pcie", "unknown fault target 's0g0/pcie': expected HOST/nic or HOST/hb"),
    ("switch-down", "path:s0g0>s9g9", "unknown host 's9g9' in path target"),
    ("port-disable", "path:s0g0>s1g0", "s0g0 and s1g0 share a switch: their path has no switch-to-switch link"),
    ("gpu-crash", "s1", "unknown gpu-crash target 's1': expected a GPU host like s0g1"),
    ("gpu-stall", "rail0-spine0", "unknown gpu-stall target 'rail0-spine0': expected a GPU host like s0g1"),
    ("nic-down", "s0g0/nic", "unknown nic-down target 's0g0/nic': expected a GPU host like s0g1"),
    ("gpu-restart", "s9g0", "unknown gpu-restart target 's9g0'"),
    ("server-down", "s1g0", "unknown server-down target 's1g0': expected a GPU host like s0g1 (server-down: a "
                            "server like s1)"),
    ("partition", "s5", "(partition: a server like s1)")])
def test_a_bad_target_names_itself_and_what_was_expected(name, target, message):
    with pytest.raises(FaultError) as err:
        REGISTRY[name].check(FABRIC, {"at": 1, "kind": name, "target": target})
    assert message in str(err.value)


def test_server_faults_take_the_servers_spares_too_and_gpu_faults_a_spare():
    assert REGISTRY["server-down"].hit(FABRIC, {"target": "s1"})[1] == {"s1g0", "s1g1", "s1spare0"}
    REGISTRY["gpu-crash"].check(FABRIC, {"target": "s1spare0"})


def test_a_switch_target_is_every_link_of_the_switch():
    assert len(resolve(FABRIC, "spine1")) == 2 and resolve(FABRIC, "s1g0/hb")[0].kind == "hb"


def test_the_runner_refuses_a_bad_target_before_bring_up_naming_the_fault():
    doc = {"name": "x", "fabric": {"kind": "rail-optimized"}, "workloads": [{"type": "connectivity"}],
           "faults": [{"at": 1, "kind": "link-down", "target": "rail0-spine0"},
                      {"at": 1, "kind": "gpu-hang", "target": "s1"}]}
    with pytest.raises(ScenarioError, match=r"^faults\.1: unknown gpu-hang target 's1'"):
        runner.check(doc, runner.fabric_of(doc))
