"""The CLI as a user runs it: JSON topologies without root, one-line errors with exit status 2."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "scenarios")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_topo_json():
    p = run_cli("topo", "rail-optimized", "--servers", "4", "--gpus", "8", "--spines", "2", "--json")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)
    assert t["kind"] == "rail-optimized"
    assert len([h for h in t["hosts"] if h.startswith("s")]) == 32
    assert sum(1 for s in t["switches"] if s.startswith("rail")) == 8
    uplinks = [l for l in t["links"] if l[0].startswith("rail") and l[1].startswith("spine")]
    assert len(uplinks) == 16 and all(l[2]["mbps"] == 4 * 5 / 2 for l in uplinks)


def test_topo_text():
    p = run_cli("topo", "clos", "--servers", "2", "--gpus", "2")
    assert p.returncode == 0 and "clos: 2 servers x 2 GPUs" in p.stdout


@pytest.mark.parametrize("args,message", [
    (["topo", "ring", "--servers", "2", "--gpus", "2"], "unknown fabric kind 'ring'"),
    (["topo", "rail-only", "--servers", "0", "--gpus", "2"], "servers must be between 1"),
    (["topo", "rail-only", "--servers", "two", "--gpus", "2"], "invalid int value"),
    (["run", os.path.join(FIXTURES, "yaml_error.yaml")], "malformed YAML"),
    (["run", os.path.join(FIXTURES, "gpus_error.yaml")], "gpus_per_server must be between"),
    (["run", os.path.join(FIXTURES, "kind.yaml"), "--set", "fabric.kind=mesh"], "'mesh' is not one of"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    p = run_cli(*args)
    assert p.returncode == 2
    assert message in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 3


def run_with_extra(tmp_path, extra: str):
    """`testbed run` on a minimal clos scenario with one more top-level section."""
    path = tmp_path / "scenario.yaml"
    path.write_text(f"name: f\nfabric: {{kind: clos}}\nworkloads: [{{type: connectivity}}]\n{extra}\n")
    return run_cli("run", str(path))


@pytest.mark.parametrize("point,message", [
    ("s9g0/nic", "capture.0: unknown capture point 's9g0/nic'"),
    ("tor0:3", "capture.0: tor0:3 is an OVS patch port"),
    ("tor0:9", "capture.0: switch tor0 has no port 9"),
])
def test_bad_capture_points_are_named(point, message, tmp_path):
    p = run_with_extra(tmp_path, f"capture: [{{point: '{point}'}}]")
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_pcap_summarize_reads_real_rxe_captures():
    p = run_cli("pcap", "summarize", os.path.join(ROOT, "tests", "data", "rxe", "rc_read.pcap"), "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["packets"] == s["roce_packets"] == 100 and s["bad_icrc"] == 0 and s["retransmissions"] == 0
    assert set(s["opcodes"]) == {"RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_FIRST",
                                 "RC_RDMA_READ_RESPONSE_MIDDLE", "RC_RDMA_READ_RESPONSE_LAST"}
    p = run_cli("pcap", "summarize", os.path.join(ROOT, "README.md"))
    assert p.returncode == 2 and "not a pcap" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("fault,message", [
    ("{at: 1, kind: link-down, target: rail7-spine0}", "faults.0: unknown fault target 'rail7-spine0'"),
    ("{at: 1, kind: gpu-melt, target: s0g0}", "faults.0.kind: 'gpu-melt' is not one of"),
    ("{at: -1, kind: link-down, target: tor0-spine0}", "faults.0.at: -1 is less than the minimum"),
])
def test_bad_faults_are_named(fault, message, tmp_path):
    p = run_with_extra(tmp_path, f"faults: [{fault}]")
    assert p.returncode == 2 and message in p.stderr, p.stderr
