"""Fabric kinds as objects: the registry, each kind's cabling and answers, and no kind name compared elsewhere."""
import itertools
import os

import pytest

from testbed.fabric import kinds
from testbed.fabric.topo import build

from tests import compared_names

SIZES = [(1, 1), (2, 2), (3, 5), (5, 3)]


def test_the_registry_lists_each_kind_once():
    assert kinds.NAMES == ("rail-only", "rail-optimized", "clos")
    assert all(kinds.get(name).name == name for name in kinds.NAMES)
    assert kinds.described().count("(") == len(kinds.NAMES)


@pytest.mark.parametrize("bad", ["mesh", "", None, 3])
def test_an_unknown_kind_names_the_kinds(bad):
    with pytest.raises(kinds.UnknownKind, match="choose one of rail-only, rail-optimized, clos"):
        kinds.get(bad)


@pytest.mark.parametrize("kind", kinds.ALL, ids=kinds.NAMES)
@pytest.mark.parametrize("n, k", SIZES)
def test_every_gpu_is_cabled_to_the_leaf_its_kind_names(kind, n, k):
    f = build(kind.name, n, k, spare_servers=1)
    for host in f.gpus() + [h for h in f.spares() if h.rank is not None]:
        assert f.attachment(host.name).b == kind.leaf_of(host.server, host.rank)
    leaves = [s for s in f.switches.values() if s.kind == kind.leaf]
    count, per_leaf = kind.groups(n, k)
    assert len(leaves) == count + (1 if kind.leaf == "tor" else 0)        # a spare server brings its own ToR
    for leaf in leaves[:count]:
        assert sum(1 for l in f.links if l.b == leaf.name and l.kind == "nic" and not l.standby) == per_leaf


@pytest.mark.parametrize("kind", kinds.ALL, ids=kinds.NAMES)
def test_spines_and_cross_rail_paths_are_the_kinds(kind):
    f = build(kind.name, 3, 2, spines=2)
    assert (f.params.spines > 0) == kind.spines
    assert any(s.kind == "spine" for s in f.switches.values()) == kind.spines
    for a, b in itertools.permutations(f.gpus(), 2):
        assert f.nic_reachable(a, b) == (kind.cross_rail or a.rank == b.rank)


@pytest.mark.parametrize("kind", kinds.ALL, ids=kinds.NAMES)
def test_a_spare_gpu_can_be_switched_onto_the_leaves_its_kind_allows(kind):
    f = build(kind.name, 2, 3, spares_per_server=1)
    for host, circuit in f.circuits.items():
        server = f.hosts[host].server
        assert [l.b for l in circuit] == ([kind.leaf_of(server, 0)] if not kind.rails else
                                          [kind.leaf_of(server, j) for j in range(3)])


def test_no_kind_name_is_compared_outside_the_kinds_package():
    assert compared_names.outside(kinds.NAMES, os.path.join("testbed", "fabric", "kinds")) == []
