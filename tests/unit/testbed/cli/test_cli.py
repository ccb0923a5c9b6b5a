"""The CLI as a user runs it: JSON topologies without root, one-line errors with exit status 2."""
import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

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
    (["topo", "rail-only", "--servers", "2", "--gpus", "2", "--machines", "a,b,c"], "3 machines but the fabric has 2"),
    (["topo", "rail-only", "--servers", "2", "--gpus", "2", "--machines", "a,,b"], "'' is not a host name"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    p = run_cli(*args)
    assert p.returncode == 2
    assert message in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 3


def test_every_workload_is_validated_before_bring_up(tmp_path):
    """An offload without CPU hosts is refused with exit status 2 before anything is brought up (it used to
    fail after bring-up with exit 1): the runner validates every workload type through the registry."""
    path = tmp_path / "scenario.yaml"
    path.write_text("name: f\nfabric: {kind: rail-optimized, servers: 1, gpus_per_server: 2}\n"
                    "workloads: [{type: offload}]\n")
    p = run_cli("run", str(path))
    assert p.returncode == 2 and "workloads.0: offload needs CPU hosts" in p.stderr, p.stderr


def test_binary_scenario_file_is_one_line_exit_2(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_bytes(b"name: x\n\xff\xfe\x00\x91 binary")
    p = run_cli("run", str(path))
    assert p.returncode == 2 and "not a text file (byte 8 is not UTF-8)" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content,message", [
    (b"\x00\x00\x00", "not a text file (control character #x0000 at character 0)"),      # decodes, but NULs
    (b"name: x\x01\n", "not a text file (control character #x0001 at character 7)"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a text file (byte 0 is not UTF-8)"),
    (b"\xff\xfen\x00a\x00", "not a text file (byte 0 is not UTF-8)"),                      # UTF-16
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "not a text file (byte 1 is not UTF-8)"),  # gzip
])
def test_undecodable_scenario_files_are_one_line_exit_2(tmp_path, content, message):
    path = tmp_path / "scenario.yaml"
    path.write_bytes(content)
    p = run_cli("run", str(path))
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    (tmp_path / "past").mkdir()                      # the same file as a past run's scenario (--again)
    (tmp_path / "past" / "scenario.yaml").write_bytes(content)
    p = run_cli("run", "--again", str(tmp_path / "past"))
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_topo_shows_the_placement_over_machines():
    p = run_cli("topo", "rail-optimized", "--servers", "4", "--gpus", "4", "--machines", "m1,m2")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[-4:] == ["placed by rails on 2 machines:",
                          "  m1: 5 switches (rail0, rail1, spine0, hb0, hb2), 8 hosts",
                          "  m2: 5 switches (rail2, rail3, spine1, hb1, hb3), 8 hosts",
                          "  between machines: 12 links: 8 hb (360 Mbit/s), 4 uplink (40 Mbit/s)"]
    p = run_cli("topo", "rail-only", "--servers", "2", "--gpus", "2", "--machines", "a,b", "--json")
    placed = json.loads(p.stdout)["placement"]
    assert placed["machines"]["a"] == {"switches": ["rail0", "hb0"], "hosts": ["s0g0", "s1g0"]}
    assert {c["kind"] for c in placed["crossing"]} == {"hb"} and placed["crossing_mbps"] == 90.0


def test_topo_warns_about_options_the_fabric_kind_ignores():
    p = run_cli("topo", "rail-only", "--servers", "2", "--gpus", "2", "--spines", "4", "--oversubscription", "2")
    assert p.returncode == 0 and p.stdout.startswith("rail-only: 2 servers x 2 GPUs, 4 switches")
    assert p.stderr.splitlines() == ["warning: --spines: a rail-only fabric has no use for it; ignored",
                                     "warning: --oversubscription: a rail-only fabric has no use for it; ignored"]
    p = run_cli("topo", "rail-only", "--servers", "2", "--gpus", "2")
    assert p.returncode == 0 and p.stderr == ""
    p = run_cli("topo", "clos", "--servers", "2", "--gpus", "2", "--spines", "3")
    assert p.returncode == 0 and p.stderr == "" and "7 switches" in p.stdout


def run_with_extra(tmp_path, extra: str, fabric: str = "{kind: clos}"):
    """`testbed run` on a minimal clos scenario with one more top-level section."""
    path = tmp_path / "scenario.yaml"
    path.write_text(f"name: f\nfabric: {fabric}\nworkloads: [{{type: connectivity}}]\n{extra}\n")
    return run_cli("run", str(path))


@pytest.mark.parametrize("point,message", [
    ("s9g0/nic", "capture.0: unknown capture point 's9g0/nic'"),
    ("tor0:3", "capture.0: tor0:3 is an OVS patch port"),
    ("tor0:9", "capture.0: switch tor0 has no port 9"),
])
def test_bad_capture_points_are_named(point, message, tmp_path):
    # uplinks are patch ports only with ideal_uplinks
    p = run_with_extra(tmp_path, f"capture: [{{point: '{point}'}}]", "{kind: clos, ideal_uplinks: true}")
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


def _rewrite_pcap(src, dst, change):
    """Write dst with change(frame bytes) -> (kept bytes, wire length) applied to every frame of src."""
    from scapy.layers.l2 import Ether
    from scapy.utils import rdpcap, wrpcap
    out = []
    for i, frame in enumerate(rdpcap(src)):
        kept, wire = change(i, bytes(frame))
        pkt = Ether(kept)
        pkt.wirelen = wire
        out.append(pkt)
    wrpcap(dst, out)
    return [len(bytes(f)) for f in rdpcap(src)]


def test_pcap_summarize_counts_truncated_packets_apart_from_bad_icrc(tmp_path):
    """A capture cut at 128 bytes: the cut RoCE packets are 'truncated', never 'bad ICRC' or 'malformed'."""
    src, cut = os.path.join(ROOT, "tests", "data", "rxe", "rc_read.pcap"), str(tmp_path / "cut.pcap")
    lengths = _rewrite_pcap(src, cut, lambda i, b: (b[:128], len(b)))
    longer = sum(n > 128 for n in lengths)
    assert 0 < longer < len(lengths)            # the file mixes cut data packets with whole short ones
    p = run_cli("pcap", "summarize", cut, "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["truncated"] == longer and s["bad_icrc"] == 0 and s["malformed"] == 0, s
    assert s["icrc_checked"] == len(lengths) - longer
    assert s["bytes"] == sum(lengths)           # bytes on the wire, not what the snaplen kept
    p = run_cli("pcap", "summarize", cut)
    assert f"{longer} truncated (ICRC not checkable), 0 bad ICRC, 0 malformed" in p.stdout, p.stdout


def test_pcap_summarize_finds_corrupted_icrcs(tmp_path):
    """Whole packets with a flipped payload bit fail the ICRC check, one count each."""
    src, bad = os.path.join(ROOT, "tests", "data", "rxe", "rc_read.pcap"), str(tmp_path / "bad.pcap")
    flip = lambda b: b[:-5] + bytes([b[-5] ^ 0x01]) + b[-4:]
    lengths = _rewrite_pcap(src, bad, lambda i, b: ((flip(b) if i % 3 == 0 else b), len(b)))
    s = json.loads(run_cli("pcap", "summarize", bad, "--json").stdout)
    assert s["bad_icrc"] == len(range(0, len(lengths), 3)) and s["truncated"] == 0, s


def test_snaplen_that_cuts_roce_is_warned_about_at_validation():
    from hosts.rdma.mtu import HB_MTU
    from testbed.fabric.topo import build
    from testbed.monitor import capture
    fabric = build("rail-only", 2, 2, nic_mtu=1500)
    warnings = capture.snaplen_warnings(fabric, [{"point": "s0g0/nic", "snaplen": 128},
                                                 {"point": "s0g0/nic"},
                                                 {"point": "s0g0/hb", "snaplen": 1514},
                                                 {"point": "rail0:1", "snaplen": 1514}])
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("capture.0: snaplen 128 cuts frames at s0g0/nic (up to 1514 bytes)")
    assert "ICRCs in that pcap will not be checkable" in warnings[0]
    assert warnings[1].startswith(f"capture.2: snaplen 1514 cuts frames at s0g0/hb (up to {HB_MTU + 14} bytes)")


def test_shipped_scenarios_capture_whole_packets():
    import glob

    import yaml

    from testbed import runner
    from testbed.monitor import capture
    for path in glob.glob(os.path.join(ROOT, "scenarios", "*.yaml")):
        with open(path) as f:
            doc = yaml.safe_load(f)
        if doc.get("capture"):
            assert capture.snaplen_warnings(runner.fabric_of(doc), doc["capture"]) == [], path


@pytest.mark.parametrize("fault,message", [
    ("{at: 1, kind: link-down, target: rail7-spine0}", "faults.0: unknown fault target 'rail7-spine0'"),
    ("{at: 1, kind: gpu-melt, target: s0g0}", "faults.0.kind: 'gpu-melt' is not one of"),
    ("{at: -1, kind: link-down, target: tor0-spine0}", "faults.0.at: -1 is less than the minimum"),
])
def test_bad_faults_are_named(fault, message, tmp_path):
    p = run_with_extra(tmp_path, f"faults: [{fault}]")
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_pcap_summarize_counts_cnps_and_ecn_marks(tmp_path):
    """A capture of uroce under CE marking: the CNPs are counted (not as retransmissions), and so are the
    ECN-capable and CE-marked RoCE packets."""
    from hosts.rdma import headers as H
    from hosts.rdma.transport import PcapWriter, set_ce
    a, b = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    data = [bytes(H.encode(a, b, 0xC000, i, H.SEND_ONLY, 0x11, i, payload=b"x" * 64, tos=H.ECT0))
            for i in range(6)]
    pkts = data[:2] + [set_ce(d) for d in data[2:]] + [bytes(H.encode_cnp(b, a, 0xC000, 9, 0x12))] * 3
    path = str(tmp_path / "cnp.pcap")
    w = PcapWriter(path)
    for pkt in pkts:
        w.write(pkt)
    w.close()
    s = json.loads(run_cli("pcap", "summarize", path, "--json").stdout)
    assert (s["cnps"], s["ecn_capable"], s["ecn_ce"], s["retransmissions"], s["bad_icrc"]) == (3, 6, 4, 0, 0), s
    assert s["opcodes"]["CNP"] == 3
    assert "DCQCN: 3 CNPs, 4 CE-marked of 6 ECN-capable" in run_cli("pcap", "summarize", path).stdout
