"""Bringing a spare onto the network, and parking it again (see testbed/fabric/topo.py for how spares are cabled).

`activate(net, host, leaf)`:
  - a spare GPU whose fibre is on another leaf's reserved port is re-cabled, as its optical circuit
    switch would reconnect it: the switch end of its NIC's veth leaves that bridge and joins `leaf` on
    the port reserved for it there, renamed after it (tb-<leaf>-p<port>), still disabled;
  - the port is enabled with an OpenFlow port-mod (`ovs-ofctl mod-port ... up`, as a link is repaired);
    the switch reports PORT_STATUS and the controller, which knows every circuit and has had them down,
    recomputes its routes so that they cover the spare;
  - returns once the controller reports the port up.
A spare server's GPUs are cabled to their rails already: activating them only enables their ports.

Jobs that run together share the spares, first come, first served (`Ledger`): a spare one job's recovery takes
is that job's until the job ends and parks it, and no other job is offered it meanwhile; a spare server is taken
whole.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time

from testbed.fabric.links import switch_port, sysname


class SpareError(RuntimeError):
    """No spare can do what a recovery needs; the message says why."""


class Ledger:
    """Which job holds which spare host, for the jobs of one network."""

    def __init__(self):
        self._held: dict[str, str] = {}          # spare host -> the job holding it
        self._lock = threading.Lock()

    def free(self, host: str, job: str) -> bool:
        """Whether `job` may take `host`: no other job holds it."""
        return self._held.get(host, job) == job

    def take(self, hosts: list[str], job: str) -> bool:
        """Take every one of `hosts` for `job`, or none if another job holds one of them."""
        with self._lock:
            if not all(self.free(h, job) for h in hosts):
                return False
            self._held.update({h: job for h in hosts})
            return True

    def release(self, job: str) -> None:
        """The job has ended and parked its spares: they are free for other jobs again."""
        with self._lock:
            self._held = {h: j for h, j in self._held.items() if j != job}


def leaf_of(fabric, server: int, local_rank: int) -> str:
    """The leaf a GPU of this server and local rank is cabled to: its rail, or its server's ToR."""
    return fabric.design.leaf_of(server, local_rank)


def _circuits(fabric, host: str) -> list:
    return fabric.circuits.get(host) or [l for l in fabric.links if l.a == host and l.kind == "nic"]


def _dev(link) -> str:
    return switch_port(link.b, link.b_port)


def cabled_to(fabric, host: str):
    """The link the spare's fibre is on now (the one whose switch-side interface exists)."""
    for link in _circuits(fabric, host):
        if os.path.exists(f"/sys/class/net/{_dev(link)}"):
            return link
    raise SpareError(f"{host}'s NIC is not cabled to any switch")


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SpareError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def recable(fabric, host: str, leaf: str):
    """Move the spare's fibre to its reserved port on `leaf` (disabled); returns that link."""
    target = next((l for l in _circuits(fabric, host) if l.b == leaf), None)
    if target is None:
        raise SpareError(f"{host} cannot be switched onto {leaf}")
    now = cabled_to(fabric, host)
    if now != target:
        old, new = _dev(now), _dev(target)
        _run("ovs-vsctl", "--if-exists", "del-port", sysname(now.b), old)
        _run("ip", "link", "set", old, "down")
        _run("ip", "link", "set", old, "name", new)
        _run("ovs-vsctl", "add-port", sysname(target.b), new, "--", "set", "interface", new,
             f"ofport_request={target.b_port}")
    return target


def set_port(link, up: bool) -> None:
    _run("ovs-ofctl", "-O", "OpenFlow13", "mod-port", sysname(link.b), str(link.b_port), "up" if up else "down")


def wait_routed(net, link, up: bool = True, timeout: float = 10.0) -> None:
    """Until the controller has seen the port up (down) and recomputed its routes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            down = {tuple(p) for p in net.controller_view().get("down", [])}
        except (OSError, ValueError):
            down = None
        if down is not None and ((link.b, link.b_port) in down) != up:
            return
        time.sleep(0.01)
    raise SpareError(f"the controller did not see {link.b} port {link.b_port} {'up' if up else 'down'} "
                     f"within {timeout:.0f} s")


def activate(net, host: str, leaf: str) -> float:
    """Bring a spare onto `leaf` and wait until it is routed; returns the seconds it took."""
    t0 = time.monotonic()
    link = recable(net.fabric, host, leaf)
    set_port(link, up=True)
    wait_routed(net, link, up=True)
    return time.monotonic() - t0


def park(net, host: str) -> None:
    """Disable the spare's port again (it stays cabled where it is)."""
    link = cabled_to(net.fabric, host)
    set_port(link, up=False)
    wait_routed(net, link, up=False)
