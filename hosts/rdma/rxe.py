"""rxe backend: the same API over pyverbs (rdma-core's Python binding) for kernel RDMA devices,
e.g. Linux Soft-RoCE (rdma_rxe) where the kernel has it, or a real RoCE NIC.

The device is the one whose GID table holds the IPv4-mapped RoCE v2 GID of `ip` (found in sysfs).
Differences from uroce, imposed by the kernel: no per-packet source ports, no selective retransmission,
no user rate limit, and multicast attach is not exposed by pyverbs (raises RdmaError).
"""
import ctypes
import math
import os
import socket
import threading
import time
from collections import Counter
from typing import Optional

from .headers import IB_MTU_ENUM, ipv4_to_gid
from .verbs import (GRH_LEN, Access, AddressHandle, MemoryRegion, QPInfo, QPState, QPType, RdmaError,
                    RecvWR, SendWR, WC, WCOpcode, WCStatus, WROpcode)

SYSFS = "/sys/class/infiniband"
GID_TABLE_ENTRIES = 1024          # the most valid GIDs a device may list (rxe's table size)
IBV_SEND_SIGNALED, IBV_SEND_SOLICITED = 2, 4
IBV_WC_WITH_IMM = 2


def ipv4_gid(ip: str) -> str:
    """The IPv4-mapped GID of `ip` in sysfs/pyverbs notation (8 groups of 4 hex digits)."""
    b = ipv4_to_gid(ip)
    return ":".join(b[i:i + 2].hex() for i in range(0, 16, 2))


def find_gid(ip: str, root: str = SYSFS, name: Optional[str] = None):
    """(device, port, gid_index) of the RoCE v2 GID for IPv4 `ip`; None if absent.

    The kernel's GID tables are asked through verbs where pyverbs is present (one call per device); sysfs,
    the fallback, costs a file read per table entry (1024 per rxe port, in every namespace that sees the
    devices): seconds per lookup on a small machine with a few dozen emulated hosts."""
    want = ipv4_gid(ip)
    try:
        devs = sorted(os.listdir(root)) if name is None else [name]
    except OSError:
        return None
    if root == SYSFS:
        found = _find_gid_by_verbs(want, devs)
        if found is not NotImplemented:
            return found
    for dev in devs:
        ports = os.path.join(root, dev, "ports")
        try:
            port_list = sorted(os.listdir(ports), key=int)
        except OSError:
            continue
        for port in port_list:
            gids = os.path.join(ports, port, "gids")
            try:
                idxs = sorted(os.listdir(gids), key=int)
            except OSError:
                continue
            for idx in idxs:
                try:
                    with open(os.path.join(gids, idx)) as f:
                        gid = f.read().strip().lower()
                    with open(os.path.join(ports, port, "gid_attrs", "types", idx)) as f:
                        gtype = f.read().strip()
                except OSError:
                    continue
                if gid == want and "v2" in gtype.lower():
                    return dev, int(port), int(idx)
    return None


def _find_gid_by_verbs(want: str, devs: list):
    """find_gid through ibv_query_gid_table; NotImplemented where pyverbs cannot say (not installed, or too
    old to have the call), so that the caller reads sysfs instead."""
    try:
        from pyverbs.device import Context
        from pyverbs.enums import IBV_GID_TYPE_ROCE_V2
    except ImportError:
        return NotImplemented
    for dev in devs:
        try:
            with Context(name=dev) as ctx:
                entries = ctx.query_gid_table(GID_TABLE_ENTRIES)
        except AttributeError:
            return NotImplemented
        except Exception:           # a device that went away, or one we may not open: not ours to pick
            continue
        for e in entries:
            if e.gid_str().lower() == want and e.gid_type == IBV_GID_TYPE_ROCE_V2:
                return dev, e.port_num, e.gid_index
    return None


def hw_counters(dev: str, port: int = 1, root: str = SYSFS) -> Counter:
    """The kernel driver's counters (rxe: sent_pkts, rcvd_pkts, rcvd_seq_err, completer_retry_err,
    duplicate_request, out_of_seq_request, ...) from sysfs hw_counters."""
    out = Counter()
    d = os.path.join(root, dev, "ports", str(port), "hw_counters")
    try:
        names = os.listdir(d)
    except OSError:
        return out
    for n in names:
        try:
            with open(os.path.join(d, n)) as f:
                out[n] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def _pyverbs_errors(fn):
    """Report pyverbs' errors (failed verbs calls, bad attributes) as RdmaError, like the other backend."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        try:
            return fn(*args, **kw)
        except RdmaError:
            raise
        except Exception as e:
            if type(e).__module__.startswith("pyverbs"):
                raise RdmaError(f"{fn.__qualname__}: {e}") from e
            raise
    return wrapper


def timeout_code(seconds: float) -> int:
    """IB local ACK timeout code: 4.096 us * 2^code >= seconds (1..31)."""
    return max(1, min(31, math.ceil(math.log2(max(seconds, 4.096e-6) / 4.096e-6))))


class RxePD:
    def __init__(self, device, pd):
        self.device, self._pd = device, pd
        self._empty = None

    @_pyverbs_errors
    def reg_mr(self, buf, access: Access = Access.LOCAL_WRITE) -> MemoryRegion:
        from pyverbs.mr import MR
        access = Access(access)
        mr = MemoryRegion(self, buf, access, 0, 0)
        mr._pv = MR(self._pd, mr.length, int(access), address=mr.addr)
        mr.lkey, mr.rkey = mr._pv.lkey, mr._pv.rkey
        return mr

    def dereg_mr(self, mr: MemoryRegion):
        mr._pv.close()


class RxeCQ:
    """Completion queue over a pyverbs CQ. wait() polls (pyverbs has no timed wait: its completion channel
    blocks holding the GIL), backing off from 50 us to 2 ms while the queue stays empty, so that idle
    pollers leave the CPU to the processes doing work: on a small or emulated machine, a dozen threads
    polling every 0.5 ms starve the very transfers they wait for."""

    MIN_SLEEP, MAX_SLEEP = 50e-6, 2e-3

    def __init__(self, device, depth):
        from pyverbs.cq import CQ
        self.device = device
        self._cq = CQ(device._ctx, depth)
        self._lock = threading.Lock()
        self._stopped = False           # stop_waiting(): wait() no longer sleeps

    def poll(self, max_entries: int = 16):
        with self._lock:
            n, wcs = self._cq.poll(max_entries)
        return [self.device._convert(w) for w in wcs[:n]]

    def wait(self, n: int = 1, timeout: Optional[float] = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        out, sleep = [], self.MIN_SLEEP
        while len(out) < n:
            got = self.poll(n - len(out))
            out += got
            if len(out) >= n or self._stopped or (deadline is not None and time.monotonic() >= deadline):
                break
            sleep = self.MIN_SLEEP if got else min(2 * sleep, self.MAX_SLEEP)
            time.sleep(sleep)
        return out

    def stop_waiting(self) -> None:
        """From now on wait() returns after its next poll (within MAX_SLEEP), a wait in progress too."""
        self._stopped = True


class RxeQP:
    def __init__(self, dev, pd, qp_type, send_cq, recv_cq, psn, mtu, timeout, retry_cnt, rnr_retry,
                 min_rnr_timer, qkey, max_send_wr, max_recv_wr):
        import pyverbs.enums as e
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
        self.dev, self.pd, self.qp_type = dev, pd, QPType(qp_type)
        self.send_cq, self.recv_cq = send_cq, recv_cq
        self.psn, self.mtu, self.qkey = psn, mtu, qkey
        self.timeout, self.retry_cnt, self.rnr_retry, self.min_rnr_timer = timeout, retry_cnt, rnr_retry, min_rnr_timer
        self.counters = Counter()
        self.remote = None
        cap = QPCap(max_send_wr=max_send_wr, max_recv_wr=max_recv_wr, max_send_sge=16, max_recv_sge=16)
        init = QPInitAttr(qp_type=int(qp_type), scq=send_cq._cq, rcq=recv_cq._cq, cap=cap, sq_sig_all=0)
        if self.qp_type == QPType.UD:
            attr = QPAttr(port_num=dev.port)
            attr.qkey = qkey
            attr.sq_psn = psn
            self._qp = QP(pd._pd, init, attr)          # pyverbs takes a UD QP to RTS
            self.state = QPState.RTS
        else:
            # straight to INIT, as ibv_rc_pingpong does: the kernel takes receives only from INIT on
            attr = QPAttr(port_num=dev.port)
            attr.qp_access_flags = int(Access.ALL)
            self._qp = QP(pd._pd, init, attr)
            self.state = QPState.INIT
        self.qpn = self._qp.qp_num
        self._e = e

    def info(self) -> QPInfo:
        return QPInfo(self.dev.ip, self.qpn, self.psn)

    def _ah_attr(self, ip, hop_limit=64):
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        gr = GlobalRoute(dgid=GID(ipv4_gid(ip)), sgid_index=self.dev.gid_index, hop_limit=hop_limit)
        return AHAttr(is_global=1, port_num=self.dev.port, gr=gr)

    @_pyverbs_errors
    def connect(self, remote: QPInfo):
        from pyverbs.qp import QPAttr
        if self.qp_type != QPType.RC:
            raise RdmaError("connect() is for RC QPs; UD sends name the destination in SendWR.ah")
        if isinstance(remote, dict):
            remote = QPInfo.from_dict(remote)
        attr = QPAttr(port_num=self.dev.port, path_mtu=IB_MTU_ENUM[self.mtu])
        attr.qp_access_flags = int(Access.ALL)
        attr.dest_qp_num = remote.qpn
        attr.rq_psn = remote.psn
        attr.sq_psn = self.psn
        attr.max_rd_atomic = 16
        attr.max_dest_rd_atomic = 16
        attr.min_rnr_timer = self.min_rnr_timer
        attr.timeout = timeout_code(self.timeout)
        attr.retry_cnt = min(self.retry_cnt, 7)
        attr.rnr_retry = self.rnr_retry
        attr.ah_attr = self._ah_attr(remote.ip)
        self._qp.to_rts(attr)
        self.remote = remote
        self.state = QPState.RTS
        return self

    def _sges(self, sg_list):
        """pyverbs needs at least one SGE: an empty list becomes one 0-byte SGE of a small PD-owned MR."""
        from pyverbs.wr import SGE
        if not sg_list:
            if self.pd._empty is None:
                self.pd._empty = self.pd.reg_mr(bytearray(64), Access.LOCAL_WRITE)
            return [SGE(self.pd._empty.addr, 0, self.pd._empty.lkey)]
        return [SGE(s.addr, s.length, s.lkey) for s in sg_list]

    @_pyverbs_errors
    def post_send(self, wr: SendWR):
        from pyverbs.wr import SendWR as PvSendWR
        op = WROpcode(wr.opcode)
        if op in (WROpcode.SEND_WITH_IMM, WROpcode.RDMA_WRITE_WITH_IMM) and wr.imm is None:
            raise RdmaError(f"{op.name} needs wr.imm")
        flags = (IBV_SEND_SIGNALED if wr.signaled else 0) | (IBV_SEND_SOLICITED if wr.solicited else 0)
        sg = self._sges(wr.sg_list)
        imm = socket.htonl(wr.imm & 0xFFFFFFFF) if wr.imm is not None else 0
        pw = PvSendWR(wr_id=wr.wr_id, opcode=int(op), num_sge=len(sg), sg=sg, send_flags=flags,
                      imm_data=imm)
        if op in (WROpcode.RDMA_WRITE, WROpcode.RDMA_WRITE_WITH_IMM, WROpcode.RDMA_READ):
            pw.set_wr_rdma(wr.rkey, wr.remote_addr)
        if self.qp_type == QPType.UD:
            if not isinstance(wr.ah, AddressHandle):
                raise RdmaError("UD send needs wr.ah = AddressHandle(ip, qpn, qkey)")
            from pyverbs.addr import AH
            mc = 224 <= int(wr.ah.ip.split(".")[0]) <= 239
            key = (id(self.pd), wr.ah.ip)
            ah = self.dev._ah_cache.get(key)       # one AH per destination, kept for the device's life
            if ah is None:
                ah = self.dev._ah_cache[key] = AH(self.pd._pd, attr=self._ah_attr(wr.ah.ip, 255 if mc else 64))
            pw.set_wr_ud(ah, wr.ah.qpn, wr.ah.qkey)
        self._qp.post_send(pw)
        self.counters["posted_send"] += 1

    @_pyverbs_errors
    def post_recv(self, wr: RecvWR):
        from pyverbs.wr import RecvWR as PvRecvWR
        sg = self._sges(wr.sg_list)
        self._qp.post_recv(PvRecvWR(wr_id=wr.wr_id, num_sge=len(sg), sg=sg))
        if self.qp_type == QPType.UD and wr.sg_list:
            self.dev._ud_recv[(self.qpn, wr.wr_id)] = wr.sg_list[0]
        self.counters["posted_recv"] += 1

    def set_rate_limit(self, bps):
        if bps is not None:
            raise RdmaError("the rxe backend has no per-QP rate limit (shape the netdev with tc instead)")

    def attach_mcast(self, group: str):
        raise RdmaError("multicast attach is not exposed by pyverbs; use the uroce backend for multicast")

    def detach_mcast(self, group: str):
        raise RdmaError("multicast attach is not exposed by pyverbs; use the uroce backend for multicast")

    def destroy(self):
        self._qp.close()
        self.state = QPState.RESET

    def __repr__(self):
        return f"<rxe QP {self.qp_type.name} 0x{self.qpn:x} {self.state.name} on {self.dev.name}>"


class RxeDevice:
    backend = "rxe"

    def __init__(self, ip: str, mtu: int = 1024, name: Optional[str] = None, port: Optional[int] = None,
                 sysfs: str = SYSFS):
        try:
            from pyverbs.device import Context
            from pyverbs.pd import PD  # noqa: F401
        except ImportError as e:
            raise RdmaError(f"the rxe backend needs pyverbs (Debian: python3-pyverbs): {e}") from None
        if mtu not in IB_MTU_ENUM:
            raise RdmaError(f"mtu must be one of {sorted(IB_MTU_ENUM)}, not {mtu}")
        found = find_gid(ip, sysfs, name)
        if found is None:
            raise RdmaError(f"no RDMA device has a RoCE v2 GID for {ip} (devices: {os.listdir(sysfs) if os.path.isdir(sysfs) else 'none'})")
        self.name, self.port, self.gid_index = found
        if port is not None and port != self.port:
            raise RdmaError(f"{ip} is on port {self.port} of {self.name}, not port {port}")
        self.ip, self.mtu = ip, mtu
        self._ctx = Context(name=self.name)
        self._ah_cache = {}
        self._ud_recv = {}
        self._sysfs = sysfs
        self.last_error = None
        self.tx_drop_hook = self.rx_drop_hook = self.tap = None

    @property
    def counters(self) -> Counter:
        """The kernel's per-port hw_counters of this device (read from sysfs on each access)."""
        return hw_counters(self.name, self.port, self._sysfs)

    @_pyverbs_errors
    def alloc_pd(self):
        from pyverbs.pd import PD
        return RxePD(self, PD(self._ctx))

    @_pyverbs_errors
    def create_cq(self, depth: int = 4096):
        return RxeCQ(self, depth)

    @_pyverbs_errors
    def create_qp(self, pd, qp_type, send_cq, recv_cq=None, *, max_send_wr=1024, max_recv_wr=1024, psn=None,
                  mtu=None, timeout=0.067, retry_cnt=7, rnr_retry=7, min_rnr_timer=12, rate_limit_bps=None,
                  sport_mode="qp", retransmit="gbn", reorder_window=None, reorder_timeout=None,
                  ack_every=None, max_outstanding=None, qkey=0x11111111, cc=None, rto="fixed", rto_min=None,
                  rto_max=None, time_scale=1.0, dcqcn=None, cnp_interval=None):
        if rto != "fixed":
            raise RdmaError("the kernel rxe backend's retransmission timer is fixed (the QP's timeout attribute); "
                            "rto must be 'fixed'")
        if cc == "dcqcn" or dcqcn:
            raise RdmaError("kernel rxe has no DCQCN (it neither answers ECN marks nor sends CNPs); "
                            "use backend uroce for congestion: dcqcn")
        if cc is not None:
            raise RdmaError("the kernel rxe backend does its own congestion control (none in rxe); cc must be None")
        if sport_mode != "qp" or retransmit != "gbn":
            raise RdmaError("the kernel rxe backend supports sport_mode='qp' and retransmit='gbn' only")
        if rate_limit_bps is not None:
            raise RdmaError("the rxe backend has no per-QP rate limit (shape the netdev with tc instead)")
        psn = int.from_bytes(os.urandom(3), "big") if psn is None else psn & 0xFFFFFF
        return RxeQP(self, pd, qp_type, send_cq, recv_cq or send_cq, psn, mtu or self.mtu, timeout, retry_cnt,
                     rnr_retry, min_rnr_timer, qkey, max_send_wr, max_recv_wr)

    def _convert(self, w) -> WC:
        imm = socket.ntohl(w.imm_data) if w.wc_flags & IBV_WC_WITH_IMM else None
        opcode = WCOpcode(w.opcode)
        wc = WC(w.wr_id, WCStatus(w.status) if w.status in WCStatus._value2member_map_ else w.status, opcode,
                w.byte_len, w.qp_num, imm=imm)
        sge = self._ud_recv.pop((w.qp_num, w.wr_id), None) if opcode == WCOpcode.RECV else None
        if sge is not None:
            wc.src_qp = w.src_qp
            hdr = (ctypes.c_char * GRH_LEN).from_address(sge.addr).raw
            wc.src_ip = socket.inet_ntoa(hdr[20 + 12:20 + 16])
        return wc

    def close(self, linger: Optional[float] = None):
        """Close the device. `linger` is for the Device interface: the kernel answers late retransmissions
        for its QPs itself, so there is nothing to wait for here."""
        self._ctx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<rxe Device {self.name} port {self.port} gid {self.gid_index} ({self.ip})>"
