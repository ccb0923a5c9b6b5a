"""Integration (root): ECN marking on a fabric (fabric.ecn). Two paced UDP flows, one ECN-capable (ECT(0)) and one
not, converge on s1g0 at 0.9 x NIC each: the switch port into it (rail0>s1g0) gets 1.8 times what it can send,
and its queue passes Kmin. The receiver counts the TOS of every datagram (IP_RECVTOS) and a capture is read back
with scapy: the ECN-capable flow arrives partly CE with sound header checksums, the other never CE, and an idle
port marks nothing. While the queue builds, the program's virtual queue follows the real tbf queue."""
import json
import os
import subprocess
import sys
import time

import pytest
from scapy.layers.inet import IP
from scapy.utils import rdpcap

from testbed.fabric import ecn
from testbed.fabric.links import switch_port
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import beat_watch
from tests.paths import ROOT

pytestmark = [pytest.mark.root, pytest.mark.alone]   # paced senders need the CPU to keep their pace

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ecn_udp.py")
NIC_MBPS, SECONDS, PORT = 10, 3.0, 5999
RED = {"kmin_kb": 20, "kmax_kb": 200, "pmax": 0.2}
ECT0, NOT_ECT, CE = 0b10, 0b00, 0b11


@pytest.fixture(scope="module", autouse=True)
def can_mark():
    lacking = ecn.missing()
    if lacking:
        pytest.skip(f"cannot mark ECN here: {lacking}")


def port_into(fabric, switch: str, host: str) -> str:
    """The switch's port device on its link to the host."""
    link = next(l for l in fabric.links if {l.a, l.b} == {switch, host})
    return switch_port(switch, link.a_port if link.a == switch else link.b_port)


def tbf_backlog(dev: str) -> int:
    out = json.loads(subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", dev, "root"], capture_output=True,
                                    text=True, check=True).stdout)
    return next(q["backlog"] for q in out if q["kind"] == "tbf")


@pytest.mark.parametrize("delay_us", [0, 2000], ids=["no-delay", "delay-line"])
def test_an_incast_marks_ect_packets_above_kmin_only_never_not_ect_and_not_on_idle_ports(tmp_path, delay_us):
    """With a link delay, the delay line holds the port's rate and queue, and sends each frame again after its
    delay: the program still sees each frame once, as offered."""
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=NIC_MBPS, ecn=RED, delay_us={"nic": delay_us})
    bottleneck, idle = port_into(fabric, "rail0", "s1g0"), port_into(fabric, "rail1", "s1g1")
    pcap = str(tmp_path / "s1g0.pcap")
    with Network(fabric) as net:
        dst = net.host("s1g0")
        ip = dst.IP()
        capture = dst.popen(["tcpdump", "-i", "eth0", "-w", pcap, "-s", "64", "-U", "udp", "port", str(PORT)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        receiver = dst.popen([sys.executable, HELPER, "receive", str(PORT), str(SECONDS + 3)],
                             stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        senders = [net.host(h).popen([sys.executable, HELPER, "send", ip, str(PORT), str(tos), str(0.9 * NIC_MBPS),
                                      str(SECONDS)], stdout=subprocess.PIPE, text=True)
                   for h, tos in (("s0g0", ECT0), ("s0g1", NOT_ECT))]
        pairs = []                                   # (real tbf backlog, virtual queue) while the queue builds
        for _ in range(10 if not delay_us else 0):        # with a delay, the tbf is the delay line's
            time.sleep(0.1)
            pairs.append((tbf_backlog(bottleneck), ecn.counters(bottleneck)["virtual_queue_bytes"]))
        sent = [json.loads(s.communicate(timeout=60)[0]) for s in senders]
        counts = {int(k): v for k, v in json.loads(receiver.communicate(timeout=60)[0]).items()}
        capture.terminate()
        capture.wait(timeout=10)
        marks = net.ecn_counters()
    hot, cold = marks[bottleneck], marks[idle]
    # Once each, not twice: at most what the senders sent (and a few frames of the fabric's own), at least what the
    # receiver got. Not measured against the offered load: a sender starved on a busy machine sends late, in a
    # burst its own NIC's queue drops, and the port never sees those.
    received, ect_received = sum(counts.values()), counts.get(ECT0, 0) + counts.get(CE, 0)
    assert received <= hot["packets"] <= sum(x["sent"] for x in sent) + 20, (hot, counts, sent)
    assert ect_received <= hot["ect_packets"] <= sent[0]["sent"] and hot["marked_packets"] > 0, (hot, counts, sent)
    assert cold["marked_packets"] == 0 and cold["ect_packets"] == 0, cold
    assert 0 < hot["marked_packets"] < hot["ect_packets"], hot
    # the receiver: ECT(0) datagrams, some CE; the Not-ECT flow's never CE
    assert counts.get(ECT0, 0) > 0 and counts.get(CE, 0) > 0 and counts.get(NOT_ECT, 0) > 0, counts
    assert set(counts) <= {ECT0, CE, NOT_ECT}, counts
    assert counts[CE] <= hot["marked_packets"], (counts, hot)     # the queue's overflow drops some marked ones too
    # every CE packet on the wire has a sound header checksum
    packets = [p[IP] for p in rdpcap(pcap) if IP in p]
    ce = [p for p in packets if p.tos & 3 == CE]
    assert ce, "no CE packet captured"
    for p in ce:
        sent = p.chksum
        del p.chksum
        assert IP(bytes(p)).chksum == sent
    # the virtual queue follows the real one as it builds (before the real queue's limit: then it drops, and the
    # virtual queue, which counts what the real one admits, stays there too)
    if delay_us:
        return
    building = [(real, virtual) for real, virtual in pairs if 0 < real]
    assert building, pairs
    for real, virtual in building:
        assert abs(virtual - real) <= 0.25 * real + 64 * 1024, pairs


@pytest.mark.slow
def test_with_marking_on_every_port_heartbeats_still_go_first():
    """The marking program runs ahead of each port's qdiscs and leaves their classes alone: heartbeats keep their
    priority over filling queues (test_liveness.py has the control, where without it live peers go silent)."""
    fabric = build("rail-optimized", 2, 2, nic_mbps=5, ecn=RED)
    with Network(fabric, routing="ecmp") as net:
        r = beat_watch.run(net, 20, timeout=1.0, flood=True)
        seen = net.ecn_counters()
    assert r["false"] == [] and r["max_silence_s"] < 1.0, r
    assert len(seen) == len(ecn.port_ends(fabric)) and sum(c["packets"] for c in seen.values()) > 0, seen


INCAST = """
name: ecn-incast
fabric: {kind: rail-optimized, servers: 2, gpus_per_server: 2, spines: 2, nic_mbps: 10,
         ecn: {kmin_kb: 20, kmax_kb: 200, pmax: 0.2}}
workloads:
  - {type: traffic, name: incast, pattern: pairs, pairs: [[s0g0, s1g0], [s0g1, s1g0]], protocol: udp, size: 2MiB,
     rate_mbps: 9, expect: {max_loss: 1}}
"""


def test_a_run_writes_the_ports_marks_to_queues_json_results_and_summary(tmp_path):
    """The traffic workload's UDP is Not-ECT: the congested port sees it and marks none of it."""
    path = tmp_path / "scenario.yaml"
    path.write_text(INCAST)
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    results = json.loads((out / "results.json").read_text())
    rows = {r["port"]: r for r in json.loads((out / "queues.json").read_text())["ports"]}
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=10, ecn=RED)
    assert {name for name, r in rows.items() if "ecn" in r} == \
        {f"{node}>{l.b if node == l.a else l.a}" for node, _, l in ecn.port_ends(fabric)}
    hot = rows["rail0>s1g0"]["ecn"]
    assert hot["packets"] > 1000 and max(rows["rail0>s1g0"]["backlog_bytes"]) > RED["kmax_kb"] * 1024, hot
    assert hot["ect_packets"] == hot["marked_packets"] == 0, hot
    e = results["queues"]["ecn"]
    assert e["ports"] == len(ecn.port_ends(fabric)) and e["marked_packets"] == 0 and e["most_marked"] == []
    summary = (out / "summary.md").read_text()
    assert f"ECN marking on {e['ports']} switch ports: 0 packets marked CE of 0 ECN-capable" in summary
