"""This package's side of rdma-core's ``ibv_rc_pingpong`` and perftest's ``ib_write_bw`` / ``ib_read_bw``, so
that a device from :func:`hosts.rdma.open_device` can be the peer of the real tools (for example running on
Linux kernel rxe in a QEMU guest). The tools' out-of-band exchange is hosts/rdma/oob.py.

:func:`rc_pingpong` and :func:`perftest_bw` run the tool's side of the test. Command line (run in the
endpoint's network namespace)::

    python -m hosts.rdma.interop rc_pingpong --ip 10.77.0.10 [-n 1000] [-s 4096] [SERVER]
    python -m hosts.rdma.interop write_bw   --ip 10.77.0.10 [-n 1000] [-s 65536] [SERVER]
    python -m hosts.rdma.interop read_bw    --ip 10.77.0.10 [-n 1000] [-s 65536] [SERVER]

Without SERVER the endpoint listens (the guest tool is then started with the endpoint's address);
with it, it connects. The last line printed is a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Callable, Optional

from .oob import (DEFAULT_PORT, BwReport, OobError, PerftestComm, PerftestDest, PingpongDest, gid_str,
                  ipv4_to_gid, pingpong_client_exchange, pingpong_server_exchange, tcp_accept, tcp_connect)
from .verbs import Access, QPInfo, QPType, RecvWR, SendWR, WCOpcode, WROpcode


def _wait_wcs(cq, deadline: float):
    left = deadline - time.monotonic()
    if left <= 0:
        raise OobError("timed out waiting for completions")
    return cq.wait(1, timeout=min(left, 1.0))


# ------------------------------------------------------------------------------------- ibv_rc_pingpong
def rc_pingpong(dev, server: Optional[str] = None, *, port: int = DEFAULT_PORT, size: int = 4096,
                iters: int = 1000, rx_depth: int = 64, timeout: float = 120, check_data: bool = True,
                log: Callable[[str], None] = lambda s: None) -> dict:
    """Be the peer of ``ibv_rc_pingpong`` (client if ``server`` is given, else server on ``port``).

    Same exchange and message pattern as the tool: the client sends first; each side sends its next
    message once its previous send completed and a message arrived; ``iters`` messages of ``size`` bytes
    each way. The tool uses one buffer for sending and receiving, so it echoes what it last received:
    with ``check_data`` every message we get back must equal the one we sent (the tool's very first
    message, before it received anything, is its initial fill of 0x7b bytes).
    """
    deadline = time.monotonic() + timeout
    nslots = max(2, min(rx_depth, iters + 1))
    pd, cq = dev.alloc_pd(), dev.create_cq(4 * nslots + 16)
    buf = bytearray(size * (nslots + 2))
    mr = pd.reg_mr(buf, Access.LOCAL_WRITE)
    qp = dev.create_qp(pd, QPType.RC, cq, max_recv_wr=nslots + 1, max_send_wr=4)
    try:
        for i in range(nslots):
            qp.post_recv(RecvWR([mr.sge(i * size, size)], wr_id=i))
        info = qp.info()
        mine = PingpongDest(qpn=info.qpn, psn=info.psn, gid=ipv4_to_gid(dev.ip))
        log(f"  local address:  LID 0x0000, QPN 0x{mine.qpn:06x}, PSN 0x{mine.psn:06x}, GID {gid_str(mine.gid)}")
        remote = _pingpong_connect(qp, mine, dev.ip, server, port, deadline)
        log(f"  remote address: LID 0x{remote.lid:04x}, QPN 0x{remote.qpn:06x}, PSN 0x{remote.psn:06x}, "
            f"GID {gid_str(remote.gid)}")
        secs, mismatches = _Pingpong(qp, cq, mr, buf, size, nslots, is_client=bool(server),
                                     check_data=check_data).run(iters, deadline)
        nbytes = size * iters * 2
        res = {"tool": "rc_pingpong", "role": "client" if server else "server", "bytes": nbytes,
               "seconds": round(secs, 4), "mbit_s": round(nbytes * 8 / secs / 1e6, 3),
               "usec_per_iter": round(secs * 1e6 / iters, 2), "iters": iters, "size": size,
               "data_mismatches": mismatches if check_data else None,
               "local": {"qpn": mine.qpn, "psn": mine.psn, "ip": dev.ip},
               "remote": {"qpn": remote.qpn, "psn": remote.psn, "ip": remote.ip},
               "qp_counters": dict(getattr(qp, "counters", {}) or {})}
        log(f"{nbytes} bytes in {secs:.2f} seconds = {res['mbit_s']:.2f} Mbit/sec")
        log(f"{iters} iters in {secs:.2f} seconds = {res['usec_per_iter']:.2f} usec/iter")
        if check_data and mismatches:
            raise OobError(f"{mismatches} of {iters} echoed messages differ from what was sent")
        return res
    finally:
        qp.destroy()


def _pingpong_connect(qp, mine: PingpongDest, ip: str, server: Optional[str], port: int,
                      deadline: float) -> PingpongDest:
    """Exchange coordinates with the tool over TCP (as client or server) and connect the QP; returns the peer's."""
    def connect(rem: PingpongDest):
        qp.connect(QPInfo(rem.ip, rem.qpn, rem.psn))

    if server:
        sock = tcp_connect(server, port, timeout=max(1.0, deadline - time.monotonic()))
        try:
            remote = pingpong_client_exchange(sock, mine)
        finally:
            sock.close()
        connect(remote)
    else:
        sock = tcp_accept(port, ip, timeout=max(1.0, deadline - time.monotonic()))
        try:
            remote = pingpong_server_exchange(sock, mine, connect)
        finally:
            sock.close()
    return remote


class _Pingpong:
    """The message loop of ibv_rc_pingpong: receive slots 0..nslots-1 of `buf`, the send buffer after them."""

    def __init__(self, qp, cq, mr, buf: bytearray, size: int, nslots: int, is_client: bool, check_data: bool):
        self.qp, self.cq, self.mr, self.buf, self.size = qp, cq, mr, buf, size
        self.is_client, self.check_data = is_client, check_data
        self.send_off = size * nslots
        self.rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        self.sent: list[bytes] = []
        self.scnt = self.rcnt = self.mismatches = 0

    def post_send(self) -> None:
        data = self.rng.randbytes(self.size)
        self.buf[self.send_off:self.send_off + self.size] = data
        self.sent.append(data)
        self.qp.post_send(SendWR(WROpcode.SEND, [self.mr.sge(self.send_off, self.size)], wr_id=1 << 40))

    def received(self, wc) -> None:
        """Check a message against what we sent (it echoes ours), and repost its slot."""
        size, slot = self.size, wc.wr_id
        got = bytes(self.buf[slot * size:slot * size + wc.byte_len])
        if self.check_data:
            # client: reply k echoes our message k; server: message k>0 echoes our message k-1
            k = self.rcnt if self.is_client else self.rcnt - 1
            want = self.sent[k] if k >= 0 else b"\x7b" * size
            if wc.byte_len != size or got != want:
                self.mismatches += 1
        self.rcnt += 1
        self.qp.post_recv(RecvWR([self.mr.sge(slot * size, size)], wr_id=slot))

    def run(self, iters: int, deadline: float) -> tuple[float, int]:
        """(seconds, mismatched messages) for `iters` messages each way."""
        pending = {"recv"}
        t0 = time.monotonic()
        if self.is_client:
            self.post_send()
            pending.add("send")
        while self.rcnt < iters or self.scnt < iters:
            for wc in _wait_wcs(self.cq, deadline):
                if not wc.ok:
                    raise OobError(f"completion error {wc.status!r} (opcode {wc.opcode!r}, wr_id {wc.wr_id})")
                if wc.opcode == WCOpcode.SEND:
                    self.scnt += 1
                    pending.discard("send")
                else:
                    self.received(wc)
                    pending.discard("recv")
                if self.scnt < iters and not pending:
                    self.post_send()
                    pending = {"recv", "send"}
        return time.monotonic() - t0, self.mismatches


# ---------------------------------------------------------------------------- ib_write_bw / ib_read_bw
# Long on purpose: perftest's exchange step by step in the tools' order, to read beside perftest_communication.c.
def perftest_bw(dev, verb: str, server: Optional[str] = None, *, port: int = DEFAULT_PORT, size: int = 65536,
                iters: int = 1000, tx_depth: int = 128, out_reads: int = 16, mtu: int = 1024,
                timeout: float = 120, log: Callable[[str], None] = lambda s: None) -> dict:
    """Be the peer of perftest's ``ib_write_bw`` (verb "write") or ``ib_read_bw`` (verb "read"), RC, one QP,
    half duplex, ethernet exchange with a GID (the tool run with ``-x <gid index>``, no ``-R``).

    As client we post ``iters`` RDMA WRITEs / READs of ``size`` bytes against the server's buffer (at most
    ``tx_depth`` outstanding, READs also at most the server's outstanding-read limit) and send the report
    the server prints. As server we expose a buffer with remote write/read access and wait for the client.
    """
    if verb not in ("write", "read"):
        raise ValueError("verb must be 'write' or 'read'")
    deadline = time.monotonic() + timeout
    is_client = server is not None
    comm = (PerftestComm.connect(server, port, timeout=max(1.0, deadline - time.monotonic())) if is_client
            else PerftestComm.accept(port, dev.ip, timeout=max(1.0, deadline - time.monotonic())))
    qp = None
    try:
        rver = comm.exchange_versions()
        cycle_buffer, cache_line = comm.check_sys_data()
        mtu = comm.check_mtu(mtu)
        # like perftest: twice max(size, cycle buffer), aligned to the cache line
        half = -(-max(size, cycle_buffer) // cache_line) * cache_line
        buf = bytearray(2 * half)
        pd, cq = dev.alloc_pd(), dev.create_cq(4 * tx_depth + 16)
        mr = pd.reg_mr(buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
        qp = dev.create_qp(pd, QPType.RC, cq, mtu=mtu, max_send_wr=max(tx_depth, 1) + 1, max_recv_wr=16)
        info = qp.info()
        mine = PerftestDest(qpn=info.qpn, psn=info.psn, rkey=mr.rkey, vaddr=mr.addr, gid=ipv4_to_gid(dev.ip),
                            out_reads=out_reads if verb == "read" else 0)
        remote = comm.hand_shake(mine)
        log(f" local address: QPN 0x{mine.qpn:04x} PSN 0x{mine.psn:06x} RKey 0x{mine.rkey:06x} "
            f"VAddr 0x{mine.vaddr:014x} GID {gid_str(mine.gid)}")
        log(f" remote address: QPN 0x{remote.qpn:04x} PSN 0x{remote.psn:06x} RKey 0x{remote.rkey:06x} "
            f"VAddr 0x{remote.vaddr:014x} GID {gid_str(remote.gid) if remote.gid else '-'} "
            f"OUT {remote.out_reads} (peer perftest {rver}, MTU {mtu})")
        qp.connect(QPInfo(remote.ip, remote.qpn, remote.psn))
        comm.hand_shake(mine)
        comm.hand_shake(mine)   # the tools' extra handshake after RTR
        res = {"tool": f"{verb}_bw", "role": "client" if is_client else "server", "size": size, "iters": iters,
               "mtu": mtu, "peer_version": rver,
               "local": {"qpn": mine.qpn, "psn": mine.psn, "ip": dev.ip, "rkey": mine.rkey},
               "remote": {"qpn": remote.qpn, "psn": remote.psn, "ip": remote.ip, "rkey": remote.rkey,
                          "vaddr": remote.vaddr, "out_reads": remote.out_reads}}
        if is_client:
            rep = _bw_client(qp, cq, mr, verb, remote, size, iters, tx_depth, cycle_buffer, half, deadline, res, log)
        else:
            rep = BwReport(size, iters, 0.0, 0.0, 0.0)
        comm.hand_shake(mine)          # server waits here for the client to finish
        peer_rep = comm.xchg_bw_report(rep)
        comm.close_connection(mine)
        if not is_client:
            res.update(peer_report={"size": peer_rep.size, "iters": peer_rep.iters,
                                    "bw_avg_MiBps": round(peer_rep.bw_avg, 3)})
            if verb == "write":
                res["bytes_written_nonzero"] = sum(1 for b in buf if b)
        res["qp_counters"] = dict(getattr(qp, "counters", {}) or {})
        return res
    finally:
        comm.close()
        if qp is not None:
            qp.destroy()


def _bw_client(qp, cq, mr, verb: str, remote: PerftestDest, size: int, iters: int, tx_depth: int,
               cycle_buffer: int, half: int, deadline: float, res: dict, log) -> BwReport:
    """The client's run: `iters` WRITEs / READs against the server's buffer; the report it sends (and `res`)."""
    opcode = WROpcode.RDMA_WRITE if verb == "write" else WROpcode.RDMA_READ
    depth = tx_depth if verb == "write" else max(1, min(tx_depth, remote.out_reads or 1))
    step = size if size <= cycle_buffer // 2 else 0
    posted = done = 0
    t0 = time.monotonic()
    while done < iters:
        while posted < iters and posted - done < depth:
            off = (posted * step) % cycle_buffer if step else 0
            lo = half if verb == "read" else 0
            qp.post_send(SendWR(opcode, [mr.sge(lo + off, size)], wr_id=posted,
                                remote_addr=remote.vaddr + off, rkey=remote.rkey))
            posted += 1
        for wc in _wait_wcs(cq, deadline):
            if not wc.ok:
                raise OobError(f"completion error {wc.status!r} for wr_id {wc.wr_id}")
            done += 1
    secs = time.monotonic() - t0
    mib_s = size * iters / secs / 0x100000
    rep = BwReport(size, iters, mib_s, mib_s, iters / secs / 1e6)
    res.update(seconds=round(secs, 4), bw_avg_MiBps=round(mib_s, 3),
               goodput_mbit_s=round(size * iters * 8 / secs / 1e6, 3))
    log(f" #bytes #iterations BW average[MB/sec] MsgRate[Mpps]\n {size} {iters} {mib_s:.2f} "
        f"{rep.msg_rate:.6f}")
    return rep


# ------------------------------------------------------------------------------------------------- CLI
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hosts.rdma.interop",
                                 description="Peer of ibv_rc_pingpong / ib_write_bw / ib_read_bw on this package's RDMA")
    ap.add_argument("tool", choices=["rc_pingpong", "write_bw", "read_bw"])
    ap.add_argument("server", nargs="?", help="connect to this server (default: listen)")
    ap.add_argument("--ip", required=True, help="local IPv4 address of the endpoint")
    ap.add_argument("--backend", default="uroce", choices=["uroce", "rxe", "auto"])
    ap.add_argument("-p", "--port", type=int, default=DEFAULT_PORT)
    ap.add_argument("-s", "--size", type=int)
    ap.add_argument("-n", "--iters", type=int, default=1000)
    ap.add_argument("-t", "--tx-depth", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--no-check", action="store_true", help="rc_pingpong: do not verify echoed data")
    a = ap.parse_intermixed_args(argv)
    from . import open_device
    dev = open_device(a.ip, backend=a.backend)
    out = lambda s: print(s, flush=True)  # noqa: E731
    try:
        if a.tool == "rc_pingpong":
            res = rc_pingpong(dev, a.server, port=a.port, size=a.size or 4096, iters=a.iters,
                              timeout=a.timeout, check_data=not a.no_check, log=out)
        else:
            res = perftest_bw(dev, a.tool.split("_")[0], a.server, port=a.port, size=a.size or 65536,
                              iters=a.iters, tx_depth=a.tx_depth, timeout=a.timeout, log=out)
        res["device_counters"] = dict(getattr(dev, "counters", {}) or {})
        t = os.times()
        res["cpu_seconds"] = round(t.user + t.system, 3)  # this process, set-up included
        print(json.dumps(res, default=str), flush=True)
        return 0
    except (OobError, OSError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        dev.close()


if __name__ == "__main__":
    sys.exit(main())
