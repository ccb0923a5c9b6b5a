"""The host backends' shared vocabulary: the HostNode and HostBackend interfaces, their error, and the
namespace backend (Mininet's own hosts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mininet.node import Host

from testbed import PROJECT_ROOT

# mpirun's remote shell on namespace hosts: enters a host by its backend's prefix, as ssh would enter a node
MPI_AGENT = os.path.join(PROJECT_ROOT, "hosts", "programs", "mpi_agent.py")


class BackendUnavailable(RuntimeError):
    pass


@dataclass
class RemoteShell:
    """How mpirun, in a job's first host, starts its daemons in the job's other hosts: `agent` is what it
    runs as it would run ssh (`AGENT [options] ADDRESS COMMAND`, ADDRESS a host's fabric address), `env`
    what the agent needs in mpirun's environment; close() when the job has ended."""

    agent: str
    env: dict[str, str] = field(default_factory=dict)
    release: Callable[[], None] | None = None      # close() calls it: what the backend started for the job ends

    def close(self) -> None:
        if self.release is not None:
            self.release()
            self.release = None


class HostNode(Protocol):
    python: str

    def cmd(self, *args, **kwargs) -> str: ...
    def popen(self, *args, **kwargs): ...
    def tool_popen(self, *args, **kwargs): ...
    def fail(self, sig, idle: bool = True) -> int | None: ...
    def processes(self) -> dict[int, str]: ...
    def signal(self, pids, sig) -> int: ...


class HostBackend(Protocol):
    """What the network needs of a backend: its hosts' Mininet class and parameters, before and after."""

    name: str

    @staticmethod
    def require() -> None: ...
    def start(self, hosts: list[str], record) -> dict: ...
    def node_params(self, host: str) -> dict: ...
    def stop(self) -> None: ...
    def enter(self, host: str, pid: int, tty: bool) -> list[str]: ...
    def attach(self, host: str, pid: int) -> AttachedHost: ...


class LocalProcesses:
    """The processes of a host whose network namespace is on this machine, found and signalled from here."""

    pid: int
    tool_pids: frozenset = frozenset()

    def processes(self) -> dict[int, str]:
        """PID -> command line of what runs in the host's network namespace, except the host's own shell and the
        testbed's tools there (captures): a failed GPU takes its programs down, not the probe watching its NIC."""
        try:
            ns = os.readlink(f"/proc/{self.pid}/ns/net")
        except OSError:
            return {}
        found = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.pid and int(entry) not in self.tool_pids:
                try:
                    if os.readlink(f"/proc/{entry}/ns/net") == ns:
                        with open(f"/proc/{entry}/cmdline", "rb") as f:
                            found[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
        return found

    def signal(self, pids, sig) -> int:
        """How many of pids got sig (the others had ended)."""
        hit = 0
        for pid in pids:
            try:
                os.kill(pid, sig)
                hit += 1
            except ProcessLookupError:
                pass
        return hit


class NamespaceHost(LocalProcesses, Host):
    """A Mininet host (its own network namespace, the machine's file system and interpreter). What it starts
    gets the host's own temporary folder (TMPDIR, `tmp_dir` in its parameters), as a Docker host has its own
    /tmp: what libraries leave there (Open MPI's session folders, TensorFlow's generated code) goes with the
    fabric, and two hosts' files cannot meet."""

    python = sys.executable

    @property
    def tmp_dir(self) -> str | None:
        return self.params.get("tmp_dir")

    def popen(self, *args, **kwargs):
        given = kwargs.get("env")
        if self.tmp_dir and "TMPDIR" not in (given or {}):      # a caller's own TMPDIR wins
            kwargs["env"] = {**(os.environ if given is None else given), "TMPDIR": self.tmp_dir}
        return super().popen(*args, **kwargs)

    def tool_popen(self, *args, **kwargs):
        """A tool of the testbed's own in the host (a capture): a GPU fault in the host spares it."""
        proc = self.popen(*args, **kwargs)
        self.tool_pids = self.tool_pids | {proc.pid}
        return proc

    def fail(self, sig, idle: bool = True) -> int | None:
        return None


class AttachedHost(LocalProcesses):
    """A live run's host, reached from another process by the PID of its shell (`testbed fault` and the live
    fabric): the parts of HostNode that faults use."""

    def __init__(self, pid: int):
        self.pid = pid

    def cmd(self, command: str) -> str:
        return subprocess.run(["nsenter", "-t", str(self.pid), "-n", "sh", "-c", command],
                              capture_output=True, text=True).stdout

    def fail(self, sig, idle: bool = True) -> int | None:
        return None


class Namespaces:
    """Hosts as bare network namespaces: nothing to start or stop beyond what Mininet does."""

    name = "netns"

    def __init__(self, run_dir: str, **limits):
        self.run_dir = run_dir

    @staticmethod
    def require() -> None:
        pass

    def tmp_dir(self, host: str) -> str:
        """The host's TMPDIR: in the run directory, so tear-down and `testbed clean` remove it."""
        return os.path.join(self.run_dir, "tmp", host)

    def start(self, hosts: list[str], record) -> dict:
        for path in map(self.tmp_dir, hosts):
            os.makedirs(path, exist_ok=True)
            os.chmod(path, 0o1777)       # as /tmp: a program that drops root can still write there
        return {}

    def node_params(self, host: str) -> dict:
        return {"cls": NamespaceHost, "tmp_dir": self.tmp_dir(host)}

    def enter(self, host: str, pid: int, tty: bool) -> list[str]:
        """The command prefix that runs a program in a live host from any process, as the host's own programs
        run: in its shell's network namespace (pid: the shell's, as the run's state file records it), with the
        host's temporary folder."""
        return ["nsenter", "--target", str(pid), "--net", "--", "env", f"TMPDIR={self.tmp_dir(host)}"]

    def attach(self, host: str, pid: int) -> AttachedHost:
        """A live host from another process: its GPU failures are its processes'."""
        return AttachedHost(pid)

    def remote_shell(self, nodes: dict, folder: str) -> RemoteShell:
        """mpirun's remote shell for the hosts `nodes` ({fabric address: live node}): the testbed's agent,
        which enters a host's namespace from the machine (every host shares its file system and tools); its
        map of addresses to entering prefixes is written in `folder`."""
        path = os.path.join(folder, "mpi_hosts.json")
        with open(path, "w") as f:
            json.dump({ip: self.enter(node.name, node.pid, False) for ip, node in nodes.items()}, f)
        return RemoteShell(f"{sys.executable} {MPI_AGENT}", {"TB_MPI_HOSTS": path})

    def stop(self) -> None:
        pass
