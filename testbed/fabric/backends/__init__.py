"""What an emulated host offers the rest of the testbed, whichever backend runs it.

Two backends: network namespaces (Mininet's hosts, `NamespaceHost`) and Docker containers
(`testbed.fabric.backends.dockerhost.DockerHost`). Besides Mininet's `cmd` and `popen` (a process *inside* the
host), both provide the three things that differ between them, so that no caller asks which backend it has:

    python                 the interpreter that runs the `hosts` package in this host
    tool_popen(argv, ...)  one of the machine's own tools (tcpdump) in the host's network namespace
    fail(sig) -> int|None  a GPU failure of this host: the backend's own way (a container is killed, paused or
                           unpaused: the number of processes hit), or None: signal the rank processes by PID

A HostBackend (`Namespaces` here, `dockerhost.Docker`) is what the network asks at bring-up and tear-down, and
what reaches a live run's host from another process (`enter` for a program, `attach` for a fault by hand);
`backend_class(name)` picks one by its scenario name and `require(name)` says, in one line, why a machine
cannot run it now.
"""
from __future__ import annotations

from testbed.fabric.backends.base import (  # noqa: F401
    BackendUnavailable,
    HostBackend,
    HostNode,
    NamespaceHost,
    Namespaces,
)

BACKENDS = ("netns", "docker")


def backend_class(name: str):
    if name == "netns":
        return Namespaces
    if name == "docker":
        from testbed.fabric.backends.dockerhost import Docker
        return Docker
    raise BackendUnavailable(f"unknown host backend {name!r}; choose one of {', '.join(BACKENDS)}")


def require(name: str) -> None:
    """BackendUnavailable, one line saying why, if this machine cannot run the backend now."""
    backend_class(name).require()
