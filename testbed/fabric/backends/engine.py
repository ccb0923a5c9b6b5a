"""The local Docker engine: a client of it, or one line saying why there is none."""
from __future__ import annotations

from testbed.fabric.backends.base import BackendUnavailable


class DockerUnavailable(BackendUnavailable):
    pass


def engine():
    """A client of the local Docker engine, or DockerUnavailable saying why there is none."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailable("hosts: docker needs the docker Python package (scripts/setup installs it)") from None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except Exception as exc:    # no socket, daemon down, permission: all mean "no engine"
        raise DockerUnavailable(f"hosts: docker needs a running Docker engine (scripts/dockerd-start starts one): "
                                f"{type(exc).__name__}: {str(exc)[:120]}") from None
