"""What an emulated host offers the rest of the testbed, whichever backend runs it.

Two backends: network namespaces (Mininet's hosts, `NamespaceHost`) and Docker containers
(`testbed.fabric.hosts.dockerhost.DockerHost`). Besides Mininet's `cmd` and `popen` (a process *inside* the host), both
provide the three things that differ between them, so that no caller asks which backend it has:

    python                 the interpreter that runs the `hosts` package in this host
    tool_popen(argv, ...)  one of the machine's own tools (tcpdump) in the host's network namespace
    fail(sig) -> int|None  a GPU failure of this host: the backend's own way (a container is killed, paused or
                           unpaused: the number of processes hit), or None: signal the rank processes by PID
"""
from __future__ import annotations

import sys
from typing import Protocol

from mininet.node import Host


class HostNode(Protocol):
    python: str

    def cmd(self, *args, **kwargs) -> str: ...
    def popen(self, *args, **kwargs): ...
    def tool_popen(self, *args, **kwargs): ...
    def fail(self, sig) -> int | None: ...


class NamespaceHost(Host):
    """A Mininet host (its own network namespace, the machine's file system and interpreter)."""

    python = sys.executable

    def tool_popen(self, *args, **kwargs):
        return self.popen(*args, **kwargs)

    def fail(self, sig) -> int | None:
        return None
