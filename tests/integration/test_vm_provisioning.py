"""The VM's offline provisioning, for real and without booting the VM: scripts/vm-provision-check runs
scripts/setup in a container made from the local box's root file system (Debian 12 with the box's packages),
with no network and pip reading only the wheels `make vm` collects; and the same check fails, naming pip's
error, when the wheels lack one requirement (what a broken wheel step gave the VM). Needs a Docker engine
(`make test` starts one) and debootstrap for the box's root the first time (kept as an image afterwards)."""
import os
import shutil
import subprocess

import pytest

from tests.paths import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow]
CHECK = os.path.join(ROOT, "scripts", "vm-provision-check")


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([CHECK, *args], cwd=ROOT, capture_output=True, text=True, timeout=2400)


@pytest.fixture(scope="module")
def provisioned(docker_engine):
    return run()


def test_offline_provisioning_in_the_box_root_passes(provisioned):
    out = provisioned.stdout + provisioned.stderr
    assert provisioned.returncode == 0, out[-4000:]
    assert "PASS: offline provisioning in the box's root" in out
    assert "imports ok: tensorflow" in out
    assert os.path.exists(os.path.join(ROOT, "build", "wheels", ".requirements"))


def test_wheels_missing_a_requirement_fail_the_provisioning(provisioned, tmp_path):
    assert provisioned.returncode == 0
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    source = os.path.join(ROOT, "build", "wheels")
    dropped = [w for w in os.listdir(source) if w.lower().startswith("pyyaml-")]
    assert dropped, "no PyYAML wheel in build/wheels"
    for name in os.listdir(source):
        if name.endswith(".whl") and name not in dropped:
            try:
                os.link(os.path.join(source, name), wheels / name)
            except OSError:
                shutil.copy(os.path.join(source, name), wheels / name)
    p = run("--wheels", str(wheels))
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-4000:]
    assert "FAIL: offline provisioning failed" in out and "pyyaml" in out.lower()
