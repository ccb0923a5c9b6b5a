"""RC requester of uroce: segmenting and sending requests, the queue pair's timers (retransmission, go-back-N or
selective; and the responder's NAK of a gap that outlived the reorder window), ACKs, NAKs and read responses
coming back, and completions in order. Part of rc.ReliableConnection."""
import time

from . import headers as H
from .qp import _gather, _scatter
from .verbs import QPState, QPType, WC, WCOpcode, WCStatus, WROpcode

# IB RNR timer encoding (ms) for the 5-bit code in an RNR NAK
RNR_MS = [655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
          2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76,
          327.68, 491.52]
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


class Requester:
    """Mixin of uroce.Device (through rc.ReliableConnection), run under the device lock."""

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
            qp._ackreq_hi = max(qp._ackreq_hi, w.end)
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
        ackreq = i == n - 1 or qp._since_ackreq >= qp.ack_every or now - qp._ackreq_t > qp.timeout / 4 \
            or seq == qp._timeout_head
        # one round-trip sample in flight at a time; congestion control asks for one every round
        # trip, otherwise only packets that request an ACK anyway are timed (the wire stays rxe's)
        if first_time and qp._probe is None and (ackreq or qp.cc is not None):
            qp._probe = (seq, now)
            ackreq = True
        if ackreq:
            qp._since_ackreq = 0
            qp._ackreq_t = now
            qp._ackreq_hi = max(qp._ackreq_hi, seq + 1)
        ext = H.OPCODE_EXT[op]
        hdrs = b""
        if ext:
            hdrs = H.ext_headers(op, va=wr.remote_addr, rkey=wr.rkey, dma_len=w.length, imm=wr.imm)
        self._emit(qp, op, qp._dst_b, r.ip, r.qpn, qp._wire(seq), hdrs, _gather(w.segs, off, plen),
                   ackreq=ackreq, se=wr.solicited and i == n - 1)
        return seq + 1

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
        # requester: retransmission timeout, while a packet that asked for an ACK is unanswered (packets after it
        # are answered with the next one that asks, or NAKed when it reveals their loss)
        if qp.outstanding and qp._ackreq_hi > qp._una():
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
                qp._rto.timed_out()
                self._timed_out(qp, now)
                dl = now + qp.timeout
            nxt = dl if nxt is None else min(nxt, dl)
        return nxt

    def _timed_out(self, qp, now):
        """Fixed timer: go back N, as rxe. Adaptive, on its first timeout since the last round-trip sample: resend
        the oldest packet alone, asking for an ACK. If the packets were only queued, ACKs resume and a timer that
        fired too early has cost one packet, not a window; if they were lost, the next timeout (twice as long, from
        the last progress) goes back N. An ACK that covers only the resent packet would not tell: the original may
        have asked for one too. Counted in timeouts, not doublings: where the estimate is near the ceiling the
        backoff stops growing, and a QP that resent one packet per timeout after a flap crawled for minutes."""
        una = qp._una()
        w = qp._find(una)
        if not qp._rto.adaptive or qp._rto.timeouts > 1 or w is None or w.wr.opcode == WROpcode.RDMA_READ:
            return self._go_back(qp, una, now)
        qp._retx.clear()
        qp._probe = None                    # Karn: no sample while a retransmission is outstanding
        qp._timeout_head = una
        qp._retx.append(una)
        qp._progress_t = now

    def _go_back(self, qp, seq, now):
        qp._retx.clear()
        qp._timeout_head = None
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

    # -- requester
    # Long on purpose: one dispatch per response packet on the engine thread (ACK, NAK kinds, READ data), as rxe's.
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
                        if qp._probe is not None and qp._probe[0] >= seq:
                            qp._probe = None    # its ACK now waits for the retransmission (Karn)
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
        qp._rto.sample(rtt)
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
            if qp._timeout_head is not None and seq > qp._timeout_head:
                qp._timeout_head = None
        if qp._send_seq < qp._una():
            qp._send_seq = qp._una()
