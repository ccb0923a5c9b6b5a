"""Packet transports for the user-space RoCEv2 engine, and a pcap writer.

KernelTransport: real sockets in the host's network namespace (needs CAP_NET_RAW).
  TX: AF_INET/SOCK_RAW/IPPROTO_RAW, we write the IPv4+UDP headers ourselves: exact bytes and any
      UDP source port per packet.
  RX: AF_INET/SOCK_RAW/IPPROTO_UDP with a classic-BPF filter (UDP dport 4791, destination = our IP
      or a multicast group), because the ICRC covers IP header fields (the IP ID) that a UDP socket hides.
  A UDP socket bound to (ip, 4791) with a drop-all filter keeps the port open (no ICMP port
  unreachable) and holds the multicast memberships, so the kernel sends the IGMP reports.
  path_mtu(dst): the MTU of the route to dst (a connected UDP probe socket's IP_MTU), so a queue pair can refuse
  an IB MTU whose packets the kernel would refuse to send (EMSGSIZE: dropped, then retried until the QP fails).
MemoryFabric: an in-process network of transports (no privileges), with drop/mark/delay hooks for tests;
Bottleneck: a FIFO link with an ECN threshold and a buffer for those hooks.
"""
import ctypes
import heapq
import os
import random
import socket
import struct
import threading
import time
from collections import deque

from .headers import ROCE_PORT, ip_checksum

SO_ATTACH_FILTER = 26
IP_MTU = 14             # linux/in.h; the socket module does not export it


def _bpf(prog):
    """Pack a classic BPF program [(code, jt, jf, k), ...] as a sock_fprog for setsockopt."""
    arr = (ctypes.c_uint8 * (8 * len(prog)))()
    for i, (code, jt, jf, k) in enumerate(prog):
        struct.pack_into("HBBI", arr, 8 * i, code, jt, jf, k & 0xFFFFFFFF)
    fprog = struct.pack("HL", len(prog), ctypes.addressof(arr))
    return fprog, arr


def _roce_filter(ip: str):
    myip = struct.unpack("!I", socket.inet_aton(ip))[0]
    return [
        (0xB1, 0, 0, 0),            # ldxb 4*([0]&0xf)
        (0x48, 0, 0, 2),            # ldh [x+2]        UDP dport
        (0x15, 0, 5, ROCE_PORT),    # jeq #4791 ? next : drop
        (0x20, 0, 0, 16),           # ld [16]          IP dst
        (0x15, 2, 0, myip),         # jeq myip -> accept
        (0x54, 0, 0, 0xF0000000),   # and #0xf0000000
        (0x15, 0, 1, 0xE0000000),   # jeq 224/4 ? accept : drop
        (0x06, 0, 0, 0x40000),      # ret accept
        (0x06, 0, 0, 0),            # ret drop
    ]


def _attach(sock, prog):
    fprog, keep = _bpf(prog)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    del keep


def have_raw_sockets() -> bool:
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW).close()
        return True
    except PermissionError:
        return False


class KernelTransport:
    def __init__(self, ip: str, sndbuf: int = 1 << 20, rcvbuf: int = 8 << 20):
        self.ip = ip
        self._groups = set()
        try:
            self.tx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            self.rx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        except PermissionError:
            raise PermissionError("uroce needs CAP_NET_RAW for raw IPv4 sockets "
                                  "(or use MemoryFabric for in-process tests)") from None
        self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sink.bind((ip, ROCE_PORT))
        except OSError as e:
            self.close()
            raise OSError(e.errno, f"cannot bind {ip}:{ROCE_PORT}: {e.strerror} "
                                   f"(is the address configured, or another RoCE endpoint on it?)") from None
        _attach(self.sink, [(0x06, 0, 0, 0)])
        self._probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)     # made here: routes of this namespace
        self._probe.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ip))
        self._probe_lock = threading.Lock()
        _attach(self.rx, _roce_filter(ip))
        self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.rx.setblocking(False)
        self.tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        self.tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ip))
        self.tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)

    def fileno(self) -> int:
        return self.rx.fileno()

    def recv_batch(self, n: int = 64):
        out = []
        rx = self.rx
        try:
            for _ in range(n):
                out.append(rx.recv(65536))
        except (BlockingIOError, InterruptedError):
            pass
        return out

    def send(self, pkt, dst_ip: str):
        try:
            self.tx.sendto(pkt, (dst_ip, 0))
            return True
        except OSError:
            return False

    def path_mtu(self, dst_ip: str):
        """The MTU of the route from our address to dst_ip (its interface's, or the route's own), or None if
        the kernel has no route to it."""
        with self._probe_lock:
            try:
                self._probe.connect((dst_ip, ROCE_PORT))     # a UDP connect sends nothing: a route lookup only
                return self._probe.getsockopt(socket.IPPROTO_IP, IP_MTU)
            except OSError:
                return None

    def join(self, group: str):
        mreq = socket.inet_aton(group) + socket.inet_aton(self.ip)
        self.sink.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        self._groups.add(group)

    def leave(self, group: str):
        mreq = socket.inet_aton(group) + socket.inet_aton(self.ip)
        self.sink.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, mreq)
        self._groups.discard(group)

    def close(self):
        for s in ("tx", "rx", "sink", "_probe"):
            sock = getattr(self, s, None)
            if sock is not None:
                sock.close()


class MemoryFabric:
    """In-process packet network between transports created by attach(ip).

    drop(pkt) -> bool       drop a packet (loss injection)
    mark(pkt) -> bool       set ECN's CE on an ECN-capable packet, as a congested switch queue does
    delay(pkt) -> seconds   deliver after a delay (per-packet delays reorder packets, like unequal paths)
    tap(pkt)                see every packet that enters the fabric (e.g. PcapWriter.write)
    mtu                     every port's link MTU: a longer packet is refused at send, as the kernel refuses it
                            (None: no limit)
    """

    def __init__(self, drop=None, delay=None, tap=None, queue_limit: int = 65536, mark=None, mtu=None):
        self.drop, self.delay, self.tap, self.mark, self.mtu = drop, delay, tap, mark, mtu
        self.marked = 0
        self.queue_limit = queue_limit
        self._ports = {}
        self._lock = threading.Lock()
        self._heap = []
        self._cv = threading.Condition(self._lock)
        self._seq = 0
        self._thread = None
        self.dropped = 0
        self.no_route = 0

    def attach(self, ip: str) -> "MemoryTransport":
        with self._lock:
            if ip in self._ports:
                raise OSError(f"address {ip} already attached to this fabric")
            t = MemoryTransport(self, ip)
            self._ports[ip] = t
            return t

    def _detach(self, t):
        with self._lock:
            self._ports.pop(t.ip, None)

    def _send(self, pkt, dst_ip: str):
        pkt = bytes(pkt)
        if self.tap:
            self.tap(pkt)
        if self.drop and self.drop(pkt):
            self.dropped += 1
            return
        if self.mark and pkt[1] & 3 and self.mark(pkt):      # only ECT packets may be marked (RFC 3168)
            pkt = set_ce(pkt)
            self.marked += 1
        d = self.delay(pkt) if self.delay else 0
        if d > 0:
            with self._cv:
                self._seq += 1
                heapq.heappush(self._heap, (time.monotonic() + d, self._seq, pkt, dst_ip))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._delayer, daemon=True, name="tb-fabric")
                    self._thread.start()
                self._cv.notify()
        else:
            self._deliver(pkt, dst_ip)

    def _deliver(self, pkt, dst_ip):
        first = int(dst_ip.split(".", 1)[0])
        if 224 <= first <= 239:
            targets = [t for t in list(self._ports.values()) if dst_ip in t.groups]
        else:
            t = self._ports.get(dst_ip)
            targets = [t] if t else []
            if not targets:
                self.no_route += 1
        for t in targets:
            t._push(pkt)

    def _delayer(self):
        while True:
            with self._cv:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cv.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                _, _, pkt, dst = heapq.heappop(self._heap)
            self._deliver(pkt, dst)


def set_ce(pkt: bytes) -> bytes:
    """The IPv4 packet with ECN's CE set and its header checksum updated (the ICRC masks the TOS byte)."""
    b = bytearray(pkt)
    b[1] |= 3
    b[10:12] = b"\0\0"
    b[10:12] = struct.pack("!H", ip_checksum(b))
    return bytes(b)


class Bottleneck:
    """A FIFO link of `bps` for MemoryFabric's hooks (drop=, mark=, delay=): each packet of `min_bytes` or more
    (data, not ACKs or CNPs, which take the reverse path) waits for those before it. It marks CE as DCQCN's
    congestion point does, on the queue a packet finds (seconds of the link): never below `mark_above_s` (Kmin),
    with a probability rising linearly to `pmax` at `kmax_s`, always above it (kmax_s None: always above Kmin);
    and drops packets arriving to a queue of over `limit_s` (its buffer). `queues` holds the queue each packet
    found, `served` (start, seconds) per packet sent on, `drops` the packets lost."""

    def __init__(self, bps: float, mark_above_s: float | None = None, limit_s: float | None = None,
                 min_bytes: int = 200, kmax_s: float | None = None, pmax: float = 1.0, seed: int = 1):
        self.bps, self.mark_above_s, self.limit_s, self.min_bytes = bps, mark_above_s, limit_s, min_bytes
        self.kmax_s, self.pmax = kmax_s, pmax
        self.free_at, self.queues, self.served, self.drops = 0.0, [], [], 0
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def _queue(self) -> float:
        return max(0.0, self.free_at - time.monotonic())

    def drop(self, pkt) -> bool:
        with self._lock:
            lost = self.limit_s is not None and len(pkt) >= self.min_bytes and self._queue() > self.limit_s
            self.drops += lost
            return lost

    def mark(self, pkt) -> bool:
        with self._lock:
            q, kmin, kmax = self._queue(), self.mark_above_s, self.kmax_s
            if kmin is None or len(pkt) < self.min_bytes or q <= kmin:
                return False
            if kmax is None or q >= kmax:
                return True
            return self._random.random() < self.pmax * (q - kmin) / (kmax - kmin)

    def delay(self, pkt) -> float:
        if len(pkt) < self.min_bytes:
            return 0
        with self._lock:
            now = time.monotonic()
            start = max(now, self.free_at)
            self.queues.append(start - now)
            self.served.append((start, len(pkt) * 8 / self.bps))
            self.free_at = start + len(pkt) * 8 / self.bps
            return self.free_at - now

    def utilization(self, skip: float = 0.0) -> float:
        """The fraction of time the link was busy, from `skip` of the way through its traffic to the end."""
        t0 = self.served[0][0] + skip * (self.free_at - self.served[0][0])
        return sum(s for start, s in self.served if start >= t0) / (self.free_at - t0)


class MemoryTransport:
    def __init__(self, fabric: MemoryFabric, ip: str):
        self.fabric, self.ip = fabric, ip
        self.groups = set()
        self._q = deque()
        self._efd = os.eventfd(0, os.EFD_NONBLOCK)
        self.overflows = 0

    def _push(self, pkt):
        if len(self._q) >= self.fabric.queue_limit:
            self.overflows += 1
            return
        q = self._q
        q.append(pkt)
        if len(q) == 1:          # the reader drains the queue completely before it sleeps again
            os.eventfd_write(self._efd, 1)

    def fileno(self) -> int:
        return self._efd

    def recv_batch(self, n: int = 64):
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        out = []
        q = self._q
        try:
            while len(out) < n:
                out.append(q.popleft())
        except IndexError:
            pass
        if q:
            os.eventfd_write(self._efd, 1)
        return out

    def send(self, pkt, dst_ip: str):
        if self.fabric.mtu is not None and len(pkt) > self.fabric.mtu:
            return False
        self.fabric._send(pkt, dst_ip)
        return True

    def path_mtu(self, dst_ip: str):
        return self.fabric.mtu

    def join(self, group: str):
        self.groups.add(group)

    def leave(self, group: str):
        self.groups.discard(group)

    def close(self):
        self.fabric._detach(self)
        os.close(self._efd)


class PcapWriter:
    """Write raw IPv4 packets to a pcap file (LINKTYPE_RAW), thread-safe."""

    def __init__(self, path: str):
        self._f = open(path, "wb")
        self._f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 101))
        self._lock = threading.Lock()

    def write(self, pkt):
        t = time.time()
        with self._lock:
            self._f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(pkt), len(pkt)))
            self._f.write(pkt)

    def close(self):
        with self._lock:
            self._f.close()
