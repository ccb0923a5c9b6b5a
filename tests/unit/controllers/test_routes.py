"""The controller's route computation (no switches needed)."""
from controllers.routes import Topology
from testbed.fabric.topo import build


def topo(*args, **kw):
    fabric = build(*args, **kw)
    return fabric, Topology(fabric.to_controller())


def test_single_has_one_port_ecmp_has_every_spine():
    fabric, t = topo("rail-optimized", 4, 4, spines=3)
    single, ecmp = t.routes("single"), t.routes("ecmp")
    dst = fabric.hosts["s2g1"]
    uplinks = sorted(l.a_port for l in fabric.links if l.kind == "uplink" and l.a == "rail0")
    assert ecmp["rail0"][dst.ip] == uplinks
    assert len(single["rail0"][dst.ip]) == 1 and single["rail0"][dst.ip][0] in uplinks
    # same rail: straight down, never via a spine
    assert ecmp["rail1"][dst.ip] == [fabric.attachment("s2g1").b_port]
    # single mode spreads different destinations over different spines
    chosen = {single["rail0"][h.ip][0] for h in fabric.gpus() if h.rank != 0}
    assert len(chosen) == 3


def test_rail_only_routes_stay_in_their_rail():
    fabric, t = topo("rail-only", 3, 4, cpu_hosts=1)
    table = t.routes("ecmp")
    for g in fabric.gpus():
        for j in range(4):
            assert (g.ip in table[f"rail{j}"]) == (g.rank == j)
        assert g.ip in table["fe0"]             # CPU hosts reach every GPU
    assert fabric.hosts["cpu0"].ip in table["rail2"]


def test_clos_routes_cross_spines_between_servers():
    fabric, t = topo("clos", 3, 2, spines=2)
    table = t.routes("ecmp")
    assert len(table["tor0"][fabric.hosts["s1g0"].ip]) == 2
    assert len(table["tor0"][fabric.hosts["s0g1"].ip]) == 1
    assert set(table["spine0"]) == {h.ip for h in fabric.gpus()}
