"""The fabric a run has up, rebuilt from its state, for faults injected by hand (`testbed fault`, the console).

The running fabric is found through its run directory's state file (the fabric's parameters and the
PIDs of its host shells); its hosts are reached through the run's host backend (`attach`), or over ssh on
other machines.
"""
from __future__ import annotations

import subprocess

from testbed.fabric import machines, runstate, topo
from testbed.fabric.params import FabricParams
from testbed.fabric.backends import backend_class


class HandFaultError(ValueError):
    pass


class _MachineHost:
    """A live run's host on another machine: its shell's PID there, entered with mnexec over ssh."""

    def __init__(self, pid: int, machine: machines.Machine):
        self.pid, self.machine = pid, machine

    def cmd(self, command: str) -> str:
        return self.machine.run(["mnexec", "-a", str(self.pid), "sh", "-c", command], check=False).stdout

    def fail(self, sig, idle: bool = True) -> int | None:
        return None

    def processes(self) -> dict[int, str]:
        return machines.processes(self.machine, self.pid)

    def signal(self, pids, sig) -> int:
        return machines.signal_processes(self.machine, pids, sig)


class RunningFabric:
    """Just enough of a Network, rebuilt from a live run's state, for the fault kinds (testbed.faults)."""

    def __init__(self, state: dict, run_dir: str):
        self.run_dir = run_dir
        self.fabric = topo.build_from(FabricParams(**state["fabric"]))
        self.pids = state.get("host_pids", {})
        self.backend = backend_class(state.get("hosts", "netns"))(run_dir)
        self.machines = {e["name"]: machines.Machine.from_json(e) for e in state.get("machines", [])}
        self.placement = state.get("placement", {})

    def machine_of(self, node: str) -> machines.Machine | None:
        return self.machines.get(self.placement.get(node, ""))

    def crosses(self, link) -> bool:
        return self.machine_of(link.a) != self.machine_of(link.b)

    def run_at(self, node: str, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        machine = self.machine_of(node)
        if machine is None:
            return subprocess.run(argv, check=check, capture_output=True, text=True)
        return machine.run(argv, check=check)

    def host(self, name: str):
        if self.machine_of(name):
            return _MachineHost(self.pids[name], self.machine_of(name))
        return self.backend.attach(name, self.pids[name])

    def is_patch(self, link) -> bool:
        from testbed.fabric.links import is_patch
        return is_patch(self.fabric, link) and not self.crosses(link)

    def set_host_port(self, host: str, port: int, up: bool) -> None:
        from testbed.fabric.network import set_host_port
        set_host_port(self.host(host), self.run_dir, host, port, up)


def running_fabric() -> RunningFabric:
    """The fabric up under this process's fabric tag: another tag's fabric is another user's, never struck."""
    mine = runstate.live_fabric()
    if mine is None:
        others = sorted(tag or "(none)" for tag in runstate.live_fabrics())
        also = f" (fabrics up under other tags: {', '.join(others)}; TESTBED_FABRIC_TAG picks one)" if others else ""
        raise HandFaultError(f"no testbed run has a fabric up on this machine under this fabric tag{also}")
    run_dir, state = mine
    return RunningFabric(state, run_dir)
