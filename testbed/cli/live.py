"""The fabric up on this machine, reached from any process: what `status`, `exec`, `shell`, `cli` and `down` share.

The fabric is found through its run's state file (testbed.fabric.runstate) and rebuilt as the reattach path
`testbed fault` uses (testbed.faults.running.RunningFabric). Programs run in its hosts through the host
backend's own way in (`enter`: a container for Docker hosts), or as the machine's tools in the host's network
namespace (what the console uses, like Mininet's node shells); nothing here asks which backend it is.
"""
from __future__ import annotations

import os
import re
import subprocess

from testbed.cli.errors import UsageError
from testbed.fabric import ovs, runstate
from testbed.fabric.links import is_patch, switch_port, sysname

MAX_NAMES = 24          # names listed in an error before "... (N in all)"


def names(items) -> str:
    items = list(items)
    shown = ", ".join(items[:MAX_NAMES])
    return shown + (f", ... ({len(items)} in all)" if len(items) > MAX_NAMES else "")


class LiveFabric:
    """A running fabric: its model, state, hosts' PIDs and the backend that entered its hosts."""

    def __init__(self, run_dir: str, state: dict):
        from testbed.fabric.backends import backend_class
        from testbed.faults.running import RunningFabric
        self.run_dir, self.state = run_dir, state
        self.net = RunningFabric(state, run_dir)         # what the fault kinds take
        self.fabric = self.net.fabric
        self.backend = backend_class(state.get("hosts", "netns"))(run_dir)

    @property
    def owner_pid(self) -> int:
        return self.state["owner_pid"]

    def check_host(self, name: str) -> str:
        if name in self.fabric.hosts:
            return name
        what = "a switch" if name in self.fabric.switches else "no host of this fabric"
        raise UsageError(f"{name!r} is {what}; hosts: {names(self.fabric.hosts)}")

    def enter(self, host: str, argv: list[str], tty: bool = False, netns: bool = False) -> list[str]:
        """The command line that runs argv in the host: as the host's own programs run (in its container, for
        Docker hosts), or with netns=True the machine's tools in the host's network namespace (every backend's
        recorded shell is in it, as `testbed fault` relies on)."""
        pid = self.state["host_pids"][self.check_host(host)]
        if netns:
            return ["nsenter", "--target", str(pid), "--net", "--"] + argv
        return self.backend.enter(host, pid, tty) + argv

    def run(self, host: str, command: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """A shell command of the machine's tools in the host's network namespace, its output captured (stderr
        into stdout)."""
        return subprocess.run(self.enter(host, ["sh", "-c", command], netns=True), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)

    def popen(self, host: str, command: str) -> subprocess.Popen:
        return subprocess.Popen(self.enter(host, ["sh", "-c", command], netns=True), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def links(self) -> list[dict]:
        """Every cable of the model with its state now (up, down) and its rate."""
        ports = {br: _ofport_states(br) for br in (sysname(s.name) for s in self.fabric.sdn_switches())}
        rows = []
        for l in self.fabric.links:
            ends = [(n, p) for n, p in ((l.a, l.a_port), (l.b, l.b_port)) if n in self.fabric.switches]
            seen = [_switch_port_up(ports, n, p) for n, p in ends]
            state = "unknown" if None in seen else "up" if all(seen) else "down"
            rows.append({"a": l.a, "b": l.b, "kind": l.kind, "mbps": l.mbps, "state": state,
                         "shaped": not is_patch(self.fabric, l), "standby": l.standby,
                         "ends": [_end_name(self.fabric, n, p) for n, p in ((l.a, l.a_port), (l.b, l.b_port))]})
        return rows


def _end_name(fabric, node: str, port: int) -> str:
    return f"{node}:eth{port}" if node in fabric.hosts else f"{node}:{port}"


PORT_RE = re.compile(r"^\s*(\d+)\((\S+)\):.*?\n\s*config:\s*(\S.*?)\n\s*state:\s*(\S.*?)\n", re.M | re.S)


def _ofport_states(bridge: str) -> dict[int, bool] | None:
    """OpenFlow port -> up (configured up, with carrier) on one OVS bridge; a removed patch port is absent.
    None if the switch cannot be asked (not root, or the bridge is gone)."""
    proc = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "show", bridge], capture_output=True, text=True,
                          timeout=10)
    if proc.returncode != 0:
        return None
    return {int(no): "PORT_DOWN" not in config and "LINK_DOWN" not in state
            for no, _, config, state in PORT_RE.findall(proc.stdout)}


def _switch_port_up(ports: dict, switch: str, port: int) -> bool | None:
    br = sysname(switch)
    if br in ports:
        return None if ports[br] is None else ports[br].get(port, False)
    try:      # a Linux bridge's (HB domain's) port in the root namespace
        with open(f"/sys/class/net/{switch_port(switch, port)}/operstate") as f:
            return f.read().strip() == "up"
    except OSError:
        return False


def attach() -> LiveFabric:
    found = runstate.live_fabric()
    if found is None:
        raise UsageError("no fabric is up on this machine (bring one up with `testbed up`)")
    return LiveFabric(*found)


def require_root(verb: str) -> None:
    if os.geteuid() != 0:
        raise UsageError(f"`testbed {verb}` needs root (namespaces, Open vSwitch); try sudo")


def leftovers() -> dict[str, list[str]]:
    """What `testbed clean` would remove now (runs no longer alive, objects of ours no live run uses); read only."""
    from testbed import clean
    states, live = clean.runs()
    in_use = {br for d in live for br in states[d].get("bridges", []) + states[d].get("delay_devices", [])}
    found = {"run dirs": [os.path.basename(d) for d in clean.left_run_dirs(states, live)],
             "processes": [str(pid) for pid in clean.left_processes(states, live)],
             "bridges": [b for b in ovs.our_bridges() if b not in in_use and clean.mine(b)]}
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    devices = {m.split("@")[0] for m in re.findall(r"^\d+:\s+(\S+):", out, re.M)}
    found["links"] = sorted(d for d in devices if clean.mine(d) and d not in in_use
                            and d.split("-p")[0] not in in_use)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    found["namespaces"] = [line.split()[0] for line in netns if line.strip() and clean.mine(line.split()[0])]
    found["containers"] = sorted(c.name for c in clean.left_containers(live))
    found["on machines"] = clean.left_on_machines(states, live)
    return {k: v for k, v in found.items() if v}
