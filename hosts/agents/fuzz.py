"""A hostile host: sends malformed and adversarial frames from inside an emulated host (scapy, seeded).

    python -m hosts.agents.fuzz --iface eth0 --peers 10.11.0.2,10.12.0.2 --seed 1 [--groups 2000] [--rate 400]

Kinds, interleaved (each spans the whole run, so every kind meets the collective running beside it), at most
--rate frames/s in all (the host's NIC is shaped: a flood only fills it):
  igmp-broken   IGMP with wrong lengths, unknown types, bad checksums, v3 reports claiming records they lack
  igmp-joins    --groups IGMPv2 reports for distinct groups, v3 reports of many records, joins of unicast addresses
  lldp          LLDP-looking frames (0x88cc to the bridge group address) with random TLVs
  arp           an ARP storm: requests and gratuitous replies claiming the peers' addresses
  roce          RoCEv2 at the peers' queue pairs (QPN 0x11.. as uroce numbers them, and random ones): bad ICRC,
                valid ICRC with a far PSN, RETH DMA lengths of 2 GiB, random opcodes and truncated headers
Prints {"sent": {kind: frames}, "seed": N} as JSON. The same seed sends the same frames.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import random
import socket
import struct
import time
from functools import partial
from typing import Callable, Iterator

# scapy's layers one by one, not scapy.all (which loads every layer: 1 s of start-up instead of 0.3)
from scapy.arch import get_if_hwaddr
from scapy.config import conf
from scapy.layers.inet import IP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from hosts.rdma import headers as H

conf.verb = 0
IGMP_ALL = "224.0.0.22"
LLDP_MAC = "01:80:c2:00:00:0e"
Send = Callable[[], None]                   # one frame, ready to go


class Sender:
    """L2 frames by a packet socket on the interface; IPv4 packets by a raw socket (the kernel's route and its
    permanent neighbours pick the next hop, as for any packet of the host)."""

    def __init__(self, iface: str, rate: float):
        self.iface, self.gap = iface, 1.0 / rate
        self.l2 = conf.L2socket(iface=iface)
        self.l3 = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.l3.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        self.mac = get_if_hwaddr(iface)
        self.next = time.monotonic()

    def _pace(self) -> None:
        self.next += self.gap
        delay = self.next - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            self.next = time.monotonic()

    def frame(self, pkt) -> None:
        self._pace()
        self.l2.send(pkt)

    def packet(self, raw: bytes, dst: str) -> None:
        self._pace()
        try:
            self.l3.sendto(raw, (dst, 0))
        except OSError:
            pass                        # a length the kernel refuses is a frame not sent, not a stop

    def close(self) -> None:
        self.l2.close()
        self.l3.close()


def igmp_ip(src: str, payload: bytes, dst: str = IGMP_ALL) -> IP:
    return IP(src=src, dst=dst, proto=2, ttl=1, options=[b"\x94\x04\x00\x00"]) / Raw(payload)


def igmp_broken(s: Sender, rnd: random.Random, src: str, n: int) -> Iterator[Send]:
    for i in range(n):
        kind = i % 5
        if kind == 0:                       # too short for any IGMP message
            body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 7)))
        elif kind == 1:                     # an unknown type, any length
            body = bytes([rnd.choice([0x99, 0x00, 0x13, 0x1e, 0xff])]) + rnd.randbytes(rnd.randrange(7, 40))
        elif kind == 2:                     # a v2 report with a bad checksum and a garbage group
            body = struct.pack("!BBH4s", 0x16, 0, rnd.randrange(65536), rnd.randbytes(4))
        elif kind == 3:                     # a v3 report claiming 300 records, carrying one half record
            body = struct.pack("!BBHHH", 0x22, 0, 0, 0, 300) + rnd.randbytes(5)
        else:                               # a v3 record claiming 1000 sources and 255 aux words
            body = struct.pack("!BBHHHBBH4s", 0x22, 0, 0, 0, 1, 4, 255, 1000, socket.inet_aton("239.7.7.7"))
        ip = igmp_ip(src, body)
        if rnd.random() < 0.3:
            ip.len = rnd.choice([20, 24, 1500, 65535])       # an IP total length that lies
        yield partial(s.frame, Ether(src=s.mac, dst="01:00:5e:00:00:16") / ip)


def igmp_joins(s: Sender, rnd: random.Random, src: str, groups: int, peers: list[str]) -> Iterator[Send]:
    from scapy.contrib.igmp import IGMP
    for i in range(groups):                 # distinct groups 239.x.y.z
        group = str(ipaddress.IPv4Address(0xEF000000 + 0x10000 + i))
        yield partial(s.frame, Ether(src=s.mac, dst="01:00:5e:00:00:16") / IP(src=src, dst=group, proto=2, ttl=1)
                / IGMP(type=0x16, gaddr=group))
    for base in range(0, 400, 100):         # v3 reports of 100 records each
        records = b"".join(struct.pack("!BBH4s", 2, 0, 0, socket.inet_aton(f"239.200.{base // 100}.{k}"))
                           for k in range(100))
        body = struct.pack("!BBHHH", 0x22, 0, 0, 0, 100) + records
        yield partial(s.frame, Ether(src=s.mac, dst="01:00:5e:00:00:16") / igmp_ip(src, body))
    for peer in peers + ["0.0.0.0", "255.255.255.255", "224.0.0.1"]:   # "groups" that are not multicast
        yield partial(s.frame, Ether(src=s.mac, dst="01:00:5e:00:00:16") / IP(src=src, dst=IGMP_ALL, proto=2, ttl=1)
                / IGMP(type=0x16, gaddr=peer))


def lldp(s: Sender, rnd: random.Random, n: int) -> Iterator[Send]:
    for i in range(n):
        tlvs = b"".join(struct.pack("!H", (rnd.randrange(128) << 9) | (k := rnd.randrange(0, 40))) + rnd.randbytes(k)
                        for _ in range(rnd.randrange(1, 6)))
        if i % 2:                           # chassis id / port id / TTL, as a switch would send, then junk
            tlvs = b"\x02\x07\x04" + rnd.randbytes(6) + b"\x04\x03\x02\x00\x01\x06\x02\x00\x78" + tlvs
        yield partial(s.frame, Ether(src=s.mac, dst=LLDP_MAC, type=0x88CC) / Raw(tlvs))


def arp_storm(s: Sender, rnd: random.Random, src: str, peers: list[str], n: int) -> Iterator[Send]:
    for i in range(n):
        claim = rnd.choice(peers)
        op = 1 if i % 2 else 2
        yield partial(s.frame, Ether(src=s.mac, dst="ff:ff:ff:ff:ff:ff")
                / ARP(op=op, hwsrc=s.mac, psrc=claim, pdst=rnd.choice(peers + [src]), hwdst="ff:ff:ff:ff:ff:ff"))
    return n


def roce(s: Sender, rnd: random.Random, src: str, peers: list[str], n: int) -> Iterator[Send]:
    src_b = socket.inet_aton(src)
    for i in range(n):
        dst = peers[i % len(peers)]
        qpn = 0x11 + rnd.randrange(16) if rnd.random() < 0.8 else rnd.randrange(1 << 24)
        psn = rnd.randrange(1 << 24)
        kind = i % 5
        if kind == 0:                       # a WRITE ONLY with a 2 GiB DMA length
            hdrs = H.ext_headers(H.WRITE_ONLY, va=rnd.randrange(1 << 64), rkey=rnd.randrange(1 << 32), dma_len=1 << 31)
            pkt = H.encode(src_b, socket.inet_aton(dst), 49152 + i % 1000, i, H.WRITE_ONLY, qpn, psn, hdrs,
                           rnd.randbytes(rnd.randrange(0, 1024)))
        elif kind == 1:                     # a READ REQUEST for 2 GiB
            hdrs = H.ext_headers(H.READ_REQUEST, va=0, rkey=rnd.randrange(1 << 32), dma_len=(1 << 31) - 1)
            pkt = H.encode(src_b, socket.inet_aton(dst), 49152, i, H.READ_REQUEST, qpn, psn, hdrs)
        elif kind == 2:                     # a SEND with a far PSN (valid ICRC)
            pkt = H.encode(src_b, socket.inet_aton(dst), 49152, i, H.SEND_ONLY, qpn, psn, b"", rnd.randbytes(256))
        elif kind == 3:                     # a SEND or any opcode, then the ICRC broken
            opcode = H.SEND_ONLY if rnd.random() < 0.8 else rnd.randrange(256)
            pkt = H.encode(src_b, socket.inet_aton(dst), 49152, i, opcode, qpn, psn, b"",
                           rnd.randbytes(rnd.randrange(0, 512)))
            pkt[-1] ^= 0xFF
        else:                               # cut short inside the BTH or the RETH, lengths left as they were
            pkt = H.encode(src_b, socket.inet_aton(dst), 49152, i, H.WRITE_FIRST, qpn, psn,
                           H.ext_headers(H.WRITE_FIRST, dma_len=1 << 30), b"")[:rnd.randrange(30, 50)]
        yield partial(s.packet, bytes(pkt), dst)


def interleaved(frames: dict[str, list[Send]]) -> list[Send]:
    """Every kind spread evenly over the run: the k-th of n frames of a kind goes at fraction k/n of it."""
    order = sorted((k / len(f), i, k) for i, f in enumerate(frames.values()) for k in range(len(f)))
    lists = list(frames.values())
    return [lists[i][k] for _, i, k in order]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iface", default="eth0")
    ap.add_argument("--src", required=True, help="this host's address")
    ap.add_argument("--peers", required=True, help="the other hosts' addresses, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--groups", type=int, default=2000, help="distinct groups to join")
    ap.add_argument("--count", type=int, default=500, help="frames of each other kind")
    ap.add_argument("--rate", type=float, default=400, help="frames per second, at most")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    peers = args.peers.split(",")
    s = Sender(args.iface, args.rate)
    kinds = {"igmp-broken": igmp_broken(s, rnd, args.src, args.count),
             "igmp-joins": igmp_joins(s, rnd, args.src, args.groups, peers),
             "lldp": lldp(s, rnd, args.count),
             "arp": arp_storm(s, rnd, args.src, peers, args.count),
             "roce": roce(s, rnd, args.src, peers, args.count)}
    frames = {kind: list(gen) for kind, gen in kinds.items()}
    try:
        for send in interleaved(frames):
            send()
    finally:
        s.close()
    sent = {kind: len(f) for kind, f in frames.items()}
    print(json.dumps({"sent": sent, "seed": args.seed}), flush=True)


if __name__ == "__main__":
    main()
