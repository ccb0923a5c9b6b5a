"""Machines: a fabric spread over several machines with Mininet's Cluster Edition (mininet.examples.cluster).

A `Machine` is reached over ssh by its address (the management network); the run itself and the controller
stay on this machine. Every machine runs its own Open vSwitch; its switches reach the one controller through a
reverse ssh tunnel to this machine's loopback, so the controller still listens on loopback only.

    MachineHost, MachineSwitch, MachineBridge   Cluster Edition's remote nodes, each on a given Machine
    MachineLink                                 a veth pair (or OVS patch) within a machine; across machines a
                                                VXLAN tunnel: one vxlan device per end, one VNI per link
    Machine.run(argv)                           a command in a machine's root namespace (switch ports, OVS)

Cluster Edition's own nodes prefix every command with sudo and register `mn -c` on every server at exit;
these classes enter as the machine's ssh user (root, or sudo when the user is not root) and clean up only
what the run made. Commands travel as one shell-quoted string, so arguments (JSON specs) arrive intact.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
import weakref
from dataclasses import dataclass
from functools import cached_property

from mininet.examples.cluster import RemoteLink, RemoteMixin, RemoteOVSSwitch
from mininet.nodelib import LinuxBridge

from testbed import PREFIX, RUN_ROOT
from testbed.fabric.backends.base import NamespaceHost
from testbed.fabric.links import fabric_tag
from testbed.fabric.placement import MACHINE_NAME

VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50             # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8: the underlay carries this more
VNI_BASE = 4096                 # a link's VNI is this plus its index in the fabric
SSH_DIR = os.path.join(RUN_ROOT, "ssh")


class MachineError(RuntimeError):
    """A machine that cannot take part, named in one line."""


@dataclass(frozen=True)
class Machine:
    name: str
    address: str                        # where ssh reaches it; also the VXLAN underlay address
    ssh_user: str = "root"
    ssh_options: tuple[str, ...] = ()   # e.g. ("-i", KEY, "-p", "2222")
    pythonpath: str = "/opt/testbed"    # where the machine has the `hosts` package
    python: str = "python3"

    @cached_property
    def ip(self) -> str:
        """The address resolved: the VXLAN devices' remote end."""
        try:
            return socket.gethostbyname(self.address)
        except OSError:
            raise MachineError(f"machine {self.name}: address {self.address!r} does not resolve") from None

    def ssh(self, tty: bool = False, share: bool = True) -> list[str]:
        """The ssh command that runs one command line on the machine. One connection per machine and fabric tag,
        shared by every node and process (ControlMaster): sshd's limits on new connections are not hit at
        bring-up. The connection persists until close(); it starts with the first shared command, so a run
        starts it from inside its cgroup and it dies with the run (testbed/fabric/lifeline.py). share=False
        (the checks before a run is tied) uses the connection if there is one but does not start it."""
        os.makedirs(SSH_DIR, mode=0o700, exist_ok=True)
        control = ["-o", "ControlMaster=auto", "-o", "ControlPersist=yes"] if share else ["-o", "ControlMaster=no"]
        return ["ssh", "-q", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                "-o", "ServerAliveCountMax=3", *control, "-o", f"ControlPath={SSH_DIR}/{fabric_tag() or '-'}-%C",
                *self.ssh_options, *(["-tt"] if tty else ["-T"]), f"{self.ssh_user}@{self.address}"]

    def as_root(self, argv: list[str]) -> list[str]:
        return argv if self.ssh_user == "root" else ["sudo", "-n", "-E", *argv]

    def run(self, argv: list[str], check: bool = True, timeout: float = 60,
            share: bool = True) -> subprocess.CompletedProcess:
        """argv in the machine's root namespace; its output as text. check: MachineError if it fails."""
        proc = subprocess.run(self.ssh(share=share) + [shlex.join(self.as_root(argv))], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            why = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            raise MachineError(f"machine {self.name}: `{shlex.join(argv)[:80]}` failed: {why[0]}")
        return proc

    def popen(self, argv: list[str], **params) -> "RemoteProcess":
        """argv started in the machine's root namespace (`mnexec -da PID ...` enters a node), as a process here
        that lives as long as it: see RemoteProcess."""
        return RemoteProcess(self, self.as_root(list(argv)), **params)

    def close(self) -> None:
        """The shared ssh connection ends (it was started by the first command)."""
        subprocess.run(self.ssh()[:-2] + ["-O", "exit", f"{self.ssh_user}@{self.address}"], capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=15)

    @classmethod
    def from_json(cls, entry: dict) -> "Machine":
        """The machine a run's state file recorded (to_json)."""
        return cls(**{**entry, "ssh_options": tuple(entry.get("ssh_options", ()))})

    def to_json(self) -> dict:
        return {"name": self.name, "address": self.address, "ssh_user": self.ssh_user,
                "ssh_options": list(self.ssh_options), "pythonpath": self.pythonpath, "python": self.python}


def machines_from(entries: list[dict]) -> list[Machine]:
    """Machines from the scenario's `machines:` list (or the CLI's); MachineError naming a bad entry."""
    out, seen = [], set()
    for i, e in enumerate(entries):
        name, address = e.get("name"), e.get("address")
        if not isinstance(name, str) or not MACHINE_NAME.match(name):
            raise MachineError(f"machines[{i}]: name {name!r} is not a machine name (letters, digits, . _ -)")
        if name in seen:
            raise MachineError(f"machines[{i}]: machine {name!r} is listed twice")
        if not isinstance(address, str) or not address:
            raise MachineError(f"machines[{i}] ({name}): an address is needed (where ssh reaches it)")
        seen.add(name)
        out.append(Machine(name, address, e.get("ssh_user", "root"), tuple(e.get("ssh_options", ())),
                           e.get("pythonpath", "/opt/testbed"), e.get("python", "python3")))
    return out


def check(machine: Machine) -> dict:
    """What a machine must offer before bring-up, checked in one ssh round: MachineError naming what is
    missing. Returns its facts (its OVS datapath)."""
    machine.ip          # noqa: B018 -- resolves now: MachineError if it does not
    probe = ("command -v mnexec >/dev/null || echo MISSING mnexec; command -v ovs-vsctl >/dev/null || echo MISSING "
             "ovs-vsctl; ovs-vsctl --timeout=3 show >/dev/null 2>&1 || echo MISSING 'a running Open vSwitch'; "
             f"{machine.python} -c 'import numpy, hosts' 2>/dev/null || echo MISSING 'python3 with numpy and the "
             f"hosts package in {machine.pythonpath}'; "
             "[ -d /sys/module/openvswitch ] && echo DATAPATH kernel || echo DATAPATH user")
    try:
        command = f"PYTHONPATH={shlex.quote(machine.pythonpath)}; export PYTHONPATH; " + probe
        proc = subprocess.run(machine.ssh(share=False) + [command], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise MachineError(f"machine {machine.name}: no answer over ssh at {machine.address} in 30 s") from None
    if proc.returncode == 255:
        raise MachineError(f"machine {machine.name}: ssh {machine.ssh_user}@{machine.address} failed "
                           f"({(proc.stderr.strip().splitlines() or ['no message'])[-1]}); it needs key login")
    missing = [line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("MISSING ")]
    if missing:
        raise MachineError(f"machine {machine.name} lacks {', '.join(missing)}")
    datapath = next((line.split()[1] for line in proc.stdout.splitlines() if line.startswith("DATAPATH")), "user")
    return {"datapath": datapath}


def clean(machine: Machine, nodes: dict[str, int], bridges: list[str], prefix: str = PREFIX) -> int:
    """What a finished or crashed run left on a machine: its nodes' shells (by PID, while their command line
    still names the node), its bridges, and the devices named with `prefix` (the run's fabric tag's) in the
    root namespace (veth ends, VXLAN devices, HB bridges). Returns how many objects went; MachineError if the
    machine cannot be reached."""
    return len(_objects(machine, nodes, bridges, prefix, remove=True))


def left(machine: Machine, nodes: dict[str, int], bridges: list[str], prefix: str = PREFIX) -> list[str]:
    """What clean() would remove from the machine now, by name (node shells as NODE/PID); it removes nothing."""
    return _objects(machine, nodes, bridges, prefix, remove=False)


def _objects(machine: Machine, nodes: dict[str, int], bridges: list[str], prefix: str, remove: bool) -> list[str]:
    """One ssh round that names each object of the run found on the machine, removing it first with remove."""
    kill, del_br, del_dev = ("kill -9 {pid} && ", "ovs-vsctl --timeout=5 del-br {br} && ",
                             'ip link del "$dev" 2>/dev/null && ') if remove else ("", "", "")
    lines = [f"grep -qa 'mininet:{name}' /proc/{pid}/cmdline 2>/dev/null && {kill.format(pid=pid)}echo {name}/{pid}"
             for name, pid in nodes.items()]
    lines += [f"ovs-vsctl --timeout=5 br-exists {br} 2>/dev/null && {del_br.format(br=br)}echo {br}"
              for br in bridges if br.startswith(prefix)]
    # a veth's other end goes with it: the list is taken first, so a device already gone is not named
    lines.append(f"for dev in $(ip -o link show | sed -n 's/^[0-9]*: \\({prefix}[^:@]*\\).*/\\1/p'); do "
                 f"{del_dev}echo \"$dev\"; done")
    # share=False: a connection left by the run is used, none is started (it would outlive this command)
    return machine.run(["sh", "-c", "\n".join(lines) + "\ntrue"], share=False).stdout.split()


def underlay_mtu(machine: Machine, peer: Machine) -> int:
    """The MTU of the machine's interface toward a peer: the largest frame a VXLAN packet may fill."""
    route = machine.run(["ip", "-o", "route", "get", peer.ip], share=False).stdout
    dev = re.search(r"\bdev (\S+)", route)
    if not dev:
        raise MachineError(f"machine {machine.name}: no route to {peer.name} ({peer.ip})")
    return int(machine.run(["cat", f"/sys/class/net/{dev[1]}/mtu"], share=False).stdout.strip())


class ControllerTunnel:
    """The controller's port on a machine's loopback, forwarded over ssh to this machine's loopback: the
    machine's switches connect to 127.0.0.1 as the local ones do."""

    def __init__(self, machine: Machine, port: int):
        self.machine, self.port = machine, port
        self.proc = subprocess.Popen(["ssh", "-N", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
                                      "-o", "ControlPath=none", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                                      *machine.ssh_options, "-R", f"127.0.0.1:{port}:127.0.0.1:{port}",
                                      f"{machine.ssh_user}@{machine.address}"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)

    def wait(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        probe = ["bash", "-c", f"(echo > /dev/tcp/127.0.0.1/{self.port}) 2>/dev/null && echo OPEN"]
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise MachineError(f"machine {self.machine.name}: the controller tunnel failed: "
                                   f"{self.proc.stderr.read().decode().strip()[-200:]}")
            if "OPEN" in self.machine.run(probe, check=False).stdout:
                return
            time.sleep(0.2)
        raise MachineError(f"machine {self.machine.name}: the controller's port is not reachable there")

    def close(self) -> None:
        if self.proc.poll() is None:        # a tunnel has nothing to flush
            self.proc.kill()
            self.proc.wait()


class RemoteProcess(subprocess.Popen):
    """A process on a machine, seen here as its ssh client. It ends when that client ends (killed here, or the
    connection lost), as a local child would: on the machine a watcher reads the session's stdin, fed by a
    pipe held open here, and kills the process when it closes; the process itself reads /dev/null. SIGINT or
    SIGTERM closes that pipe: the process gets SIGTERM there, and its last output still arrives here."""

    def __init__(self, machine: Machine, argv: list[str], **params):
        # (a shell gives background jobs /dev/null as stdin: the watcher reads the session's stdin as fd 3)
        remote = (f"exec 3<&0; PYTHONPATH={shlex.quote(machine.pythonpath)} {shlex.join(argv)} </dev/null 3<&- & "
                  "p=$!; (cat <&3 >/dev/null; kill $p 2>/dev/null) >/dev/null 2>&1 & w=$!; exec 3<&-; wait $p; "
                  "s=$?; kill $w 2>/dev/null; exit $s")
        keep_r, keep_w = os.pipe()
        params.pop("stdin", None)
        try:
            super().__init__(machine.ssh() + [remote], stdin=keep_r, start_new_session=True, **params)
        finally:
            os.close(keep_r)
        self.hang_up = weakref.finalize(self, os.close, keep_w)

    def send_signal(self, sig) -> None:
        if sig in (signal.SIGINT, signal.SIGTERM):
            self.hang_up()
        else:
            super().send_signal(sig)


class MachineNode(RemoteMixin):
    """Cluster Edition's remote node, on a Machine: its shell is started over ssh (RemoteMixin.startShell)."""

    def __init__(self, name, machine: Machine, **params):
        # RemoteMixin.__init__ is not called: it would add sudo to every command and `mn -c` at exit
        self.machine, self.server, self.serverIP = machine, machine.name, machine.ip
        self.user, self.dest, self.isRemote = machine.ssh_user, f"{machine.ssh_user}@{machine.address}", True
        self.controlPath, self.splitInit = None, False
        self.sshcmd = machine.ssh(tty=True)
        self.shell, self.pid = None, None
        super(RemoteMixin, self).__init__(name, **params)

    def rcmd(self, *cmd, **opts) -> str:
        """A command line in the machine's root namespace (Cluster Edition's, which reads bytes as text)."""
        proc = self.machine.run(["sh", "-c", " ".join(cmd)], check=False)
        return proc.stdout + proc.stderr

    def _popen(self, cmd, sudo=True, tt=True, **params):
        if isinstance(cmd, str):
            cmd = cmd.split()
        cmd = self.machine.as_root(list(cmd))
        if self.shell is None or params.get("stdin") not in (None, subprocess.DEVNULL):
            # the node's own shell (a terminal, as Mininet's shells have), or a process fed on stdin
            return subprocess.Popen(self.machine.ssh(tty=tt and self.shell is None) + [shlex.join(cmd)],
                                    start_new_session=True, **params)
        return RemoteProcess(self.machine, cmd, **params)


class MachineHost(MachineNode, NamespaceHost):
    """An emulated host: a network namespace on its machine; its processes use the machine's interpreter."""

    def __init__(self, name, machine: Machine, **params):
        self.python = machine.python
        super().__init__(name, machine, **params)

    def processes(self) -> dict[int, str]:
        return processes(self.machine, self.pid)

    def signal(self, pids, sig) -> int:
        return signal_processes(self.machine, pids, sig)


def processes(machine: Machine, shell: int) -> dict[int, str]:
    """PID -> command line of what runs in the network namespace of a node's shell on its machine (one ssh
    round), except the shell and the testbed's captures there (tcpdump)."""
    script = (f"t=$(readlink /proc/{shell}/ns/net) || exit 0; for d in /proc/[0-9]*; do p=${{d#/proc/}}; "
              f"[ $p = {shell} ] && continue; [ \"$(readlink $d/ns/net 2>/dev/null)\" = \"$t\" ] || continue; "
              "c=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null) || continue; case $c in tcpdump*) continue;; esac; "
              "echo \"$p $c\"; done")
    out = machine.run(["sh", "-c", script], check=False).stdout
    return {int(pid): cmdline for pid, _, cmdline in (line.partition(" ") for line in out.splitlines())
            if pid.isdigit()}


def signal_processes(machine: Machine, pids, sig) -> int:
    """How many of pids (on the machine) got sig."""
    if not pids:
        return 0
    script = f"for p in {' '.join(str(int(p)) for p in pids)}; do kill -{int(sig)} $p 2>/dev/null && echo HIT; done"
    return machine.run(["sh", "-c", script], check=False).stdout.split().count("HIT")


class MachineSwitch(MachineNode, RemoteOVSSwitch):
    """A switch: a bridge in its machine's Open vSwitch, started and stopped in one batch per machine
    (Cluster Edition's RemoteOVSSwitch)."""

    def __init__(self, name, machine: Machine, **params):
        super().__init__(name, machine, batch=True, **params)


class MachineBridge(MachineNode, LinuxBridge):
    """An HB domain: a Linux bridge on its machine."""


class MachineLink(RemoteLink):
    """Within a machine, the usual veth pair; across machines, a VXLAN tunnel (Cluster Edition's GRE links need
    a kernel with GRE): a vxlan device at each end over the machines' addresses, VNI `vni`, MTU `mtu`. A host's
    end is made in the machine's root namespace (where its UDP socket stays) and moved into the host."""

    def __init__(self, node1, node2, vni: int, mtu: int, **params):
        self.vni, self.mtu = vni, mtu
        super().__init__(node1, node2, **params)

    def makeTunnel(self, node1, node2, intfname1, intfname2, addr1=None, addr2=None):
        for node, peer, name, addr in ((node1, node2, intfname1, addr1), (node2, node1, intfname2, addr2)):
            dev = f"{PREFIX}vx{self.vni}" if node.inNamespace else name
            add = ["ip", "link", "add", dev, *(["address", addr] if addr else []), "mtu", str(self.mtu),
                   "type", "vxlan", "id", str(self.vni), "remote", peer.machine.ip, "dstport", str(VXLAN_PORT),
                   "ttl", "64"]
            node.machine.run(["ip", "link", "del", dev], check=False)
            node.machine.run(add)
            if node.inNamespace:
                node.machine.run(["ip", "link", "set", dev, "netns", str(node.pid)])
                out = node.cmd(f"ip link set {dev} name {name} && echo TB-OK")
                if "TB-OK" not in out:
                    raise MachineError(f"machine {node.machine.name}: naming {node.name}'s {name} failed: {out}")
        return True

    def stop(self):
        if self.tunnel:
            self.intf1.delete()
            self.intf2.delete()
            self.tunnel = None
        else:
            super().stop()
