"""The engine thread of a uroce device: select() on the receive socket and the device's eventfd, timers, paced
transmission (token buckets per queue pair), UD sends, and receive (drops counted by reason, RC to rc.py, UD
here). A mixin of uroce.Device, under its lock.
"""
import os
import select
import socket
import time

from . import headers as H
from .qp import _gather, _is_mcast, _scatter
from .rc import _RESP_OPS
from .verbs import GRH_LEN, QPState, QPType, WC, WCOpcode, WCStatus, WROpcode

ETH_OVERHEAD = 14        # bytes a shaper (tbf) counts per packet on top of the IP packet
RX_HOLD_PACKETS = 2.5    # arrivals wait for a pacing wake due within this many of the QP's packet times ...
RX_HOLD_MAX = 0.02       # s ... and this: what a receive buffer holds at any rate, and a bound on the added latency


class Engine:
    # ---- the engine ---------------------------------------------------------------------------
    def _run(self):
        rx_fd, wfd = self.transport.fileno(), self._wfd
        timeout, hold = 0.0, False
        while self._running:
            try:
                # while a paced QP will wake the engine within two packets' time, arrivals wait for that wake instead
                # of waking it themselves (as a NIC moderates interrupts): the CPU goes mostly to waking up
                r, _, _ = select.select([wfd] if hold else [rx_fd, wfd], [], [], timeout)
            except (OSError, ValueError):
                if not self._running:
                    return
                raise
            with self._lock:
                self.counters["engine_wakeups"] += 1
                try:
                    if wfd in r:
                        try:
                            os.eventfd_read(wfd)
                        except BlockingIOError:
                            pass
                    backlog = False
                    if hold or rx_fd in r:
                        batch = self.transport.recv_batch(64)
                        for pkt in batch:
                            self._rx(pkt)
                        backlog = len(batch) == 64
                    now = time.monotonic()
                    for qp in list(self._qps.values()):
                        if qp._ack_pending:
                            self._send_ack(qp)
                    timeout = 0.0 if backlog else self._service(now)
                    hold = not backlog and self._pacing_wake_soon
                    if backlog:     # gaps are judged only once the receive queue is drained
                        for qp in list(self._qps.values()):
                            if qp.state != QPState.ERROR:
                                self._pump(qp, now)
                except Exception as e:   # keep the endpoint alive; record what happened
                    self.counters["engine_errors"] += 1
                    self.last_error = e
                    timeout, hold = 0.01, False

    def _service(self, now):
        """Timers and paced TX for all QPs; returns the select() timeout. Sets _pacing_wake_soon: a QP without
        congestion control waits for tokens due within RX_HOLD_PACKETS of its packets (and RX_HOLD_MAX)."""
        nxt = 1.0
        soon, cc = False, False
        for qp in list(self._qps.values()):
            if qp.state == QPState.ERROR:
                continue
            self._timers(qp, now)
            t = self._pump(qp, now)
            if t is not None:
                nxt = min(nxt, t - now)
                # out of tokens (_pump checks them first): its wake is the pacing one
                if qp.cc is None and qp._rate is not None and qp._tokens <= 0 and \
                        t - now <= min(RX_HOLD_PACKETS * qp._packet_tokens / qp._rate, RX_HOLD_MAX):
                    soon = True
            cc = cc or qp.cc is not None
            t = self._timers(qp, now)     # again: what was just sent arms the retransmission timer
            if t is not None:
                nxt = min(nxt, t - now)
        # congestion control reacts packet by packet (a CNP, a cut): its arrivals are not held
        self._pacing_wake_soon = soon and not cc
        return max(nxt, 0.0)

    # ---- TX ------------------------------------------------------------------------------------
    def _emit(self, qp, opcode, dst_b, dst_ip, dqpn, psn, hdrs=b"", payload=b"", ackreq=False, se=False):
        self._ip_id = (self._ip_id + 1) & 0xFFFF or 1
        pkt = H.encode(self._ip_b, dst_b, qp._sport_now(), self._ip_id, opcode, dqpn, psn, hdrs, payload,
                       ackreq=ackreq, se=se, ttl=255 if dst_b[0] >= 224 and dst_b[0] <= 239 else 64,
                       tos=H.ECT0 if self.ecn else 0)
        n = len(pkt)
        if qp._rate is not None:
            qp._tokens -= n + ETH_OVERHEAD
        if qp.cc is not None:           # DCQCN's byte counter
            qp.cc.sent(n, time.monotonic())
            qp._follow_cc()
        qp.counters["tx_packets"] += 1
        qp.counters["tx_bytes"] += n
        self._wire_out(pkt, dst_ip)

    def _send_cnp(self, qp):
        """Notification point: a CNP to the peer queue pair, outside pacing (as NICs send them)."""
        self._ip_id = (self._ip_id + 1) & 0xFFFF or 1
        pkt = H.encode_cnp(self._ip_b, qp._dst_b, qp._sport, self._ip_id, qp.remote.qpn)
        qp.counters["cnp_sent"] += 1
        self.counters["cnp_sent"] += 1
        self._wire_out(pkt, qp.remote.ip)

    def _wire_out(self, pkt, dst_ip):
        n = len(pkt)
        self.counters["tx_packets"] += 1
        self.counters["tx_bytes"] += n
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
        if qp.cc is not None:
            return now + (-qp._tokens + 1) / qp._rate     # congestion control sets a rate per packet: keep to it
        # sleep until the bucket holds a full packet, not until it is just positive: a wake then sends two packets
        # back to back (well inside the burst), and the engine, whose CPU goes mostly to waking up, wakes half as
        # often for the same rate
        return now + (qp._packet_tokens - qp._tokens) / qp._rate

    def _pump(self, qp, now, budget=32):
        """Send what the QP may send now; returns when it wants to be called again (or None)."""
        if qp.cc is not None:       # DCQCN's timers may have raised the rate while the QP waited
            qp.cc.advance(now)
            qp._follow_cc()
        while budget > 0:
            wait = self._tokens_ok(qp, now)
            if wait is not None:
                return wait if qp.cc is None else min(wait, qp.cc.wake_at)
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
        if p.opcode == H.CNP:
            return self._rx_cnp(p)
        if p.opcode >= H.UD_SEND_ONLY:
            return self._rx_ud(p, raw)
        if p.opcode > H.ACKNOWLEDGE:
            return self._drop("unsupported_opcode")
        qp = self._connected_rc_qp(p)
        if qp is None:
            return
        qp.counters["rx_packets"] += 1
        qp.counters["rx_bytes"] += len(raw)
        if p.tos & H.ECN_MASK == H.ECN_CE:
            self._congestion_experienced(qp)
        if p.opcode in _RESP_OPS:
            self._rx_response(qp, p)
        else:
            self._rx_request(qp, p)

    def _connected_rc_qp(self, p):
        """The RC QP a packet is for, if it is connected to the packet's sender; else the drop is counted."""
        qp = self._qps.get(p.dqpn)
        if qp is None or qp.qp_type != QPType.RC:
            return self._drop("unknown_qp")
        if qp.state != QPState.RTS:
            return self._drop("bad_state", qp)
        if p.src_ip != qp.remote.ip:
            return self._drop("bad_source", qp)
        return qp

    # -- DCQCN: the notification point and the reaction point's input
    def _congestion_experienced(self, qp):
        qp.counters["ecn_ce_received"] += 1
        self.counters["ecn_ce_received"] += 1
        now = time.monotonic()
        if now - qp._last_cnp >= qp.cnp_interval:
            qp._last_cnp = now
            self._send_cnp(qp)

    def _rx_cnp(self, p):
        qp = self._connected_rc_qp(p)
        if qp is None:
            return
        qp.counters["cnp_received"] += 1
        self.counters["cnp_received"] += 1
        if qp.cc is not None:
            qp.cc.cnp(time.monotonic())
            qp._follow_cc()

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
