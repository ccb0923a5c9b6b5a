"""The fewest bytes a multicast collective can put on the network's links, from the fabric model.

SPCL (Khalilov et al., SC'24) counts traffic as bytes on every link: what the NICs send plus what the
switches send. A multicast shard must cross each link of a tree that spans its sender and its
receivers once, and no tree is smaller than the minimal Steiner tree: the member hosts as leaves
(one link each) plus the fewest switch-to-switch links joining their switches. Here it is computed
exactly (Dreyfus-Wagner over the SDN switches; these fabrics have at most a few dozen) for up to
EXACT_TERMINALS member switches, else bounded from above by the best shortest-path tree over all roots.
Measured bytes (NIC sends + switch egress) over this minimum is 1 for a perfect multicast.

A shard's bytes on the wire are its UD chunks (hosts/collectives/mcast_allgather.py: one RoCE MTU of
payload each) with their headers: Ethernet, IPv4, UDP, BTH, DETH, ImmDt and ICRC.
"""
from __future__ import annotations

from collections import deque

from hosts.rdma.engine import ETH_OVERHEAD
from hosts.rdma.headers import BTH_LEN, DETH_LEN, ICRC_LEN, IMM_LEN
from hosts.rdma.mtu import roce_mtu

CHUNK_OVERHEAD = ETH_OVERHEAD + 20 + 8 + BTH_LEN + DETH_LEN + IMM_LEN + ICRC_LEN   # 70 bytes per chunk
EXACT_TERMINALS = 10           # Dreyfus-Wagner is 3^k: exact up to this many member switches


def wire_bytes(nbytes: int, chunk: int = 1024) -> int:
    """Bytes on one link for one multicast copy of nbytes in chunks of `chunk` bytes (the NICs' RoCE MTU):
    payload padded to 4 bytes per chunk, plus headers."""
    chunks, last = max(1, -(-nbytes // chunk)), nbytes % chunk
    return nbytes + (-last) % 4 + chunks * CHUNK_OVERHEAD


def switch_graph(fabric, members: list[str]) -> dict[str, set[str]]:
    """SDN switches and their up links; front-end switches carry no GPU traffic unless a member sits on one."""
    homes = {home(fabric, h) for h in members}
    keep = {s.name for s in fabric.sdn_switches() if s.kind != "frontend" or s.name in homes}
    adj: dict[str, set[str]] = {s: set() for s in keep}
    for l in fabric.links:
        if l.a in keep and l.b in keep and not l.standby:
            adj[l.a].add(l.b)
            adj[l.b].add(l.a)
    return adj


def home(fabric, host: str) -> str:
    """The switch a host's NIC is cabled to."""
    link = fabric.attachment(host, "nic")
    return link.b if link.a == host else link.a


def distances(adj: dict[str, set[str]], src: str) -> dict[str, int]:
    dist, queue = {src: 0}, deque([src])
    while queue:
        here = queue.popleft()
        for nbr in adj[here]:
            if nbr not in dist:
                dist[nbr] = dist[here] + 1
                queue.append(nbr)
    return dist


def steiner_links(adj: dict[str, set[str]], terminals: list[str]) -> int:
    """The fewest links of a tree joining the terminals (they must be connected)."""
    terminals = sorted(set(terminals))
    if len(terminals) <= 1:
        return 0
    dist = {v: distances(adj, v) for v in adj}
    if len(terminals) > EXACT_TERMINALS:
        return min(_spt_links(adj, root, terminals) for root in adj if set(terminals) <= set(dist[root]))
    nodes, inf, k = sorted(adj), float("inf"), len(terminals)
    # dp[mask][v]: the smallest tree joining the terminals in mask and switch v
    dp: list[dict[str, float]] = [{}] * (1 << k)
    for i, t in enumerate(terminals):
        dp[1 << i] = {v: dist[t].get(v, inf) for v in nodes}
    for mask in range(3, 1 << k):
        if not mask & (mask - 1):
            continue
        low, merged = mask & -mask, {}
        for v in nodes:
            best, sub = inf, (mask - 1) & mask
            while sub:
                if sub & low:                        # each split once: the part with the lowest terminal
                    best = min(best, dp[sub][v] + dp[mask ^ sub][v])
                sub = (sub - 1) & mask
            merged[v] = best
        dp[mask] = {v: min(merged[u] + dist[u].get(v, inf) for u in nodes) for v in nodes}
    return int(min(dp[(1 << k) - 1].values()))


def _spt_links(adj: dict[str, set[str]], root: str, terminals: list[str]) -> int:
    """Links of a shortest-path tree from root to the terminals (an upper bound on the Steiner tree)."""
    parent: dict[str, str | None] = {root: None}
    queue = deque([root])
    while queue:
        here = queue.popleft()
        for nbr in sorted(adj[here]):
            if nbr not in parent:
                parent[nbr] = here
                queue.append(nbr)
    on_tree: set[str] = set()                  # every switch but the root brings the link to its parent
    for node in terminals:
        while parent[node] is not None:
            on_tree.add(node)
            node = parent[node]
    return len(on_tree)


def tree_links(fabric, members: list[str]) -> dict[str, int]:
    """member host -> links of the smallest tree from it to every member it can reach (host links included)."""
    adj = switch_graph(fabric, members)
    out: dict[str, int] = {}
    left = sorted(members)
    while left:                                   # one tree per connected piece (a rail, on rail-only)
        reach = distances(adj, home(fabric, left[0]))
        piece = [h for h in left if home(fabric, h) in reach]
        links = len(piece) + steiner_links(adj, [home(fabric, h) for h in piece]) if len(piece) > 1 else 0
        out.update((h, links) for h in piece)
        left = [h for h in left if h not in piece]
    return out


def allgather_minimum(fabric, hosts: list[str], shard_bytes: int, scope: str = "fabric") -> int:
    """Bytes one multicast AllGather needs on the network: every shard once over its sender's tree. Scope
    rail: the multicast stays in each rail (the HB stage that follows is not network traffic)."""
    groups = [hosts] if scope != "rail" else _rails(fabric, hosts)
    links = sum(n for group in groups for n in tree_links(fabric, group).values())
    return links * wire_bytes(shard_bytes, _nic_roce_mtu(fabric, hosts)) if links else 0


def broadcast_minimum(fabric, hosts: list[str], root: str, nbytes: int) -> int:
    return tree_links(fabric, hosts)[root] * wire_bytes(nbytes, _nic_roce_mtu(fabric, hosts))


def _nic_roce_mtu(fabric, hosts: list[str]) -> int:
    """The RoCE MTU the members' NICs use: what their NIC link carries (every NIC link has the fabric's MTU)."""
    return roce_mtu(fabric.attachment(hosts[0], "nic").mtu)


def _rails(fabric, hosts: list[str]) -> list[list[str]]:
    rails: dict[int, list[str]] = {}
    for h in hosts:
        rails.setdefault(fabric.hosts[h].rank, []).append(h)
    return [rails[r] for r in sorted(rails)]
