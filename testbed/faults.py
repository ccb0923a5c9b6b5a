"""Fault injection into a running fabric: links and switches.

Targets:
  rail0-spine1      a switch-to-switch link (either order)
  s0g0/nic          a GPU's (or CPU host's) NIC link; s0g0/hb its HB-domain link
  spine1            a whole switch (every port)
A link goes down at both ends, as a cut cable does: switch ports are set down through OpenFlow port
config (the controller gets PORT_STATUS; watch-port buckets stop using them) and host interfaces are
set down in the host's namespace.
"""
from __future__ import annotations

import subprocess
import time

from testbed.net import sysname
from testbed.topo import Link


class FaultError(ValueError):
    """A fault target that does not exist in the fabric."""


def resolve(fabric, target: str) -> list[Link]:
    """The links a target names."""
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
                     f"HOST/hb or a switch name")


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
