"""The fault kinds' registry: every kind a scenario may name is registered, in the schema's order, and answers
what the schedule, `testbed fault`, the outcomes and the report ask of it."""
import os

import pytest

from testbed.fabric.topo import build
from testbed.faults import HAND, REGISTRY, FaultKind

from tests import compared_names

KINDS = ["link-down", "link-up", "link-flap", "switch-down", "port-disable", "gpu-crash", "gpu-hang", "gpu-stall",
         "gpu-declared", "server-down", "nic-down", "partition", "gpu-restart", "nic-up"]
TARGET = {"server-down": "s1", "partition": "s1", "link-down": "rail0-spine1", "link-up": "rail0-spine1",
          "link-flap": "s0g0/nic", "switch-down": "spine0", "port-disable": "s1g0/nic"}


def test_every_kind_is_registered_once_under_its_own_name_in_the_schemas_order():
    assert list(REGISTRY) == KINDS
    assert all(isinstance(k, FaultKind) and k.name == name for name, k in REGISTRY.items())


@pytest.mark.parametrize("name", KINDS)
def test_each_kind_checks_its_target_and_knows_what_it_hits(name):
    kind = REGISTRY[name]
    fabric = build("rail-optimized", 2, 2, spines=2)
    fault = {"at": 1.0, "kind": name, "target": TARGET.get(name, "s1g1")}
    kind.check(fabric, fault)
    links, hosts = kind.hit(fabric, fault)
    assert links or hosts
    # the controller sees exactly the faults whose outcome is not the job's
    assert (kind.ports(fabric, fault) is None) == kind.by_job
    assert kind.doc and kind.target.phrase and kind.recovery and kind.missed


@pytest.mark.parametrize("name, steps", [
    ("link-down", [(1.0, False), (3.0, True)]), ("link-up", [(1.0, True)]), ("gpu-restart", [(1.0, True)]),
    ("nic-up", [(1.0, True)]), ("gpu-hang", [(1.0, False), (3.0, True)]),
    ("link-flap", [(1.0, False), (3.0, True), (5.0, False), (7.0, True)])])
def test_a_kind_says_when_it_strikes_and_is_undone(name, steps):
    assert REGISTRY[name].steps({"at": 1.0, "kind": name, "target": "x", "duration": 2.0, "count": 2}) == steps


def test_a_fault_without_a_duration_is_never_undone_and_a_flap_has_its_defaults():
    assert REGISTRY["gpu-crash"].steps({"at": 1.0}) == [(1.0, False)]
    assert len(REGISTRY["link-flap"].steps({"at": 0.0})) == 6 and REGISTRY["link-flap"].steps({"at": 0.0})[1][0] == 0.5


def test_the_hand_actions_are_the_kinds_own_in_the_cli_order():
    assert list(HAND) == ["down", "up", "crash", "hang", "stall", "resume", "declare"]
    assert {a: (k.name, up) for a, (k, up) in HAND.items()} == {
        "down": ("link-down", False), "up": ("link-up", True), "crash": ("gpu-crash", False),
        "hang": ("gpu-hang", False), "stall": ("gpu-stall", False), "resume": ("gpu-stall", True),
        "declare": ("gpu-declared", False)}


def test_the_summary_line_and_the_report_column_come_from_the_kind():
    link = {"kind": "link-down", "target": "rail0-spine1", "at_s": 1.0, "detected_s": 1.01, "installed_s": 1.02,
            "restored_s": 2.0, "resumed_s": None}
    assert REGISTRY["link-down"].describe(link).startswith("fault link-down rail0-spine1: at 1.0 s, controller saw")
    gpu = {"kind": "gpu-crash", "target": "s1g1", "at_s": 1.0, "detected_s": None, "processes": 0}
    assert REGISTRY["gpu-crash"].describe(gpu).endswith("it hit no process (no rank ran on the target)")
    assert (REGISTRY["link-down"].recovery, REGISTRY["gpu-crash"].recovery) == ("reroute", "-")


def test_a_kind_that_a_gpu_comes_back_from_names_a_registered_kind_that_brings_it_back():
    backs = {name: k.back for name, k in REGISTRY.items() if k.back}
    assert backs == {"gpu-crash": "gpu-restart", "gpu-hang": "gpu-restart", "gpu-stall": "gpu-restart",
                     "nic-down": "nic-up"}
    assert all(REGISTRY[b].steps({"at": 0.0}) == [(0.0, True)] for b in backs.values())


def test_no_fault_kind_is_compared_outside_the_faults_package():
    assert compared_names.outside(REGISTRY, os.path.join("testbed", "faults")) == []
