"""Multicast distribution trees over the fabric, as pure Python (unit-tested without switches).

One shared, bidirectional tree per group and per connected piece of the fabric: the shortest paths from
a root to the member switches, the root being the switch whose tree has the fewest links (first tried:
the member switch with the smallest name, so a tie keeps that tree). A packet crosses each tree link
once, whoever sent it, so the smallest tree is the fewest bytes for every sender at once; on leaf-spine
fabrics it is a minimal Steiner tree (one spine and the member leaves), also after a leaf-spine link
fails (a root on a member leaf would then need a second spine). Every member sends and receives on
the same tree, so senders need not be known in advance; a packet that enters a tree switch on tree
port p leaves on every other tree port. On rail-only fabrics rails
are disconnected, so a group spanning rails gets one tree per rail and a sender reaches its own rail
only. Front-end switches never carry GPU multicast, as for unicast routes.
"""
from __future__ import annotations

from collections import deque

from controllers.routes import Topology


def member_ports(topo: Topology, members) -> dict[str, set[int]]:
    """switch -> host-facing ports of the members attached to it (hosts that are down are left out)."""
    out: dict[str, set[int]] = {}
    for host in members:
        if host in topo.host_port:
            sw, port = topo.host_port[host]
            out.setdefault(sw, set()).add(port)
    return out


def _transit(topo: Topology, switch: str, gpu_group: bool) -> bool:
    return not gpu_group or topo.switches[switch]["kind"] != "frontend"


def _bfs(topo: Topology, root: str, gpu_group: bool) -> dict[str, tuple[str, int, int] | None]:
    """switch -> (parent, port on parent, port on switch) over switches reachable from root."""
    parent: dict[str, tuple[str, int, int] | None] = {root: None}
    queue = deque([root])
    while queue:
        here = queue.popleft()
        if here != root and not _transit(topo, here, gpu_group):
            continue
        for nbr, port in sorted(topo.adj[here]):
            if nbr not in parent:
                rport = next(p for n, p in topo.adj[nbr] if n == here)
                parent[nbr] = (here, port, rport)
                queue.append(nbr)
    return parent


def trees(topo: Topology, members) -> list[dict[str, set[int]]]:
    """The group's trees: each maps switch -> its tree ports (links of the tree and member hosts)."""
    hosts = [h for h in members if h in topo.hosts]
    gpu_group = any(topo.hosts[h]["kind"] == "gpu" for h in hosts)
    at = member_ports(topo, hosts)
    left = set(at)
    out = []
    while left:
        first = min(left)
        reach = _bfs(topo, first, gpu_group)
        here = left & set(reach)
        roots = [first] + sorted(sw for sw in reach if sw != first and (sw in here or _transit(topo, sw, gpu_group)))
        # the smallest shortest-path tree over the candidate roots (min keeps the first of equals)
        spts = ((root, _bfs(topo, root, gpu_group)) for root in roots)
        tree = min((_tree(parent, root, here) for root, parent in spts if here <= set(parent)), key=_links)
        for sw in tree:
            tree[sw] |= at.get(sw, set())
        left -= set(reach)
        out.append(tree)
    return out


def _tree(parent: dict, root: str, members: set[str]) -> dict[str, set[int]]:
    """The shortest paths from root to the member switches: switch -> its ports on those paths."""
    tree: dict[str, set[int]] = {root: set()}
    for sw in sorted(members):
        node = sw
        while parent[node] is not None:             # walk up to the root, adding the links
            up, up_port, my_port = parent[node]
            tree.setdefault(node, set()).add(my_port)
            tree.setdefault(up, set()).add(up_port)
            node = up
    return tree


def _links(tree: dict[str, set[int]]) -> int:
    """Switch-to-switch links in a tree (before member ports are added): each has a port at both ends."""
    return sum(len(ports) for ports in tree.values()) // 2


def forwarding(topo: Topology, members) -> dict[str, dict[int, tuple[int, ...]]]:
    """switch -> {in_port: output ports}: what enters on a tree port leaves on all the others."""
    table: dict[str, dict[int, tuple[int, ...]]] = {}
    for tree in trees(topo, members):
        for sw, ports in tree.items():
            for p in ports:
                outs = tuple(sorted(ports - {p}))
                if outs:
                    table.setdefault(sw, {})[p] = outs
    return table


def unreachable(topo: Topology, members) -> dict[str, list[str]]:
    """member -> the members it cannot reach (other trees: other rails on a rail-only fabric)."""
    where = {}
    for i, tree in enumerate(trees(topo, members)):
        for sw in tree:
            where[sw] = i
    homes = {h: where.get(topo.host_port[h][0]) for h in members if h in topo.host_port}
    return {h: sorted(o for o in homes if homes[o] != t) for h, t in sorted(homes.items())
            if any(homes[o] != t for o in homes)}
