"""The optional extras (TensorFlow, torch): `make demo` sets up without them, the test targets ask for both, and
scripts/setup refuses an unknown extra or argument before it installs anything."""
import os
import shutil
import subprocess

import pytest

from tests.paths import ROOT

SETUP = os.path.join(ROOT, "scripts", "setup")


def make_n(*args) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    p = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout


def setup_line(out: str) -> str:
    return next(line.strip() for line in out.splitlines() if line.startswith("scripts/setup"))


def test_demo_sets_up_without_extras_and_the_tests_with_both():
    assert setup_line(make_n("demo")) == "scripts/setup"
    assert setup_line(make_n("setup")) == "scripts/setup"
    for target in ("test", "test-unit", "test-fast"):
        assert setup_line(make_n(target)) == "scripts/setup --extras tf,torch,dev", target
    assert setup_line(make_n("setup", "EXTRAS=tf")) == "scripts/setup --extras tf"


def test_every_extra_has_its_requirements_and_tensorflow_is_one():
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        base = [line for line in f if line.strip() and not line.startswith("#")]
    assert not [line for line in base if line.startswith(("tensorflow", "torch"))]
    with open(os.path.join(ROOT, "requirements-tf.txt")) as f:
        assert any(line.startswith("tensorflow-cpu==") for line in f)


@pytest.mark.parametrize("args, message", [
    (["--extras", "tf,bogus"], "setup: unknown extra 'bogus' (known: tf, torch, dev)"),
    (["--extras"], "setup: --extras needs a list"),
    (["--frob"], "setup: unknown argument --frob"),
])
def test_setup_refuses_bad_arguments_before_installing(args, message, tmp_path):
    # a PATH with bash and dirname alone (no dpkg, apt or pip): past the arguments it would fail otherwise
    for tool in ("bash", "dirname"):
        os.symlink(shutil.which(tool), tmp_path / tool)
    p = subprocess.run([str(tmp_path / "bash"), SETUP, *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=30, env={"PATH": str(tmp_path)})
    assert p.returncode == 2 and p.stderr.startswith(message) and p.stderr.count("\n") == 1, p.stderr
    assert p.stdout == ""
