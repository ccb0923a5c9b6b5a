"""Placement by rails: whole leaves per machine in balanced contiguous blocks, spines shared, HB switches with
most of their GPUs; the links between machines are only those the fabric's kind implies."""
import itertools

import pytest

from testbed.fabric.placement import PlacementError, place
from testbed.fabric.topo import build

GRIDS = [(2, 4), (3, 5), (4, 2), (5, 3), (1, 4)]


def leaves_of(fabric):
    return [s.name for s in fabric.switches.values() if s.kind in ("rail", "tor")]


CASES = [(kind, servers, gpus, count) for kind in ("rail-only", "rail-optimized", "clos") for servers, gpus in GRIDS
         for count in (1, 2, 3) if count <= (servers if kind == "clos" else gpus)]    # more is refused (below)


@pytest.mark.parametrize("kind,servers,gpus,count", CASES)
def test_every_node_is_placed_with_its_leaf_and_only_the_kinds_links_cross(kind, servers, gpus, count):
    fabric = build(kind, servers, gpus)
    leaves = leaves_of(fabric)
    machines = [f"m{i}" for i in range(count)]
    p = place(fabric, machines)
    assert set(p.node_machine) == set(fabric.switches) | set(fabric.hosts)
    assert set(p.node_machine.values()) == set(machines)           # every machine emulates something
    for gpu in fabric.gpus():                                        # a GPU sits with the leaf its NIC is cabled to
        nic = fabric.attachment(gpu.name)
        assert p.node_machine[gpu.name] == p.node_machine[nic.b]
    # whole leaves in contiguous blocks whose sizes differ by one at most
    blocks = [list(g) for _, g in itertools.groupby(leaves, key=p.node_machine.get)]
    assert len(blocks) == count and max(map(len, blocks)) - min(map(len, blocks)) <= 1
    crossing = {l.kind for l in p.crossing(fabric)}
    allowed = {"rail-only": {"hb"}, "rail-optimized": {"hb", "uplink"}, "clos": {"uplink"}}[kind]
    assert crossing <= allowed
    if count == 1:
        assert crossing == set()
    elif kind == "rail-only":
        assert crossing == {"hb"}                  # rails never meet but in the HB domains


def test_a_server_on_clos_stays_on_one_machine_and_hb_domains_spread_on_rails():
    clos = build("clos", 4, 4)
    p = place(clos, ["a", "b"])
    for i in range(4):
        server = [f"s{i}g{j}" for j in range(4)] + [f"hb{i}"]
        assert {p.node_machine[n] for n in server} == {p.node_machine[f"tor{i}"]}
    rails = build("rail-optimized", 4, 4)
    p = place(rails, ["a", "b"])
    hb = [p.node_machine[f"hb{i}"] for i in range(4)]
    assert hb.count("a") == hb.count("b") == 2                       # ties go to the machine with fewer domains
    assert [p.node_machine[f"spine{x}"] for x in range(2)] == ["a", "b"]
    summary = p.to_json(rails)
    assert summary["crossing_mbps"] == sum(c["mbps"] for c in summary["crossing"])
    assert len([c for c in summary["crossing"] if c["kind"] == "hb"]) == 4 * 2      # half of each domain's links
    assert "between machines: 12 links: 8 hb" in p.describe(rails)[-1]


def test_spares_cpu_hosts_and_the_front_end_are_placed():
    fabric = build("rail-optimized", 2, 4, spares_per_server=1, spare_servers=1, cpu_hosts=2)
    p = place(fabric, ["a", "b"])
    assert p.node_machine["cpu0"] == p.node_machine["cpu1"] == p.node_machine["fe0"] == "a"
    for i in range(2):                                               # a spare GPU with its HB domain
        assert p.node_machine[f"s{i}spare0"] == p.node_machine[f"hb{i}"]
    for j in range(4):                                               # a spare server's GPUs on their rails
        assert p.node_machine[f"s2g{j}"] == p.node_machine[f"rail{j}"]


@pytest.mark.parametrize("machines, message", [
    ([], "non-empty list"),
    ("a,b", "non-empty list"),
    (["a", "a"], "'a' is named twice"),
    (["a", "b c"], "'b c' is not a host name"),
    (["a", ""], "'' is not a host name"),
    (["a", 7], "7 is not a host name"),
    ([f"m{i}" for i in range(5)], "5 machines but the fabric has 4 rails"),
])
def test_an_impossible_placement_is_named(machines, message):
    with pytest.raises(PlacementError, match=message):
        place(build("rail-optimized", 2, 4), machines)


def test_clos_places_by_tor():
    with pytest.raises(PlacementError, match="3 machines but the fabric has 2 ToRs"):
        place(build("clos", 2, 4), ["a", "b", "c"])
