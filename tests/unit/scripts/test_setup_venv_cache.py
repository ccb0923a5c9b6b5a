"""scripts/setup keeps the Python packages on the machine (VENV_CACHE): run for real on small projects (the
real script, a local package as the only requirement), a second checkout reuses what the first installed, a
change to the requirements gets a virtualenv of its own, and a self-contained .venv of an earlier set-up is
replaced."""
import base64
import hashlib
import os
import shutil
import subprocess
import time
import zipfile

import pytest

from tests.paths import ROOT

pytestmark = pytest.mark.slow

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "tbcheckout"
version = "1.0"

[tool.setuptools.packages.find]
include = ["testbed*"]
"""


def wheel(folder, name: str) -> str:
    """A one-module wheel, made here (no build, no index)."""
    info = f"{name}-1.0.dist-info"
    files = {f"{name}.py": f"NAME = {name!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = os.path.join(folder, f"{name}-1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
    return path


def project(path, requirements: list[str]):
    """A checkout in miniature: the real scripts/setup, a package of its own, local wheels as requirements."""
    (path / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "scripts", "setup"), path / "scripts" / "setup")
    for folder in ("hosts", "testbed", "controllers", "tools"):
        (path / folder).mkdir()
        (path / folder / "__init__.py").write_text("")
    (path / "pyproject.toml").write_text(PYPROJECT)
    wheels = ["./" + os.path.basename(wheel(path, name)) for name in requirements]   # the same text in every copy
    (path / "requirements.txt").write_text("".join(f"{w}\n" for w in wheels))
    (path / "requirements-tf.txt").write_text(f"{wheels[0]}\n")
    return path


def setup(path, cache) -> float:
    t0 = time.monotonic()
    p = subprocess.run([str(path / "scripts" / "setup")], cwd=path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "VENV_CACHE": str(cache)}, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    return time.monotonic() - t0


def where(path, module: str) -> str:
    p = subprocess.run([str(path / ".venv" / "bin" / "python"), "-c", f"import {module}; print({module}.__file__)"],
                       cwd=path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def kept(cache) -> list[str]:
    return sorted(e for e in os.listdir(cache) if not e.startswith("."))


@pytest.fixture
def machine(tmp_path):
    if os.geteuid() != 0 or shutil.which("dpkg-query") is None:
        print("SKIP: scripts/setup runs as root on Debian or Ubuntu")
        pytest.skip("scripts/setup runs as root on Debian or Ubuntu")
    return tmp_path


def test_checkouts_share_the_kept_packages_a_new_requirement_gets_its_own_and_an_old_venv_goes(machine):
    cache, a, b = machine / "cache", project(machine / "a", ["tbprobe_a"]), project(machine / "b", ["tbprobe_a"])
    first = setup(a, cache)
    entry, = kept(cache)
    stamp = cache / entry / ".requirements-installed"
    installed_at = stamp.stat().st_mtime
    second = setup(b, cache)                                   # a fresh clone of the same commit
    assert kept(cache) == [entry] and stamp.stat().st_mtime == installed_at      # nothing installed again
    for checkout in (a, b):
        assert where(checkout, "tbprobe_a").startswith(str(cache / entry))
        assert where(checkout, "testbed") == str(checkout / "testbed" / "__init__.py")
    print(f"set-up: first checkout {first:.1f} s, second {second:.1f} s")

    (b / "requirements.txt").write_text("./tbprobe_a-1.0-py3-none-any.whl\n./"
                                        + os.path.basename(wheel(b, "tbprobe_b")) + "\n")   # a later commit's
    setup(b, cache)
    new, = set(kept(cache)) - {entry}
    assert where(b, "tbprobe_b").startswith(str(cache / new))
    assert where(a, "tbprobe_a").startswith(str(cache / entry))               # the first checkout keeps its own
    assert subprocess.run([str(a / ".venv" / "bin" / "python"), "-c", "import tbprobe_b"], cwd=a,
                          capture_output=True).returncode != 0

    (a / ".venv" / ".requirements-installed").write_text("")       # as a self-contained .venv of an older set-up
    (a / ".venv" / "lib" / "stale").mkdir()
    setup(a, cache)
    assert not (a / ".venv" / ".requirements-installed").exists() and not (a / ".venv" / "lib" / "stale").exists()
    assert where(a, "tbprobe_a").startswith(str(cache / entry))
