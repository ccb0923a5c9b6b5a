"""The flows agent's UDP receiver: it counts what arrives, and stops when its paced sender is done, lost packets
or not, instead of waiting for the run's deadline."""
import socket
import threading
import time

import pytest

from hosts.agents import flows
from hosts.spec import Listen, Send


@pytest.fixture(autouse=True)
def _short_quiet(monkeypatch):
    monkeypatch.setattr(flows, "QUIET_S", 0.5)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receive_while_sending(seqs, rate_mbps: float, deadline_s: float) -> tuple[dict, float]:
    """Send the datagrams `seqs` of a 64-datagram flow, paced, to a receiver on loopback; (its result, how
    long it ran)."""
    port, start_at = free_udp_port(), time.time() + 0.2
    spec = Listen(flow=7, proto="udp", port=port, bytes=64 * flows.DATAGRAM, rate_mbps=rate_mbps)
    ready, out = threading.Event(), {}

    def receive():
        out["result"] = flows.udp_receive(spec, start_at, start_at + deadline_s, ready)
        out["ended"] = time.time()
    t = threading.Thread(target=receive)
    t.start()
    ready.wait(5)
    gap = flows.DATAGRAM * 8 / (rate_mbps * 1e6)
    payload = bytearray(flows.DATAGRAM)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flows.wait_until(start_at)
        for seq in range(64):
            if seq in seqs:
                flows.HEADER.pack_into(payload, 0, 7, seq)
                s.sendto(payload, ("127.0.0.1", port))
            flows.wait_until(start_at + (seq + 1) * gap)
    t.join(deadline_s + 5)
    return out["result"], out["ended"] - start_at


def test_a_whole_flow_ends_its_receiver_at_the_last_packet():
    result, ran = receive_while_sending(set(range(64)), rate_mbps=5, deadline_s=60)
    assert result["packets"] == 64 and result["lost_packets"] == 0
    assert ran < 64 * flows.DATAGRAM * 8 / 5e6 + 0.5


def test_a_flow_that_lost_its_tail_ends_its_receiver_soon_after_the_sender_not_at_the_deadline():
    sent = set(range(48))                     # the last 16 datagrams lost, as under a cut no one mended
    result, ran = receive_while_sending(sent, rate_mbps=5, deadline_s=60)
    assert result["packets"] == 48 and result["lost_packets"] == 16
    flow_s = 64 * flows.DATAGRAM * 8 / 5e6
    assert flow_s + flows.QUIET_S - 0.1 <= ran < flow_s + flows.QUIET_S + 0.5, ran


def test_a_receiver_that_hears_nothing_waits_for_a_late_sender_before_giving_up():
    result, ran = receive_while_sending(set(), rate_mbps=50, deadline_s=60)
    assert result["packets"] == 0
    assert ran >= 6 * flows.QUIET_S - 0.1 and ran < 60


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_offered_load_paces_tcp_too():
    """pace_tcp holds a TCP sender to its rate (the kernel's own pacing): 2 MB at 8 Mbit/s takes about 2 s
    even on loopback (the first window goes at once, so at least 60% of that)."""
    port, sport, start_at = free_tcp_port(), free_tcp_port(), time.time() + 0.2
    size, rate = 2_000_000, 8.0
    listen = Listen(flow=3, proto="tcp", port=port, bytes=size, rate_mbps=rate)
    ready, out = threading.Event(), {}
    t = threading.Thread(target=lambda: out.update(flows.tcp_receive(listen, start_at, start_at + 30, ready)))
    t.start()
    ready.wait(5)
    sent = flows.tcp_send(Send(flow=3, proto="tcp", dst="127.0.0.1", dport=port, sport=sport, bytes=size,
                               rate_mbps=rate, pace_tcp=True), start_at)
    t.join(35)
    assert out["bytes"] == size == sent["bytes"]
    assert sent["seconds"] >= 0.6 * size * 8 / (rate * 1e6), sent
