"""Byte-exact check of RC SEND, RDMA WRITE and RDMA READ between two endpoints of any backends.

    python -m hosts.rdma.verify --ip A [--backend rxe|uroce|auto] [--size N]            (responder: listens)
    python -m hosts.rdma.verify --ip B [--backend ...] [--size N] A                    (requester)

The requester SENDs pattern R into the responder's receive buffer, WRITEs pattern R into the responder's second
half, and READs the responder's pattern S from its first half; each side checks what it got byte for byte and
the responder reports its checks back, so the requester's one line of JSON holds all three verdicts and exit
status 0 means every byte arrived as sent. Patterns are seeded, so each side knows the other's without sending
it out of band; the QP details go over TCP as JSON (port 18516). Standard library only (plus pyverbs for the
kernel backend): it runs in minimal guests too.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

from . import Access, QPInfo, QPType, RecvWR, SendWR, WROpcode, open_device
from .oob import tcp_accept, tcp_connect

PORT = 18516
ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def pattern(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def send_json(sock, obj) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def recv_json(sock) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("peer closed the out-of-band connection")
        data += chunk
    return json.loads(data)


def complete(cq, what: str, timeout: float) -> None:
    wcs = cq.wait(1, timeout)
    if not wcs or not wcs[0].ok:
        raise RuntimeError(f"{what}: {'no completion' if not wcs else wcs[0].status!r} within {timeout:.0f} s")


def endpoint(ip: str, backend: str, size: int):
    dev = open_device(ip, backend=backend)
    pd, cq = dev.alloc_pd(), dev.create_cq()
    buf = bytearray(3 * size)            # [0, size) READ source or target, [size, 2 size) WRITE, [2 size, 3 size) SEND
    mr = pd.reg_mr(buf, ALL)
    qp = dev.create_qp(pd, QPType.RC, cq)
    return dev, cq, buf, mr, qp


def responder(ip: str, backend: str, size: int, timeout: float) -> dict:
    dev, cq, buf, mr, qp = endpoint(ip, backend, size)
    try:
        buf[:size] = pattern(2, size)                                   # what the requester will READ
        qp.post_recv(RecvWR([mr.sge(2 * size, size)], wr_id=1))
        sock = tcp_accept(PORT, timeout=timeout)
        with sock:
            peer = recv_json(sock)
            qp.connect(QPInfo.from_dict(peer["qp"]))
            send_json(sock, {"qp": qp.info().to_dict(), "addr": mr.addr, "rkey": mr.rkey, "backend": backend})
            complete(cq, "receive of the SEND", timeout)
            recv_json(sock)                                              # the requester's WRITE and READ are done
            want = pattern(1, size)
            verdict = {"send": bytes(buf[2 * size:]) == want, "write": bytes(buf[size:2 * size]) == want}
            send_json(sock, verdict)
        return verdict
    finally:
        dev.close()


def requester(ip: str, backend: str, server: str, size: int, timeout: float) -> dict:
    dev, cq, buf, mr, qp = endpoint(ip, backend, size)
    try:
        buf[size:2 * size] = pattern(1, size)
        sock = tcp_connect(server, PORT, timeout=timeout)
        with sock:
            send_json(sock, {"qp": qp.info().to_dict()})
            peer = recv_json(sock)
            qp.connect(QPInfo.from_dict(peer["qp"]))
            t0 = time.monotonic()
            qp.post_send(SendWR(WROpcode.SEND, [mr.sge(size, size)], wr_id=1))
            complete(cq, "SEND", timeout)
            qp.post_send(SendWR(WROpcode.RDMA_WRITE, [mr.sge(size, size)], wr_id=2,
                                remote_addr=peer["addr"] + size, rkey=peer["rkey"]))
            complete(cq, "RDMA WRITE", timeout)
            qp.post_send(SendWR(WROpcode.RDMA_READ, [mr.sge(0, size)], wr_id=3, remote_addr=peer["addr"],
                                rkey=peer["rkey"]))
            complete(cq, "RDMA READ", timeout)
            seconds = time.monotonic() - t0
            send_json(sock, {"done": True})
            theirs = recv_json(sock)
        return {**theirs, "read": bytes(buf[:size]) == pattern(2, size), "bytes": size, "seconds": round(seconds, 3),
                "backend": backend, "peer_backend": peer["backend"]}
    finally:
        dev.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("server", nargs="?", help="the responder's address (default: be the responder)")
    ap.add_argument("--ip", required=True, help="this endpoint's IPv4 address")
    ap.add_argument("--backend", default="auto", choices=["auto", "uroce", "rxe"])
    ap.add_argument("--size", type=int, default=65536 + 3, help="bytes per operation (default: 64 KiB + 3)")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args(argv)
    if a.size < 1:
        ap.error("--size must be at least 1")
    if a.server:
        result = requester(a.ip, a.backend, a.server, a.size, a.timeout)
    else:
        result = responder(a.ip, a.backend, a.size, a.timeout)
    print(json.dumps(result), flush=True)
    return 0 if all(result[k] for k in ("send", "write", "read") if k in result) else 1


if __name__ == "__main__":
    sys.exit(main())
