"""`testbed topo --json` port numbers: unique per switch, and the very numbers the controller is given."""
import json
import subprocess
import sys

import pytest

from testbed.fabric.links import switch_port
from testbed.fabric.topo import build

from tests.paths import ROOT

FABRICS = [
    ("rail-only", dict(servers=3, gpus_per_server=2, cpu_hosts=2, spares_per_server=1, spare_servers=1)),
    ("rail-optimized", dict(servers=2, gpus_per_server=4, spines=3, cpu_hosts=1, spares_per_server=2,
                            spare_servers=1, oversubscription=2)),
    ("clos", dict(servers=3, gpus_per_server=2, spines=2, cpu_hosts=2, spares_per_server=1, spare_servers=2)),
]


def ends(j: dict):
    """(node, port, intf, ofport) of every link end in a `topo --json`, circuits included."""
    links = j["links"] + [c for cs in j["circuits"].values() for c in cs]
    for a, b, d in links:
        yield a, d["a_port"], d["a_intf"], d["a_ofport"]
        yield b, d["b_port"], d["b_intf"], d["b_ofport"]


@pytest.mark.parametrize("kind,params", FABRICS)
def test_each_switch_port_is_unique(kind, params):
    fabric = build(kind, **params)
    j = fabric.to_json()
    by_switch: dict[str, list] = {}
    for node, port, intf, of in ends(j):
        if node in fabric.switches:
            by_switch.setdefault(node, []).append((port, intf, of))
            assert intf == switch_port(node, port)
            assert of == (port if fabric.switches[node].sdn else None)     # HB domains are Linux bridges
        else:
            assert (intf, of) == (f"eth{port}", None)
    assert set(by_switch) == set(fabric.switches)
    for sw, ports in by_switch.items():
        numbers = [p for p, _, _ in ports]
        assert len(set(numbers)) == len(numbers), (sw, sorted(numbers))
        assert len({i for _, i, _ in ports}) == len(ports)


@pytest.mark.parametrize("kind,params", FABRICS)
def test_ports_are_those_the_controller_is_given(kind, params):
    fabric = build(kind, **params)
    j, ctl = fabric.to_json(), fabric.to_controller()
    listed = {(a, b): (d["a_ofport"], d["b_ofport"]) for a, b, d in j["links"] + [c for cs in j["circuits"].values()
                                                                                   for c in cs]}
    sdn = {s["name"] for s in ctl["switches"]}
    for link in ctl["links"]:
        want = tuple(link[f"{e}_port"] if link[e] in sdn else None for e in ("a", "b"))
        assert listed[(link["a"], link["b"])] == want, link
    # `ports` names every OpenFlow port the controller knows, by its counter name, and only those
    controller_ports = {f"{link[e]}:{link[f'{e}_port']}" for link in ctl["links"] for e in ("a", "b") if link[e] in sdn}
    assert set(j["ports"]) == controller_ports
    for name, p in j["ports"].items():
        switch, port = name.split(":")
        assert p["intf"] == switch_port(switch, int(port))
        assert any({link["a"], link["b"]} == {switch, p["peer"]} for link in ctl["links"])


def test_spare_circuits_are_listed_with_their_reserved_ports():
    fabric = build("rail-optimized", 2, 3, spares_per_server=1)
    j = fabric.to_json()
    # a spare GPU's NIC is parked on rail0; the ports reserved for it on rail1 and rail2 are circuits
    assert [c[1] for c in j["circuits"]["s0spare0"]] == ["rail1", "rail2"]
    parked = next(d for a, b, d in j["links"] if a == "s0spare0" and d["kind"] == "nic")
    assert parked["standby"] and parked["b_intf"].endswith("-rail0-p" + str(parked["b_port"]))
    assert j["ports"]["rail2:" + str(j["circuits"]["s0spare0"][1][2]["b_port"])]["peer"] == "s0spare0"


def test_cli_json_has_the_ports():
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "topo", "clos", "--servers", "2", "--gpus", "2",
                        "--cpu-hosts", "1", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    nic = next(d for a, b, d in j["links"] if (a, b) == ("s1g1", "tor1"))
    assert (nic["a_intf"], nic["b_intf"], nic["b_ofport"]) == ("eth0", "tb-tor1-p2", 2)
    assert j["ports"]["tor1:2"] == {"intf": "tb-tor1-p2", "kind": "nic", "peer": "s1g1", "peer_port": 0}
    uplink = next(d for a, b, d in j["links"] if (a, b) == ("tor0", "spine0"))
    assert j["ports"][f"spine0:{uplink['b_ofport']}"]["peer"] == "tor0"
