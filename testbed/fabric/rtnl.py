"""Reading rtnetlink dumps lean: the few fields the queue sampler and the pause process need of each message,
unpacked from the bytes as they came (decoding every attribute of every message, as pyroute2 does, costs ~0.1 ms
of CPU a qdisc: 20 times what they read of it)."""
from __future__ import annotations

import struct

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST

# rtnetlink, as the kernel lays it out (linux/netlink.h, rtnetlink.h, pkt_sched.h, gen_stats.h, if_link.h)
NLMSG_HEADER, TCMSG, IFINFOMSG = 16, 20, 16
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_NEWQDISC = 16, 36
NLA_TYPE = 0x3FFF                  # without the nested and byte-order flags
TCA_KIND, TCA_OPTIONS, TCA_STATS2 = 1, 2, 7
TCA_TBF_PARMS, TCA_STATS_QUEUE = 1, 3
TBF_LIMIT_AT = 24                  # struct tc_qopt_tbf: two struct tc_ratespec (12 bytes each), then limit
IFLA_IFNAME, IFLA_STATS64 = 3, 23
TX_DROPPED_AT = 56                 # struct rtnl_link_stats64: tx_dropped is its eighth u64
TC_H_ROOT = 0xFFFFFFFF


def messages(chunks: list[bytes]):
    """(type, data, body start, end) of every netlink message in what a dump returned."""
    for data in chunks:
        off = 0
        while off + NLMSG_HEADER <= len(data):
            length, kind = struct.unpack_from("=IH", data, off)
            if length < NLMSG_HEADER:
                break
            yield kind, data, off + NLMSG_HEADER, off + length
            off += (length + 3) & ~3


def attributes(data: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
    """type -> (payload start, payload end) of the attributes (struct nlattr) between start and end."""
    out = {}
    while start + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, start)
        if length < 4:
            break
        out[kind & NLA_TYPE] = (start + 4, start + length)
        start += (length + 3) & ~3
    return out


def devices(chunks: list[bytes]) -> dict[str, tuple[int, int]]:
    """device name -> (ifindex, tx_dropped), from an RTM_GETLINK dump's messages."""
    out = {}
    for kind, data, start, end in messages(chunks):
        if kind != RTM_NEWLINK:
            continue
        index = struct.unpack_from("=i", data, start + 4)[0]
        nla = attributes(data, start + IFINFOMSG, end)
        if IFLA_IFNAME not in nla:
            continue
        name = data[slice(*nla[IFLA_IFNAME])].rstrip(b"\0").decode()
        stats = nla.get(IFLA_STATS64)
        out[name] = (index, struct.unpack_from("=Q", data, stats[0] + TX_DROPPED_AT)[0] if stats else 0)
    return out


def dump(ipr: IPRoute, msg, request: int) -> list[bytes]:
    """One dump request on pyroute2's socket; the replies as they came, undecoded."""
    ipr.put(msg, request, msg_flags=NLM_F_REQUEST | NLM_F_DUMP)
    chunks = []
    while True:
        data = ipr.recv(1 << 16)
        chunks.append(data)
        for kind, _, start, _ in messages([data]):
            if kind == NLMSG_DONE:
                return chunks
            if kind == NLMSG_ERROR:
                raise OSError(-struct.unpack_from("=i", data, start)[0], "netlink dump failed")
