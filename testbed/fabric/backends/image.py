"""The emulated hosts' container image: the `hosts` package on Debian with what its processes import.

    ensure(client)                      -> "tb-host:latest", built only when its inputs changed
    build(client, base="debootstrap")   -> the same, built now (scripts/docker-image)

The image is docker/Dockerfile FROM a base, in two stages: everything but the `hosts` package, tagged
tb-host-deps (deps_tag), then the package. Derived images (docker/torch, docker/tf, docker/machine) install their
packages on the first and copy the package from the second, so a change to hosts/ reinstalls nothing.
The image a rebuild replaces is removed when nothing uses it any more.

With a registry the base is debian:bookworm-slim; without one it is made here: debootstrap (minbase, with
docker/packages included) into a temporary directory, trimmed, and `docker import`ed as tb-base:bookworm.
Rebuilding is incremental: the image carries a digest of its inputs (Dockerfile, docker/packages,
hosts/**/*.py) and is rebuilt only when that changes; the debootstrap base carries the digest of the package
list and is remade only when it changes.
"""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import tempfile
import time

from testbed import PREFIX, PROJECT_ROOT

DOCKER_DIR = os.path.join(PROJECT_ROOT, "docker")
IMAGE = f"{PREFIX}host:latest"
LOCAL_BASE = f"{PREFIX}base:bookworm"
REGISTRY_BASE = "debian:bookworm-slim"
SUITE = "bookworm"
BASES = ("auto", "registry", "debootstrap")
# debootstrap keeps the packages it downloaded here: a base remade later downloads only what changed.
DEBOOTSTRAP_CACHE = f"/var/cache/{PREFIX}debootstrap"
# What a base image does not need: documentation, locales, apt's caches.
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt",
        "var/lib/apt/lists")


class ImageError(RuntimeError):
    pass


def packages() -> list[str]:
    with open(os.path.join(DOCKER_DIR, "packages")) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def _host_files() -> list[str]:
    """The `hosts` package's sources, relative to the project root, in a stable order."""
    out = []
    for root, dirs, files in os.walk(os.path.join(PROJECT_ROOT, "hosts")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [os.path.relpath(os.path.join(root, f), PROJECT_ROOT) for f in sorted(files) if f.endswith(".py")]
    return out


def inputs_digest() -> str:
    h = hashlib.sha256()
    for rel in ["docker/Dockerfile", "docker/packages"] + _host_files():
        h.update(rel.encode() + b"\0")
        with open(os.path.join(PROJECT_ROOT, rel), "rb") as f:
            h.update(f.read() + b"\0")
    return h.hexdigest()[:16]


def packages_digest() -> str:
    return hashlib.sha256(("\n".join(packages()) + SUITE).encode()).hexdigest()[:16]


def _image(client, name: str):
    """The image NAME (a tag or an ID), or None when there is none."""
    import docker
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def _label(client, name: str, key: str) -> str | None:
    img = _image(client, name)
    return None if img is None else (img.labels or {}).get(key)


def up_to_date(client, tag: str = IMAGE) -> bool:
    return _label(client, tag, "testbed.inputs") == inputs_digest()


def context() -> io.BytesIO:
    """The build context as a tar: Dockerfile, the package list and hosts/ (sources only)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(os.path.join(DOCKER_DIR, "Dockerfile"), "Dockerfile")
        tar.add(os.path.join(DOCKER_DIR, "packages"), "packages")
        for rel in _host_files():
            tar.add(os.path.join(PROJECT_ROOT, rel), rel)
    buf.seek(0)
    return buf


def mirror() -> str:
    """This machine's Debian mirror if it has one configured, else Debian's own."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            with open(path) as f:
                for line in f:
                    words = line.split()
                    if words[:1] == ["URIs:"] or (words[:1] == ["deb"] and len(words) > 2):
                        uri = words[1] if words[0] == "URIs:" else words[-3]
                        if uri.rstrip("/").endswith("/debian"):
                            return uri
        except OSError:
            continue
    return "http://deb.debian.org/debian"


def debootstrap_base(client, tag: str = LOCAL_BASE, echo=print) -> str:
    """tb-base:bookworm from debootstrap + docker import (no registry needed); reused while the
    package list is unchanged."""
    digest = packages_digest()
    if _label(client, tag, "testbed.packages") == digest:
        return tag
    if subprocess.run(["sh", "-c", "command -v debootstrap"], capture_output=True).returncode != 0:
        raise ImageError("building the host image without a registry needs debootstrap (scripts/setup installs it)")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}rootfs-", dir="/var/tmp") as tmp:
        root = os.path.join(tmp, "root")
        echo(f"image: debootstrap {SUITE} with {', '.join(packages())} ...")
        os.makedirs(DEBOOTSTRAP_CACHE, exist_ok=True)
        run = subprocess.run(["debootstrap", "--variant=minbase", f"--cache-dir={DEBOOTSTRAP_CACHE}",
                              f"--include={','.join(packages())}", SUITE, root, mirror()],
                             capture_output=True, text=True)
        if run.returncode != 0:
            last = (run.stdout + run.stderr).strip().splitlines()[-1:] or ["no output"]
            raise ImageError(f"debootstrap failed: {last[0]}")
        for rel in TRIM:
            subprocess.run(["sh", "-c", f'rm -rf "{root}/{rel}"/*'], check=True)
        tarball = os.path.join(tmp, "rootfs.tar")
        subprocess.run(["tar", "-C", root, "-cf", tarball, "."], check=True)
        repository, _, version = tag.partition(":")
        client.api.import_image(src=tarball, repository=repository, tag=version or "latest",
                                changes=[f"LABEL testbed=1 testbed.packages={digest}", 'CMD ["/bin/sh"]'])
    echo(f"image: base {tag} made in {time.monotonic() - t0:.1f} s")
    return tag


def registry_base(client) -> str | None:
    """debian:bookworm-slim, local or pulled; None when there is no registry to pull it from."""
    import docker
    try:
        client.images.get(REGISTRY_BASE)
        return REGISTRY_BASE
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(REGISTRY_BASE)
        return REGISTRY_BASE
    except docker.errors.APIError:
        return None


def build(client, base: str = "auto", tag: str = IMAGE, base_tag: str = LOCAL_BASE, echo=print) -> str:
    """Build the host image now. base: auto (the registry's Debian if reachable, else debootstrap),
    registry, or debootstrap (made as base_tag)."""
    if base not in BASES:
        raise ImageError(f"unknown base {base!r}; choose one of {', '.join(BASES)}")
    t0 = time.monotonic()
    chosen = registry_base(client) if base in ("auto", "registry") else None
    if chosen is None:
        if base == "registry":
            raise ImageError(f"no registry to pull {REGISTRY_BASE} from; use base debootstrap")
        chosen = debootstrap_base(client, base_tag, echo)
    # The first stage's labels leave out the inputs' digest: with it, every change to hosts/ would make a new
    # first stage and the derived images would install their packages again.
    deps_labels = {"testbed": "1", "testbed.base": chosen}
    _build(client, deps_tag(tag), context(), {"BASE": chosen}, deps_labels, target="deps")
    _build(client, tag, context(), {"BASE": chosen}, {**deps_labels, "testbed.inputs": inputs_digest()})
    size = client.images.get(tag).attrs["Size"]
    echo(f"image: {tag} from {chosen}, {size / 1e6:.0f} MB, built in {time.monotonic() - t0:.1f} s")
    return tag


def deps_tag(tag: str) -> str:
    """The tag of an image's first stage (all but the `hosts` package): tb-host:latest -> tb-host-deps:latest."""
    repository, _, version = tag.partition(":")
    return f"{repository}-deps:{version or 'latest'}"


def _build(client, tag: str, context_tar: io.BytesIO, buildargs: dict, labels: dict, target: str | None = None):
    """One `docker build` from a tar context; the image TAG named before is removed once unused."""
    import docker
    context_tar.seek(0)
    before = _image_id(client, tag)
    try:
        client.images.build(fileobj=context_tar, custom_context=True, tag=tag, buildargs=buildargs, labels=labels,
                            target=target, network_mode="host", rm=True, forcerm=True)  # apt: this machine's network
    except docker.errors.BuildError as exc:
        lines = [str(c.get("stream", c.get("error", ""))).strip() for c in exc.build_log]
        raise ImageError(f"building {tag} failed: {exc.msg} ({' | '.join(l for l in lines if l)[-300:]})") from None
    if before and before != _image_id(client, tag):
        _remove_if_unused(client, before)


def _image_id(client, tag: str) -> str | None:
    img = _image(client, tag)
    return None if img is None else img.id


def _remove_if_unused(client, image_id: str) -> None:
    """Remove a testbed image that lost its last tag, unless a container or another image still uses it."""
    import docker
    try:
        img = client.images.get(image_id)
        if img.tags or (img.labels or {}).get("testbed") != "1":
            return
        client.images.remove(image_id)
    except docker.errors.APIError:
        pass                        # in use (a container, a child image): it stays, as Docker would keep it


def ensure(client, echo=print) -> str:
    """The host image, (re)built only if it is missing or its inputs changed (or its first stage is gone)."""
    if not up_to_date(client, IMAGE) or _image_id(client, deps_tag(IMAGE)) is None:
        build(client, tag=IMAGE, echo=echo)
    return IMAGE


FLAVOURS = ("default", "torch", "tf")   # what Docker hosts may run on: the host image, or it plus docker/NAME/
# Files of the project a derived image shares with the venv (one pin for both), added to its context.
SHARED = {"tf": ("requirements-tf.txt",)}
# The machine's CA bundle, in every derived image's context as machine-ca.crt: pip in a build trusts what the
# machine trusts. Not in the digest (a new bundle does not make a new image).
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def derived(client, name: str, echo=print) -> str:
    """tb-NAME:latest, built from the host image's two stages (its Dockerfile's HOST and DEPS) with docker/NAME/
    as its context (its Dockerfile and the files beside it, the project's files it SHAREs, the machine's CA
    bundle); (re)built only when those files (not the bundle) or the host image changed. Installing needs
    Debian's mirror (and PyPI for docker/tf)."""
    base = ensure(client, echo=echo)
    folder, tag = os.path.join(DOCKER_DIR, name), f"{PREFIX}{name}:latest"
    files = {f: os.path.join(folder, f) for f in sorted(os.listdir(folder)) if os.path.isfile(os.path.join(folder, f))}
    files.update({os.path.basename(rel): os.path.join(PROJECT_ROOT, rel) for rel in SHARED.get(name, ())})
    h = hashlib.sha256(client.images.get(base).id.encode())
    for f, path in files.items():
        with open(path, "rb") as fh:
            h.update(f.encode() + b"\0" + fh.read() + b"\0")
    digest = h.hexdigest()[:16]
    if _label(client, tag, "testbed.inputs") == digest:
        return tag
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f, path in files.items():
            tar.add(path, f)
        ca = next((c for c in CA_BUNDLES if os.path.exists(c)), None)
        if ca:
            tar.add(ca, "machine-ca.crt")
        else:                       # an empty one: pip then uses its own (certifi's)
            info = tarfile.TarInfo("machine-ca.crt")
            tar.addfile(info, io.BytesIO(b""))
    buf.seek(0)
    t0 = time.monotonic()
    _build(client, tag, buf, {"HOST": base, "DEPS": deps_tag(base)}, {"testbed": "1", "testbed.inputs": digest})
    echo(f"image: {tag}, {client.images.get(tag).attrs['Size'] / 1e6:.0f} MB, built in {time.monotonic() - t0:.1f} s")
    return tag


def flavour(client, name: str = "default", echo=print) -> str:
    """The image Docker hosts run: the host image, a flavour derived from it (FLAVOURS), or NAME:TAG, an image
    the user built FROM it, which must be here already."""
    import docker
    if name == "default":
        return ensure(client, echo=echo)
    if name in FLAVOURS:
        return derived(client, name, echo=echo)
    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        raise ImageError(f"host_image {name}: no such image on this machine; build it FROM {IMAGE} "
                         f"(docs/docker.md)") from None
    return name


def main(argv: list[str] | None = None) -> int:
    import argparse

    from testbed.fabric.backends.engine import DockerUnavailable, engine
    p = argparse.ArgumentParser(prog="docker-image", description="build the emulated hosts' container image")
    p.add_argument("--base", choices=BASES, default="auto",
                   help="auto: a registry's debian:bookworm-slim if reachable, else debootstrap + docker import")
    p.add_argument("--force", action="store_true", help="build even if the image is up to date")
    p.add_argument("--tag", default=IMAGE)
    args = p.parse_args(argv)
    try:
        client = engine()
        if not args.force and up_to_date(client, args.tag):
            print(f"image: {args.tag} is up to date (inputs {inputs_digest()})")
            return 0
        build(client, args.base, args.tag)
    except (ImageError, DockerUnavailable) as exc:
        print(f"docker-image: error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
