"""The minimal multicast trees' bytes, from the fabric model: hand-counted trees on odd and even grids,
rail-only, rail-optimized and Clos, one spine or several, and the controller's tree against the exact minimum."""
import itertools

import pytest

from controllers import mcast_trees
from controllers.routes import Topology
from testbed.fabric.links import roce_mtus
from testbed.fabric.topo import build
from testbed.model import multicast_minimum as mm


def gpus(fabric):
    return sorted(h.name for h in fabric.gpus())


def wire(fabric, nbytes):
    """One multicast copy of nbytes on a link, in chunks of the fabric's RoCE MTU."""
    return mm.wire_bytes(nbytes, roce_mtus(fabric)["nic"])


def test_a_chunk_on_the_wire_carries_ethernet_ip_udp_bth_deth_immdt_and_icrc():
    assert mm.CHUNK_OVERHEAD == 14 + 20 + 8 + 12 + 8 + 4 + 4
    assert mm.wire_bytes(1024) == 1024 + 70
    assert mm.wire_bytes(128 * 1024) == 128 * (1024 + 70)
    assert mm.wire_bytes(1025) == 1025 + 3 + 2 * 70        # the short last chunk is padded to 4 bytes
    assert mm.wire_bytes(0) == 70                           # an empty shard is still one packet


@pytest.mark.parametrize("servers,per,spines,links", [
    (2, 4, 2, 8 + 4),          # 8 host links; one spine joins the 4 rails
    (2, 4, 1, 8 + 4),
    (3, 3, 1, 9 + 3),          # odd grid
    (4, 4, 2, 16 + 4),
    (5, 2, 3, 10 + 2),
    (3, 1, 2, 3),              # one rail: no spine at all
])
def test_rail_optimized_tree_is_every_host_link_and_one_spine_to_each_rail(servers, per, spines, links):
    fabric = build("rail-optimized", servers, per, spines=spines)
    assert set(mm.tree_links(fabric, gpus(fabric)).values()) == {links}
    shard = 64 * 1024
    assert mm.allgather_minimum(fabric, gpus(fabric), shard) == servers * per * links * wire(fabric, shard)


def test_rail_only_has_one_tree_per_rail_and_the_rail_scope_the_same_on_rail_optimized():
    fabric = build("rail-only", 3, 4)
    assert set(mm.tree_links(fabric, gpus(fabric)).values()) == {3}       # 3 hosts on each rail switch
    shard = 1000
    assert mm.allgather_minimum(fabric, gpus(fabric), shard) == 12 * 3 * wire(fabric, shard)
    opt = build("rail-optimized", 3, 4)
    assert mm.allgather_minimum(opt, gpus(opt), shard, scope="rail") == 12 * 3 * wire(opt, shard)


def test_clos_joins_the_tors_through_one_spine_and_broadcast_is_one_copy_over_the_tree():
    fabric = build("clos", 3, 4, spines=2)
    hosts = gpus(fabric)
    assert set(mm.tree_links(fabric, hosts).values()) == {12 + 3}
    assert mm.broadcast_minimum(fabric, hosts, hosts[0], 4096) == 15 * wire(fabric, 4096)
    some = ["s0g0", "s0g3"]                                 # both on one ToR: no spine link
    assert set(mm.tree_links(fabric, some).values()) == {2}


def test_a_subset_of_rails_needs_only_their_rails_and_a_lone_member_no_link():
    fabric = build("rail-optimized", 2, 4)
    assert set(mm.tree_links(fabric, ["s0g0", "s1g0", "s0g2"]).values()) == {3 + 2}
    assert mm.tree_links(fabric, ["s0g1"]) == {"s0g1": 0}


def test_exact_steiner_beats_a_bad_root_and_matches_a_brute_force_on_small_graphs():
    # a ring of 6 switches with a hub: terminals a, c, e are 2 apart on the ring, 1 from the hub
    ring = "abcdef"
    adj = {s: set() for s in ring + "h"}
    for x, y in zip(ring, ring[1:] + ring[0]):
        adj[x].add(y), adj[y].add(x)
    for x in "ace":
        adj[x].add("h"), adj["h"].add(x)
    assert mm.steiner_links(adj, ["a", "c", "e"]) == 3                     # the star through the hub
    assert mm.steiner_links(adj, ["a", "b"]) == 1
    for terms in itertools.combinations(sorted(adj), 4):
        assert mm.steiner_links(adj, list(terms)) == brute_force(adj, terms), terms


def brute_force(adj, terms):
    """Fewest nodes of a connected set holding the terminals, minus one (a tree on them)."""
    others = [v for v in adj if v not in terms]
    for extra in range(len(others) + 1):
        for add in itertools.combinations(others, extra):
            nodes = set(terms) | set(add)
            seen, stack = {terms[0]}, [terms[0]]
            while stack:
                for nbr in adj[stack.pop()] & nodes - seen:
                    seen.add(nbr), stack.append(nbr)
            if seen == nodes:
                return len(nodes) - 1
    raise AssertionError("not connected")


def test_past_the_exact_limit_the_best_shortest_path_tree_is_used():
    fabric = build("clos", 12, 1, spines=2)               # 12 ToRs, above EXACT_TERMINALS
    assert set(mm.tree_links(fabric, gpus(fabric)).values()) == {12 + 12}


def controller_links(topo, members):
    """Links of the controller's trees: switch-switch links (a port at both ends) plus member host ports."""
    total = 0
    for tree in mcast_trees.trees(topo, members):
        ports = sum(len(p) for p in tree.values())
        hosts = sum(1 for m in members if topo.host_port[m][0] in tree)
        total += (ports - hosts) // 2 + hosts
    return total


@pytest.mark.parametrize("kind,servers,per,spines", [
    ("rail-optimized", 2, 4, 2), ("rail-optimized", 3, 3, 1), ("rail-optimized", 4, 4, 2), ("clos", 3, 2, 2),
])
def test_the_controller_installs_a_minimal_tree_also_after_a_leaf_spine_link_fails(kind, servers, per, spines):
    fabric = build(kind, servers, per, spines=spines)
    topo = Topology(fabric.to_controller())
    members = gpus(fabric)
    minimum = mm.tree_links(fabric, members)[members[0]]
    assert controller_links(topo, members) == minimum
    if spines > 1:                       # cut the second leaf from spine0: a tree rooted at the first leaf
        leaf = sorted(sw for sw in topo.switches if topo.switches[sw]["kind"] in ("rail", "tor"))[1]
        port = next(p for nbr, p in topo.adj[leaf] if nbr == "spine0")      # would need both spines
        topo.set_port(leaf, port, False)
        tree, = mcast_trees.trees(topo, members)
        assert controller_links(topo, members) == minimum and "spine0" not in tree
