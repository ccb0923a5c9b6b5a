"""The fabric model: counts against formulas, naming, addressing, isolation, bad parameters."""
import itertools

import pytest

from testbed.fabric.topo import TopologyError, build

SIZES = [(1, 1, 1), (2, 2, 2), (4, 4, 2), (8, 8, 4), (3, 5, 3), (16, 4, 4)]


def switch_path_exists(fabric, a, b):
    graph = fabric.switch_graph()
    seen, todo = {a}, [a]
    while todo:
        here = todo.pop()
        for nbr, _ in graph[here]:
            if nbr not in seen:
                seen.add(nbr)
                todo.append(nbr)
    return b in seen


@pytest.mark.parametrize("n,k,s", SIZES)
def test_rail_optimized_counts(n, k, s):
    f = build("rail-optimized", n, k, spines=s)
    kinds = [sw.kind for sw in f.switches.values()]
    assert len(f.gpus()) == n * k
    assert kinds.count("rail") == k and kinds.count("spine") == s and kinds.count("hb") == n
    assert sum(l.kind == "uplink" for l in f.links) == k * s
    assert sum(l.kind == "nic" for l in f.links) == n * k
    assert sum(l.kind == "hb" for l in f.links) == n * k
    # every rail reaches every other rail through the spines
    for a, b in itertools.combinations([f"rail{j}" for j in range(k)], 2):
        assert switch_path_exists(f, a, b)


@pytest.mark.parametrize("n,k,s", SIZES)
def test_rail_only_has_no_path_between_rails(n, k, s):
    f = build("rail-only", n, k, spines=s)
    kinds = [sw.kind for sw in f.switches.values()]
    assert kinds.count("spine") == 0 and kinds.count("rail") == k
    assert not any(l.kind == "uplink" for l in f.links)
    for a, b in itertools.combinations([f"rail{j}" for j in range(k)], 2):
        assert not switch_path_exists(f, a, b)
    for src, dst in itertools.permutations(f.gpus(), 2):
        assert f.nic_reachable(src, dst) == (src.rank == dst.rank)


@pytest.mark.parametrize("n,k,s", SIZES)
def test_clos_counts(n, k, s):
    f = build("clos", n, k, spines=s)
    kinds = [sw.kind for sw in f.switches.values()]
    assert kinds.count("tor") == n and kinds.count("spine") == s and kinds.count("rail") == 0
    assert sum(l.kind == "uplink" for l in f.links) == n * s
    for h in f.gpus():       # all GPUs of a server on one ToR
        assert f.attachment(h.name).b == f"tor{h.server}"


def test_rates_and_oversubscription():
    f = build("rail-optimized", 8, 4, spines=4, nic_mbps=5, oversubscription=2)
    assert f.params.hb_mbps == 45            # HB defaults to 9 x NIC
    uplinks = [l.mbps for l in f.links if l.kind == "uplink"]
    assert uplinks == [8 * 5 / (4 * 2)] * 16     # a rail's downlink capacity / spines / ratio
    assert {l.mbps for l in f.links if l.kind == "hb"} == {45}


def test_naming_and_addressing_are_deterministic():
    a, b = build("rail-optimized", 3, 4, spines=2, cpu_hosts=2), build("rail-optimized", 3, 4, spines=2, cpu_hosts=2)
    assert a.to_json() == b.to_json()
    h = a.hosts["s2g3"]
    assert (h.ip, h.hb_ip, h.mac, h.server, h.rank) == ("10.11.2.4", "10.12.2.4", "02:0b:00:02:03:00", 2, 3)
    assert a.hosts["cpu1"].ip == "10.11.250.2"
    ips = [x.ip for x in a.hosts.values()]
    macs = [x.mac for x in a.hosts.values()]
    assert len(set(ips)) == len(ips) and len(set(macs)) == len(macs)
    dpids = [s.dpid for s in a.sdn_switches()]
    assert len(set(dpids)) == len(dpids)
    # switch ports are numbered from 1 without gaps, in cabling order
    for sw in a.switches:
        ports = sorted(p for l in a.links for node, p in ((l.a, l.a_port), (l.b, l.b_port)) if node == sw)
        assert ports == list(range(1, len(ports) + 1))


def test_cpu_hosts_reach_every_gpu_but_do_not_join_rails():
    f = build("rail-only", 2, 2, cpu_hosts=1)
    cpu = f.hosts["cpu0"]
    assert all(f.nic_reachable(cpu, g) and f.nic_reachable(g, cpu) for g in f.gpus())
    assert not f.nic_reachable(f.hosts["s0g0"], f.hosts["s1g1"])


def test_json_form():
    j = build("clos", 2, 2, spines=1).to_json()
    assert set(j) == {"kind", "switches", "hosts", "links", "circuits", "ports"}
    assert j["kind"] == "clos" and "tor0" in j["switches"] and "s1g1" in j["hosts"]
    assert all(len(l) == 3 and set(l[2]) == {"mbps", "kind", "standby", "a_port", "b_port", "a_intf", "b_intf",
                                             "a_ofport", "b_ofport"} for l in j["links"])


@pytest.mark.parametrize("kwargs,message", [
    (dict(kind="torus", servers=2, gpus_per_server=2), "unknown fabric kind 'torus'"),
    (dict(kind="rail-only", servers=0, gpus_per_server=2), "servers must be between 1"),
    (dict(kind="rail-only", servers=2, gpus_per_server=65), "gpus_per_server must be between 1 and 64"),
    (dict(kind="clos", servers=2, gpus_per_server=2, spines=0), "spines must be between 1"),
    (dict(kind="clos", servers=2, gpus_per_server=2, nic_mbps=-1), "nic_mbps must be a rate"),
    (dict(kind="clos", servers=2, gpus_per_server=2, oversubscription=0.5), "oversubscription must be"),
    (dict(kind="clos", servers="2", gpus_per_server=2), "servers must be an integer"),
])
def test_bad_parameters_name_the_problem(kwargs, message):
    kind = kwargs.pop("kind")
    with pytest.raises(TopologyError, match=message):
        build(kind, **kwargs)
