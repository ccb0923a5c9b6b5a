"""`testbed pcap summarize FILE`: what a capture holds, RoCEv2 first.

Per BTH opcode counts, flows (5-tuples with packets and bytes), retransmissions (a request packet
seen again: same flow, destination QP, PSN and opcode), multicast traffic per group, ICRC failures, and
DCQCN's traffic: congestion notification packets (CNPs, opcode 0x81) and RoCE packets ECN-capable or
marked CE. Decoding is scapy's (scapy.contrib.roce), so it is independent of our own transport.

A RoCE packet captured shorter than it was on the wire (a snaplen below the frame size) is counted as
truncated: its ICRC covers bytes the capture does not hold, so it is neither checked nor counted bad,
and a BTH cut off by the snaplen is not called malformed.
"""
from __future__ import annotations

import ipaddress
import os
from collections import Counter

ROCE_PORT = 4791
CNP_OPCODE = 0x81
# Wireshark's RPC-over-RDMA heuristic claims some SEND messages of raw tensor data as RPC (6 of the demo's
# 32k packets) and then calls them malformed; our payloads carry no upper protocol, so switch it off.
TSHARK_OPTIONS = ("--disable-heuristic", "rpcrdma_infiniband")


class PcapError(ValueError):
    pass


def summarize(path: str, check_icrc: bool = True, icrc_limit: int | None = None) -> dict:
    """What the capture holds; ICRCs of at most icrc_limit whole RoCE packets are checked (None: all)."""
    if not os.path.exists(path):
        raise PcapError(f"{path}: no such file")
    from scapy.contrib.roce import BTH
    from scapy.error import Scapy_Exception
    from scapy.layers.inet import IP, UDP
    from scapy.utils import PcapReader

    opcodes, flows, groups, seen = Counter(), {}, Counter(), Counter()
    total = roce = bad_icrc = malformed = truncated = icrc_checked = cnps = ect = ce = 0
    size = 0
    try:
        reader = PcapReader(path)
    except (Scapy_Exception, OSError, EOFError) as exc:
        raise PcapError(f"{path}: not a pcap or pcapng file ({exc})") from None
    with reader:
        for pkt in reader:
            total += 1
            wire = max(len(pkt), pkt.wirelen or 0)       # bytes on the wire, whatever the snaplen kept
            size += wire
            if IP not in pkt:
                continue
            ip = pkt[IP]
            sport = dport = None
            if UDP in pkt:
                sport, dport = pkt[UDP].sport, pkt[UDP].dport
            key = f"{ip.src}:{sport} > {ip.dst}:{dport} {ip.proto}"
            f = flows.setdefault(key, [0, 0])
            f[0] += 1
            f[1] += wire
            if ipaddress.ip_address(ip.dst).is_multicast:
                groups[ip.dst] += 1
            if dport != ROCE_PORT:
                continue
            roce += 1
            ect += ip.tos & 3 != 0
            ce += ip.tos & 3 == 3
            cut = len(pkt) < wire
            truncated += cut
            bth = pkt.getlayer(BTH)
            if bth is None:
                malformed += not cut
                continue
            name = bth.get_field("opcode").i2repr(bth, bth.opcode)
            opcodes[name] += 1
            cnps += bth.opcode == CNP_OPCODE
            if "ACKNOWLEDGE" not in name and "RESPONSE" not in name and bth.opcode != CNP_OPCODE:
                seen[(ip.src, ip.dst, bth.dqpn, bth.psn, bth.opcode)] += 1
            if check_icrc and not cut and (icrc_limit is None or icrc_checked < icrc_limit):
                icrc_checked += 1
                bad_icrc += not icrc_ok(pkt[IP])
    retrans = sum(n - 1 for n in seen.values() if n > 1)
    return {"file": path, "packets": total, "bytes": size, "roce_packets": roce, "opcodes": dict(opcodes.most_common()),
            "retransmissions": retrans, "truncated": truncated,
            "cnps": cnps, "ecn_capable": ect, "ecn_ce": ce,
            "bad_icrc": bad_icrc if check_icrc else None, "icrc_checked": icrc_checked if check_icrc else 0,
            "malformed": malformed,
            "multicast": dict(groups),
            "flows": [{"flow": k, "packets": v[0], "bytes": v[1]}
                      for k, v in sorted(flows.items(), key=lambda kv: -kv[1][1])]}


def icrc_ok(ip) -> bool:
    """Recompute the ICRC of a whole RoCEv2 packet with scapy and compare it with the captured one."""
    from scapy.contrib.roce import BTH
    datagram = bytes(ip.original or ip)[:ip.len]        # the IP datagram, without Ethernet padding
    return len(datagram) == ip.len and ip[BTH].compute_icrc(b"") == datagram[-4:]


def format_summary(s: dict, top: int = 10) -> str:
    icrc = "ICRC not checked" if s["bad_icrc"] is None else f"{s['bad_icrc']} bad ICRC"
    if s["bad_icrc"] is not None and s["icrc_checked"] < s["roce_packets"] - s["truncated"]:
        icrc += f" (of {s['icrc_checked']} checked)"
    lines = [f"{s['file']}: {s['packets']} packets, {s['bytes']} bytes; RoCEv2 {s['roce_packets']} packets, "
             f"{s['retransmissions']} retransmitted, {s['truncated']} truncated (ICRC not checkable), {icrc}, "
             f"{s['malformed']} malformed",
             f"DCQCN: {s['cnps']} CNPs, {s['ecn_ce']} CE-marked of {s['ecn_capable']} ECN-capable RoCE packets"]
    if s["opcodes"]:
        lines.append("opcodes:")
        lines += [f"  {n:>8}  {name}" for name, n in s["opcodes"].items()]
    if s["multicast"]:
        lines.append("multicast groups:")
        lines += [f"  {n:>8}  {g}" for g, n in s["multicast"].items()]
    lines.append(f"flows (top {min(top, len(s['flows']))} of {len(s['flows'])} by bytes):")
    lines += [f"  {f['packets']:>8} pkts {f['bytes']:>11} B  {f['flow']}" for f in s["flows"][:top]]
    return "\n".join(lines)
