"""scripts/lib/vm.sh's vm_wheels, the wheels the VM provisions from offline, run for real in a checkout in
miniature (the real library, this checkout's light .venv, local wheels as the requirements): it collects with
the .venv's `python -m pip` (the light .venv has no pip of its own), fails loudly when a requirement cannot be
had, writes its marker only once pip resolves every requirement from the folder alone, and does not believe
a marker whose wheels are gone."""
import os
import subprocess

import pytest

from tests.paths import ROOT
from tests.unit.scripts.test_setup_venv_cache import wheel

pytestmark = pytest.mark.slow


def checkout(path, requirements: list[str]):
    path.mkdir()
    os.symlink(os.path.join(ROOT, ".venv"), path / ".venv")
    (path / "requirements.txt").write_text("".join(f"{r}\n" for r in requirements))
    (path / "requirements-tf.txt").write_text("")
    return path


def vm_wheels(path, **env) -> subprocess.CompletedProcess:
    script = f'. {os.path.join(ROOT, "scripts", "lib", "vm.sh")}; vm_wheels'
    return subprocess.run(["bash", "-c", script], cwd=path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})


def test_the_light_venv_has_no_pip_of_its_own():
    """Why vm_wheels must not call .venv/bin/pip (what broke the VM's provisioning)."""
    assert not os.path.exists(os.path.join(ROOT, ".venv", "bin", "pip"))


def test_collects_and_marks_only_a_complete_folder(tmp_path):
    # the package by name, from a folder the host's pip configuration names (as the VM's real requirements)
    (tmp_path / "index").mkdir()
    local = wheel(tmp_path / "index", "tbprovisioned")
    path = checkout(tmp_path / "co", ["tbprovisioned==1.0"])
    p = vm_wheels(path, PIP_FIND_LINKS=str(tmp_path / "index"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.path.exists(path / "build/wheels" / os.path.basename(local))
    assert (path / "build/wheels/.requirements").read_text() == "tbprovisioned==1.0\n"
    # the marker is not believed once the wheels it stands for are gone: they are collected again
    os.remove(path / "build/wheels" / os.path.basename(local))
    p = vm_wheels(path, PIP_FIND_LINKS=str(tmp_path / "index"))
    assert p.returncode == 0 and "collecting" in p.stdout, p.stdout + p.stderr
    assert os.path.exists(path / "build/wheels" / os.path.basename(local))


def test_a_requirement_that_cannot_be_had_fails_and_leaves_no_marker(tmp_path):
    path = checkout(tmp_path / "co", ["tbmissing==1.0"])
    p = vm_wheels(path, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path))
    assert p.returncode != 0
    assert "pip wheel failed" in p.stderr and "cannot provision the VM offline" in p.stderr
    assert not os.path.exists(path / "build/wheels/.requirements")
