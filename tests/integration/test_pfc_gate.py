"""Integration (root): the pause itself, on one shaped veth end in a throwaway namespace pair: a closed gate holds
what is sent (at most the frame it had tokens for leaves), drops nothing, and keeps the order; opened, the queue
drains at once at the link's rate, though tbf's timer was set for the paused rate; heartbeats pass a closed gate;
and the kick frame that restarts the qdisc never leaves the port."""
import json
import os
import socket
import struct
import subprocess
import time

import pytest

from hosts.recovery.beats import PORT as BEAT_PORT
from testbed import PREFIX
from testbed.fabric import ecn
from testbed.fabric.linuxcalls import netns
from testbed.fabric.links import Link, fabric_tag, shape
from testbed.fabric.pfc import Gate
from testbed.fabric.pfcd import Namespace

pytestmark = [pytest.mark.root, pytest.mark.alone]     # the drain's timing needs the CPU

MBPS = 10.0


def tc_json(ns: str, *args: str) -> list:
    done = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "-j", *args], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout or "[]")


@pytest.fixture(params=[1500, 9000], ids=["mtu1500", "jumbo"])
def pair(request):
    """Namespaces A and B and a veth between them of this MTU, A's end shaped as a link end with a gate."""
    mtu = request.param
    a, b = (f"{PREFIX}{fabric_tag()}pfcg{os.getpid()}{side}" for side in "ab")
    for ns in (a, b):
        subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        cmds = [f"ip link add tb-pg0 mtu {mtu} type veth peer name tb-pg1 mtu {mtu} netns {b}", "ip addr add 10.77.0.1/24 dev tb-pg0",
                "ip link set tb-pg0 addrgenmode none", "ip link set tb-pg0 up", *shape("tb-pg0", Link("a", "b", MBPS, 0, 0, "nic", mtu=mtu, queue_bytes=1 << 20),
                                                 gate_limit=1 << 20)]
        for cmd in cmds:
            subprocess.run(["ip", "netns", "exec", a, "sh", "-c", cmd], check=True)
        for cmd in ("ip addr add 10.77.0.2/24 dev tb-pg1", "ip link set tb-pg1 addrgenmode none",
                    "ip link set tb-pg1 up"):
            subprocess.run(["ip", "netns", "exec", b, "sh", "-c", cmd], check=True)
        yield a, b, mtu
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def received(ns: str) -> int:
    """Frames B's end has received."""
    link = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "tb-pg1"], capture_output=True, text=True,
                          check=True).stdout
    return json.loads(link)[0]["stats64"]["rx"]["packets"]


def backlog(ns: str) -> int:
    return next(q["backlog"] for q in tc_json(ns, "qdisc", "show", "dev", "tb-pg0", "root"))


def test_a_closed_gate_holds_in_order_drops_nothing_and_opens_at_once(pair):
    """Jumbo frames too: a closed gate's bucket must still hold one (tbf keeps it in at most 4.3 s of its rate)."""
    a, b, mtu = pair
    size = mtu - 500
    sent = (600 << 10) // size                                  # ~0.5 s at the link's rate
    gate = Gate("a>b", "tb-pg0", f"/run/netns/{a}", mtu, 1 << 20)
    port = Namespace(gate.netns)
    try:
        port.add_gate(gate)
        with netns(f"/run/netns/{b}"):
            rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("10.77.0.2", 5000))
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        with netns(f"/run/netns/{b}"):
            beats_rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        beats_rx.bind(("10.77.0.2", BEAT_PORT))
        beats_rx.settimeout(2)
        with netns(gate.netns):
            tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.sendto(b"hello", ("10.77.0.2", 5001))         # the neighbour resolved first: ARP waits in the gate too
        time.sleep(0.2)
        port.set_gate(gate, paused=True)
        for k in range(sent):
            tx.sendto(struct.pack("!I", k) + bytes(size - 4), ("10.77.0.2", 5000))
        tx.sendto(b"beat", ("10.77.0.2", BEAT_PORT))
        assert beats_rx.recv(100) == b"beat"                   # the heartbeats' class is not paused
        time.sleep(0.8)                                        # at 10 Mbit/s the whole lot would have gone in 0.5 s
        held = backlog(a)
        rx.setblocking(False)
        early = []
        try:
            while True:
                early.append(struct.unpack_from("!I", rx.recv(10000))[0])
        except BlockingIOError:
            pass
        assert len(early) <= 2 and held >= (sent - 2) * size, (early, held)
        before = received(b)
        opened = time.monotonic()
        port.set_gate(gate, paused=False)
        while backlog(a) and time.monotonic() - opened < 10:
            time.sleep(0.005)
        drained = time.monotonic() - opened
        due = held * 8 / (MBPS * 1e6)
        assert drained < 1.5 * due + 0.1, (drained, due)       # not the paused rate's timer (seconds)
        rx.setblocking(True)
        rx.settimeout(2)
        seqs = early + [struct.unpack_from("!I", rx.recv(10000))[0] for _ in range(sent - len(early))]
        assert seqs == list(range(sent))
        stats = {q["kind"]: q for q in tc_json(a, "qdisc", "show", "dev", "tb-pg0")}
        assert all(q.get("drops", 0) == 0 for q in stats.values()), stats
        assert received(b) - before == sent - len(early)        # the held data, and no kick frame
    finally:
        port.close()


def test_pausing_a_port_that_marks_stops_its_marking_programs_queue_clock(pair):
    lacking = ecn.missing()
    if lacking:
        pytest.skip(f"cannot mark ECN here: {lacking}")
    a, _, mtu = pair
    ecn.attach("tb-pg0", ecn.compiled(), a)
    pause_map = ecn.maps("tb-pg0", a)["ecn_pause"]
    gate = Gate("a>b", "tb-pg0", f"/run/netns/{a}", mtu, 1 << 20, ecn_pause=pause_map)
    port = Namespace(gate.netns)
    try:
        port.add_gate(gate)
        port.set_gate(gate, True)
        since, total = ecn.PAUSE.unpack(ecn.read_map(pause_map))
        assert 0 < since <= time.monotonic_ns() and total == 0
        time.sleep(0.05)
        port.set_gate(gate, False)
        since, total = ecn.PAUSE.unpack(ecn.read_map(pause_map))
        assert since == 0 and 50_000_000 <= total < 5_000_000_000, total
    finally:
        port.close()
