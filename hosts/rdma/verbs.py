"""Verbs-like objects shared by all backends: enums, work requests, completions, MRs and CQs.

Values of the enums equal libibverbs' (ibv_wr_opcode, ibv_wc_opcode, ibv_wc_status, ibv_access_flags),
so code written against this API maps one to one onto pyverbs.
"""
import ctypes
import enum
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import List, Optional

GRH_LEN = 40   # UD receive buffers start with 40 bytes of GRH space, as in ibverbs (IPv4 header in the last 20)


class RdmaError(Exception):
    """Bad use of the API (wrong state, bad argument, resource exhausted)."""


class QPType(enum.IntEnum):
    RC = 2
    UD = 4


class QPState(enum.IntEnum):
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 6


class Access(enum.IntFlag):
    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    ALL = 7


class WROpcode(enum.IntEnum):
    RDMA_WRITE = 0
    RDMA_WRITE_WITH_IMM = 1
    SEND = 2
    SEND_WITH_IMM = 3
    RDMA_READ = 4


class WCOpcode(enum.IntEnum):
    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


class WCStatus(enum.IntEnum):
    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13


@dataclass
class SGE:
    """Scatter/gather element: `length` bytes at virtual address `addr` of the MR with key `lkey`."""
    addr: int
    length: int
    lkey: int


@dataclass
class AddressHandle:
    """Destination of a UD send: remote IPv4 address, QP number (0xFFFFFF for multicast) and Q_Key."""
    ip: str
    qpn: int
    qkey: int


@dataclass
class SendWR:
    opcode: WROpcode
    sg_list: List[SGE] = field(default_factory=list)
    wr_id: int = 0
    remote_addr: int = 0          # RDMA WRITE/READ: remote virtual address
    rkey: int = 0                 # RDMA WRITE/READ: remote key
    imm: Optional[int] = None     # *_WITH_IMM: 32-bit immediate (host order int)
    signaled: bool = True         # generate a send completion
    solicited: bool = False       # set the BTH SE bit
    ah: Optional[AddressHandle] = None   # UD only

    @property
    def length(self) -> int:
        return sum(s.length for s in self.sg_list)


@dataclass
class RecvWR:
    sg_list: List[SGE] = field(default_factory=list)
    wr_id: int = 0

    @property
    def length(self) -> int:
        return sum(s.length for s in self.sg_list)


@dataclass
class WC:
    """Work completion. For receives: src_qp/src_ip are set on UD, imm when the sender sent one."""
    wr_id: int
    status: WCStatus
    opcode: WCOpcode
    byte_len: int
    qp_num: int
    imm: Optional[int] = None
    src_qp: Optional[int] = None
    src_ip: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == WCStatus.SUCCESS


@dataclass(frozen=True)
class QPInfo:
    """What a peer needs to connect to a QP (exchange it out of band, e.g. as a dict over TCP)."""
    ip: str
    qpn: int
    psn: int

    def to_dict(self) -> dict:
        return {"ip": self.ip, "qpn": self.qpn, "psn": self.psn}

    @classmethod
    def from_dict(cls, d: dict) -> "QPInfo":
        return cls(str(d["ip"]), int(d["qpn"]), int(d["psn"]))


def buffer_address(buf) -> tuple:
    """(address, length, memoryview) of a writable, contiguous buffer (bytearray, numpy array, mmap...).
    The returned memoryview keeps the buffer exported, so a bytearray cannot be resized while registered."""
    try:
        mv = memoryview(buf)
    except TypeError:
        raise RdmaError(f"cannot register {type(buf).__name__}: not a buffer") from None
    if mv.readonly:
        raise RdmaError("cannot register a read-only buffer (use bytearray or a writable numpy array)")
    if not mv.c_contiguous:
        raise RdmaError("cannot register a non-contiguous buffer")
    mv = mv.cast("B")
    if mv.nbytes == 0:
        raise RdmaError("cannot register an empty buffer")
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mv))
    return addr, mv.nbytes, mv


class MemoryRegion:
    """A registered buffer: virtual address range [addr, addr+length), lkey, rkey and access flags."""

    def __init__(self, pd, buf, access: Access, lkey: int, rkey: int):
        self.addr, self.length, self.view = buffer_address(buf)
        self.pd = pd
        self.buf = buf
        self.access = Access(access)
        self.lkey = lkey
        self.rkey = rkey

    def sge(self, offset: int = 0, length: Optional[int] = None) -> SGE:
        """SGE covering `length` bytes (default: the rest) from `offset` of this MR."""
        if length is None:
            length = self.length - offset
        if offset < 0 or length < 0 or offset + length > self.length:
            raise RdmaError(f"SGE [{offset}, {offset + length}) outside MR of {self.length} bytes")
        return SGE(self.addr + offset, length, self.lkey)

    def contains(self, addr: int, length: int) -> bool:
        return self.addr <= addr and addr + length <= self.addr + self.length

    def __repr__(self):
        return f"<MR addr=0x{self.addr:x} len={self.length} lkey=0x{self.lkey:x} rkey=0x{self.rkey:x} {self.access!r}>"


class CompletionQueue:
    """Thread-safe completion queue. poll() never blocks; wait() blocks until completions arrive."""

    def __init__(self, depth: int = 4096):
        self.depth = depth
        self._q = deque()
        self._cv = threading.Condition()
        self.overflows = 0
        self._stopped = False           # stop_waiting(): wait() no longer blocks
        self._sink = None               # deliver_to(): completions go to it instead of the queue

    def _push(self, wc: WC):
        with self._cv:
            if self._sink is not None:
                self._sink(wc)
                return
            if len(self._q) >= self.depth:
                self.overflows += 1
            self._q.append(wc)
            self._cv.notify_all()

    def poll(self, max_entries: int = 16) -> List[WC]:
        with self._cv:
            out = []
            while self._q and len(out) < max_entries:
                out.append(self._q.popleft())
            return out

    def wait(self, n: int = 1, timeout: Optional[float] = None) -> List[WC]:
        """Block until `n` completions were collected or `timeout` seconds passed; returns what arrived."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out: List[WC] = []
        with self._cv:
            while len(out) < n:
                while self._q and len(out) < n:
                    out.append(self._q.popleft())
                if len(out) >= n:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if self._stopped or (left is not None and left <= 0):
                    break
                self._cv.wait(left)
        return out

    def deliver_to(self, sink) -> None:
        """Pass each completion to sink(wc) as it is made, in the thread that makes it, instead of queueing it (what
        is queued goes first): a consumer that waits on a queue of its own then wakes once per completion, where a
        thread forwarding from wait() would wake too. sink must be quick and must not block."""
        with self._cv:
            while self._q:
                sink(self._q.popleft())
            self._sink = sink

    def stop_waiting(self) -> None:
        """From now on wait() returns at once with what is queued, a wait in progress too: for the thread
        that waits on this queue to see at once that its owner is closing."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def __len__(self):
        with self._cv:
            return len(self._q)
