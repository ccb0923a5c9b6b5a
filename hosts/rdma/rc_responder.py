"""RC responder of uroce: requests in PSN order (with the reorder window), executing SENDs, WRITEs and READs,
coalesced ACKs, NAKs and read responses. Part of rc.ReliableConnection."""
import time
from collections import deque

from . import headers as H
from .qp import _scatter
from .verbs import Access, QPState, WC, WCOpcode, WCStatus

_SEND_OPS = {H.SEND_FIRST, H.SEND_MIDDLE, H.SEND_LAST, H.SEND_LAST_IMM, H.SEND_ONLY, H.SEND_ONLY_IMM}
_WRITE_OPS = {H.WRITE_FIRST, H.WRITE_MIDDLE, H.WRITE_LAST, H.WRITE_LAST_IMM, H.WRITE_ONLY, H.WRITE_ONLY_IMM}
_FIRSTS = {H.SEND_FIRST, H.SEND_ONLY, H.SEND_ONLY_IMM, H.WRITE_FIRST, H.WRITE_ONLY, H.WRITE_ONLY_IMM}
_LASTS = {H.SEND_LAST, H.SEND_LAST_IMM, H.SEND_ONLY, H.SEND_ONLY_IMM, H.WRITE_LAST, H.WRITE_LAST_IMM,
          H.WRITE_ONLY, H.WRITE_ONLY_IMM}


class Responder:
    """Mixin of uroce.Device (through rc.ReliableConnection), run under the device lock."""

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
                # re-execute an earlier READ (idempotent) from the PSN asked for; a "duplicate" READ that none of
                # ours covers is stale or forged: dropped in silence (IBA class D, as rxe does), never NAKed, as
                # a NAK would fail the real requester's QP
                if self._earlier_read(qp, p, seq):
                    self._queue_read(qp, p, seq, count_msn=False)
                else:
                    self._drop("unknown_duplicate_read", qp)
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

    # Long on purpose: one dispatch per in-order request packet on the engine thread (SEND, WRITE, READ), as rxe's.
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

    @staticmethod
    def _earlier_read(qp, p, seq):
        """Whether a duplicate READ request asks again for (the rest of) one this QP executed."""
        return any(s0 <= seq < s0 + n and p.rkey == rkey and p.va == va + (seq - s0) * qp.mtu
                   for s0, n, va, rkey in qp._reads)

    def _queue_read(self, qp, p, seq, count_msn):
        mr = self._mrs.get(p.rkey)
        if (mr is None or mr.pd is not qp.pd or not mr.access & Access.REMOTE_READ
                or not mr.contains(p.va, p.dma_len)):
            self.counters["remote_access_errors"] += 1
            self._nak(qp, H.NAK_REM_ACCESS_ERR)
            return False
        npkts = max(1, -(-p.dma_len // qp.mtu))
        if count_msn:
            qp._reads.append((seq, npkts, p.va, p.rkey))
            qp._msn = (qp._msn + 1) & 0xFFFFFF
            qp._nak_seq = None
        else:
            # a retried READ replaces any queued answer to the same request
            qp._resp = deque(j for j in qp._resp if not (j[3] <= seq < j[3] + j[4]))
        qp._resp.append([mr.view, p.va - mr.addr, p.dma_len, seq, npkts, 0])
        return True
