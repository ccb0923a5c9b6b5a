"""TensorFlow is an optional extra: an offload scenario without it stops at the check, before anything is brought
up, with one line naming the fix (`testbed validate` and `testbed run` alike)."""
import importlib.util
import subprocess
import sys

import pytest

from testbed.fabric.topo import build
from testbed.scenario.schema import ScenarioError
from testbed.workloads import offload

from tests.paths import ROOT

FIX = "make setup EXTRAS=tf"
# Blocks the import as a venv without the extra would: find_spec and import both fail.
WITHOUT_TF = "import sys; sys.modules['tensorflow'] = None; from testbed.cli import main; sys.exit(main(sys.argv[1:]))"


def fabric():
    return build("rail-optimized", servers=2, gpus_per_server=2, cpu_hosts=1)


def test_offload_without_tensorflow_is_a_scenario_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    assert offload.tensorflow_installed() is False
    with pytest.raises(ScenarioError, match="offload needs TensorFlow.*make setup EXTRAS=tf"):
        offload.validate(fabric(), {"type": "offload"}, {"hosts": "netns"})


def test_offload_with_tensorflow_passes_the_check(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "tensorflow" else real(name, *a))
    assert offload.validate(fabric(), {"type": "offload"}, {"hosts": "netns"})["trainer"] == "s0g0"


@pytest.mark.parametrize("verb", ["validate", "run"])
def test_cli_names_the_fix_in_one_line(verb):
    p = subprocess.run([sys.executable, "-c", WITHOUT_TF, verb, "scenarios/offload.yaml"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and FIX in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "offload needs TensorFlow" in p.stderr and "workloads.0" in p.stderr


def test_on_docker_hosts_the_image_carries_tensorflow_and_the_venv_need_not(monkeypatch):
    """hosts: docker runs offload in the tf image (or an image of the user's): the venv's TensorFlow is not
    asked for; the torch image, which has none, is refused in one line."""
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    for image in ("default", "tf", "tb-mine:latest"):
        assert offload.validate(fabric(), {"type": "offload"}, {"hosts": "docker", "host_image": image})
    with pytest.raises(ScenarioError, match="^offload runs TensorFlow, which host_image torch does not carry; "
                                            "use host_image tf"):
        offload.validate(fabric(), {"type": "offload"}, {"hosts": "docker", "host_image": "torch"})
