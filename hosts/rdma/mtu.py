"""Link MTUs and the RoCE MTU each carries: the fabric's defaults, in one place for both sides.

The testbed cables its links with these MTUs (testbed/fabric/links.py imports them) and tells every rank the
RoCE MTU of its ports; a rank told nothing falls back to the same defaults.
"""
from hosts.rdma.headers import IB_MTUS

NIC_MTU = 9000          # every link but the HB ones, by default: jumbo frames, RoCE MTU 4096, as AI fabrics run
HB_MTU = 9000           # the HB-domain (NVLink) links
ROCE_HEADERS = 20 + 8 + 12 + 16 + 4     # IPv4, UDP, BTH, RETH, ICRC: what a RoCEv2 packet adds to its payload


def roce_mtu(link_mtu: int) -> int:
    """The RoCE path MTU a link MTU carries: the largest IB MTU whose packets fit in it, as rxe derives its
    own from its netdev's MTU (1500 -> 1024, 9000 -> 4096)."""
    return max(m for m in IB_MTUS if m + ROCE_HEADERS <= link_mtu)


DEFAULT_ROCE_MTU = {"nic": roce_mtu(NIC_MTU), "hb": roce_mtu(HB_MTU)}     # a rank's ports on default links
