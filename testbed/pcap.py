"""`testbed pcap summarize FILE`: what a capture holds, RoCEv2 first.

Per BTH opcode counts, flows (5-tuples with packets and bytes), retransmissions (a request packet
seen again: same flow, destination QP, PSN and opcode), multicast traffic per group, and ICRC
failures. Decoding is scapy's (scapy.contrib.roce), so it is independent of our own transport.
"""
from __future__ import annotations

import ipaddress
import json
import os
from collections import Counter

ROCE_PORT = 4791


class PcapError(ValueError):
    pass


def summarize(path: str, check_icrc: bool = True) -> dict:
    if not os.path.exists(path):
        raise PcapError(f"{path}: no such file")
    from scapy.contrib.roce import BTH
    from scapy.error import Scapy_Exception
    from scapy.layers.inet import IP, UDP
    from scapy.utils import PcapReader

    opcodes, flows, groups, seen = Counter(), {}, Counter(), Counter()
    total = roce = bad_icrc = malformed = 0
    size = 0
    try:
        reader = PcapReader(path)
    except (Scapy_Exception, OSError, EOFError) as exc:
        raise PcapError(f"{path}: not a pcap or pcapng file ({exc})") from None
    with reader:
        for pkt in reader:
            total += 1
            size += len(pkt)
            if IP not in pkt:
                continue
            ip = pkt[IP]
            sport = dport = None
            if UDP in pkt:
                sport, dport = pkt[UDP].sport, pkt[UDP].dport
            key = f"{ip.src}:{sport} > {ip.dst}:{dport} {ip.proto}"
            f = flows.setdefault(key, [0, 0])
            f[0] += 1
            f[1] += len(pkt)
            if ipaddress.ip_address(ip.dst).is_multicast:
                groups[ip.dst] += 1
            if dport != ROCE_PORT:
                continue
            roce += 1
            bth = pkt.getlayer(BTH)
            if bth is None:
                malformed += 1
                continue
            name = bth.get_field("opcode").i2repr(bth, bth.opcode)
            opcodes[name] += 1
            if "ACKNOWLEDGE" not in name and "RESPONSE" not in name:
                seen[(ip.src, ip.dst, bth.dqpn, bth.psn, bth.opcode)] += 1
            if check_icrc and not icrc_ok(pkt[IP]):
                bad_icrc += 1
    retrans = sum(n - 1 for n in seen.values() if n > 1)
    return {"file": path, "packets": total, "bytes": size, "roce_packets": roce, "opcodes": dict(opcodes.most_common()),
            "retransmissions": retrans, "bad_icrc": bad_icrc if check_icrc else None, "malformed": malformed,
            "multicast": dict(groups),
            "flows": [{"flow": k, "packets": v[0], "bytes": v[1]}
                      for k, v in sorted(flows.items(), key=lambda kv: -kv[1][1])]}


def icrc_ok(ip) -> bool:
    """Recompute the ICRC of a RoCEv2 packet with scapy and compare."""
    from scapy.contrib.roce import BTH
    rebuilt = ip.copy()
    rebuilt[BTH].icrc = None
    return bytes(rebuilt) == bytes(ip)


def format_summary(s: dict, top: int = 10) -> str:
    lines = [f"{s['file']}: {s['packets']} packets, {s['bytes']} bytes; RoCEv2 {s['roce_packets']} packets, "
             f"{s['retransmissions']} retransmitted, {s['bad_icrc']} bad ICRC, {s['malformed']} malformed"]
    if s["opcodes"]:
        lines.append("opcodes:")
        lines += [f"  {n:>8}  {name}" for name, n in s["opcodes"].items()]
    if s["multicast"]:
        lines.append("multicast groups:")
        lines += [f"  {n:>8}  {g}" for g, n in s["multicast"].items()]
    lines.append(f"flows (top {min(top, len(s['flows']))} of {len(s['flows'])} by bytes):")
    lines += [f"  {f['packets']:>8} pkts {f['bytes']:>11} B  {f['flow']}" for f in s["flows"][:top]]
    return "\n".join(lines)


def register(subparsers) -> None:
    p = subparsers.add_parser("pcap", help="inspect packet captures")
    sub = p.add_subparsers(dest="pcap_command", required=True, parser_class=type(p))
    s = sub.add_parser("summarize", help="per-opcode counts, retransmissions, multicast copies and flows")
    s.add_argument("file")
    s.add_argument("--json", action="store_true")
    s.add_argument("--no-icrc", action="store_true", help="skip the ICRC check (faster on big files)")
    s.set_defaults(func=run)


def run(args) -> int:
    summary = summarize(args.file, check_icrc=not args.no_icrc)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0
