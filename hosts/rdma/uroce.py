"""uroce: RoCEv2 from user space. One engine thread per device does RX, timers and paced TX.

The engine blocks in select() on the receive socket and an eventfd that post_send() signals; it never
busy-polls. This module is the device's verbs (resources, posting, closing); the engine thread is in
engine.py, RC reliability in rc.py, per-QP state in qp.py, the packet codec in headers.py, sockets in
transport.py.
"""
import os
import random
import socket
import threading
import time
from collections import Counter
from typing import Optional

from . import headers as H
from .engine import Engine
from .mtu import UD_HEADERS, mtu_mismatch
from .qp import ProtectionDomain, QueuePair, _is_mcast, _SendWQE
from .rc import ReliableConnection
from .verbs import (Access, AddressHandle, CompletionQueue, MemoryRegion, QPState, QPType, RdmaError, RecvWR,
                    SendWR, WROpcode)


class Device(Engine, ReliableConnection):
    """A uroce RDMA device bound to one IPv4 address. Create with open_device(ip, backend='uroce')."""

    backend = "uroce"

    def __init__(self, ip: str, transport=None, mtu: int = 1024, name: Optional[str] = None,
                 first_qpn: int = 0x11, ecn: bool = True):
        socket.inet_aton(ip)
        if mtu not in H.ROCE_MTUS:
            raise RdmaError(f"mtu must be one of {H.ROCE_MTUS}, not {mtu}")
        self.ip, self.mtu = ip, mtu
        self.ecn = ecn               # send ECN-capable packets, ECT(0) (False: TOS 0, rxe's bytes exactly)
        self.name = name or f"uroce-{ip}"
        self._ip_b = socket.inet_aton(ip)
        from .transport import KernelTransport
        self.transport = transport if transport is not None else KernelTransport(ip)
        self.counters = Counter()
        self.tx_drop_hook = None     # callable(pkt bytes) -> True to drop (loss injection, sender side)
        self.rx_drop_hook = None     # callable(pkt bytes) -> True to drop (receiver side)
        self.tap = None              # callable(pkt bytes) for every packet sent (e.g. PcapWriter.write)
        self._qps = {}
        self._mrs = {}
        self._groups = {}
        self._path_mtus = {}         # destination ip -> the MTU of the route to it (looked up at a UD QP's first send there)
        self._next_qpn = first_qpn
        self._next_mr = 1
        self._ip_id = random.randrange(1, 0xFFFF)
        self._lock = threading.RLock()
        self._wfd = os.eventfd(0, os.EFD_NONBLOCK)
        self._running = True
        self._pacing_wake_soon = False   # the engine holds arrivals for a pacing wake due soon (engine.py)
        self.last_error = None       # last exception caught by the engine thread (should stay None)
        self._thread = threading.Thread(target=self._run, name=f"tb-{self.name}", daemon=True)
        self._thread.start()

    # ---- resources ----------------------------------------------------------------------------
    def alloc_pd(self) -> ProtectionDomain:
        return ProtectionDomain(self)

    def create_cq(self, depth: int = 4096) -> CompletionQueue:
        return CompletionQueue(depth)

    def create_qp(self, pd: ProtectionDomain, qp_type: QPType, send_cq: CompletionQueue,
                  recv_cq: Optional[CompletionQueue] = None, *, max_send_wr: int = 1024,
                  max_recv_wr: int = 1024, psn: Optional[int] = None, mtu: Optional[int] = None,
                  timeout: float = 0.067, retry_cnt: int = 7, rnr_retry: int = 7, min_rnr_timer: int = 12,
                  rate_limit_bps: Optional[float] = None, sport_mode: str = "qp",
                  retransmit: str = "gbn", reorder_window: int = 256, reorder_timeout: float = 0.005,
                  ack_every: int = 64, max_outstanding: int = 256, qkey: int = 0x11111111,
                  cc: Optional[str] = None, rto: str = "adaptive", rto_min: Optional[float] = None,
                  rto_max: Optional[float] = None, time_scale: float = 1.0, dcqcn: Optional[dict] = None,
                  cnp_interval: Optional[float] = None) -> QueuePair:
        """Create a QP. RC: call qp.connect(peer_info) next. UD: ready at once (Q_Key `qkey`).

        timeout/retry_cnt: retransmit after `timeout` s without progress (default 67 ms = IB timeout
        code 14, perftest's), give up after retry_cnt retries (RETRY_EXC_ERR). rto 'adaptive' (RFC 6298,
        hosts/rdma/rto.py): `timeout` is only the first value; the timeout follows the measured round trip
        (smoothed RTT + 4 x its variance) within [rto_min, rto_max] (None: 50 ms or `timeout` if shorter, and
        `timeout`) and doubles on each timeout until progress; rto 'fixed': always `timeout`, as rxe. rnr_retry 7 = retry forever on RNR NAK. sport_mode 'qp': UDP source
        port from the QPNs like rxe; 'packet': a random one per packet (spraying). retransmit 'gbn'
        (go-back-N, as rxe) or 'selective'. reorder_window=0 NAKs at the first gap, like rxe.
        max_outstanding: packets in flight before the sender waits for ACKs.
        cc 'delay': delay-based congestion control (hosts/rdma/cc.py) paces an RC QP at most at its
        rate_limit_bps, less while the round trip shows queueing. cc 'dcqcn': DCQCN (hosts/rdma/dcqcn.py)
        paces it below rate_limit_bps as CNPs arrive; `dcqcn` overrides its parameters (DcqcnParams' names),
        `time_scale` scales its timers and rates as fabric.time_scale does the fabric's. Whatever cc is, the
        QP answers CE-marked packets with CNPs, at most one per `cnp_interval` s (default 50 us x time_scale).
        """
        if pd.device is not self:
            raise RdmaError("PD belongs to another device")
        qp_type = QPType(qp_type)
        with self._lock:
            qpn = self._next_qpn
            while qpn in self._qps:
                qpn += 1
            self._next_qpn = qpn + 1
            qp = QueuePair(self, pd, qp_type, send_cq, recv_cq or send_cq, qpn,
                           random.getrandbits(24) if psn is None else psn & H.PSN_MASK,
                           max_send_wr=max_send_wr, max_recv_wr=max_recv_wr, mtu=mtu or self.mtu,
                           timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
                           min_rnr_timer=min_rnr_timer, rate_limit_bps=rate_limit_bps, sport_mode=sport_mode,
                           retransmit=retransmit, reorder_window=reorder_window,
                           reorder_timeout=reorder_timeout, ack_every=ack_every,
                           max_outstanding=max_outstanding, qkey=qkey, cc=cc, rto=rto, rto_min=rto_min,
                           rto_max=rto_max, time_scale=time_scale, dcqcn=dcqcn, cnp_interval=cnp_interval)
            self._qps[qpn] = qp
        return qp

    def _destroy_qp(self, qp):
        with self._lock:
            for g in list(qp._mcast):
                self._detach_mcast(qp, g)
            self._qps.pop(qp.qpn, None)
            qp.state = QPState.RESET

    def _reg_mr(self, pd, buf, access):
        access = Access(access)
        if access & (Access.REMOTE_WRITE) and not access & Access.LOCAL_WRITE:
            raise RdmaError("REMOTE_WRITE requires LOCAL_WRITE (as in ibverbs)")
        with self._lock:
            key = (self._next_mr << 8) | random.getrandbits(8)
            self._next_mr += 1
            mr = MemoryRegion(pd, buf, access, key, key)
            self._mrs[key] = mr
        return mr

    def _dereg_mr(self, mr):
        with self._lock:
            self._mrs.pop(mr.lkey, None)

    def _local_segs(self, qp, sg_list, need_write):
        segs = []
        for s in sg_list:
            mr = self._mrs.get(s.lkey)
            if mr is None or mr.pd is not qp.pd:
                raise RdmaError(f"lkey 0x{s.lkey:x} is not a registered MR of this PD")
            if not mr.contains(s.addr, s.length):
                raise RdmaError(f"SGE [0x{s.addr:x}, +{s.length}) is outside {mr!r}")
            if need_write and not mr.access & Access.LOCAL_WRITE:
                raise RdmaError(f"{mr!r} lacks LOCAL_WRITE, needed to receive into it")
            off = s.addr - mr.addr
            segs.append(mr.view[off:off + s.length])
        return segs

    # ---- posting ------------------------------------------------------------------------------
    def _post_send(self, qp, wr: SendWR):
        if not isinstance(wr, SendWR):
            raise RdmaError("post_send takes a SendWR")
        op = WROpcode(wr.opcode)
        if qp.state != QPState.RTS:
            raise RdmaError(f"post_send on {qp!r}: QP must be RTS (connect() it first)")
        segs = self._local_segs(qp, wr.sg_list, need_write=(op == WROpcode.RDMA_READ))
        length = sum(len(s) for s in segs)
        if op in (WROpcode.SEND_WITH_IMM, WROpcode.RDMA_WRITE_WITH_IMM) and wr.imm is None:
            raise RdmaError(f"{op.name} needs wr.imm")
        with self._lock:
            if qp.outstanding >= qp.max_send_wr:
                raise RdmaError(f"send queue of {qp!r} is full ({qp.max_send_wr} WRs)")
            if qp.qp_type == QPType.UD:
                if op not in (WROpcode.SEND, WROpcode.SEND_WITH_IMM):
                    raise RdmaError("UD QPs support SEND and SEND_WITH_IMM only")
                if not isinstance(wr.ah, AddressHandle):
                    raise RdmaError("UD send needs wr.ah = AddressHandle(ip, qpn, qkey)")
                if length > qp.mtu:
                    raise RdmaError(f"UD message of {length} bytes exceeds the MTU {qp.mtu}")
                socket.inet_aton(wr.ah.ip)
                if wr.ah.ip not in self._path_mtus:
                    self._path_mtus[wr.ah.ip] = self._path_mtu(wr.ah.ip)
                pmtu = self._path_mtus[wr.ah.ip]
                wire = -(-length // 4) * 4 + UD_HEADERS + (H.IMM_LEN if op == WROpcode.SEND_WITH_IMM else 0)
                if pmtu and wire > pmtu:     # the kernel would refuse it: a silent drop
                    raise RdmaError(f"UD message of {length} bytes is a {wire}-byte packet, longer than the MTU "
                                    f"{pmtu} of the path from {self.ip} to {wr.ah.ip}")
                npkts = 1
            else:
                npkts = max(1, -(-length // qp.mtu))
                if length >= 1 << 31:
                    raise RdmaError("message longer than 2 GiB")
            w = _SendWQE(wr, qp._next_seq, npkts, length, segs)
            if op == WROpcode.RDMA_READ:
                w.rcvd = bytearray(npkts)
            qp._next_seq += npkts
            if qp._sq_head and qp._sq_head > 64 and qp._sq_head * 2 > len(qp._sq):
                del qp._sq[:qp._sq_head]
                del qp._first_list[:qp._sq_head]
                qp._sq_head = 0
            qp._sq.append(w)
            qp._first_list.append(w.first)
            if qp.outstanding == 1:
                qp._progress_t = time.monotonic()
        self._wake()

    def _post_recv(self, qp, wr: RecvWR):
        if not isinstance(wr, RecvWR):
            raise RdmaError("post_recv takes a RecvWR")
        if qp.state in (QPState.RESET, QPState.ERROR):
            raise RdmaError(f"post_recv on {qp!r}")
        segs = self._local_segs(qp, wr.sg_list, need_write=True)
        with self._lock:
            if len(qp._rq) >= qp.max_recv_wr:
                raise RdmaError(f"receive queue of {qp!r} is full ({qp.max_recv_wr} WRs)")
            qp._rq.append((wr, segs))

    def _attach_mcast(self, qp, group):
        if qp.qp_type != QPType.UD:
            raise RdmaError("only UD QPs can attach to multicast groups")
        if not _is_mcast(group):
            raise RdmaError(f"{group} is not an IPv4 multicast address")
        with self._lock:
            members = self._groups.setdefault(group, set())
            if not members:
                self.transport.join(group)
            members.add(qp)
            qp._mcast.add(group)

    def _detach_mcast(self, qp, group):
        with self._lock:
            members = self._groups.get(group, set())
            if qp not in members:
                raise RdmaError(f"{qp!r} is not attached to {group}")
            members.discard(qp)
            qp._mcast.discard(group)
            if not members:
                del self._groups[group]
                self.transport.leave(group)

    def _path_mtu(self, dst_ip: str):
        """The MTU of the route to dst_ip, None if unknown (no route, or a transport without MTUs)."""
        lookup = getattr(self.transport, "path_mtu", None)
        return lookup(dst_ip) if lookup else None

    def _path_mtu_problem(self, dst_ip: str, ib_mtu: int):
        """One line naming why RoCE MTU ib_mtu cannot reach dst_ip, or None if its packets fit the path."""
        pmtu = self._path_mtu(dst_ip)
        return mtu_mismatch(ib_mtu, pmtu, f"the path from {self.ip} to {dst_ip}") if pmtu else None

    def _wake(self):
        os.eventfd_write(self._wfd, 1)

    def close(self, linger: Optional[float] = None):
        """Stop the engine thread and close the sockets. QPs are destroyed.

        Like TCP's TIME_WAIT, the device first keeps answering its RC peers for a short while if one of
        them sent a request recently: if our last ACK was lost, the peer retransmits after its timeout
        and must get the ACK again, or its send fails with RETRY_EXC_ERR although all data arrived.
        linger=None waits until no RC QP has received a request for 3 x its timeout (re-checked while
        retransmissions keep arriving, at most 3 s in all); linger=0 closes at once."""
        if not self._running:
            return
        if linger is None:
            give_up = time.monotonic() + 3.0
            while True:
                with self._lock:
                    ends = [qp._last_req_rx + 3 * qp.timeout for qp in self._qps.values()
                            if qp.qp_type == QPType.RC and qp.state == QPState.RTS and qp._last_req_rx]
                wait = min(max(ends, default=0.0), give_up) - time.monotonic()
                if wait <= 0:
                    break
                time.sleep(wait)
        elif linger > 0:
            time.sleep(linger)
        self._running = False
        self._wake()
        self._thread.join(5)
        self.transport.close()
        os.close(self._wfd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<uroce Device {self.ip} mtu={self.mtu} qps={len(self._qps)}>"
