"""uroce: RoCEv2 from user space. One engine thread per device does RX, timers and paced TX.

The engine blocks in select() on the receive socket and an eventfd that post_send() signals; it never
busy-polls. RC reliability is in rc.py, per-QP state in qp.py, packet codec in headers.py, sockets
in transport.py.
"""
import os
import random
import select
import socket
import threading
import time
from collections import Counter
from typing import Optional

from . import headers as H
from .qp import ProtectionDomain, QueuePair, _gather, _is_mcast, _scatter, _SendWQE
from .rc import _RESP_OPS, ReliableConnection
from .verbs import (GRH_LEN, Access, AddressHandle, CompletionQueue, MemoryRegion, QPState, QPType, RdmaError,
                    RecvWR, SendWR, WC, WCOpcode, WCStatus, WROpcode)

ETH_OVERHEAD = 14        # bytes a shaper (tbf) counts per packet on top of the IP packet


class Device(ReliableConnection):
    """A uroce RDMA device bound to one IPv4 address. Create with open_device(ip, backend='uroce')."""

    backend = "uroce"

    def __init__(self, ip: str, transport=None, mtu: int = 1024, name: Optional[str] = None,
                 first_qpn: int = 0x11):
        socket.inet_aton(ip)
        if mtu not in H.IB_MTUS:
            raise RdmaError(f"mtu must be one of {H.IB_MTUS}, not {mtu}")
        self.ip, self.mtu = ip, mtu
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
        self._next_qpn = first_qpn
        self._next_mr = 1
        self._ip_id = random.randrange(1, 0xFFFF)
        self._lock = threading.RLock()
        self._wfd = os.eventfd(0, os.EFD_NONBLOCK)
        self._running = True
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
                  cc: Optional[str] = None) -> QueuePair:
        """Create a QP. RC: call qp.connect(peer_info) next. UD: ready at once (Q_Key `qkey`).

        timeout/retry_cnt: retransmit after `timeout` s without progress (default 67 ms = IB timeout
        code 14, perftest's), give up after retry_cnt retries (RETRY_EXC_ERR). rnr_retry 7 = retry forever on RNR NAK. sport_mode 'qp': UDP source
        port from the QPNs like rxe; 'packet': a random one per packet (spraying). retransmit 'gbn'
        (go-back-N, as rxe) or 'selective'. reorder_window=0 NAKs at the first gap, like rxe.
        max_outstanding: packets in flight before the sender waits for ACKs.
        cc 'delay': delay-based congestion control (hosts/rdma/cc.py) paces an RC QP at most at its
        rate_limit_bps, less while the round trip shows queueing.
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
                           max_outstanding=max_outstanding, qkey=qkey, cc=cc)
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

    # ---- the engine ---------------------------------------------------------------------------
    def _run(self):
        rx_fd, wfd = self.transport.fileno(), self._wfd
        timeout = 0.0
        while self._running:
            try:
                r, _, _ = select.select([rx_fd, wfd], [], [], timeout)
            except (OSError, ValueError):
                if not self._running:
                    return
                raise
            with self._lock:
                try:
                    if wfd in r:
                        try:
                            os.eventfd_read(wfd)
                        except BlockingIOError:
                            pass
                    backlog = False
                    if rx_fd in r:
                        batch = self.transport.recv_batch(64)
                        for pkt in batch:
                            self._rx(pkt)
                        backlog = len(batch) == 64
                    now = time.monotonic()
                    for qp in list(self._qps.values()):
                        if qp._ack_pending:
                            self._send_ack(qp)
                    timeout = 0.0 if backlog else self._service(now)
                    if backlog:     # gaps are judged only once the receive queue is drained
                        for qp in list(self._qps.values()):
                            if qp.state != QPState.ERROR:
                                self._pump(qp, now)
                except Exception as e:   # keep the endpoint alive; record what happened
                    self.counters["engine_errors"] += 1
                    self.last_error = e
                    timeout = 0.01

    def _service(self, now):
        """Timers and paced TX for all QPs; returns the select() timeout."""
        nxt = 1.0
        for qp in list(self._qps.values()):
            if qp.state == QPState.ERROR:
                continue
            self._timers(qp, now)
            t = self._pump(qp, now)
            if t is not None:
                nxt = min(nxt, t - now)
            t = self._timers(qp, now)     # again: what was just sent arms the retransmission timer
            if t is not None:
                nxt = min(nxt, t - now)
        return max(nxt, 0.0)

    # ---- TX ------------------------------------------------------------------------------------
    def _emit(self, qp, opcode, dst_b, dst_ip, dqpn, psn, hdrs=b"", payload=b"", ackreq=False, se=False):
        self._ip_id = (self._ip_id + 1) & 0xFFFF or 1
        pkt = H.encode(self._ip_b, dst_b, qp._sport_now(), self._ip_id, opcode, dqpn, psn, hdrs, payload,
                       ackreq=ackreq, se=se, ttl=255 if dst_b[0] >= 224 and dst_b[0] <= 239 else 64)
        n = len(pkt)
        if qp._rate is not None:
            qp._tokens -= n + ETH_OVERHEAD
        self.counters["tx_packets"] += 1
        self.counters["tx_bytes"] += n
        qp.counters["tx_packets"] += 1
        qp.counters["tx_bytes"] += n
        if self.tap:
            self.tap(bytes(pkt))
        if self.tx_drop_hook and self.tx_drop_hook(pkt):
            self.counters["drop_tx_hook"] += 1
            return
        if not self.transport.send(pkt, dst_ip):
            self.counters["drop_tx_error"] += 1

    def _tokens_ok(self, qp, now):
        """None if the QP may send now, else the time it may."""
        if qp._rate is None:
            return None
        qp._tokens = min(qp._burst, qp._tokens + (now - qp._tok_t) * qp._rate)
        qp._tok_t = now
        if qp._tokens > 0:
            return None
        return now + (-qp._tokens + 1) / qp._rate

    def _pump(self, qp, now, budget=32):
        """Send what the QP may send now; returns when it wants to be called again (or None)."""
        while budget > 0:
            wait = self._tokens_ok(qp, now)
            if wait is not None:
                return wait
            if qp._resp:
                self._send_read_resp(qp)
            elif qp.qp_type == QPType.UD:
                if qp._sq_head >= len(qp._sq):
                    return None
                self._send_ud(qp)
            else:
                if now < qp._rnr_until:
                    return qp._rnr_until
                if qp._retx:
                    seq = qp._retx.popleft()
                    if seq < qp._una():
                        continue
                    self._send_req(qp, seq, now)
                elif qp._send_seq < qp._next_seq and qp._send_seq - qp._una() < qp.max_outstanding:
                    qp._send_seq = self._send_req(qp, qp._send_seq, now)
                else:
                    return None
            budget -= 1
        return now

    def _send_ud(self, qp):
        w = qp._sq[qp._sq_head]
        wr = w.wr
        op = H.UD_SEND_ONLY_IMM if wr.opcode == WROpcode.SEND_WITH_IMM else H.UD_SEND_ONLY
        hdrs = H.ext_headers(op, qkey=wr.ah.qkey, src_qp=qp.qpn, imm=wr.imm)
        self._emit(qp, op, socket.inet_aton(wr.ah.ip), wr.ah.ip, wr.ah.qpn, qp._wire(w.first), hdrs,
                   _gather(w.segs, 0, w.length), se=wr.solicited)
        qp._send_seq = qp._acked = w.end
        self._complete_head(qp, WCStatus.SUCCESS)









    # ---- RX ------------------------------------------------------------------------------------
    def _drop(self, reason, qp=None):
        self.counters["drop_" + reason] += 1
        self.counters["rx_dropped"] += 1
        if qp is not None:
            qp.counters["drop_" + reason] += 1

    def _rx(self, raw):
        self.counters["rx_packets"] += 1
        self.counters["rx_bytes"] += len(raw)
        if self.rx_drop_hook and self.rx_drop_hook(raw):
            self._drop("rx_hook")
            return
        try:
            p = H.decode(raw)
        except H.DecodeError as e:
            self._drop(e.reason)
            return
        if p.pkey != H.DEFAULT_PKEY:
            return self._drop("bad_pkey")
        if p.opcode >= H.UD_SEND_ONLY:
            return self._rx_ud(p, raw)
        if p.opcode > H.ACKNOWLEDGE:
            return self._drop("unsupported_opcode")
        qp = self._qps.get(p.dqpn)
        if qp is None or qp.qp_type != QPType.RC:
            return self._drop("unknown_qp")
        if qp.state != QPState.RTS:
            return self._drop("bad_state", qp)
        if p.src_ip != qp.remote.ip:
            return self._drop("bad_source", qp)
        qp.counters["rx_packets"] += 1
        qp.counters["rx_bytes"] += len(raw)
        if p.opcode in _RESP_OPS:
            self._rx_response(qp, p)
        else:
            self._rx_request(qp, p)







    # -- UD
    def _rx_ud(self, p, raw):
        if p.opcode > H.UD_SEND_ONLY_IMM:
            return self._drop("unsupported_opcode")
        if p.dqpn == H.MCAST_QPN:
            if not _is_mcast(p.dst_ip):
                return self._drop("unknown_qp")
            targets = [q for q in self._groups.get(p.dst_ip, ()) if q.state == QPState.RTS]
            if not targets:
                return self._drop("not_member")
            if p.src_ip == self.ip and all(q.qpn == p.src_qp for q in targets):
                return self._drop("own_multicast")
        else:
            q = self._qps.get(p.dqpn)
            if q is None or q.qp_type != QPType.UD:
                return self._drop("unknown_qp")
            targets = [q]
        for qp in targets:
            if p.src_ip == self.ip and qp.qpn == p.src_qp:
                continue        # our own multicast looped back
            if p.qkey != qp.qkey:
                self._drop("bad_qkey", qp)
                continue
            qp.counters["rx_packets"] += 1
            qp.counters["rx_bytes"] += len(raw)
            if not qp._rq:
                self._drop("no_recv_wqe", qp)
                continue
            wr, segs = qp._rq.popleft()
            total = sum(len(s) for s in segs)
            if total < GRH_LEN + len(p.payload):
                qp.recv_cq._push(WC(wr.wr_id, WCStatus.LOC_LEN_ERR, WCOpcode.RECV, 0, qp.qpn))
                self._drop("recv_too_small", qp)
                continue
            _scatter(segs, 0, bytes(20) + bytes(raw[:20]) + bytes(p.payload))
            qp.recv_cq._push(WC(wr.wr_id, WCStatus.SUCCESS, WCOpcode.RECV, GRH_LEN + len(p.payload), qp.qpn,
                                imm=p.imm, src_qp=p.src_qp, src_ip=p.src_ip))
