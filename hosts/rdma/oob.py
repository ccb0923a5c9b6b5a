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

The tools' side of the tests, on a device of this package, and its command line: hosts/rdma/interop.py.
"""
from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass
from typing import Callable, Optional

from .headers import IB_MTU_ENUM as MTU_ENUM
from .headers import gid_to_ipv4, ipv4_to_gid  # noqa: F401  (part of this module's API)

DEFAULT_PORT = 18515
PP_MSG_LEN = 52          # "%04x:%06x:%06x:" + 32 hex digits + NUL
PT_MSG_LEN_GID = 108     # perftest keys message with GID
PT_MSG_LEN = 59          # perftest keys message without GID
PT_VERSION = "6.06"      # perftest version we announce (the Debian 12 tools report 6.06)
PT_VERSION_LEN = 16
MTU_BYTES = {v: k for k, v in MTU_ENUM.items()}
DONE = b"done\0"


class OobError(RuntimeError):
    """The peer broke the exchange protocol, closed the connection or timed out."""


# ---------------------------------------------------------------------------------------------------- GIDs
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
