"""Scenario validation: every *_error fixture fails with one line naming the problem; its good twin loads."""
import glob
import os

import pytest

from testbed import runner
from testbed.scenario import ScenarioError, apply_set, load, parse_size
from testbed.topo import TopologyError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "scenarios")
SCENARIOS = os.path.join(os.path.dirname(__file__), "..", "scenarios")

ERRORS = {
    "kind": "'torus' is not one of",
    "servers": "fabric.servers: 0 is less than the minimum of 1",
    "gpus": "gpus_per_server must be between 1 and 64, got 65",
    "unknown_key": "routing: Additional properties are not allowed ('hashing' was unexpected)",
    "yaml": "malformed YAML at line 4",
    "size": "size '12 parsecs' is not a size",
    "workload": "workloads.0.type: 'allreduce' is not one of",
    "mode": "routing.mode: 'split:1' is not a routing mode; choose single, ecmp, spray, rr or split:K",
    "notmapping": "a scenario must be a YAML mapping",
}


def load_and_build(path, overrides=()):
    doc = load(path, list(overrides))
    runner.fabric_of(doc)
    return doc


def test_every_error_fixture_has_an_expected_message():
    names = {os.path.basename(p)[:-len("_error.yaml")] for p in glob.glob(os.path.join(FIXTURES, "*_error.yaml"))}
    assert names == set(ERRORS)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_error_fixture_names_the_problem(name):
    with pytest.raises((ScenarioError, TopologyError)) as exc:
        load_and_build(os.path.join(FIXTURES, f"{name}_error.yaml"))
    message = str(exc.value)
    assert ERRORS[name] in message
    assert "\n" not in message


@pytest.mark.parametrize("name", sorted(n for n in ERRORS if n != "notmapping"))
def test_good_twin_loads(name):
    doc = load_and_build(os.path.join(FIXTURES, f"{name}.yaml"))
    assert doc["name"] == name


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(SCENARIOS, "*.yaml"))))
def test_shipped_scenarios_are_valid(path):
    load_and_build(path)


def test_set_overrides_values_and_lists():
    doc = load(os.path.join(FIXTURES, "unknown_key.yaml"),
               ["fabric.servers=4", "routing.mode=ecmp", "workloads.0.size=2MiB"])
    assert doc["fabric"]["servers"] == 4 and doc["routing"]["mode"] == "ecmp"
    assert doc["workloads"][0]["size"] == "2MiB"
    with pytest.raises(ScenarioError, match="expected key=value"):
        apply_set(doc, "fabric.servers")
    with pytest.raises(ScenarioError, match=r"workloads.0: Additional properties .*bogus"):
        load(os.path.join(FIXTURES, "unknown_key.yaml"), ["workloads.0.bogus=1"])


def test_missing_file():
    with pytest.raises(ScenarioError, match="No such file"):
        load("/nonexistent/scenario.yaml")


@pytest.mark.parametrize("text,size", [(4096, 4096), ("64KiB", 65536), ("1MiB", 1 << 20), ("10MB", 10**7),
                                       ("1.5 MiB", 1572864), ("512B", 512)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["0", "2GiB", "-1", "ten", "1 TB"])
def test_parse_size_rejects(text):
    with pytest.raises(ScenarioError):
        parse_size(text)
