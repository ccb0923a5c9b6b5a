"""Fault injection into a running fabric: links and switches.

Targets:
  rail0-spine1      a switch-to-switch link (either order)
  path:s0g0>s1g1    the first switch-to-switch link of the single-path route from s0g0 to s1g1
  s0g0/nic          a GPU's (or CPU host's) NIC link; s0g0/hb its HB-domain link
  spine1            a whole switch (every port)
A link goes down at both ends, as a cut cable does: switch ports are set down through OpenFlow port
config (the controller gets PORT_STATUS; watch-port buckets stop using them) and host interfaces are
set down in the host's namespace.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from testbed.net import sysname
from testbed.topo import Link


class FaultError(ValueError):
    """A fault target that does not exist in the fabric."""


def path_uplink(fabric, src: str, dst: str) -> Link:
    """The first switch-to-switch link on the single-path route from src to dst (the controller's
    preferred equal-cost port at the source's leaf)."""
    from controllers.routes import Topology
    for h in (src, dst):
        if h not in fabric.hosts:
            raise FaultError(f"unknown host {h!r} in path target")
    topo = Topology(fabric.to_controller())
    leaf, _ = topo.host_port[src]
    ports = topo.ordered_routes()[leaf].get(fabric.hosts[dst].ip)
    if not ports:
        raise FaultError(f"no route from {src} to {dst} on this fabric")
    for l in fabric.links:
        if (l.a, l.a_port) == (leaf, ports[0]) or (l.b, l.b_port) == (leaf, ports[0]):
            if l.kind != "nic":
                return l
    raise FaultError(f"{src} and {dst} share a switch: their path has no switch-to-switch link")


def resolve(fabric, target: str) -> list[Link]:
    """The links a target names."""
    if target.startswith("path:"):
        src, _, dst = target[5:].partition(">")
        return [path_uplink(fabric, src.strip(), dst.strip())]
    if "/" in target:
        host, kind = target.split("/", 1)
        if host not in fabric.hosts or kind not in ("nic", "hb"):
            raise FaultError(f"unknown fault target {target!r}: expected HOST/nic or HOST/hb")
        try:
            return [fabric.attachment(host, kind)]
        except KeyError:
            raise FaultError(f"{host} has no {kind} link") from None
    if target in fabric.switches:
        return [l for l in fabric.links if target in (l.a, l.b)]
    if "-" in target:
        a, b = target.split("-", 1)
        found = [l for l in fabric.links if {l.a, l.b} == {a, b}]
        if found:
            return found
    raise FaultError(f"unknown fault target {target!r}: expected a link like rail0-spine1, HOST/nic, "
                     f"HOST/hb, path:SRC>DST or a switch name")


def _ends(net, link: Link):
    """(kind, node, port) for both ends."""
    for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
        yield ("host" if node in net.fabric.hosts else "switch"), node, port


def set_patch(link: Link, up: bool) -> None:
    """Patch ports ignore OpenFlow's port-down config, so a cut is their removal (the switches send
    PORT_STATUS delete/add), and repair re-creates them with the same port numbers."""
    ends = [(sysname(link.a), f"{sysname(link.a)}-p{link.a_port}", link.a_port),
            (sysname(link.b), f"{sysname(link.b)}-p{link.b_port}", link.b_port)]
    cmd = ["ovs-vsctl"]
    for i, (br, port, number) in enumerate(ends):
        if up:
            peer = ends[1 - i][1]
            cmd += ["--", "--may-exist", "add-port", br, port, "--", "set", "interface", port, "type=patch",
                    f"options:peer={peer}", f"ofport_request={number}"]
        else:
            cmd += ["--", "--if-exists", "del-port", br, port]
    subprocess.run(cmd, check=True, capture_output=True)


def set_link(net, link: Link, up: bool) -> None:
    if net.is_patch(link):
        return set_patch(link, up)
    state = "up" if up else "down"
    for kind, node, port in _ends(net, link):
        if kind == "host":
            net.host(node).cmd(f"ip link set eth{port} {state}")
        elif net.fabric.switches[node].sdn:
            subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "mod-port", sysname(node), str(port), state],
                           check=True, capture_output=True)
        else:       # the HB domain's Linux bridge
            subprocess.run(["ip", "link", "set", f"{sysname(node)}-p{port}", state], check=True,
                           capture_output=True)


def inject(net, target: str, up: bool = False) -> dict:
    """Take a target down (or up); returns {"target", "up", "at"} with the wall-clock time."""
    links = resolve(net.fabric, target)
    at = time.time()
    for link in links:
        set_link(net, link, up)
    return {"target": target, "up": up, "at": at, "links": len(links)}


GPU_KINDS = {"gpu-crash": signal.SIGKILL, "gpu-hang": signal.SIGSTOP}


def gpu_hosts(fabric, kind: str, target: str) -> list[str]:
    if kind == "server-down":
        hosts = [h.name for h in fabric.gpus() if f"s{h.server}" == target]
    else:
        hosts = [target] if target in fabric.hosts and fabric.hosts[target].kind == "gpu" else []
    if not hosts:
        raise FaultError(f"unknown {kind} target {target!r}: expected a GPU host like s0g1"
                         + (" (server-down: a server like s1)" if kind == "server-down" else ""))
    return hosts


def host_processes(net, host: str) -> list[int]:
    """PIDs running in an emulated host's namespace, except the host's own shell."""
    shell = net.host(host).pid
    try:
        ns = os.readlink(f"/proc/{shell}/ns/net")
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != shell:
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == ns:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def signal_gpus(net, hosts: list[str], sig) -> int:
    """A GPU failure: the rank processes of these hosts crash (SIGKILL), hang (SIGSTOP) or resume."""
    hit = 0
    for host in hosts:
        for pid in host_processes(net, host):
            try:
                os.kill(pid, sig)
                hit += 1
            except ProcessLookupError:
                pass
    return hit


LINK_KINDS = ("link-down", "link-up", "link-flap", "switch-down")
GPU_FAULTS = ("gpu-crash", "gpu-hang", "server-down")


def check_target(fabric, fault: dict) -> None:
    if fault["kind"] in GPU_FAULTS:
        gpu_hosts(fabric, fault["kind"], fault["target"])
    else:
        resolve(fabric, fault["target"])


class Schedule:
    """Faults of a scenario, injected at their `at` (seconds after the workloads start) by a thread.

    link-down / switch-down: down at `at`, back up after `duration` if given; link-up: up at `at`;
    link-flap: down and up `count` times (default 3), `duration` (default 0.5 s) each way;
    gpu-crash / server-down: the GPU host's (server's) rank processes are killed (SIGKILL);
    gpu-hang: they are stopped (SIGSTOP), and resumed after `duration` if given.
    Everything still down when the workloads end is restored before the fabric is torn down.
    """

    def __init__(self, net, faults: list[dict]):
        self.net = net
        self.faults = faults
        self.steps: list[tuple[float, int, bool]] = []      # (time, fault index, up)
        for i, f in enumerate(faults):
            check_target(net.fabric, f)                      # fail early on unknown targets
            if f["kind"] == "link-up":
                self.steps.append((f["at"], i, True))
            elif f["kind"] == "link-flap":
                period = f.get("duration", 0.5)
                for k in range(f.get("count", 3)):
                    self.steps += [(f["at"] + 2 * k * period, i, False), (f["at"] + (2 * k + 1) * period, i, True)]
            else:
                self.steps.append((f["at"], i, False))
                if "duration" in f:
                    self.steps.append((f["at"] + f["duration"], i, True))
        self.steps.sort()
        self.log: list[dict] = []
        self.t0 = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-faults")

    def start(self) -> None:
        self.t0 = time.time()
        self._thread.start()

    def _run(self) -> None:
        for at, i, up in self.steps:
            if self._stop.wait(max(0.0, self.t0 + at - time.time())):
                return
            f = self.faults[i]
            if f["kind"] in LINK_KINDS:
                rec = inject(self.net, f["target"], up)
            else:
                hosts = gpu_hosts(self.net.fabric, f["kind"], f["target"])
                sig = signal.SIGCONT if up else GPU_KINDS.get(f["kind"], signal.SIGKILL)
                rec = {"target": f["target"], "up": up, "at": time.time(),
                       "processes": signal_gpus(self.net, hosts, sig)}
            self.log.append({**rec, "fault": i})

    def stop(self) -> None:
        """Stop injecting and restore what is down (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        down = {}
        for rec in self.log:
            down[rec["target"]] = not rec["up"]
        for target, is_down in down.items():
            kind = next(f["kind"] for f in self.faults if f["target"] == target)
            if is_down and kind in LINK_KINDS:
                inject(self.net, target, up=True)
            elif is_down and kind == "gpu-hang":       # a hung rank is resumed so it can be torn down
                signal_gpus(self.net, gpu_hosts(self.net.fabric, kind, target), signal.SIGCONT)

    def results(self, port_events: list[dict]) -> list[dict]:
        """Per fault: when it was injected, detected by the controller, and routed around (seconds
        after the workloads started)."""
        out = []
        for i, f in enumerate(self.faults):
            mine = [r for r in self.log if r["fault"] == i]
            first = next((r for r in mine if not r["up"]), mine[0] if mine else None)
            rec = {"kind": f["kind"], "target": f["target"], "at_s": None, "detected_s": None,
                   "recovered_s": None, "restored_s": None}
            if first:
                rec["at_s"] = round(first["at"] - self.t0, 4)
                seen = [e for e in port_events if e["at"] >= first["at"] - 0.001]
                if seen:
                    rec["detected_s"] = round(seen[0]["at"] - self.t0, 4)
                    rec["recovered_s"] = round(seen[0]["at"] + seen[0]["computed_s"] - self.t0, 4)
                back = next((r for r in mine if r["up"] and r["at"] > first["at"]), None)
                if back:
                    rec["restored_s"] = round(back["at"] - self.t0, 4)
            out.append(rec)
        return out
