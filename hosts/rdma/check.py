"""End-to-end check of one RC connection between two endpoints of this package, any backend on either side:
RDMA SEND, WRITE and READ of several message sizes, every byte verified.

    python -m hosts.rdma.check --ip A [--backend rxe|uroce|auto] [-p PORT]                 # server
    python -m hosts.rdma.check --ip B [--backend ...] [--sizes 1,1024,65536] SERVER_IP     # client

The client is the requester of every operation, the server the responder:
- SEND: the server has posted one receive per size; each received message must equal the one sent.
- WRITE: the client writes a pattern into the server's memory region; the server compares it afterwards.
- READ: the server has filled a region with another pattern; the client reads it back and compares.
Patterns come from a seed the client picks, so each side knows what the other must have sent. Set-up
(QP numbers, PSNs, MR address and rkey) and the server's verdict go over one TCP connection as JSON lines.
Each side prints one JSON line with its results and exits 0 only if every operation completed and every
byte matched.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

from .oob import DEFAULT_PORT, OobError, tcp_accept, tcp_connect

DEFAULT_SIZES = (1, 1000, 1024, 4097, 65536, (1 << 20) + 13)
OPS = ("send", "write", "read")


def pattern(seed: int, op: str, size: int) -> bytes:
    """The bytes operation `op` of `size` bytes carries in a run with `seed`."""
    return random.Random(f"{seed}:{op}:{size}").randbytes(size)


def layout(sizes) -> tuple[dict, int]:
    """Offsets of each size's slot in a region, and the region's length (slots 64-byte aligned)."""
    offs, off = {}, 0
    for s in sizes:
        offs[s] = off
        off += -(-max(s, 1) // 64) * 64
    return offs, off


class _Lines:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def send(self, obj) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def recv(self) -> dict:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OobError("peer closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _wait(cq, n: int, deadline: float, what: str) -> list:
    wcs = []
    while len(wcs) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise OobError(f"{what}: {len(wcs)} of {n} completions before the timeout")
        wcs += cq.wait(n - len(wcs), timeout=min(left, 1.0))
    bad = [w for w in wcs if not w.ok]
    if bad:
        raise OobError(f"{what}: completion error {bad[0].status!r} (opcode {bad[0].opcode!r}, wr_id {bad[0].wr_id})")
    return wcs


def _setup(dev, sizes, nrecv: int):
    from . import Access, QPType
    offs, length = layout(sizes)
    pd, cq = dev.alloc_pd(), dev.create_cq(4 * len(sizes) + 16)
    regions = {op: bytearray(length) for op in OPS}
    mrs = {op: pd.reg_mr(regions[op], Access.ALL) for op in OPS}
    qp = dev.create_qp(pd, QPType.RC, cq, max_send_wr=2 * len(sizes) + 4, max_recv_wr=nrecv + 4)
    return offs, pd, cq, regions, mrs, qp


def server(dev, *, port: int = DEFAULT_PORT, timeout: float = 120) -> dict:
    """Responder side: accept one client, take its operations, verify what it sent and wrote."""
    from . import QPInfo, RecvWR
    deadline = time.monotonic() + timeout
    sock = tcp_accept(port, dev.ip, timeout=timeout)
    qp = None
    try:
        ch = _Lines(sock)
        hello = ch.recv()
        seed, sizes = int(hello["seed"]), [int(s) for s in hello["sizes"]]
        offs, pd, cq, regions, mrs, qp = _setup(dev, sizes, len(sizes))
        for i, s in enumerate(sizes):
            qp.post_recv(RecvWR([mrs["send"].sge(offs[s], s)] if s else [], wr_id=i))
            regions["read"][offs[s]:offs[s] + s] = pattern(seed, "read", s)
        qp.connect(QPInfo.from_dict(hello["qp"]))
        ch.send({"qp": qp.info().to_dict(),
                 "mr": {op: {"addr": mrs[op].addr, "rkey": mrs[op].rkey} for op in ("write", "read")}})
        bad = {op: [] for op in OPS}
        wcs = _wait(cq, len(sizes), deadline, "receives")
        for w in wcs:
            s = sizes[w.wr_id]
            got = bytes(regions["send"][offs[s]:offs[s] + w.byte_len])
            if w.byte_len != s or got != pattern(seed, "send", s):
                bad["send"].append(s)
        msg = ch.recv()            # the client's WRITEs and READs have completed
        if msg.get("done") != "write+read":
            raise OobError(f"unexpected message from the client: {msg}")
        for s in sizes:
            if bytes(regions["write"][offs[s]:offs[s] + s]) != pattern(seed, "write", s):
                bad["write"].append(s)
        res = {"role": "server", "backend": dev.backend, "ip": dev.ip, "sizes": sizes,
               "verified": {op: [s for s in sizes if s not in bad[op]] for op in ("send", "write")},
               "mismatch": {op: bad[op] for op in ("send", "write")}}
        ch.send(res)
        ch.recv()                   # the client's verdict: keep the QP until it has read everything
        return res
    finally:
        sock.close()
        if qp is not None:
            qp.destroy()


def client(dev, server_ip: str, *, sizes=DEFAULT_SIZES, port: int = DEFAULT_PORT, timeout: float = 120) -> dict:
    """Requester side: SEND, WRITE and READ each size to/from the server and verify everything."""
    from . import QPInfo, SendWR, WROpcode
    deadline = time.monotonic() + timeout
    sizes = [int(s) for s in sizes]
    seed = int.from_bytes(os.urandom(6), "big")
    offs, pd, cq, regions, mrs, qp = _setup(dev, sizes, 0)
    sock = tcp_connect(server_ip, port, timeout=timeout, retry_for=timeout)   # until the server listens
    times = {}
    try:
        ch = _Lines(sock)
        ch.send({"seed": seed, "sizes": sizes, "qp": qp.info().to_dict()})
        peer = ch.recv()
        qp.connect(QPInfo.from_dict(peer["qp"]))
        for s in sizes:
            regions["send"][offs[s]:offs[s] + s] = pattern(seed, "send", s)
            regions["write"][offs[s]:offs[s] + s] = pattern(seed, "write", s)
        for op, wr_op, key in (("send", WROpcode.SEND, None), ("write", WROpcode.RDMA_WRITE, "write"),
                               ("read", WROpcode.RDMA_READ, "read")):
            t0 = time.monotonic()
            for i, s in enumerate(sizes):
                sg = [mrs[op].sge(offs[s], s)] if s else []
                wr = SendWR(wr_op, sg, wr_id=i)
                if key:
                    wr.remote_addr, wr.rkey = peer["mr"][key]["addr"] + offs[s], peer["mr"][key]["rkey"]
                qp.post_send(wr)
            _wait(cq, len(sizes), deadline, op)
            times[op] = round(time.monotonic() - t0, 4)
        bad_read = [s for s in sizes if bytes(regions["read"][offs[s]:offs[s] + s]) != pattern(seed, "read", s)]
        ch.send({"done": "write+read"})
        verdict = ch.recv()
        res = {"role": "client", "backend": dev.backend, "ip": dev.ip, "server": server_ip, "sizes": sizes,
               "bytes_per_op": sum(sizes), "seconds": times,
               "verified": {"send": verdict["verified"]["send"], "write": verdict["verified"]["write"],
                            "read": [s for s in sizes if s not in bad_read]},
               "mismatch": {"send": verdict["mismatch"]["send"], "write": verdict["mismatch"]["write"],
                            "read": bad_read},
               "peer_backend": verdict["backend"]}
        ch.send({"ok": True})
        return res
    finally:
        sock.close()
        qp.destroy()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hosts.rdma.check", description=__doc__.split("\n\n")[0])
    ap.add_argument("server", nargs="?", help="connect to this server and run the operations (default: serve)")
    ap.add_argument("--ip", required=True, help="local IPv4 address of the endpoint")
    ap.add_argument("--backend", default="auto", choices=["uroce", "rxe", "auto"])
    ap.add_argument("-p", "--port", type=int, default=DEFAULT_PORT)
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                    help="comma-separated message sizes in bytes (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
        if not sizes or min(sizes) < 0 or len(set(sizes)) != len(sizes):
            raise ValueError
    except ValueError:
        ap.error(f"--sizes must be distinct non-negative integers, not {a.sizes!r}")
    from . import open_device
    from .verbs import RdmaError
    try:
        dev = open_device(a.ip, backend=a.backend)
    except (RdmaError, OSError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    try:
        if a.server:
            res = client(dev, a.server, sizes=sizes, port=a.port, timeout=a.timeout)
        else:
            res = server(dev, port=a.port, timeout=a.timeout)
        print(json.dumps(res), flush=True)
        return 0 if not any(res["mismatch"].values()) else 1
    except (OobError, RdmaError, OSError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        dev.close()


if __name__ == "__main__":
    sys.exit(main())
