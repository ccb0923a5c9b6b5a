"""Scenario validation: every *_error fixture fails with one line naming the problem; its good twin loads."""
import glob
import os

import pytest

from testbed import runner
from testbed.fabric.topo import TopologyError
from testbed.scenario import ScenarioError, apply_set, load, parse_size
from tests import paths

FIXTURES = os.path.join(paths.FIXTURES, "scenarios")
SCENARIOS = paths.SCENARIOS

ERRORS = {
    "kind": "'torus' is not one of",
    "servers": "fabric.servers: 0 is less than the minimum of 1",
    "gpus": "gpus_per_server must be between 1 and 64, got 65",
    "unknown_key": "routing: Additional properties are not allowed ('hashing' was unexpected)",
    "yaml": "yaml_error.yaml:4:11: malformed YAML: mapping values are not allowed here",
    "size": "size '12 parsecs' is not a size",
    "workload": "workloads.0.type: 'allreduce' is not one of",
    "mode": "routing.mode: 'split:1' is not a routing mode; choose single, ecmp, spray, rr or split:K",
    "notmapping": "a scenario must be a YAML mapping",
    "training_plan": "workloads.0: plan tp 2 x pp 2 x dp 4 = 16 is not the 8 GPUs of the fabric",
    "training_tp": "plan tp 8 does not divide the 4 GPUs per server: a TP group must stay inside one HB domain",
    "training_rail": "on rail-only, pipeline neighbours tp x dp = 2 ranks apart cross rails between servers",
    "training_size": "the scaled activations are 16777216 B per micro-batch, outside 1024 B..256 KiB; lower scale",
    "training_model": "workloads.0.model.bytes_per_param: 3 is not one of [2, 4]",
    "hosts": "hosts: 'kubernetes' is not one of ['netns', 'docker']",
    "host_limits": "host_limits.memory: size '1MiB' must be between 32 MiB and 64 GiB",
    "notype": "workloads.0: 'type' is a required property",
    "job_rail": "jobs.0 (a): placement.rails: 5 is out of range (this fabric has 2: 0..1)",
    "ecn_order": "ecn: kmin_kb (50) is above kmax_kb (10)",
    "pfc_order": "pfc: xon_kb (64) must be below xoff_kb (32)",
    "delay": "fabric.delay_us.nic: -5 is less than the minimum of 0",
    "wan_site": "wan[0].b: no site 'jp' (sites: eu, us)",
    "wan_gateway": "wan[0].a: site 'eu' has no switch 'spine7' (its switches: spine0, spine1, tor0)",
    "wan_delay": "fabric.wan.0.delay_us: -1 is less than the minimum of 0",
    "wan_loss": "fabric.wan.0.loss: 1 is greater than or equal to the maximum of 1",
}


def load_and_build(path, overrides=()):
    doc = load(path, list(overrides))
    runner.check(doc, runner.fabric_of(doc))          # the checks that need the fabric, as `testbed run` does
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


def test_hosts_backend_and_limits():
    doc = load(os.path.join(FIXTURES, "mode.yaml"), ["hosts=docker", "host_limits.cpus=0.25", "host_limits.memory=512MiB"])
    assert doc["hosts"] == "docker"
    from testbed.scenario import host_limits
    assert host_limits(doc) == {"cpus": 0.25, "memory": 512 * 2**20}
    with pytest.raises(ScenarioError, match="^host_limits: CPU and memory limits are for Docker hosts; set hosts: docker$"):
        from testbed.scenario import validate
        validate({**doc, "hosts": "netns"})


def test_the_hosts_image_is_asked_of_docker_hosts_only():
    from testbed.scenario import host_limits, validate
    doc = load(os.path.join(FIXTURES, "mode.yaml"), ["hosts=docker", "host_image=torch"])
    assert host_limits(doc) == {"image": "torch"}
    assert host_limits(load(os.path.join(FIXTURES, "mode.yaml"), ["hosts=docker"])) == {}
    offload = {**load(os.path.join(FIXTURES, "mode.yaml"), ["hosts=docker"]), "workloads": [{"type": "offload"}]}
    assert host_limits(offload) == {"image": "tf"}                        # the image with TensorFlow, by itself
    assert host_limits({**offload, "host_image": "tb-mine:latest"}) == {"image": "tb-mine:latest"}
    with pytest.raises(ScenarioError, match="^host_image: the image of Docker hosts; set hosts: docker$"):
        validate({**doc, "hosts": "netns"})
    with pytest.raises(ScenarioError, match="host_image"):
        validate({**doc, "host_image": "tensorflow"})           # neither a flavour nor NAME:TAG
    assert host_limits(validate({**doc, "host_image": "tb-tensorflow:latest"})) == {"image": "tb-tensorflow:latest"}


def test_a_workload_without_its_type_is_one_error_not_one_per_workload_type():
    from testbed.scenario.loader import problems
    import yaml
    with open(os.path.join(FIXTURES, "notype_error.yaml")) as f:
        found = problems(yaml.safe_load(f))
    assert [str(p) for p in found] == ["workloads.0: 'type' is a required property"]
