"""The host backends' shared vocabulary: the HostNode and HostBackend interfaces, their error, and the
namespace backend (Mininet's own hosts)."""
from __future__ import annotations

import sys
from typing import Protocol

from mininet.node import Host


class BackendUnavailable(RuntimeError):
    pass


class HostNode(Protocol):
    python: str

    def cmd(self, *args, **kwargs) -> str: ...
    def popen(self, *args, **kwargs): ...
    def tool_popen(self, *args, **kwargs): ...
    def fail(self, sig) -> int | None: ...


class HostBackend(Protocol):
    """What the network needs of a backend: its hosts' Mininet class and parameters, before and after."""

    name: str
    carries_tensorflow: bool        # whether programs in its hosts can import TensorFlow

    @staticmethod
    def require() -> None: ...
    def start(self, hosts: list[str], record) -> dict: ...
    def node_params(self, host: str) -> dict: ...
    def stop(self) -> None: ...
    @staticmethod
    def enter(host: str, pid: int, tty: bool) -> list[str]: ...


class NamespaceHost(Host):
    """A Mininet host (its own network namespace, the machine's file system and interpreter)."""

    python = sys.executable
    tool_pids: frozenset = frozenset()

    def tool_popen(self, *args, **kwargs):
        """A tool of the testbed's own in the host (a capture): a GPU fault in the host spares it."""
        proc = self.popen(*args, **kwargs)
        self.tool_pids = self.tool_pids | {proc.pid}
        return proc

    def fail(self, sig) -> int | None:
        return None


class Namespaces:
    """Hosts as bare network namespaces: nothing to start or stop beyond what Mininet does."""

    name, carries_tensorflow = "netns", True

    def __init__(self, run_dir: str, **limits):
        pass

    @staticmethod
    def require() -> None:
        pass

    def start(self, hosts: list[str], record) -> dict:
        return {}

    def node_params(self, host: str) -> dict:
        return {"cls": NamespaceHost}

    @staticmethod
    def enter(host: str, pid: int, tty: bool) -> list[str]:
        """The command prefix that runs a program in a live host from any process: its shell's network
        namespace (pid: the shell's, as the run's state file records it)."""
        return ["nsenter", "--target", str(pid), "--net", "--"]

    def stop(self) -> None:
        pass
