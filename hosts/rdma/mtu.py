"""Link MTUs and the RoCE MTU each carries: the fabric's defaults, in one place for both sides.

The testbed cables its links with these MTUs (testbed/fabric/links.py imports them) and tells every rank the
RoCE MTU of its ports; a rank told nothing falls back to the same defaults.
"""
from hosts.rdma.headers import BTH_LEN, DETH_LEN, IB_MTUS, ICRC_LEN, IMM_LEN, LARGE_MTUS, RETH_LEN

NIC_MTU = 9000          # every link but the HB ones, by default: jumbo frames, RoCE MTU 4096, as AI fabrics run
# What a RoCEv2 packet adds to a full payload at most: IPv4, UDP, BTH, RETH, ImmDt, ICRC (an RDMA WRITE-only with
# immediate carries both extension headers; every other packet carries fewer bytes)
ROCE_HEADERS = 20 + 8 + BTH_LEN + RETH_LEN + IMM_LEN + ICRC_LEN
UD_HEADERS = 20 + 8 + BTH_LEN + DETH_LEN + ICRC_LEN        # what a UD SEND adds to its payload (+ ImmDt if any)
# The HB-domain (NVLink) links: sized for 32 KiB RoCE packets, 8 times fewer than 4 KiB ones for the same bytes (the
# emulation's cost is per packet; NVLink has no Ethernet MTU to honour). Kernel rxe still uses 4096 on them.
HB_ROCE_MTU = max(LARGE_MTUS)
HB_MTU = HB_ROCE_MTU + ROCE_HEADERS


def roce_mtu(link_mtu: int, large: bool = False) -> int:
    """The RoCE path MTU a link MTU carries: the largest IB MTU whose packets fit in it (1500 -> 1024, 9000 -> 4096,
    as rxe derives its own from its netdev's MTU); with `large` (HB links), MTUs beyond IB's 4096 too."""
    return max(m for m in IB_MTUS + (LARGE_MTUS if large else ()) if m + ROCE_HEADERS <= link_mtu)


def link_mtu_for(ib_mtu: int) -> int:
    """The smallest link MTU whose packets carry RoCE MTU `ib_mtu`."""
    return ib_mtu + ROCE_HEADERS


def mtu_mismatch(ib_mtu: int, link_mtu: int, where: str) -> str | None:
    """One line naming the problem if RoCE MTU `ib_mtu` does not fit a path of MTU `link_mtu`, else None."""
    if ib_mtu + ROCE_HEADERS <= link_mtu:
        return None
    fits = [m for m in IB_MTUS if m + ROCE_HEADERS <= link_mtu]
    return (f"RoCE MTU {ib_mtu} needs a link MTU of at least {link_mtu_for(ib_mtu)} bytes, but {where} has "
            f"{link_mtu} (" + (f"use RoCE MTU {fits[-1]} or less, or " if fits else "") + "raise the link MTU)")


DEFAULT_ROCE_MTU = {"nic": roce_mtu(NIC_MTU), "hb": HB_ROCE_MTU}     # a rank's ports on default links
