"""Out-of-band (TCP) connection set-up of rdma-core's and perftest's tools, so that an endpoint of this
package can be the peer of the real ``ibv_rc_pingpong``, ``ib_write_bw`` and ``ib_read_bw`` (for example
running on Linux kernel rxe in a QEMU guest).

Both tools exchange their queue-pair coordinates as fixed-size ASCII messages over one TCP connection
(default port 18515) before any RDMA traffic; the formats are the tools' wire formats:

``ibv_rc_pingpong`` (52 bytes, NUL-terminated)::

    LLLL:QQQQQQ:PPPPPP:GGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG
    lid, qpn, psn in hex; the 16 GID bytes as 32 hex digits in wire order

  The client sends its message first, the server answers after moving its QP to RTR/RTS, and the client
  confirms with ``"done\\0"``.

perftest ``ib_write_bw`` / ``ib_read_bw`` (ethernet exchange, no RDMA-CM), with a GID (108 bytes)::

    LLLL:OOOO:QQQQQQ:PPPPPP:RRRRRRRR:VVVVVVVVVVVVVVVV:g0:g1:...:g15:SSSSSSSS:
    lid, outstanding reads, qpn, psn, rkey, buffer address, GID bytes, SRQ number

  (59 bytes without a GID.) Every exchange on the connection is symmetric and the client writes first:
  version strings (16 bytes), page-size cycle buffer and cache line (4 bytes each, big endian), the MTU
  enum as a decimal string (2 bytes), the keys message three times (before connect, after connect, after
  RTR), then after the run one more keys message, the bandwidth report (size, iterations: 8-byte big endian;
  peak, average bandwidth in MiB/s and message rate in Mpps: big-endian doubles), and a final keys
  message followed by ``"done\\0"``.

High level: :func:`rc_pingpong` and :func:`perftest_bw` run the tool's side of the test on a device from
:func:`hosts.rdma.open_device`. Command line (run in the endpoint's network namespace)::

    python -m hosts.rdma.oob rc_pingpong --ip 10.77.0.10 [-n 1000] [-s 4096] [SERVER]
    python -m hosts.rdma.oob write_bw   --ip 10.77.0.10 [-n 1000] [-s 65536] [SERVER]
    python -m hosts.rdma.oob read_bw    --ip 10.77.0.10 [-n 1000] [-s 65536] [SERVER]

Without SERVER the endpoint listens (the guest tool is then started with the endpoint's address);
with it, it connects. The last line printed is a JSON summary.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

DEFAULT_PORT = 18515
PP_MSG_LEN = 52          # "%04x:%06x:%06x:" + 32 hex digits + NUL
PT_MSG_LEN_GID = 108     # perftest keys message with GID
PT_MSG_LEN = 59          # perftest keys message without GID
PT_VERSION = "6.06"      # perftest version we announce (the Debian 12 tools report 6.06)
PT_VERSION_LEN = 16
MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
MTU_BYTES = {v: k for k, v in MTU_ENUM.items()}
DONE = b"done\0"


class OobError(RuntimeError):
    """The peer broke the exchange protocol, closed the connection or timed out."""


# ---------------------------------------------------------------------------------------------------- GIDs
def ipv4_to_gid(ip: str) -> bytes:
    """RoCE v2 GID of an IPv4 address (IPv4-mapped IPv6, ::ffff:a.b.c.d)."""
    return bytes(10) + b"\xff\xff" + socket.inet_aton(ip)


def gid_to_ipv4(gid: bytes) -> str:
    """IPv4 address of an IPv4-mapped RoCE v2 GID; ValueError for other GIDs."""
    if len(gid) != 16 or gid[:12] != bytes(10) + b"\xff\xff":
        raise ValueError(f"not an IPv4-mapped GID: {gid.hex()}")
    return socket.inet_ntoa(gid[12:])


def gid_str(gid: bytes) -> str:
    a = ipaddress.IPv6Address(gid)
    return f"::ffff:{a.ipv4_mapped}" if a.ipv4_mapped else str(a)


# ------------------------------------------------------------------------------------------ TCP helpers
def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OobError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def tcp_connect(server: str, port: int = DEFAULT_PORT, timeout: float = 30, source_ip: str | None = None,
                retry_for: float = 10.0) -> socket.socket:
    """Connect to a tool's TCP port, retrying while the server is not listening yet (up to retry_for s)."""
    deadline = time.monotonic() + retry_for
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if source_ip:
                s.bind((source_ip, 0))
            s.connect((server, port))
            return s
        except (ConnectionRefusedError, socket.timeout, OSError) as e:
            s.close()
            if time.monotonic() >= deadline:
                raise OobError(f"cannot connect to {server}:{port}: {e}") from e
            time.sleep(0.1)


def tcp_accept(port: int = DEFAULT_PORT, bind_ip: str = "", timeout: float = 60) -> socket.socket:
    """Listen on port, accept one connection (the tools' servers do the same), close the listener."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        ls.bind((bind_ip, port))
        ls.listen(1)
        ls.settimeout(timeout)
        try:
            conn, _ = ls.accept()
        except socket.timeout as e:
            raise OobError(f"no client connected to port {port} within {timeout}s") from e
    finally:
        ls.close()
    conn.settimeout(timeout)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


# ----------------------------------------------------------------------------------- ibv_rc_pingpong
@dataclass
class PingpongDest:
    """What ibv_*_pingpong exchange: LID (0 on RoCE), QP number, initial PSN and GID."""
    qpn: int
    psn: int
    gid: bytes = bytes(16)
    lid: int = 0

    def pack(self) -> bytes:
        s = "%04x:%06x:%06x:%s" % (self.lid & 0xFFFF, self.qpn & 0xFFFFFF, self.psn & 0xFFFFFF, self.gid.hex())
        b = s.encode() + b"\0"
        assert len(b) == PP_MSG_LEN
        return b

    @classmethod
    def unpack(cls, msg: bytes) -> "PingpongDest":
        text = msg.split(b"\0", 1)[0].decode("ascii", errors="strict")
        parts = text.split(":")
        if len(parts) != 4 or len(parts[3]) != 32:
            raise OobError(f"bad pingpong message {msg!r}")
        try:
            return cls(lid=int(parts[0], 16), qpn=int(parts[1], 16), psn=int(parts[2], 16),
                       gid=bytes.fromhex(parts[3]))
        except ValueError as e:
            raise OobError(f"bad pingpong message {msg!r}") from e

    @property
    def ip(self) -> str:
        return gid_to_ipv4(self.gid)


def pingpong_client_exchange(sock: socket.socket, mine: PingpongDest) -> PingpongDest:
    """Client side: send ours, read the server's (it is connected by then), confirm with "done"."""
    sock.sendall(mine.pack())
    remote = PingpongDest.unpack(recv_exact(sock, PP_MSG_LEN))
    sock.sendall(DONE)
    return remote


def pingpong_server_exchange(sock: socket.socket, mine: PingpongDest,
                             connect: Callable[[PingpongDest], None]) -> PingpongDest:
    """Server side: read the client's message, ``connect(remote)`` our QP, then answer and await "done"."""
    remote = PingpongDest.unpack(recv_exact(sock, PP_MSG_LEN))
    connect(remote)
    sock.sendall(mine.pack())
    try:
        sock.recv(PP_MSG_LEN)  # "done\0" (the client may also just close)
    except OSError:
        pass
    return remote


# ------------------------------------------------------------------------------------------ perftest
@dataclass
class PerftestDest:
    """perftest's per-QP connection data (struct pingpong_dest on the wire)."""
    qpn: int
    psn: int
    rkey: int = 0
    vaddr: int = 0
    gid: Optional[bytes] = None   # None: the 59-byte form without GID (InfiniBand LIDs only)
    out_reads: int = 0
    lid: int = 0
    srqn: int = 0

    def pack(self) -> bytes:
        head = "%04x:%04x:%06x:%06x:%08x:%016x" % (self.lid & 0xFFFF, self.out_reads & 0xFFFF,
                                                   self.qpn & 0xFFFFFF, self.psn & 0xFFFFFF,
                                                   self.rkey & 0xFFFFFFFF, self.vaddr & (2 ** 64 - 1))
        if self.gid is None:
            b = (head + ":%08x" % (self.srqn & 0xFFFFFFFF)).encode() + b"\0"
            assert len(b) == PT_MSG_LEN
        else:
            b = (head + ":" + "".join("%02x:" % x for x in self.gid) + "%08x:" % (self.srqn & 0xFFFFFFFF)).encode()
            b += b"\0"
            assert len(b) == PT_MSG_LEN_GID
        return b

    @classmethod
    def unpack(cls, msg: bytes) -> "PerftestDest":
        text = msg.split(b"\0", 1)[0].decode("ascii")
        f = text.split(":")
        try:
            if len(msg) == PT_MSG_LEN_GID:
                if len(f) < 23:
                    raise ValueError("too few fields")
                gid = bytes(int(x, 16) for x in f[6:22])
                srqn = int(f[22], 16)
            elif len(msg) == PT_MSG_LEN:
                if len(f) != 7:
                    raise ValueError("wrong field count")
                gid, srqn = None, int(f[6], 16)
            else:
                raise ValueError(f"length {len(msg)}")
            return cls(lid=int(f[0], 16), out_reads=int(f[1], 16), qpn=int(f[2], 16), psn=int(f[3], 16),
                       rkey=int(f[4], 16), vaddr=int(f[5], 16), gid=gid, srqn=srqn)
        except ValueError as e:
            raise OobError(f"bad perftest keys message {msg!r}: {e}") from e

    @property
    def ip(self) -> str:
        if self.gid is None:
            raise OobError("peer sent no GID (run the perftest tool with -x <RoCE v2 IPv4 GID index>)")
        return gid_to_ipv4(self.gid)


@dataclass
class BwReport:
    """perftest's bandwidth report as exchanged at the end of a run (MiB/s and Mpps, like perftest)."""
    size: int
    iters: int
    bw_peak: float
    bw_avg: float
    msg_rate: float


class PerftestComm:
    """perftest's TCP control channel. In every exchange the client writes first and the server reads first;
    each message is written with one send, because the tools read each one with a single read()."""

    def __init__(self, sock: socket.socket, is_client: bool, with_gid: bool = True):
        self.sock, self.is_client, self.with_gid = sock, is_client, with_gid
        self.remote_version = ""

    @classmethod
    def connect(cls, server: str, port: int = DEFAULT_PORT, timeout: float = 60, **kw) -> "PerftestComm":
        return cls(tcp_connect(server, port, timeout), True, **kw)

    @classmethod
    def accept(cls, port: int = DEFAULT_PORT, bind_ip: str = "", timeout: float = 60, **kw) -> "PerftestComm":
        return cls(tcp_accept(port, bind_ip, timeout), False, **kw)

    def xchg(self, data: bytes, n: Optional[int] = None) -> bytes:
        n = len(data) if n is None else n
        if self.is_client:
            self.sock.sendall(data)
            return recv_exact(self.sock, n)
        rem = recv_exact(self.sock, n)
        self.sock.sendall(data)
        return rem

    def _rv(self) -> float:
        try:
            return float(self.remote_version)
        except ValueError:
            return 0.0

    def exchange_versions(self, version: str = PT_VERSION) -> str:
        rem = self.xchg(version.encode().ljust(PT_VERSION_LEN, b"\0")[:PT_VERSION_LEN])
        self.remote_version = rem.split(b"\0", 1)[0].decode(errors="replace")
        if self._rv() < 5.70:
            raise OobError(f"perftest peer version {self.remote_version!r} is older than 5.70 (unsupported)")
        return self.remote_version

    def check_sys_data(self, cycle_buffer: int = 4096, cache_line: int = 64) -> tuple[int, int]:
        """Exchange page size (cycle buffer) and cache line size; returns the maxima both sides then use."""
        if self._rv() < 5.32:
            return cycle_buffer, cache_line
        rc = struct.unpack("!i", self.xchg(struct.pack("!i", cycle_buffer)))[0]
        rl = struct.unpack("!i", self.xchg(struct.pack("!i", cache_line)))[0]
        return max(rc, cycle_buffer), max(rl, cache_line)

    def check_mtu(self, mtu: int = 1024) -> int:
        """Exchange the active MTU (as the ibv_mtu enum in decimal); returns the smaller MTU in bytes."""
        mine = MTU_ENUM[mtu]
        n = 2 if self._rv() >= 5.31 else 4
        rem_raw = self.xchg(str(mine).encode().ljust(n, b"\0")[:n])
        try:
            rem = int(rem_raw.split(b"\0", 1)[0].decode() or "0")
        except ValueError:
            rem = 0
        return MTU_BYTES[min(mine, rem)] if rem in MTU_BYTES else mtu

    def hand_shake(self, mine: PerftestDest) -> PerftestDest:
        n = PT_MSG_LEN_GID if self.with_gid else PT_MSG_LEN
        if not self.with_gid:
            mine = PerftestDest(**{**mine.__dict__, "gid": None})
        return PerftestDest.unpack(self.xchg(mine.pack(), n))

    def xchg_bw_report(self, rep: BwReport) -> BwReport:
        iters_fmt = "!Q" if self._rv() >= 5.33 else "!I"
        size = struct.unpack("!Q", self.xchg(struct.pack("!Q", rep.size)))[0]
        iters = struct.unpack(iters_fmt, self.xchg(struct.pack(iters_fmt, rep.iters)))[0]
        peak = struct.unpack("!d", self.xchg(struct.pack("!d", rep.bw_peak)))[0]
        avg = struct.unpack("!d", self.xchg(struct.pack("!d", rep.bw_avg)))[0]
        rate = struct.unpack("!d", self.xchg(struct.pack("!d", rep.msg_rate)))[0]
        return BwReport(size, iters, peak, avg, rate)

    def close_connection(self, mine: PerftestDest) -> None:
        """Final handshake and "done", as ctx_close_connection."""
        try:
            self.hand_shake(mine)
            self.sock.sendall(DONE)
        finally:
            self.sock.close()

    def close(self) -> None:
        self.sock.close()


# -------------------------------------------------------------------------------- tool emulations
def _verbs():
    from . import Access, QPInfo, QPType, RecvWR, SendWR, WCOpcode, WROpcode
    return Access, QPInfo, QPType, RecvWR, SendWR, WCOpcode, WROpcode


def _wait_wcs(cq, deadline: float):
    left = deadline - time.monotonic()
    if left <= 0:
        raise OobError("timed out waiting for completions")
    return cq.wait(1, timeout=min(left, 1.0))


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
    Access, QPInfo, QPType, RecvWR, SendWR, WCOpcode, WROpcode = _verbs()
    deadline = time.monotonic() + timeout
    nslots = max(2, min(rx_depth, iters + 1))
    pd, cq = dev.alloc_pd(), dev.create_cq(4 * nslots + 16)
    buf = bytearray(size * (nslots + 2))
    mr = pd.reg_mr(buf, Access.LOCAL_WRITE)
    qp = dev.create_qp(pd, QPType.RC, cq, max_recv_wr=nslots + 1, max_send_wr=4)
    send_off = size * nslots
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    sent: list[bytes] = []
    try:
        for i in range(nslots):
            qp.post_recv(RecvWR([mr.sge(i * size, size)], wr_id=i))
        info = qp.info()
        mine = PingpongDest(qpn=info.qpn, psn=info.psn, gid=ipv4_to_gid(dev.ip))
        log(f"  local address:  LID 0x0000, QPN 0x{mine.qpn:06x}, PSN 0x{mine.psn:06x}, GID {gid_str(mine.gid)}")

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
            sock = tcp_accept(port, dev.ip, timeout=max(1.0, deadline - time.monotonic()))
            try:
                remote = pingpong_server_exchange(sock, mine, connect)
            finally:
                sock.close()
        log(f"  remote address: LID 0x{remote.lid:04x}, QPN 0x{remote.qpn:06x}, PSN 0x{remote.psn:06x}, "
            f"GID {gid_str(remote.gid)}")

        def post_send():
            data = rng.randbytes(size)
            buf[send_off:send_off + size] = data
            sent.append(data)
            qp.post_send(SendWR(WROpcode.SEND, [mr.sge(send_off, size)], wr_id=1 << 40))

        pending = {"recv"}
        t0 = time.monotonic()
        if server:
            post_send()
            pending.add("send")
        scnt = rcnt = 0
        mismatches = 0
        while rcnt < iters or scnt < iters:
            for wc in _wait_wcs(cq, deadline):
                if not wc.ok:
                    raise OobError(f"completion error {wc.status!r} (opcode {wc.opcode!r}, wr_id {wc.wr_id})")
                if wc.opcode == WCOpcode.SEND:
                    scnt += 1
                    pending.discard("send")
                else:
                    slot = wc.wr_id
                    got = bytes(buf[slot * size:slot * size + wc.byte_len])
                    if check_data:
                        # client: reply k echoes our message k; server: message k>0 echoes our message k-1
                        k = rcnt if server else rcnt - 1
                        want = sent[k] if k >= 0 else b"\x7b" * size
                        if wc.byte_len != size or got != want:
                            mismatches += 1
                    rcnt += 1
                    qp.post_recv(RecvWR([mr.sge(slot * size, size)], wr_id=slot))
                    pending.discard("recv")
                if scnt < iters and not pending:
                    post_send()
                    pending = {"recv", "send"}
        secs = time.monotonic() - t0
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


def perftest_bw(dev, verb: str, server: Optional[str] = None, *, port: int = DEFAULT_PORT, size: int = 65536,
                iters: int = 1000, tx_depth: int = 128, out_reads: int = 16, mtu: int = 1024,
                timeout: float = 120, log: Callable[[str], None] = lambda s: None) -> dict:
    """Be the peer of perftest's ``ib_write_bw`` (verb "write") or ``ib_read_bw`` (verb "read"), RC, one QP,
    half duplex, ethernet exchange with a GID (the tool run with ``-x <gid index>``, no ``-R``).

    As client we post ``iters`` RDMA WRITEs / READs of ``size`` bytes against the server's buffer (at most
    ``tx_depth`` outstanding, READs also at most the server's outstanding-read limit) and send the report
    the server prints. As server we expose a buffer with remote write/read access and wait for the client.
    """
    Access, QPInfo, QPType, RecvWR, SendWR, WCOpcode, WROpcode = _verbs()
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


# ------------------------------------------------------------------------------------------------- CLI
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hosts.rdma.oob",
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
