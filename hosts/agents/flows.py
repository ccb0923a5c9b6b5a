"""Concurrent UDP and TCP flows run inside an emulated host, measured per flow.

    python -m hosts.agents.flows SPEC.json

SPEC: a FlowsSpec as JSON (hosts/spec/flows.py): when the flows start, when receivers give up, and the flows
this host receives (listen: flow, proto, port, bytes) and sends (send: flow, proto, dst, dport, sport, bytes,
rate_mbps, sport_mode, split).
UDP senders pace themselves (unpaced bursts overflow switch queues and measure the emulator, not
the fabric); each datagram carries (flow, sequence) so receivers count loss. TCP senders are
limited by the shaped NICs. Prints {"received": [...], "sent": [...]} as JSON on stdout.
"""
from __future__ import annotations

import json
import random
import socket
import struct
import sys
import threading
import time

from hosts.spec.flows import FlowsSpec, Listen, Send

DATAGRAM = 1024
HEADER = struct.Struct("!IQ")       # flow id, sequence number
SOCK_BUF = 1 << 20
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)     # Linux's option number (not in every Python)
UDP_HEADER = struct.Struct("!HHHH")  # source port, destination port, length, checksum
QUIET_S = 2.0                        # silence after a UDP flow's paced end that ends its receiver


def wait_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def udp_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCK_BUF)
    sock.bind(("0.0.0.0", port))
    return sock


def udp_send(f: Send, start_at: float) -> dict:
    """Paced datagrams. Entropy for the switches' hash: one source port (default), a random one of
    SPRAY_PORTS per datagram (sport_mode "packet"), or `split` ports in round robin."""
    spray = f.sport_mode == "packet"
    if spray:
        return udp_spray(f, start_at)
    socks = [udp_socket(f.sport)]
    if f.split > 1:
        socks += [udp_socket(0) for _ in range(f.split - 1)]
    packets = -(-f.bytes // DATAGRAM)
    gap = DATAGRAM * 8 / (f.rate_mbps * 1e6)
    payload = bytearray(DATAGRAM)
    wait_until(start_at)
    t0 = next_at = time.time()
    for seq in range(packets):
        HEADER.pack_into(payload, 0, f.flow, seq)
        socks[seq % len(socks)].sendto(payload, (f.dst, f.dport))
        next_at += gap
        delay = next_at - time.time()
        if delay > 0:
            time.sleep(delay)
    for sock in socks:
        sock.close()
    return {"flow": f.flow, "bytes": packets * DATAGRAM, "seconds": time.time() - t0}


def tcp_send(f: Send, start_at: float) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", f.sport))
    if f.pace_tcp:                # TCP's internal pacing holds the socket to this rate (bytes/s)
        sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(f.rate_mbps * 1e6 / 8))
    wait_until(start_at)
    t0 = time.time()
    for _ in range(50):           # the receiver may still be starting
        try:
            sock.connect((f.dst, f.dport))
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    chunk, left = bytes(65536), f.bytes
    while left > 0:
        left -= sock.send(chunk[:min(left, len(chunk))])
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)                  # wait for the receiver's close: all bytes delivered
    sock.close()
    return {"flow": f.flow, "bytes": f.bytes, "seconds": time.time() - t0}


def udp_spray(f: Send, start_at: float) -> dict:
    """Like udp_send, with a random UDP source port on every datagram, as spraying RoCEv2 NICs do:
    a raw socket carries our own UDP header (checksum 0, which IPv4 allows)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCK_BUF)
    packets = -(-f.bytes // DATAGRAM)
    gap = DATAGRAM * 8 / (f.rate_mbps * 1e6)
    datagram = bytearray(UDP_HEADER.size + DATAGRAM)
    wait_until(start_at)
    t0 = next_at = time.time()
    for seq in range(packets):
        UDP_HEADER.pack_into(datagram, 0, random.randint(49152, 65535), f.dport, len(datagram), 0)
        HEADER.pack_into(datagram, UDP_HEADER.size, f.flow, seq)
        sock.sendto(datagram, (f.dst, 0))
        next_at += gap
        delay = next_at - time.time()
        if delay > 0:
            time.sleep(delay)
    sock.close()
    return {"flow": f.flow, "bytes": packets * DATAGRAM, "seconds": time.time() - t0}


def udp_receive(f: Listen, start_at: float, deadline: float, ready: threading.Event) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCK_BUF)
    sock.bind(("0.0.0.0", f.port))
    ready.set()
    expected = -(-f.bytes // DATAGRAM)
    seen: set[int] = set()
    size = 0
    last = None
    gap, gap_at = 0.0, None      # longest silence between two arrivals: how long a failure cut the flow
    silences = []                # every silence of over 1.5 packet times: [start, seconds], to match with faults
    spacing = DATAGRAM * 8 / (f.rate_mbps * 1e6) if f.rate_mbps else None
    top, reordered = -1, 0
    # a paced sender is done by `ends`: a receiver still short of packets then stops after QUIET_S of silence
    # (what was lost stays lost) instead of waiting for the deadline
    ends = start_at + expected * spacing if spacing else deadline
    while len(seen) < expected and (left := deadline - time.time()) > 0:
        # silent since the last arrival (or, when nothing came, since well after the end: a late sender)
        quiet_since = max(ends, last) if last is not None else ends + 5 * QUIET_S
        sock.settimeout(min(left, max(0.01, quiet_since + QUIET_S - time.time())))
        try:
            data = sock.recv(65536)
        except socket.timeout:
            if time.time() - quiet_since >= QUIET_S:
                break
            continue
        flow, seq = HEADER.unpack_from(data)
        if flow == f.flow and seq not in seen:
            now = time.time()
            if last is not None and now - last > gap:
                gap, gap_at = now - last, last
            if last is not None and spacing and now - last > 1.5 * spacing and len(silences) < 1000:
                silences.append([round(last, 6), round(now - last, 6)])
            seen.add(seq)
            reordered += seq < top
            top = max(top, seq)
            size += len(data)
            last = now
    sock.close()
    return {**result(f, size, len(seen), expected, start_at, last), "max_gap_s": gap, "gap_at": gap_at,
            "silences": silences, "reordered": reordered}


def tcp_receive(f: Listen, start_at: float, deadline: float, ready: threading.Event) -> dict:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", f.port))
    srv.listen(1)
    ready.set()
    srv.settimeout(max(0.1, deadline - time.time()))
    size, last = 0, None
    try:
        conn, _ = srv.accept()
        while (left := deadline - time.time()) > 0:
            conn.settimeout(left)
            data = conn.recv(1 << 16)
            if not data:
                break
            size += len(data)
            last = time.time()
        conn.close()
    except socket.timeout:
        pass
    srv.close()
    return result(f, size, None, None, start_at, last)


def result(f: Listen, size, packets, expected, start_at, last) -> dict:
    seconds = (last - start_at) if last else None
    out = {"flow": f.flow, "proto": f.proto, "bytes": size, "expected_bytes": f.bytes,
           "seconds": seconds, "mbps": size * 8 / seconds / 1e6 if seconds else 0.0}
    if packets is not None:
        out.update(packets=packets, lost_packets=expected - packets)
    return out


def run(spec: FlowsSpec) -> dict:
    out = {"received": [], "sent": []}
    lock = threading.Lock()

    def keep(kind, fn, *args):
        try:
            r = fn(*args)
        except OSError as exc:
            r = {"flow": args[0].flow, "error": f"{type(exc).__name__}: {exc}"}
        with lock:
            out[kind].append(r)

    threads = []
    for f in spec.listen:
        ready = threading.Event()
        fn = udp_receive if f.proto == "udp" else tcp_receive
        threads.append(threading.Thread(target=keep, args=("received", fn, f, spec.start_at,
                                                            spec.deadline, ready)))
        threads[-1].start()
        ready.wait(5)
    for f in spec.send:
        fn = udp_send if f.proto == "udp" else tcp_send
        threads.append(threading.Thread(target=keep, args=("sent", fn, f, spec.start_at)))
        threads[-1].start()
    for t in threads:
        t.join()
    return out


def main() -> None:
    print(json.dumps(run(FlowsSpec.load(sys.argv[1]))), flush=True)


if __name__ == "__main__":
    main()
