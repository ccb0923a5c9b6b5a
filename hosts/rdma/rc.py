"""RC reliability of uroce: requester and responder.

The rules follow the InfiniBand rules as Linux rxe implements them: 24-bit PSNs, AckReq on
the last packet of a message (and every `ack_every` packets), coalesced ACKs, a NAK (PSN sequence
error) on a gap, retransmission after `timeout` seconds without progress, at most `retry_cnt` times,
go-back-N by default or selective retransmission of the NAKed packet. A responder reorder window
buffers up to `reorder_window` packets ahead of the expected PSN for `reorder_timeout` seconds before
it NAKs, so per-packet spraying over unequal paths does not cause spurious retransmissions.
Internally PSNs are unbounded sequence numbers; the wire PSN is (initial PSN + seq) mod 2^24.
"""
import time
from collections import deque

from . import headers as H
from .qp import _gather, _scatter
from .verbs import Access, QPState, QPType, WC, WCOpcode, WCStatus, WROpcode

# IB RNR timer encoding (ms) for the 5-bit code in an RNR NAK
RNR_MS = [655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
          2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76,
          327.68, 491.52]
_SEND_OPS = {H.SEND_FIRST, H.SEND_MIDDLE, H.SEND_LAST, H.SEND_LAST_IMM, H.SEND_ONLY, H.SEND_ONLY_IMM}
_WRITE_OPS = {H.WRITE_FIRST, H.WRITE_MIDDLE, H.WRITE_LAST, H.WRITE_LAST_IMM, H.WRITE_ONLY, H.WRITE_ONLY_IMM}
_RESP_OPS = {H.READ_RESP_FIRST, H.READ_RESP_MIDDLE, H.READ_RESP_LAST, H.READ_RESP_ONLY, H.ACKNOWLEDGE}
_FIRSTS = {H.SEND_FIRST, H.SEND_ONLY, H.SEND_ONLY_IMM, H.WRITE_FIRST, H.WRITE_ONLY, H.WRITE_ONLY_IMM}
_LASTS = {H.SEND_LAST, H.SEND_LAST_IMM, H.SEND_ONLY, H.SEND_ONLY_IMM, H.WRITE_LAST, H.WRITE_LAST_IMM,
          H.WRITE_ONLY, H.WRITE_ONLY_IMM}
# (only, first, middle, last) opcodes per WR opcode; the IMM variant replaces only/last
_SEGMENTS = {
    WROpcode.SEND: (H.SEND_ONLY, H.SEND_FIRST, H.SEND_MIDDLE, H.SEND_LAST),
    WROpcode.SEND_WITH_IMM: (H.SEND_ONLY_IMM, H.SEND_FIRST, H.SEND_MIDDLE, H.SEND_LAST_IMM),
    WROpcode.RDMA_WRITE: (H.WRITE_ONLY, H.WRITE_FIRST, H.WRITE_MIDDLE, H.WRITE_LAST),
    WROpcode.RDMA_WRITE_WITH_IMM: (H.WRITE_ONLY_IMM, H.WRITE_FIRST, H.WRITE_MIDDLE, H.WRITE_LAST_IMM),
}
_WC_OF_WR = {WROpcode.SEND: WCOpcode.SEND, WROpcode.SEND_WITH_IMM: WCOpcode.SEND,
             WROpcode.RDMA_WRITE: WCOpcode.RDMA_WRITE, WROpcode.RDMA_WRITE_WITH_IMM: WCOpcode.RDMA_WRITE,
             WROpcode.RDMA_READ: WCOpcode.RDMA_READ}


class ReliableConnection:
    """Mixin of uroce.Device: RC transmit, timers, completions and receive (run under the device lock)."""

    def _send_req(self, qp, seq, now):
        """Transmit request packet `seq`; returns the seq after it."""
        w = qp._find(seq)
        if w is None:
            return seq + 1
        wr = w.wr
        i = seq - w.first
        first_time = seq >= qp._sent_hi
        if not first_time:
            qp.counters["retransmits"] += 1
            self.counters["retransmits"] += 1
        qp._sent_hi = max(qp._sent_hi, w.end if wr.opcode == WROpcode.RDMA_READ else seq + 1)
        if not w.sent:
            w.sent = True
            if seq - qp._una() <= 0:
                qp._progress_t = now
        r = qp.remote
        if wr.opcode == WROpcode.RDMA_READ:
            off = i * qp.mtu
            hdrs = H.ext_headers(H.READ_REQUEST, va=wr.remote_addr + off, rkey=wr.rkey, dma_len=w.length - off)
            self._emit(qp, H.READ_REQUEST, qp._dst_b, r.ip, r.qpn, qp._wire(seq), hdrs, ackreq=True)
            qp._since_ackreq = 0
            qp._ackreq_t = now
            return w.end
        only, first, middle, last = _SEGMENTS[wr.opcode]
        n = w.npkts
        if n == 1:
            op = only
        elif i == 0:
            op = first
        elif i == n - 1:
            op = last
        else:
            op = middle
        off = i * qp.mtu
        plen = min(qp.mtu, w.length - off)
        qp._since_ackreq += 1
        # AckReq on the last packet, every ack_every packets, and often enough for slow paced QPs
        ackreq = i == n - 1 or qp._since_ackreq >= qp.ack_every or now - qp._ackreq_t > qp.timeout / 4
        # one round-trip sample in flight at a time; congestion control asks for one every round
        # trip, otherwise only packets that request an ACK anyway are timed (the wire stays rxe's)
        if first_time and qp._probe is None and (ackreq or qp.cc is not None):
            qp._probe = (seq, now)
            ackreq = True
        if ackreq:
            qp._since_ackreq = 0
            qp._ackreq_t = now
        ext = H.OPCODE_EXT[op]
        hdrs = b""
        if ext:
            hdrs = H.ext_headers(op, va=wr.remote_addr, rkey=wr.rkey, dma_len=w.length, imm=wr.imm)
        self._emit(qp, op, qp._dst_b, r.ip, r.qpn, qp._wire(seq), hdrs, _gather(w.segs, off, plen),
                   ackreq=ackreq, se=wr.solicited and i == n - 1)
        return seq + 1

    def _send_read_resp(self, qp):
        job = qp._resp[0]
        view, off0, length, seq0, npkts, i = job
        op = (H.READ_RESP_ONLY if npkts == 1 else H.READ_RESP_FIRST if i == 0 else
              H.READ_RESP_LAST if i == npkts - 1 else H.READ_RESP_MIDDLE)
        off = i * qp.mtu
        plen = min(qp.mtu, length - off)
        hdrs = H.ext_headers(op, syndrome=H.AETH_ACK, msn=qp._msn) if H.OPCODE_EXT[op] else b""
        r = qp.remote
        self._emit(qp, op, qp._dst_b, r.ip, r.qpn, (r.psn + seq0 + i) & H.PSN_MASK, hdrs,
                   view[off0 + off:off0 + off + plen])
        job[5] = i + 1
        if i + 1 >= npkts:
            qp._resp.popleft()

    def _send_ack(self, qp, syndrome=H.AETH_ACK, seq=None):
        qp._ack_pending = False
        r = qp.remote
        if seq is None:
            seq = qp._epsn - 1
        self._emit(qp, H.ACKNOWLEDGE, qp._dst_b, r.ip, r.qpn, (r.psn + seq) & H.PSN_MASK,
                   H.ext_headers(H.ACKNOWLEDGE, syndrome=syndrome, msn=qp._msn))
        if syndrome == H.AETH_ACK:
            qp.counters["acks_sent"] += 1
        else:
            qp.counters["naks_sent"] += 1

    # ---- timers --------------------------------------------------------------------------------
    def _timers(self, qp, now):
        nxt = None
        if qp.qp_type != QPType.RC or qp.state != QPState.RTS:
            return None
        # responder: a gap that outlived the reorder timeout -> NAK (PSN sequence error)
        if qp._ooo_t is not None:
            if not qp._ooo:
                qp._ooo_t = None
            elif now >= qp._ooo_t:
                # NAK the gap; NAK again, at doubling intervals, while it stays open (the retransmission
                # was lost, or is still queued behind the data that overtook the gap)
                qp._renaks = qp._renaks + 1 if qp._nak_seq == qp._epsn else 0
                qp._ooo_t = now + 2 * qp.reorder_timeout * 2 ** min(qp._renaks, 8)
                nxt = qp._ooo_t
                qp._nak_seq = qp._epsn
                self._send_ack(qp, 0x60 | H.NAK_PSN_SEQ_ERR, qp._epsn)
            else:
                nxt = qp._ooo_t
        # requester: READ responses missing while later ones arrived
        if qp._read_gap_t is not None:
            if now >= qp._read_gap_t + qp.reorder_timeout:
                qp._read_gap_t = None
                una = qp._una()
                if una < qp._send_seq:
                    qp.counters["read_gap_retries"] += 1
                    self._go_back(qp, una, now)
            else:
                t = qp._read_gap_t + qp.reorder_timeout
                nxt = t if nxt is None else min(nxt, t)
        # requester: retransmission timeout
        if qp.outstanding and qp._sent_hi > qp._una():
            dl = max(qp._progress_t, qp._ackreq_t) + qp.timeout
            if now >= dl:
                qp._retries += 1
                qp.counters["timeouts"] += 1
                if qp._retries > qp.retry_cnt:
                    self._qp_error(qp, WCStatus.RETRY_EXC_ERR)
                    return None
                if qp.cc is not None:
                    qp.cc.lost(now)
                    qp._follow_cc()
                self._go_back(qp, qp._una(), now)
                dl = now + qp.timeout
            nxt = dl if nxt is None else min(nxt, dl)
        return nxt

    def _go_back(self, qp, seq, now):
        qp._retx.clear()
        qp._probe = None                    # its ACK could answer either transmission (Karn)
        qp._send_seq = min(qp._send_seq, seq) if seq >= qp._una() else qp._una()
        qp._progress_t = now

    # ---- completions ---------------------------------------------------------------------------
    def _complete_head(self, qp, status, byte_len=None):
        w = qp._sq[qp._sq_head]
        qp._sq_head += 1
        w.done = True
        if w.wr.signaled or status != WCStatus.SUCCESS:
            qp.send_cq._push(WC(w.wr.wr_id, status, _WC_OF_WR[WROpcode(w.wr.opcode)],
                                w.length if byte_len is None else byte_len, qp.qpn))

    def _complete_ready(self, qp):
        progressed = False
        while qp._sq_head < len(qp._sq):
            w = qp._sq[qp._sq_head]
            if w.wr.opcode == WROpcode.RDMA_READ:
                if w.nrcvd < w.npkts:
                    break
            elif qp._acked < w.end:
                break
            self._complete_head(qp, WCStatus.SUCCESS)
            progressed = True
        if progressed:
            qp._retries = 0
            qp._progress_t = time.monotonic()
        return progressed

    def _qp_error(self, qp, status):
        """Complete the oldest WR with `status`, flush the rest, QP -> ERROR (as verbs do)."""
        qp.state = QPState.ERROR
        first = True
        while qp._sq_head < len(qp._sq):
            self._complete_head(qp, status if first else WCStatus.WR_FLUSH_ERR)
            first = False
        while qp._rq:
            wr, _ = qp._rq.popleft()
            qp.recv_cq._push(WC(wr.wr_id, WCStatus.WR_FLUSH_ERR, WCOpcode.RECV, 0, qp.qpn))
        qp._resp.clear()
        qp._retx.clear()
        self.counters["qp_errors"] += 1

    # -- responder
    def _rx_request(self, qp, p):
        qp._last_req_rx = time.monotonic()
        seq = qp._seq_of_req(p.psn)
        d = seq - qp._epsn
        if d == 0:
            self._execute(qp, p, seq)
            while qp._ooo and qp.state == QPState.RTS:
                nxt = qp._ooo.pop(qp._epsn, None)
                if nxt is None:
                    break
                self._execute(qp, nxt[0], qp._epsn)
            # a remaining gap is declared lost once a packet behind it has waited reorder_timeout
            qp._ooo_t = min(t for _, t in qp._ooo.values()) + qp.reorder_timeout if qp._ooo else None
            return
        if d < 0:
            qp.counters["duplicates"] += 1
            if p.opcode == H.READ_REQUEST:
                # re-execute an old READ (idempotent): answer from the PSN asked for
                self._queue_read(qp, p, seq, count_msn=False)
            else:
                qp._ack_pending = True
            return
        qp.counters["out_of_order"] += 1
        if d < qp.reorder_window and len(qp._ooo) < qp.reorder_window:
            if seq in qp._ooo:
                qp.counters["duplicates"] += 1
            else:
                now = time.monotonic()
                qp._ooo[seq] = (p, now)
                if qp._ooo_t is None:
                    qp._ooo_t = now + qp.reorder_timeout
            return
        if d >= qp.reorder_window:
            self._drop("out_of_window", qp)
        else:
            self._drop("reorder_overflow", qp)
        if qp._nak_seq != qp._epsn:
            qp._nak_seq = qp._epsn
            self._send_ack(qp, 0x60 | H.NAK_PSN_SEQ_ERR, qp._epsn)

    def _nak(self, qp, code):
        self._send_ack(qp, 0x60 | code, qp._epsn)
        qp.counters["naks_sent_error"] += 1

    def _execute(self, qp, p, seq):
        """Apply in-order request packet `seq` (== qp._epsn)."""
        op = p.opcode
        if op == H.READ_REQUEST:
            if self._queue_read(qp, p, seq, count_msn=True):
                qp._epsn = seq + max(1, -(-p.dma_len // qp.mtu))
            return
        if op in _FIRSTS and (qp._wr_view is not None or qp._recv_cur is not None):
            return self._nak(qp, H.NAK_INVALID_REQ)     # new message while one is in progress
        if op not in _FIRSTS and qp._wr_view is None and qp._recv_cur is None:
            return self._nak(qp, H.NAK_INVALID_REQ)     # MIDDLE/LAST without FIRST
        plen = len(p.payload)
        mid_or_first = op in (H.SEND_FIRST, H.SEND_MIDDLE, H.WRITE_FIRST, H.WRITE_MIDDLE)
        if (mid_or_first and plen != qp.mtu) or plen > qp.mtu:
            return self._nak(qp, H.NAK_INVALID_REQ)
        if op in _SEND_OPS:
            if op in _FIRSTS:
                if not qp._rq:
                    qp.counters["rnr_naks_sent"] += 1
                    return self._send_ack(qp, 0x20 | (qp.min_rnr_timer & 0x1F), seq)
                wr, segs = qp._rq.popleft()
                qp._recv_cur = [wr, segs, 0]
            cur = qp._recv_cur
            if not _scatter(cur[1], cur[2], p.payload):
                qp._recv_cur = None
                qp.recv_cq._push(WC(cur[0].wr_id, WCStatus.LOC_LEN_ERR, WCOpcode.RECV, cur[2], qp.qpn))
                return self._nak(qp, H.NAK_INVALID_REQ)
            cur[2] += plen
            if op in _LASTS:
                qp._recv_cur = None
                qp.recv_cq._push(WC(cur[0].wr_id, WCStatus.SUCCESS, WCOpcode.RECV, cur[2], qp.qpn, imm=p.imm))
        else:
            if op in (H.WRITE_LAST_IMM, H.WRITE_ONLY_IMM) and not qp._rq:
                qp.counters["rnr_naks_sent"] += 1
                return self._send_ack(qp, 0x20 | (qp.min_rnr_timer & 0x1F), seq)
            if op in _FIRSTS:
                mr = self._mrs.get(p.rkey)
                if (mr is None or mr.pd is not qp.pd or not mr.access & Access.REMOTE_WRITE
                        or not mr.contains(p.va, p.dma_len)):
                    self.counters["remote_access_errors"] += 1
                    return self._nak(qp, H.NAK_REM_ACCESS_ERR)
                off = p.va - mr.addr
                qp._wr_view = [mr.view[off:off + p.dma_len], 0]
            cur = qp._wr_view
            view, off = cur
            if off + plen > len(view):
                qp._wr_view = None
                return self._nak(qp, H.NAK_INVALID_REQ)
            view[off:off + plen] = p.payload
            cur[1] = off + plen
            if op in _LASTS:
                qp._wr_view = None
                if p.imm is not None:
                    wr, _ = qp._rq.popleft()
                    qp.recv_cq._push(WC(wr.wr_id, WCStatus.SUCCESS, WCOpcode.RECV_RDMA_WITH_IMM, cur[1],
                                        qp.qpn, imm=p.imm))
        if op in _LASTS:
            qp._msn = (qp._msn + 1) & 0xFFFFFF
        qp._epsn = seq + 1
        qp._nak_seq = None
        if p.ackreq:
            qp._ack_pending = True

    def _queue_read(self, qp, p, seq, count_msn):
        mr = self._mrs.get(p.rkey)
        if (mr is None or mr.pd is not qp.pd or not mr.access & Access.REMOTE_READ
                or not mr.contains(p.va, p.dma_len)):
            self.counters["remote_access_errors"] += 1
            self._nak(qp, H.NAK_REM_ACCESS_ERR)
            return False
        npkts = max(1, -(-p.dma_len // qp.mtu))
        if count_msn:
            qp._msn = (qp._msn + 1) & 0xFFFFFF
            qp._nak_seq = None
        else:
            # a retried READ replaces any queued answer to the same request
            qp._resp = deque(j for j in qp._resp if not (j[3] <= seq < j[3] + j[4]))
        qp._resp.append([mr.view, p.va - mr.addr, p.dma_len, seq, npkts, 0])
        return True

    # -- requester
    def _rx_response(self, qp, p):
        op = p.opcode
        seq = qp._seq_of_resp(p.psn)
        if op == H.ACKNOWLEDGE:
            t = p.syndrome & H.AETH_TYPE_MASK
            if t == H.AETH_TYPE_ACK:
                qp.counters["acks_rcvd"] += 1
                self._acked_upto(qp, seq + 1)
            elif t == H.AETH_TYPE_RNR:
                qp.counters["rnr_naks_rcvd"] += 1
                self._acked_upto(qp, seq)
                qp._rnr_retries += 1
                if qp.rnr_retry != 7 and qp._rnr_retries > qp.rnr_retry:
                    return self._qp_error(qp, WCStatus.RNR_RETRY_EXC_ERR)
                now = time.monotonic()
                qp._rnr_until = now + RNR_MS[p.syndrome & 0x1F] / 1000.0
                self._go_back(qp, seq, now)
            elif t == H.AETH_TYPE_NAK:
                code = p.syndrome & 0x1F
                qp.counters["naks_rcvd"] += 1
                if code == H.NAK_PSN_SEQ_ERR:
                    self._acked_upto(qp, seq)
                    if seq < qp._una() or seq >= qp._send_seq:
                        return
                    now = time.monotonic()
                    # The responder repeats a NAK while the gap stays open; one sent before our
                    # retransmission could reach it must not trigger another go-back-N.
                    last_seq, last_t = qp._nak_back
                    if last_seq == seq and now - last_t < max(qp.srtt or 0.0, 4 * qp.reorder_timeout):
                        qp.counters["naks_ignored"] += 1
                        return
                    qp._nak_back = (seq, now)
                    if qp.cc is not None:
                        qp.cc.lost(now)
                        qp._follow_cc()
                    if qp.retransmit == "selective":
                        qp._retx.append(seq)
                        qp._progress_t = now
                    else:
                        self._go_back(qp, seq, now)
                else:
                    self._acked_upto(qp, seq)
                    status = {H.NAK_REM_ACCESS_ERR: WCStatus.REM_ACCESS_ERR,
                              H.NAK_REM_OP_ERR: WCStatus.REM_OP_ERR}.get(code, WCStatus.REM_INV_REQ_ERR)
                    self._qp_error(qp, status)
            else:
                self._drop("bad_syndrome", qp)
            return
        # READ response
        w = qp._find(seq)
        if w is None or w.wr.opcode != WROpcode.RDMA_READ or not w.sent:
            qp.counters["duplicates"] += 1
            return
        i = seq - w.first
        off = i * qp.mtu
        exp = min(qp.mtu, w.length - off)
        if len(p.payload) != exp:
            return self._drop("bad_length", qp)
        if w.rcvd[i]:
            qp.counters["duplicates"] += 1
            return
        if op != H.READ_RESP_MIDDLE:
            self._acked_upto(qp, w.first)
        _scatter(w.segs, off, p.payload)
        w.rcvd[i] = 1
        w.nrcvd += 1
        qp._progress_t = time.monotonic()
        qp._retries = 0
        if qp._una() < seq:
            qp.counters["out_of_order"] += 1
            if qp._read_gap_t is None:
                qp._read_gap_t = time.monotonic()
        elif qp._read_gap_t is not None and qp._una() > seq:
            qp._read_gap_t = None
        if w.nrcvd == w.npkts:
            self._acked_upto(qp, w.end)
            self._complete_ready(qp)

    def _rtt_sample(self, qp, rtt, now):
        qp._probe = None
        qp.srtt = rtt if qp.srtt is None else 0.875 * qp.srtt + 0.125 * rtt
        if qp.cc is not None:
            qp.cc.rtt_sample(rtt, now)
            qp._follow_cc()

    def _acked_upto(self, qp, seq):
        """All requests before `seq` are acknowledged."""
        if seq > qp._acked:
            if seq > qp._sent_hi:
                return self._drop("ack_beyond_sent", qp)
            # an ACK beyond an incomplete READ means its responses were lost: retry it after the reorder timeout
            qp._acked = seq
            while qp._sq_head < len(qp._sq):
                if not self._complete_ready(qp):
                    w = qp._sq[qp._sq_head]
                    if w.wr.opcode == WROpcode.RDMA_READ and w.end <= seq and qp._read_gap_t is None:
                        qp._read_gap_t = time.monotonic()
                    break
            qp._progress_t = time.monotonic()
            qp._retries = 0
            qp._rnr_retries = 0 if qp._rnr_until < time.monotonic() else qp._rnr_retries
            if qp._probe is not None and seq > qp._probe[0]:
                self._rtt_sample(qp, qp._progress_t - qp._probe[1], qp._progress_t)
        if qp._send_seq < qp._una():
            qp._send_seq = qp._una()
