"""Proactive route computation over the topology the testbed hands to the controller.

Pure Python (no OpenFlow), so it is unit-tested without switches. For every SDN switch and every
destination host it yields the equal-cost output ports; the app turns one port into an output
action (`single`) and several into a select group (`ecmp`).

Front-end switches never carry GPU-to-GPU traffic: on rail-only fabrics that keeps rails apart,
as the fabric has no spine between them. With sites, a front-end switch that is a WAN gateway carries GPU
traffic to and from other sites: a front-end switch of another site than the destination's is transit, and
the destination site's own passes on only what comes over a WAN link (links of kind "wan").
"""
from __future__ import annotations

from collections import deque

MODES = ("single", "ecmp")


class Topology:
    def __init__(self, spec: dict):
        self.kind = spec["kind"]
        self.switches = {s["name"]: s for s in spec["switches"]}
        self.hosts = {h["name"]: h for h in spec["hosts"]}
        self.links = spec["links"]
        # (switch, port) reported down; spares' ports start down (disabled until a spare is needed)
        self.down: set[tuple[str, int]] = {(l[end], l[f"{end}_port"]) for l in self.links if l.get("down")
                                           for end in ("a", "b") if l[end] in self.switches}
        self.adj: dict[str, list[tuple[str, int]]] = {}
        self.wan_ports = {(l[end], l[f"{end}_port"]) for l in self.links if l.get("kind") == "wan" for end in "ab"}
        self.host_port: dict[str, tuple[str, int]] = {}
        self._index()

    def set_port(self, switch: str, port: int, up: bool) -> bool:
        """Record a port's state; True if that changed anything."""
        key = (switch, port)
        if up == (key not in self.down):
            return False
        (self.down.discard if up else self.down.add)(key)
        self._index()
        return True

    def _index(self) -> None:
        """Adjacency and host attachments over the links whose ends are both up."""
        self.adj = {name: [] for name in self.switches}
        self.host_port = {}
        for link in self.links:
            if (link["a"], link["a_port"]) in self.down or (link["b"], link["b_port"]) in self.down:
                continue
            a, b = link["a"], link["b"]
            if a in self.switches and b in self.switches:
                self.adj[a].append((b, link["a_port"]))
                self.adj[b].append((a, link["b_port"]))
            elif b in self.switches and a in self.hosts:
                self.host_port[a] = (b, link["b_port"])
            elif a in self.switches and b in self.hosts:
                self.host_port[b] = (a, link["a_port"])

    def by_dpid(self, dpid: int) -> str | None:
        for name, sw in self.switches.items():
            if sw["dpid"] == dpid:
                return name
        return None

    def _is_transit(self, switch: str, dst: dict) -> bool:
        sw = self.switches[switch]
        return dst["kind"] != "gpu" or sw["kind"] != "frontend" or sw.get("site") != dst.get("site")

    def distances(self, dst: dict) -> dict[str, int]:
        """Hop distance from every switch that can reach dst (BFS from its edge switch)."""
        edge, _ = self.host_port[dst["name"]]
        dist = {edge: 0}
        queue = deque([edge])
        while queue:
            here = queue.popleft()
            transit = here == edge or self._is_transit(here, dst)
            for nbr, port in self.adj[here]:
                if not transit and (here, port) not in self.wan_ports:
                    continue   # reachable from here, but routed onward through it only from the WAN
                if nbr not in dist:
                    dist[nbr] = dist[here] + 1
                    queue.append(nbr)
        return dist

    def next_hops(self, dst_name: str) -> dict[str, list[int]]:
        """switch -> sorted equal-cost output ports towards dst (switches that cannot reach it are absent)."""
        dst = self.hosts[dst_name]
        edge, host_port = self.host_port[dst_name]
        dist = self.distances(dst)
        hops = {edge: [host_port]}
        for sw, d in dist.items():
            if sw == edge:
                continue
            ports = sorted(port for nbr, port in self.adj[sw] if dist.get(nbr) == d - 1 and
                           (nbr == edge or self._is_transit(nbr, dst) or (sw, port) in self.wan_ports))
            if ports:
                hops[sw] = ports
        return hops

    def ordered_routes(self) -> dict[str, dict[str, list[int]]]:
        """switch -> {destination IP: equal-cost ports, the preferred one first}. The preference
        rotates with the destination, so single-path routes of different destinations differ."""
        table: dict[str, dict[str, list[int]]] = {name: {} for name in self.switches}
        for index, (name, host) in enumerate(sorted(self.hosts.items())):
            if name not in self.host_port:
                continue
            for sw, ports in self.next_hops(name).items():
                k = index % len(ports)
                table[sw][host["ip"]] = ports[k:] + ports[:k]
        return table

    def routes(self, mode: str) -> dict[str, dict[str, list[int]]]:
        """switch -> {destination IP: output ports}: one for `single`, all equal-cost ones for `ecmp`."""
        if mode not in MODES:
            raise ValueError(f"unknown routing mode {mode!r}; choose one of {', '.join(MODES)}")
        return {sw: {ip: ports[:1] if mode == "single" else sorted(ports) for ip, ports in t.items()}
                for sw, t in self.ordered_routes().items()}
