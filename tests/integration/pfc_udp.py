"""Paced UDP flows that block rather than drop at their own NIC, for the PFC fabric tests (run inside a host).

    pfc_udp.py send DEST PORT MBPS COUNT         COUNT numbered datagrams of SIZE bytes at MBPS; a small send
                                                 buffer makes a paused NIC hold the sender, as a lossless NIC does
    pfc_udp.py receive PORT SECONDS              prints JSON: per sender, datagrams, out-of-order ones (and by
                                                 how many places the latest was late), first and last
                                                 arrival (monotonic seconds)
"""
import json
import socket
import struct
import sys
import time

SIZE = 1400
SNDBUF = 32 << 10           # the kernel doubles it: ~45 datagrams wait on the socket's account, far below a queue


def send(dest: str, port: int, mbps: float, count: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
    gap, start = SIZE * 8 / (mbps * 1e6), time.monotonic()
    for k in range(count):
        due = start + k * gap
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        s.sendto(struct.pack("!I", k) + bytes(SIZE - 4), (dest, port))


def receive(port: int, seconds: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
    s.bind(("0.0.0.0", port))
    s.settimeout(0.2)
    flows: dict[str, dict] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            data, (src, _) = s.recvfrom(SIZE)
        except socket.timeout:
            continue
        now, seq = time.monotonic(), struct.unpack_from("!I", data)[0]
        f = flows.setdefault(src, {"datagrams": 0, "out_of_order": 0, "late_by": 0, "next": 0, "first": now})
        f["datagrams"] += 1
        if seq < f["next"]:
            f["out_of_order"] += 1
            f["late_by"] = max(f["late_by"], f["next"] - 1 - seq)
        f["next"], f["last"] = max(f["next"], seq + 1), now
    print(json.dumps(flows), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    else:
        receive(int(sys.argv[2]), float(sys.argv[3]))
