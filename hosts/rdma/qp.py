"""uroce protection domains and queue pairs: the state a QP keeps as requester and as responder.
The protocol that drives this state is in rc.py (RC) and engine.py (the engine thread, UD)."""
import bisect
import random
import socket
import time
from collections import Counter, deque
from typing import Optional

from . import headers as H
from .cc import DelayCC
from .dcqcn import DcqcnCC, cnp_interval as default_cnp_interval
from .rto import RetransmitTimeout
from .verbs import Access, MemoryRegion, QPInfo, QPState, QPType, RdmaError, RecvWR, SendWR, WROpcode


def _is_mcast(ip: str) -> bool:
    return 224 <= int(ip.split(".", 1)[0]) <= 239


class ProtectionDomain:
    def __init__(self, device):
        self.device = device

    def reg_mr(self, buf, access: Access = Access.LOCAL_WRITE) -> MemoryRegion:
        return self.device._reg_mr(self, buf, access)

    def dereg_mr(self, mr: MemoryRegion):
        self.device._dereg_mr(mr)


class _SendWQE:
    __slots__ = ("wr", "first", "npkts", "length", "segs", "done", "rcvd", "nrcvd", "sent")

    def __init__(self, wr, first, npkts, length, segs):
        self.wr, self.first, self.npkts, self.length, self.segs = wr, first, npkts, length, segs
        self.done = False
        self.rcvd = None      # READ: bytearray flags per response packet
        self.nrcvd = 0
        self.sent = False

    @property
    def end(self):
        return self.first + self.npkts


def _gather(segs, off, n):
    """Bytes [off, off+n) of the concatenation of (memoryview) segments."""
    if len(segs) == 1:
        return segs[0][off:off + n]
    out = bytearray()
    for s in segs:
        ls = len(s)
        if off >= ls:
            off -= ls
            continue
        take = min(n - len(out), ls - off)
        out += s[off:off + take]
        off = 0
        if len(out) == n:
            break
    return out


def _scatter(segs, off, data):
    """Write data at offset off of the concatenation of segments; False if it does not fit."""
    n = len(data)
    if len(segs) == 1:
        s = segs[0]
        if off + n > len(s):
            return False
        s[off:off + n] = data
        return True
    pos = 0
    for s in segs:
        ls = len(s)
        if off >= ls:
            off -= ls
            continue
        take = min(n - pos, ls - off)
        s[off:off + take] = data[pos:pos + take]
        pos += take
        off = 0
        if pos == n:
            return True
    return pos == n


# Ethernet + IP + UDP + BTH + ICRC bytes around a full payload (what a shaper counts)
PACKET_OVERHEAD = 14 + 20 + 8 + H.BTH_LEN + H.ICRC_LEN


class QueuePair:
    """An RC or UD queue pair of a uroce Device. Create with Device.create_qp()."""

    # Long on purpose: the queue pair's whole state in one place (the options, then the requester's and responder's).
    def __init__(self, dev, pd, qp_type, send_cq, recv_cq, qpn, psn, *, max_send_wr, max_recv_wr, mtu,
                 timeout, retry_cnt, rnr_retry, min_rnr_timer, rate_limit_bps, sport_mode, retransmit,
                 reorder_window, reorder_timeout, ack_every, max_outstanding, qkey, cc=None, rto="adaptive",
                 rto_min=None, rto_max=None, time_scale=1.0, dcqcn=None, cnp_interval=None):
        self.dev, self.pd, self.qp_type = dev, pd, QPType(qp_type)
        self.send_cq, self.recv_cq = send_cq, recv_cq
        self.qpn, self.psn = qpn, psn
        self.max_send_wr, self.max_recv_wr = max_send_wr, max_recv_wr
        if mtu not in H.ROCE_MTUS:
            raise RdmaError(f"mtu must be one of {H.ROCE_MTUS}, not {mtu}")
        self.mtu = mtu
        self.retry_cnt, self.rnr_retry, self.min_rnr_timer = retry_cnt, rnr_retry, min_rnr_timer
        if rto not in ("adaptive", "fixed"):
            raise RdmaError(f"rto must be 'adaptive' (RFC 6298) or 'fixed' (the timeout, as rxe), not {rto!r}")
        try:
            self._rto = RetransmitTimeout(timeout, adaptive=rto == "adaptive", lo=rto_min, hi=rto_max)
        except ValueError as e:
            raise RdmaError(str(e)) from None
        if sport_mode not in ("qp", "packet"):
            raise RdmaError("sport_mode must be 'qp' (rxe formula) or 'packet' (spraying)")
        if retransmit not in ("gbn", "selective"):
            raise RdmaError("retransmit must be 'gbn' or 'selective'")
        self.sport_mode, self.retransmit = sport_mode, retransmit
        self.reorder_window, self.reorder_timeout = reorder_window, reorder_timeout
        self.ack_every, self.max_outstanding = ack_every, max_outstanding
        self.qkey = qkey
        self.state = QPState.RTS if self.qp_type == QPType.UD else QPState.INIT
        self.remote: Optional[QPInfo] = None
        self.counters = Counter()
        self._sport = H.ud_udp_sport(qpn) if self.qp_type == QPType.UD else 0
        self._dst_b = b""
        # pacing, and congestion control under it
        if cc not in (None, "delay", "dcqcn"):
            raise RdmaError(f"congestion control must be None, 'delay' or 'dcqcn', not {cc!r}")
        if cc and (self.qp_type != QPType.RC or rate_limit_bps is None):
            raise RdmaError("congestion control is for RC QPs with a rate limit (their line rate)")
        if dcqcn and cc != "dcqcn":
            raise RdmaError("dcqcn parameters need cc='dcqcn'")
        try:
            self.cc = DelayCC(rate_limit_bps, mtu + PACKET_OVERHEAD) if cc == "delay" else \
                DcqcnCC(rate_limit_bps, time_scale=time_scale, **(dcqcn or {})) if cc == "dcqcn" else None
            # the notification point: answer CE marks with at most one CNP per interval (whatever cc is)
            self.cnp_interval = default_cnp_interval(time_scale) if cnp_interval is None else float(cnp_interval)
        except (TypeError, ValueError) as e:
            raise RdmaError(f"congestion control: {e}") from None
        self._last_cnp = float("-inf")
        self.set_rate_limit(rate_limit_bps)
        # requester
        self._sq = []            # outstanding _SendWQE, ordered by .first
        self._first_list = []    # .first of each entry of _sq (for bisect)
        self._sq_head = 0
        self._next_seq = 0       # seq of the next WQE to be posted
        self._send_seq = 0       # next seq to transmit
        self._sent_hi = 0        # highest seq transmitted + 1
        self._acked = 0          # all seq < _acked are acknowledged
        self._retx = deque()     # selective retransmission queue (seqs)
        self._progress_t = 0.0
        self._retries = 0
        self._rnr_retries = 0
        self._rnr_until = 0.0
        self._read_gap_t = None
        self._since_ackreq = 0
        self._ackreq_t = 0.0
        self._ackreq_hi = 0      # seq after the last packet sent with AckReq: what an ACK must come back for
        self._timeout_head = None    # adaptive timer: the oldest packet, resent alone when the timer fired
        self._probe = None       # (seq, sent at): the one round trip being measured
        self._renaks = 0         # responder: NAKs repeated for the current gap
        self._nak_back = (None, 0.0)   # (seq, when) of the last go-back-N a NAK caused
        # responder
        self._rq = deque()
        self._epsn = 0           # expected request seq (relative to the peer's initial PSN)
        self._msn = 0
        self._ooo = {}           # seq -> (Packet, arrival time): requests ahead of _epsn
        self._ooo_t = None
        self._nak_seq = None
        self._ack_pending = False
        self._resp = deque()     # READ response jobs: [mr_view, offset, length, seq, npkts, next_index]
        self._reads = deque(maxlen=16)   # the last READs executed, (seq, npkts, va, rkey): what a retry may ask again
        self._wr_view = None     # current inbound RDMA WRITE: (memoryview, offset)
        self._recv_cur = None    # current inbound SEND: [RecvWR, segs, offset]
        self._mcast = set()
        self._last_req_rx = 0.0  # when the responder last received a request (for Device.close linger)

    # ---- public -------------------------------------------------------------------------------
    def info(self) -> QPInfo:
        """(ip, qpn, psn) to hand to the peer for connect()."""
        return QPInfo(self.dev.ip, self.qpn, self.psn)

    def connect(self, remote: QPInfo):
        """RC: move RESET/INIT -> RTR -> RTS towards `remote` (its ip, qpn and initial psn)."""
        if self.qp_type != QPType.RC:
            raise RdmaError("connect() is for RC QPs; UD sends name the destination in SendWR.ah")
        if self.state not in (QPState.INIT, QPState.RESET):
            raise RdmaError(f"QP 0x{self.qpn:x} is already {self.state.name}")
        if isinstance(remote, dict):
            remote = QPInfo.from_dict(remote)
        socket.inet_aton(remote.ip)
        if not 0 < remote.qpn < H.MCAST_QPN:
            raise RdmaError(f"bad remote QPN {remote.qpn}")
        problem = self.dev._path_mtu_problem(remote.ip, self.mtu)
        if problem:         # the kernel would refuse every full packet: retries, then ERROR, and no word why
            raise RdmaError(f"cannot connect QP 0x{self.qpn:x}: {problem}")
        with self.dev._lock:
            self.remote = QPInfo(remote.ip, remote.qpn, remote.psn & H.PSN_MASK)
            self._dst_b = socket.inet_aton(remote.ip)
            self._sport = H.rc_udp_sport(self.qpn, remote.qpn)
            self._ackreq_t = time.monotonic()
            self.state = QPState.RTS
        return self

    def set_rate_limit(self, bps: Optional[float]):
        """Pace this QP's transmissions to `bps` bits/s of Ethernet frames (None: unpaced)."""
        if bps is not None and bps <= 0:
            raise RdmaError("rate limit must be positive or None")
        if self.cc is not None:
            if bps is None:
                raise RdmaError("a QP under congestion control needs a rate limit")
            self.cc.set_line_rate(bps)
        self.rate_limit_bps = bps
        self._rate = None if bps is None else (bps if self.cc is None else self.cc.rate_bps) / 8.0
        self._packet_tokens = self.mtu + 120        # a full packet on the wire, headers and framing, with room to spare
        self._burst = 0 if bps is None else max(4 * self._packet_tokens, self._rate * 0.001)   # <= 1 ms of line rate
        self._tokens = self._burst
        self._tok_t = time.monotonic()

    def post_send(self, wr: SendWR):
        self.dev._post_send(self, wr)

    def post_recv(self, wr: RecvWR):
        self.dev._post_recv(self, wr)

    def attach_mcast(self, group: str):
        """UD: receive datagrams sent to IPv4 multicast `group` (joins it: the kernel sends IGMP)."""
        self.dev._attach_mcast(self, group)

    def detach_mcast(self, group: str):
        self.dev._detach_mcast(self, group)

    def destroy(self):
        self.dev._destroy_qp(self)

    @property
    def timeout(self) -> float:
        """The retransmission timeout now, seconds (adaptive: the estimate, backed off after timeouts)."""
        return self._rto.rto

    @property
    def srtt(self):
        """Smoothed round trip (RFC 6298's 1/8 gain), seconds; None before the first sample."""
        return self._rto.srtt

    @property
    def outstanding(self) -> int:
        """Posted send WRs not yet completed."""
        return len(self._sq) - self._sq_head

    def __repr__(self):
        return f"<QP {self.qp_type.name} 0x{self.qpn:x} {self.state.name} on {self.dev.ip}>"

    # ---- helpers ------------------------------------------------------------------------------
    def _follow_cc(self):
        """Pace at the rate congestion control allows now."""
        self._rate = self.cc.rate_bps / 8.0
        self.counters["cc_rate_cuts"] = self.cc.decreases

    def _wire(self, seq):
        return (self.psn + seq) & H.PSN_MASK

    def _seq_of_resp(self, psn):
        """Requester: seq of a PSN in a response, nearest to _acked."""
        return self._acked + H.psn_diff(psn, self._wire(self._acked))

    def _seq_of_req(self, psn):
        return self._epsn + H.psn_diff(psn, (self.remote.psn + self._epsn) & H.PSN_MASK)

    def _sport_now(self):
        if self.sport_mode == "packet":
            return 0xC000 | random.getrandbits(14)
        return self._sport

    def _una(self):
        """First seq that still needs the network (oldest incomplete WQE)."""
        if self._sq_head >= len(self._sq):
            return self._next_seq
        w = self._sq[self._sq_head]
        if w.wr.opcode == WROpcode.RDMA_READ:
            i = w.rcvd.find(0) if w.rcvd is not None else 0
            return w.first + (i if i >= 0 else w.npkts)
        return max(w.first, self._acked)

    def _find(self, seq):
        firsts = self._first_list
        i = bisect.bisect_right(firsts, seq, self._sq_head) - 1
        if i >= self._sq_head:
            w = self._sq[i]
            if seq < w.end:
                return w
        return None
