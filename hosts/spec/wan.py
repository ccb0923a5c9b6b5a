"""What the testbed tells each end of a multi-connection WAN transfer (hosts/agents/wan_transfer.py)."""
from __future__ import annotations

import dataclasses
from typing import Literal

from hosts.spec.base import Spec


@dataclasses.dataclass(frozen=True, kw_only=True)
class WanTransferSpec(Spec):
    """One end of a transfer of `size` bytes over 1, then 2, ... parallel RC queue pairs (`connections`)."""
    role: Literal["send", "recv"]
    ip: str                                   # this end's NIC address
    store: str                                # the rendezvous directory both ends share
    size: int                                 # bytes moved per connection count
    connections: tuple[int, ...]              # the connection counts, run in turn
    window: int                               # packets in flight per queue pair (its max_outstanding)
    chunk: int = 64 * 1024                    # bytes per RDMA WRITE; chunk k goes on queue pair k % N
    mtu: int = 1024                           # RoCE MTU: a packet's payload
    rate_limit_bps: float | None = None       # the NIC's pacing, shared by the queue pairs
    rc_timeout: float = 0.5                   # the retransmission timeout's ceiling
    rto_min: float = 0.05                     # its floor: above the WAN's round trip, so it never fires early
    pings: int = 9                            # 1-byte WRITEs that measure the round trip before each transfer
    seed: int = 0                             # the payload's bytes
    timeout_s: float = 60
