"""Cables cut and mended in a running fabric: a link goes down at one end as a pulled cable does (the other
end loses carrier and its switch learns of it from its own port), or its switch port is configured down by
OpenFlow (`port-disable`: the switch knows at once); patch-port uplinks, which have no carrier, are removed.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from testbed.fabric.links import Link, switch_port, sysname
from testbed.faults.targets import resolve


def _ends(net, link: Link):
    """(kind, node, port) for both ends."""
    for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
        yield ("host" if node in net.fabric.hosts else "switch"), node, port


def set_patch(net, link: Link, up: bool) -> None:
    """Patch ports ignore OpenFlow's port-down config, so a cut is their removal (the switches send
    PORT_STATUS delete/add), and repair re-creates them with the same port numbers."""
    ends = [(sysname(link.a), switch_port(link.a, link.a_port), link.a_port),
            (sysname(link.b), switch_port(link.b, link.b_port), link.b_port)]
    cmd = ["ovs-vsctl"]
    for i, (br, port, number) in enumerate(ends):
        if up:
            peer = ends[1 - i][1]
            cmd += ["--", "--may-exist", "add-port", br, port, "--", "set", "interface", port, "type=patch",
                    f"options:peer={peer}", f"ofport_request={number}"]
        else:
            cmd += ["--", "--if-exists", "del-port", br, port]
    net.run_at(link.a, cmd)       # patch ports join switches of one machine


def set_link(net, link: Link, up: bool, disable: bool = False) -> None:
    """Cut (or mend) a cable: one end's interface goes down, so the other end loses carrier and each switch
    learns of it from its own port, as from a pulled cable or a dead transceiver; a host's end is the one cut.
    disable=True is the `port-disable` fault instead: the switch port is configured down by OpenFlow (the
    switch knows at once) and the host's end goes down too."""
    if net.is_patch(link):
        return set_patch(net, link, up)      # a patch port has no carrier: its removal is the cut
    state = "up" if up else "down"
    ends = list(_ends(net, link))
    if not disable and not net.crosses(link):
        # one end: a host's NIC if the cable has one, else the first switch's veth (the other end loses carrier;
        # a VXLAN tunnel between machines carries no carrier, so there both ends go down, as both ends of a cut
        # fibre lose light)
        ends = [next((e for e in ends if e[0] == "host"), ends[0])]

    def set_end(end) -> None:
        kind, node, port = end
        if kind == "host":
            net.set_host_port(node, port, up)
        elif disable and net.fabric.switches[node].sdn:
            net.run_at(node, ["ovs-ofctl", "-O", "OpenFlow13", "mod-port", sysname(node), str(port), state])
        else:       # a switch's veth (or VXLAN device) in its machine's root namespace, or an HB bridge port
            net.run_at(node, ["ip", "link", "set", switch_port(node, port), state])
    if len(ends) == 1:
        set_end(ends[0])
    else:           # both ends at once, as a cable's (over ssh, one after the other would open a window of loss)
        with ThreadPoolExecutor(len(ends)) as pool:
            list(pool.map(set_end, ends))


def inject(net, target: str, up: bool = False, disable: bool = False) -> dict:
    """Take a target down (or up); returns {"target", "up", "at"} with the wall-clock time."""
    links = resolve(net.fabric, target)
    at = time.time()
    for link in links:
        set_link(net, link, up, disable)
    return {"target": target, "up": up, "at": at, "links": len(links)}


def cut_at_switches(net, hosts: list[str], up: bool) -> int:
    """The NIC cables of these hosts cut (or mended) at their switches' ends; returns how many."""
    links = [net.fabric.attachment(h, "nic") for h in hosts if net.fabric.hosts[h].kind == "gpu"]
    for link in links:
        node, port = (link.b, link.b_port) if link.a in net.fabric.hosts else (link.a, link.a_port)
        net.run_at(node, ["ip", "link", "set", switch_port(node, port), "up" if up else "down"])
    return len(links)
