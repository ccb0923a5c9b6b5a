"""Sites: each a fabric of its own kind and size, placed in the whole with unique names, addresses and datapath
ids; WAN links between gateways carry their rate, delay, loss and queue; routes cross the WAN; a site's
hosts are listed by the one mapping (site_of, hosts_by_site); bad input names itself."""
import pytest

from controllers.routes import Topology
from testbed.fabric import sites
from testbed.fabric.links import IFNAMSIZ, overlong_names
from testbed.fabric.params import FabricParams, TopologyError
from testbed.fabric.topo import build
from testbed.faults.kind import FaultError
from testbed.faults.targets import resolve
from testbed.results.draw import layout

TWO = {"eu": {"servers": 2}, "us": {"kind": "rail-optimized", "servers": 3, "spines": 1}}
WAN = [{"a": "eu", "b": "us:spine0", "mbps": 20, "delay_us": 10_000, "loss": 0.01, "queue_kb": 256}]


def two_sites(**kw):
    return build("clos", 2, 2, sites=TWO, wan=WAN, **kw)


def test_servers_are_numbered_on_across_sites_and_switches_carry_their_site():
    f = two_sites()
    assert sites.hosts_by_site(f) == {"eu": ["s0g0", "s0g1", "s1g0", "s1g1"],
                                      "us": ["s2g0", "s2g1", "s3g0", "s3g1", "s4g0", "s4g1"]}
    assert f.params.servers == 5 and len(f.gpus()) == 10
    assert [s for s in f.switches if f.site_of(s) == "us"] == ["usrail0", "usrail1", "usspine0", "hb2", "hb3", "hb4"]
    assert {f.site_of(h) for h in ("s0g0", "s1g1", "eutor1", "euspine1")} == {"eu"}
    assert f.hosts["s3g1"].ip == "10.11.3.2" and f.attachment("s3g1").b == "usrail1"
    for values in ([h.ip for h in f.hosts.values()], [h.mac for h in f.hosts.values()],
                   [s.dpid for s in f.sdn_switches()], list(f.switches) + list(f.hosts)):
        assert len(values) == len(set(values))
    assert not overlong_names(f)


def test_a_sites_gpu_hosts_leave_its_cpu_hosts_out():
    f = build("clos", 1, 2, cpu_hosts=1, sites={"eu": {}, "us": {}}, wan=[{"a": "eu", "b": "us", "mbps": 5}])
    assert sites.hosts_by_site(f) == {"eu": ["s0g0", "s0g1", "cpu0"], "us": ["s1g0", "s1g1", "cpu1"]}
    assert sites.hosts_by_site(f, "gpu") == {"eu": ["s0g0", "s0g1"], "us": ["s1g0", "s1g1"]}
    assert f.site_of("cpu1") == "us" and f.hosts["cpu1"].ip == "10.11.250.2"


def test_a_fabric_without_sites_maps_no_host_to_a_site():
    f = build("clos", 2, 2)
    assert f.site_of("s0g0") is None and sites.hosts_by_site(f) == {} and f.wan_links() == []
    with pytest.raises(KeyError):
        f.site_of("s9g9")


def test_each_site_is_cabled_as_its_kind_and_keeps_its_own_rates():
    f = two_sites()
    up = {l.a: l.mbps for l in f.links if l.kind == "uplink"}
    assert up["eutor0"] == 2 * 5 / 2 and up["usrail0"] == 3 * 5 / 1      # leaf's downlinks / spines
    assert sorted(l.name for l in f.links if l.kind == "uplink" and l.b == "usspine0") == \
        ["usrail0-usspine0", "usrail1-usspine0"]


def test_the_wan_link_joins_the_gateways_with_its_rate_delay_loss_and_queue():
    (wan,) = two_sites().wan_links()
    assert (wan.a, wan.b, wan.mbps, wan.delay_us, wan.loss, wan.queue_bytes, wan.shaped) == \
        ("euspine0", "usspine0", 20.0, 10_000.0, 0.01, 256 * 1024, True)
    assert wan.a_port == 3 and wan.b_port == 3          # after the site's own ports


def test_time_scale_scales_the_wan_and_the_sites_and_builds_the_same_again():
    p = FabricParams("clos", 2, 2, nic_mbps=400_000, time_scale=10_000, sites=TWO,
                     wan=[{"a": "eu", "b": "us", "mbps": 100_000, "delay_us": 1000}])
    (wan,) = build("clos", 2, 2, nic_mbps=400_000, time_scale=10_000, sites=TWO, wan=p.to_json()["wan"]).wan_links()
    assert (wan.mbps, wan.delay_us) == (10.0, 10_000_000.0)
    assert sites.site_params(p)["us"].nic_mbps == 40.0
    assert FabricParams(**p.to_json()) == p


def test_a_site_inherits_the_fabric_section_and_overrides_it():
    p = FabricParams("rail-optimized", 2, 4, spines=2, cpu_hosts=1, sites={"a": {}, "b": {"kind": "clos"}},
                     wan=[{"a": "a", "b": "b", "mbps": 5}])
    a, b = sites.site_params(p).values()
    assert (a.kind, a.servers, a.gpus_per_server, a.spines, b.kind) == ("rail-optimized", 2, 4, 2, "clos")
    assert (p.servers, p.cpu_hosts) == (4, 2)
    assert p.sites == {"a": {"servers": 2, "cpu_hosts": 1}, "b": {"kind": "clos", "servers": 2, "cpu_hosts": 1}}


def test_routes_cross_the_wan_between_spine_gateways():
    f = two_sites()
    topo = Topology(f.to_controller())
    routes = topo.routes("ecmp")
    for host in f.hosts.values():
        assert all(host.ip in routes[s.name] for s in f.sdn_switches())      # every switch reaches every host
    (wan,) = f.wan_links()
    assert routes["euspine0"][f.hosts["s4g1"].ip] == [wan.a_port]
    topo.set_port("euspine0", wan.a_port, False)                              # the WAN link cut
    assert f.hosts["s4g1"].ip not in topo.routes("ecmp")["eutor0"]
    assert f.hosts["s1g1"].ip in topo.routes("ecmp")["eutor0"]                 # the site still routes within


def test_front_end_gateways_carry_other_sites_traffic_and_keep_a_rail_only_sites_rails_apart():
    f = build("rail-only", 2, 2, cpu_hosts=1, sites={"eu": {}, "us": {}}, wan=[{"a": "eu:fe0", "b": "us:fe0",
                                                                                 "mbps": 10}])
    routes = Topology(f.to_controller()).routes("single")
    ip = {h: f.hosts[h].ip for h in f.hosts}
    assert ip["s0g1"] not in routes["eurail0"]                  # rail 0 to rail 1 within a site: no route
    assert ip["s2g1"] in routes["eurail0"] and ip["s0g1"] in routes["usrail0"]      # across sites: over fe0
    assert f.nic_reachable(f.hosts["s0g0"], f.hosts["s2g1"]) and not f.nic_reachable(f.hosts["s0g0"],
                                                                                     f.hosts["s0g1"])


def test_a_site_lost_is_every_wan_link_it_has():
    f = build("clos", 1, 2, sites={"a": {}, "b": {}, "c": {}}, wan=[{"a": "a", "b": "b", "mbps": 5},
                                                                   {"a": "b", "b": "c", "mbps": 5}])
    assert [l.name for l in resolve(f, "site:b")] == ["aspine0-bspine0", "bspine0-cspine0"]
    assert [l.name for l in resolve(f, "aspine0-bspine0")] == ["aspine0-bspine0"]
    with pytest.raises(FaultError, match=r"no site 'd' in this fabric \(sites: a, b, c\)"):
        resolve(f, "site:d")


def test_each_site_is_drawn_in_a_span_of_its_own():
    f = two_sites()
    pos = layout(f)
    eu = [pos[n][0] for n in pos if f.site_of(n) == "eu"]
    us = [pos[n][0] for n in pos if f.site_of(n) == "us"]
    assert max(eu) < min(us)


@pytest.mark.parametrize("kw,words", [
    ({"sites": {"eu": {}}}, "sites must be a map of two or more site names"),
    ({"sites": {"Europe": {}, "us": {}}}, "site name 'Europe' must be 1-3 lowercase letters"),
    ({"sites": {"eu": {"nic_mbps": 5}, "us": {}}}, "sites.eu: unknown key 'nic_mbps' (the whole fabric's"),
    ({"sites": {"eu": {"servers": 0}, "us": {}}}, "sites.eu: servers must be between 1 and 200, got 0"),
    ({"sites": {"eu": {}, "us": {}}}, "sites: 'us' is joined to no other site"),
    ({"sites": {"eu": {}, "us": {}}, "wan": [{"a": "eu", "b": "eu", "mbps": 5}]}, "wan[0]: joins site 'eu' to itself"),
    ({"sites": {"eu": {}, "us": {}}, "wan": [{"a": "eu", "b": "jp", "mbps": 5}]}, "wan[0].b: no site 'jp'"),
    ({"sites": {"eu": {}, "us": {}}, "wan": [{"a": "eu", "b": "us"}]}, "wan[0] needs mbps"),
    ({"sites": {"eu": {}, "us": {}}, "wan": [{"a": "eu", "b": "us", "mbps": 5, "delay_us": -1}]},
     "wan[0].delay_us must be a delay in us"),
    ({"sites": {"eu": {}, "us": {}}, "wan": [{"a": "eu", "b": "us", "mbps": 5, "loss": 1}]},
     "wan[0].loss must be a share of frames in [0, 1), got 1"),
    ({"sites": {"eu": {}, "us": {}}, "wan": [{"a": "eu:spine7", "b": "us", "mbps": 5}]},
     "wan[0].a: site 'eu' has no switch 'spine7'"),
    ({"sites": {"eu": {}, "us": {}}, "wan": [{"a": "eu", "b": "us", "mbps": 5, "queue_kb": 1}]},
     "wan[0]: a queue of 1024 bytes holds no 9000-byte frame"),
    ({"sites": {"eu": {}, "us": {}}, "links": {"rail0-spine0": {"mbps": 1}}}, "links: with sites, each site gives"),
    ({"sites": {"abc": {"servers": 10}, "us": {}}, "wan": [{"a": "abc", "b": "us", "mbps": 5}]},
     f"longer than the kernel's {IFNAMSIZ} characters"),
])
def test_bad_sites_are_one_line_naming_the_problem(kw, words):
    with pytest.raises(TopologyError) as err:
        build("clos", 2, 2, **kw)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_rail_only_site_without_a_front_end_needs_a_named_gateway():
    with pytest.raises(TopologyError, match="site 'eu' has no spine and no front-end switch; name a gateway"):
        build("rail-only", 1, 2, sites={"eu": {}, "us": {"kind": "clos"}}, wan=[{"a": "eu", "b": "us", "mbps": 5}])
    f = build("rail-only", 1, 2, sites={"eu": {}, "us": {"kind": "clos"}},
              wan=[{"a": "eu:rail1", "b": "us", "mbps": 5}])
    assert [l.name for l in f.wan_links()] == ["eurail1-usspine0"]


def test_the_heatmap_and_captures_reach_the_wan_link():
    from testbed.monitor.capture import interface
    from testbed.results.heatmap import rows
    f = two_sites()
    (wan,) = f.wan_links()
    last = rows(f)[-1]
    assert (last.link, last.port, last.tier, last.mbps) == ("euspine0-usspine0", f"euspine0:{wan.a_port}", "wan", 20.0)
    assert interface(f, f"usspine0:{wan.b_port}")[1].endswith(f"usspine0-p{wan.b_port}")


def test_a_cut_that_splits_the_sites_says_which_are_apart():
    from testbed.faults import REGISTRY
    f = build("clos", 1, 2, sites={"a": {}, "b": {}, "c": {}}, wan=[{"a": "a", "b": "b", "mbps": 5},
                                                                   {"a": "b", "b": "c", "mbps": 5}])
    assert sites.apart(f, resolve(f, "bspine0-cspine0")) == [["a", "b"], ["c"]]
    assert sites.apart(f, resolve(f, "site:b")) == [["a"], ["b"], ["c"]]
    assert sites.apart(f, resolve(f, "ator0-aspine0")) == [] and sites.apart(build("clos", 2, 2), []) == []
    kind = REGISTRY["link-down"]
    record = {"kind": "link-down", "target": "bspine0-cspine0", "at_s": 1.0, "detected_s": 1.01,
              "installed_s": 1.02, "restored_s": 3.0}
    kind.outcome(record, [], 0.0, f)
    assert record["sites_apart"] == [["a", "b"], ["c"]]
    assert "sites apart until restored: a, b | c" in kind.describe(record)
