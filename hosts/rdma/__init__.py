"""Software RDMA for emulated hosts: a small verbs-like API with RoCEv2 on the wire.

Backends: ``uroce`` (user space, RoCEv2 over raw IPv4 sockets, byte-exact with Linux rxe) and
``rxe`` (kernel Soft-RoCE or any RDMA NIC through pyverbs). ``open_device(ip)`` picks ``rxe`` when
a kernel RDMA device carries ip's RoCE v2 GID and pyverbs imports, otherwise ``uroce``. This package
runs inside the emulated hosts and does not depend on the testbed package.

API (names follow libibverbs; enum values equal ibverbs'):

    open_device(ip, backend="auto", mtu=1024, **opts) -> Device
    Device.alloc_pd() -> PD;  Device.create_cq(depth=4096) -> CQ;  Device.counters
    CQ.poll(max_entries=16) -> [WC];  CQ.wait(n=1, timeout=None) -> [WC];  CQ.stop_waiting()
    Device.close(linger=None)   # keeps ACKing peers until 3 x timeout pass without a request (TIME_WAIT)
    PD.reg_mr(buf, access=Access.LOCAL_WRITE) -> MR     # buf: bytearray / writable numpy array / mmap
    MR.addr, MR.length, MR.lkey, MR.rkey, MR.access;  MR.sge(offset=0, length=None) -> SGE
    Device.create_qp(pd, QPType.RC | QPType.UD, send_cq, recv_cq=None, *, psn=None, mtu=None,
                     timeout=0.067, retry_cnt=7, rnr_retry=7, rate_limit_bps=None, sport_mode="qp",
                     retransmit="gbn", reorder_window=256, reorder_timeout=0.005, qkey=0x11111111) -> QP
    QP.info() -> QPInfo(ip, qpn, psn);  QP.connect(QPInfo)          # RC; exchange info out of band
    QP.post_send(SendWR(opcode, [sge], wr_id, remote_addr=, rkey=, imm=, signaled=, ah=))
    QP.post_recv(RecvWR([sge], wr_id));  QP.attach_mcast(group);  QP.detach_mcast(group)
    QP.set_rate_limit(bps);  QP.counters;  QP.destroy()
    CQ.poll(max_entries=16) -> [WC] (never blocks);  CQ.wait(n=1, timeout=None) -> [WC]
    WC: wr_id, status (WCStatus), opcode (WCOpcode), byte_len, qp_num, imm, src_qp, src_ip; WC.ok

UD receive buffers start with GRH_LEN (40) bytes of GRH space, as in ibverbs: the sender's IPv4
header is in bytes 20..40 and the payload follows.

Example (two hosts; run the mirror image on the peer):

    import numpy as np
    from hosts.rdma import open_device, Access, QPInfo, QPType, SendWR, RecvWR, WROpcode

    dev = open_device("10.0.0.1")
    pd, cq = dev.alloc_pd(), dev.create_cq()
    buf = np.zeros(1 << 20, dtype=np.uint8)
    mr = pd.reg_mr(buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
    qp = dev.create_qp(pd, QPType.RC, cq, rate_limit_bps=100e6)
    # send {**qp.info().to_dict(), "addr": mr.addr, "rkey": mr.rkey} to the peer, receive theirs:
    qp.connect(QPInfo.from_dict(peer))
    qp.post_send(SendWR(WROpcode.RDMA_WRITE, [mr.sge(0, 1 << 20)], wr_id=1,
                        remote_addr=peer["addr"], rkey=peer["rkey"]))
    wc, = cq.wait(1, timeout=10)
    assert wc.ok, wc.status
    qp.post_recv(RecvWR([mr.sge(0, 4096)], wr_id=2))   # for the peer's SEND / WRITE_WITH_IMM

Wire format (identical to Linux rxe but for ECN): IPv4 DSCP 0 and ECN ECT(0) (open_device(ecn=False): TOS 0, as
rxe), DF, TTL 64 (255 to multicast groups), UDP port 4791 with checksum 0, UDP source port 0xC000|fold(lqpn*rqpn) for RC and 0xC000+hash(qpn) for UD (or
random per packet with sport_mode="packet"), BTH P_Key 0xFFFF, ICRC little-endian. Default IB MTU 1024
(rxe's on a 1500-byte netdev). Pacing: rate_limit_bps counts Ethernet frames (IP length + 14), like tbf.

In-process network for tests (no privileges):

    from hosts.rdma.transport import MemoryFabric, PcapWriter
    fab = MemoryFabric(drop=lambda pkt: random.random() < 0.01, delay=None, tap=PcapWriter("x.pcap").write)
    a = open_device("10.0.0.1", backend="uroce", transport=fab.attach("10.0.0.1"))
    # MemoryFabric(mtu=1500): links of that MTU; connect() refuses a QP whose packets do not fit (hosts/rdma/mtu.py)

Counters: Device.counters (tx/rx packets and bytes, retransmits, drop_<reason>: bad_icrc,
truncated, malformed, bad_opcode, unknown_qp, bad_qkey, not_member, ...) and QP.counters
(tx/rx packets and bytes, retransmits, timeouts, naks_sent/rcvd, acks_sent/rcvd, out_of_order,
duplicates); both count DCQCN's ecn_ce_received (CE-marked packets in), cnp_sent and cnp_received. Loss injection for tests: Device.tx_drop_hook / rx_drop_hook = callable(pkt) -> bool.
"""
import os
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

from .headers import IB_MTUS

from .verbs import (GRH_LEN, SGE, WC, Access, AddressHandle, CompletionQueue, MemoryRegion, QPInfo,
                    QPState, QPType, RdmaError, RecvWR, SendWR, WCOpcode, WCStatus, WROpcode)

__all__ = ["open_device", "rdma_devices", "Device", "GRH_LEN", "SGE", "WC", "Access", "AddressHandle",
           "CompletionQueue", "MemoryRegion", "QPInfo", "QPState", "QPType", "RdmaError", "RecvWR",
           "SendWR", "WCOpcode", "WCStatus", "WROpcode"]

_IB_SYSFS = "/sys/class/infiniband"


@runtime_checkable
class Device(Protocol):
    """What both backends' devices offer (uroce.Device and rxe.RxeDevice; open_device returns one of them)."""

    backend: str                      # "uroce" or "rxe"
    ip: str
    mtu: int                          # IB MTU of new queue pairs
    name: str
    counters: Mapping[str, int]       # device counters (uroce: its own; rxe: the kernel's hw_counters)

    def alloc_pd(self) -> Any: ...

    def create_cq(self, depth: int = 4096) -> Any: ...

    def create_qp(self, pd, qp_type, send_cq, recv_cq=None, **options) -> Any: ...

    def close(self, linger: Optional[float] = None) -> None: ...

    def __enter__(self) -> "Device": ...

    def __exit__(self, *exc) -> None: ...


def rdma_devices():
    """Names of kernel RDMA devices (empty when the kernel has none)."""
    try:
        return sorted(os.listdir(_IB_SYSFS))
    except OSError:
        return []


def open_device(ip: str, backend: str = "auto", mtu: int = 1024, **opts) -> Device:
    """Open an RDMA device for local IPv4 address `ip`.

    backend: "auto" (rxe if a kernel RDMA device holds ip and pyverbs exists, else uroce), "uroce" or "rxe".
    uroce options: transport= (default: raw IPv4 sockets in the caller's network namespace, needs
    CAP_NET_RAW; or MemoryFabric().attach(ip) for an in-process network), first_qpn=0x11.
    rxe options: name= (device name, default: the one whose GID table holds `ip`), port=1.
    """
    if backend not in ("auto", "uroce", "rxe"):
        raise ValueError(f"backend must be 'auto', 'uroce' or 'rxe', not {backend!r}")
    if backend == "auto":
        backend = "uroce"
        if rdma_devices():
            try:
                import pyverbs  # noqa: F401
                from .rxe import find_gid
                if find_gid(ip) is not None:       # every emulated host has its own device, if any
                    backend = "rxe"
            except ImportError:
                pass
    if backend == "rxe":
        from .rxe import RxeDevice
        return RxeDevice(ip, mtu=min(mtu, max(IB_MTUS)), **opts)    # the kernel's RoCE stops at IB's 4096
    from .uroce import Device
    return Device(ip, mtu=mtu, **opts)
