"""Every shell script of the repository passes shellcheck (warnings and errors; the sourced libraries are
followed from the scripts that source them), so a command whose failure would go unnoticed, an unquoted
expansion or a `cd` that may fail is caught before the VM's hour-long run. scripts/setup --extras dev
installs shellcheck (`make test` asks for it)."""
import os
import shutil
import subprocess

import pytest

from tests.paths import ROOT


def shell_scripts() -> list[str]:
    found = []
    for folder in ("scripts", "scripts/lib", ".ci"):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            path = os.path.join(folder, name)
            if not os.path.isfile(os.path.join(ROOT, path)):
                continue
            with open(os.path.join(ROOT, path), errors="replace") as f:
                first = f.readline()
            if name.endswith(".sh") or (first.startswith("#!") and first.rstrip().endswith(("bash", "sh"))):
                found.append(path)
    return found


def shellcheck() -> str:
    tool = shutil.which("shellcheck")
    assert tool, "shellcheck is not installed: scripts/setup --extras dev installs it (make test does)"
    return tool


def test_the_scripts_are_found():
    scripts = shell_scripts()
    assert {"scripts/setup", "scripts/vm-test", "scripts/lib/vm.sh", ".ci/run"} <= set(scripts)
    assert "scripts/bench-rxe" not in scripts                       # a Python script


@pytest.mark.parametrize("path", shell_scripts())
def test_shellcheck_passes(path):
    p = subprocess.run([shellcheck(), "-x", "-P", "SCRIPTDIR", "-S", "warning", "-f", "gcc", path], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_shellcheck_catches_an_unchecked_cd(tmp_path):
    """The check itself: a script whose `cd` may fail is refused."""
    bad = tmp_path / "bad"
    bad.write_text('#!/usr/bin/env bash\ncd "$1"\nrm -rf build\n')
    p = subprocess.run([shellcheck(), "-S", "warning", str(bad)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "SC2164" in p.stdout
