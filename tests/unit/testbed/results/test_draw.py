"""The fabric drawn: every fabric kind, a run's bytes per link and its faults marked; bad file names refused."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from testbed.fabric.topo import build
from testbed.results import draw

from tests.paths import ROOT


def svg_texts(path):
    return {"".join(t.itertext()).strip() for t in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}text")}


@pytest.mark.parametrize("kind,params", [
    ("rail-only", dict(servers=3, gpus_per_server=3)),
    ("rail-optimized", dict(servers=2, gpus_per_server=4, spines=3, spares_per_server=1, cpu_hosts=2)),
    ("clos", dict(servers=3, gpus_per_server=2, spines=2, spare_servers=1)),
])
def test_every_kind_draws_every_switch_and_host(kind, params, tmp_path):
    fabric = build(kind, **params)
    path = draw.draw(fabric, str(tmp_path / "f.svg"))
    names = svg_texts(path)
    expected = {s.name for s in fabric.switches.values()} | set(fabric.hosts)   # HB domains are labelled boxes
    assert expected <= names, expected - names
    pos = draw.layout(fabric)
    assert len(set(pos.values())) == len(pos)              # no two nodes on one spot


def test_a_runs_bytes_and_faults_are_drawn(tmp_path):
    fabric = build("rail-optimized", 2, 2, spines=2)
    link = next(l for l in fabric.links if {l.a, l.b} == {"rail0", "spine1"})
    counters = {f"{link.a}:{link.a_port}": {"tx_bytes": 3_000_000, "rx_bytes": 1_000_000}}
    carried = draw.link_bytes(fabric, counters)
    assert carried == {link: 4_000_000}
    links, hosts = draw.fault_marks(fabric, [{"kind": "link-down", "target": "rail0-spine1"},
                                             {"kind": "gpu-crash", "target": "s1g0"},
                                             {"kind": "switch-down", "target": "spine0"},
                                             {"kind": "link-down", "target": "rail9-spine9"}])
    assert link in links and hosts == {"s1g0"}
    assert all("spine0" in (l.a, l.b) for l in links - {link}) and len(links) == 1 + 2
    results = {"scenario": "t", "links": counters, "faults": [{"kind": "gpu-crash", "target": "s1g0"}]}
    names = svg_texts(draw.draw_run(fabric, results, str(tmp_path / "run.svg")))
    assert "width: bytes carried (max 4.0 MB)" in names and "hit by a fault" in names


def test_topo_draw_from_the_cli(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "testbed.cli", "topo", "rail-only", "--servers", "2",
                                     "--gpus", "2", *a], capture_output=True, text=True, cwd=ROOT, timeout=60)
    p = run("--draw", str(tmp_path / "f.png"))
    assert p.returncode == 0 and os.path.getsize(tmp_path / "f.png") > 5000, p.stderr
    p = run("--draw", str(tmp_path / "f.txt"))
    assert p.returncode == 2 and "must end in .svg, .png or .pdf" in p.stderr and "Traceback" not in p.stderr
    p = run("--draw", str(tmp_path / "no" / "such" / "dir.svg"))
    assert p.returncode == 2 and "No such file or directory" in p.stderr and "Traceback" not in p.stderr


def test_topo_json_gives_ports_as_the_counters_name_them():
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "topo", "clos", "--servers", "2", "--gpus", "2", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    links = json.loads(p.stdout)["links"]
    tor_ports = sorted(l[2]["b_port"] for l in links if l[1] == "tor0" and l[2]["kind"] == "nic")
    assert tor_ports == [1, 2]
