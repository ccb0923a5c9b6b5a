"""No source file is ignored by git or left out of the VM's copy: a pattern like `results/` once hid the
testbed.results package from both."""
import os
import shutil
import subprocess

import pytest

from tests.paths import ROOT

PACKAGES = ("testbed", "hosts", "controllers", "tools")


def sources() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            out += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(".py")]
    return out


@pytest.mark.skipif(shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")),
                    reason="not a git checkout")
def test_no_source_file_is_ignored_by_git():
    p = subprocess.run(["git", "check-ignore", "--no-index", *sources()], cwd=ROOT, capture_output=True, text=True)
    assert p.stdout.split() == []


def test_the_vm_copy_excludes_only_top_level_folders():
    with open(os.path.join(ROOT, "Vagrantfile")) as f:
        line = next(l for l in f if "rsync__exclude" in l)
    patterns = line.split("[", 1)[1].split("]", 1)[0].replace('"', "").split(", ")
    assert all(p.startswith("/") or p.startswith("*") for p in patterns), patterns


def test_every_test_file_has_its_own_name():
    """pytest imports test files by their base name (the test folders are not packages): two files of one name
    stop the whole suite at collection."""
    seen: dict[str, str] = {}
    twice = []
    for d, _, files in os.walk(os.path.join(ROOT, "tests")):
        for f in files:
            if f.startswith("test_") and f.endswith(".py"):
                if f in seen:
                    twice.append(f"{seen[f]} and {os.path.relpath(os.path.join(d, f), ROOT)}")
                seen[f] = os.path.relpath(os.path.join(d, f), ROOT)
    assert twice == []
