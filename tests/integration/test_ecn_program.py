"""The ECN marking program itself (testbed/fabric/ecn_mark.bpf.c), compiled and attached on a veth of a namespace of
its own, run on frames scapy builds (BPF_PROG_TEST_RUN, through bpftool) at virtual queues the test writes into
its state map: CE on ECN-capable packets only, a valid header checksum, RED's curve, and the queue's drain, which
stops while PFC pauses the port."""
import os
import subprocess
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from testbed.fabric import ecn
from testbed.fabric.links import fabric_tag, tbf_burst

pytestmark = pytest.mark.root

MBPS, MTU, LIMIT = 10.0, 9000, 1 << 20
BURST = tbf_burst(MBPS, MTU)
FUTURE = 1 << 62           # a last update ahead of the clock: the queue does not drain between the test's steps


@pytest.fixture(scope="module")
def port():
    lacking = ecn.missing()
    if lacking:
        pytest.skip(f"cannot mark ECN here: {lacking}")
    ns = f"tb{fabric_tag()}ecn{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"], check=True)
        ecn.attach("v0", ecn.compiled(), ns)
        yield ns, ecn.maps("v0", ns), ecn.program_id("v0", ns)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def configure(port, t: ecn.Thresholds) -> None:
    ns, maps, _ = port
    ecn.write_map(maps["ecn_config"], ecn.config(MBPS, MTU, LIMIT, t))
    ecn.write_map(maps["ecn_counters"], bytes(ecn.COUNTERS.size))
    ecn.write_map(maps["ecn_pause"], bytes(ecn.PAUSE.size))          # not paused


def counted(port) -> dict:
    ns, maps, _ = port
    return ecn.counters("v0", ns, {i: name for name, i in maps.items()})


def run_at(port, queue_bytes: int, frame: bytes, tmp_path, last_ns: int = FUTURE) -> bytes:
    """The frame through the program with the virtual queue at queue_bytes (above the tbf's bucket): the frame as
    it leaves."""
    ns, maps, prog = port
    ecn.write_map(maps["ecn_state"], ecn.STATE.pack(0, 0, BURST + queue_bytes, last_ns))
    src, out = tmp_path / "in", tmp_path / "out"
    src.write_bytes(frame)
    subprocess.run(["bpftool", "prog", "run", "id", str(prog), "data_in", str(src), "data_out", str(out)],
                   check=True, capture_output=True)
    return out.read_bytes()


def frame(tos: int) -> bytes:
    return bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", tos=tos) / UDP(sport=49152, dport=4791) / (b"x" * 1000))


@pytest.mark.parametrize("ect", [0b10, 0b01])
def test_an_ecn_capable_packet_above_kmax_gets_ce_and_a_valid_checksum(port, tmp_path, ect):
    configure(port, ecn.Thresholds(10_000, 20_000, 0.1))
    ip = Ether(run_at(port, 50_000, frame(0xB8 | ect), tmp_path))[IP]     # DSCP 46 kept
    assert ip.tos == 0xB8 | 0b11
    sent = ip.chksum
    del ip.chksum
    assert IP(bytes(ip)).chksum == sent                     # the header checksum as scapy computes it afresh
    c = counted(port)
    assert (c["ect_packets"], c["marked_packets"], c["virtual_queue_bytes"]) == (1, 1, 50_000)


def test_a_not_ect_packet_is_never_marked(port, tmp_path):
    configure(port, ecn.Thresholds(0, 0, 1.0))              # every ECN-capable packet would be marked
    sent = frame(0xB8)
    for queue in (0, 50_000, LIMIT):
        assert run_at(port, queue, sent, tmp_path) == sent
    c = counted(port)
    assert (c["packets"], c["ect_packets"], c["marked_packets"]) == (3, 0, 0)


def test_below_kmin_nothing_is_marked_and_ce_stays_ce(port, tmp_path):
    configure(port, ecn.Thresholds(10_000, 20_000, 1.0))
    sent = frame(0b10)
    for _ in range(20):
        assert run_at(port, 9_000, sent, tmp_path) == sent
    ce = frame(0b11)
    assert run_at(port, 50_000, ce, tmp_path) == ce
    c = counted(port)
    assert (c["ect_packets"], c["marked_packets"]) == (21, 0)


@pytest.mark.parametrize("queue", [12_500, 15_000, 17_500])
def test_the_marking_probability_follows_reds_curve(port, tmp_path, queue):
    t = ecn.Thresholds(10_000, 20_000, 0.8)
    configure(port, t)
    n, sent = 200, frame(0b10)
    for _ in range(n):
        run_at(port, queue, sent, tmp_path)
    p, c = ecn.mark_probability(queue, t), counted(port)
    spread = 4 * (n * p * (1 - p)) ** 0.5                   # four standard deviations of a binomial count
    assert c["ect_packets"] == n and abs(c["marked_packets"] - n * p) <= spread, (c, n * p)


def test_the_virtual_queue_drains_at_the_links_rate(port, tmp_path):
    configure(port, ecn.Thresholds(10_000, 20_000, 0.1))
    rate = MBPS * 1e6 / 8
    before = time.monotonic_ns()                             # the program's clock (CLOCK_MONOTONIC)
    run_at(port, 100_000, frame(0), tmp_path, last_ns=before - 20_000_000)
    elapsed = (time.monotonic_ns() - before) / 1e9 + 0.02
    drained = 100_000 - counted(port)["virtual_queue_bytes"]
    assert 0.02 * rate <= drained <= elapsed * rate + 1, (drained, elapsed)


def test_a_paused_ports_virtual_queue_drains_only_while_it_may_send(port, tmp_path):
    ns, maps, _ = port
    configure(port, ecn.Thresholds(10_000, 20_000, 0.1))
    rate = MBPS * 1e6 / 8
    before = time.monotonic_ns()
    ecn.write_map(maps["ecn_pause"], ecn.PAUSE.pack(before - 20_000_000, 0))       # paused for the last 20 ms
    run_at(port, 100_000, frame(0), tmp_path, last_ns=before - 20_000_000)
    assert counted(port)["virtual_queue_bytes"] == 100_000                         # nothing drained
    before = time.monotonic_ns()
    ecn.write_map(maps["ecn_pause"], ecn.PAUSE.pack(0, 10_000_000))                # resumed: 10 ms were paused
    run_at(port, 100_000, frame(0), tmp_path, last_ns=before - 20_000_000 - 10_000_000)
    elapsed = (time.monotonic_ns() - before) / 1e9 + 0.02
    drained = 100_000 - counted(port)["virtual_queue_bytes"]
    assert 0.02 * rate <= drained <= elapsed * rate + 1, (drained, elapsed)      # the 20 ms it could send, not 30
