"""What a fault's `target` names in a fabric: links (a cable, a switch's every cable, a pair's path) or hosts
(a GPU host, a server's GPU hosts). Each resolver raises FaultError naming the target and what was expected.

Link targets:
  rail0-spine1      a switch-to-switch link (either order)
  path:s0g0>s1g1    the first switch-to-switch link of the single-path route from s0g0 to s1g1
  s0g0/nic          a GPU's (or CPU host's) NIC link; s0g0/hb its HB-domain link
  spine1            a whole switch (every port)
  site:us           a whole site cut off: every WAN link that joins it to another site (fabric.sites)
"""
from __future__ import annotations

from testbed.fabric.links import Link
from testbed.faults.kind import FaultError, Target

LINKS = Target("A link (rail0-spine1, HOST/nic, HOST/hb, path:SRC>DST), a switch, or site:NAME (its WAN links)")
GPU_HOST = Target("for GPU faults a GPU host (s1g2)")
SERVER = Target("for {kinds} a server (s1)")         # the schema names the kinds that take a server


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
    if target.startswith("site:"):
        site = target[5:]
        if site not in (fabric.params.sites or {}):
            raise FaultError(f"unknown fault target {target!r}: no site {site!r} in this fabric"
                             + (f" (sites: {', '.join(fabric.params.sites)})" if fabric.params.sites else ""))
        return [l for l in fabric.wan_links() if site in (fabric.site_of(l.a), fabric.site_of(l.b))]
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
                     f"HOST/hb, path:SRC>DST, a switch name or site:NAME")


def switch_ports(fabric, target: str) -> set:
    """(switch, port) of every switch end of the links a target names."""
    return {(node, port) for link in resolve(fabric, target)
            for node, port in ((link.a, link.a_port), (link.b, link.b_port)) if node in fabric.switches}


def gpu_host(fabric, kind: str, target: str) -> list[str]:
    """[target] if it is a GPU host (or a spare GPU)."""
    if target in fabric.hosts and fabric.hosts[target].kind in ("gpu", "spare"):
        return [target]
    raise FaultError(f"unknown {kind} target {target!r}: expected a GPU host like s0g1")


def server_hosts(fabric, kind: str, target: str) -> list[str]:
    """Every GPU host of the server a target names (s1), its spares included."""
    hosts = [h.name for h in fabric.gpus() + fabric.spares() if f"s{h.server}" == target]
    if not hosts:
        raise FaultError(f"unknown {kind} target {target!r}: expected a GPU host like s0g1 ({kind}: a server like s1)")
    return hosts
