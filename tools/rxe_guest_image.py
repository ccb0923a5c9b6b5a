"""The kernel-rxe guest's image (kernel + busybox initramfs with rdma-core, perftest, python3 and pyverbs).

``scripts/rxe-guest-build`` prepares it in ``build/rxe-guest/`` (or ``$RXE_GUEST_DIR``); these functions find
it, tell whether it is current and whether guests can run here, and build it on first use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent   # tools/ sits at the repository's top
DEFAULT_IMAGE_DIR = Path(os.environ.get("RXE_GUEST_DIR", REPO / "build" / "rxe-guest"))
BUILD_SCRIPT = REPO / "scripts" / "rxe-guest-build"
QEMU = "qemu-system-x86_64"


def image_files(image_dir: Path | str | None = None) -> tuple[Path, Path] | None:
    """(kernel, initrd) of a prepared guest image, or None when it has not been built."""
    d = Path(image_dir) if image_dir else DEFAULT_IMAGE_DIR
    i = d / "initrd.gz"
    for k in (d / "vmlinux", d / "vmlinuz"):  # the uncompressed kernel boots ~2 s faster under TCG
        if k.is_file() and i.is_file():
            return k, i
    return None


def missing_requirements(image_dir: Path | str | None = None) -> str | None:
    """Why guests cannot run here (a sentence), or None if they can."""
    if os.geteuid() != 0:
        return "needs root (TAP devices)"
    if not shutil.which(QEMU):
        return f"{QEMU} not installed (apt-get install qemu-system-x86)"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun missing"
    if image_files(image_dir) is None:
        return f"guest image not built ({BUILD_SCRIPT.relative_to(REPO)})"
    return None


def image_is_current(image_dir: Path | str | None = None) -> bool:
    """Whether the image was built by the present build script (its manifest records the script's hash)."""
    d = Path(image_dir) if image_dir else DEFAULT_IMAGE_DIR
    try:
        first = (d / "manifest").read_text().splitlines()[0]
        want = hashlib.sha256(BUILD_SCRIPT.read_bytes()).hexdigest()[:16]
    except (OSError, IndexError):
        return False
    return f"script={want}" in first.split()


def image_has_python(image_dir: Path | str | None = None) -> bool:
    """Whether the image carries python3 + pyverbs (see RXE_GUEST_PYTHON in the build script)."""
    d = Path(image_dir) if image_dir else DEFAULT_IMAGE_DIR
    try:
        return any(l.startswith("python ") and "python3-pyverbs=" in l for l in (d / "manifest").read_text().splitlines())
    except OSError:
        return False


def ensure_image(image_dir: Path | str | None = None, timeout: float = 600) -> str | None:
    """Build the guest image if it is missing or was made by an older build script. Returns None on success,
    else the reason it is unavailable (an existing older image is still used if a rebuild fails)."""
    env = dict(os.environ)
    if image_dir:
        env["RXE_GUEST_DIR"] = str(image_dir)
    if image_files(image_dir) is None or not image_is_current(image_dir):
        if not shutil.which(QEMU):
            return f"{QEMU} not installed (apt-get install qemu-system-x86)"
        try:
            r = subprocess.run([str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{BUILD_SCRIPT.name} failed: {e}"
        if r.returncode != 0 and image_files(image_dir) is None:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            return f"{BUILD_SCRIPT.name} failed: {' | '.join(tail)}"
    return missing_requirements(image_dir)
