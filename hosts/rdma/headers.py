"""RoCEv2 wire format: IPv4 + UDP(4791) + BTH [+ RETH|AETH|DETH|ImmDt] + payload + pad + ICRC.

Byte-exact with Linux rxe: IPv4 TOS 0, DF, TTL 64 (255 for multicast), UDP checksum 0,
P_Key 0xFFFF, ICRC = CRC-32 over the packet with the variant fields masked, stored little-endian.
The TOS byte is among the masked fields, so switches may set ECN's CE on the way without breaking the ICRC;
uroce sends ECT(0) unless told not to (the only difference from rxe's bytes). The congestion notification
packet (CNP, opcode 0x81, RoCEv2 annex A17) is a BTH, 16 reserved bytes and the ICRC.
Hot path is struct + zlib.crc32; no scapy here.
"""
import socket
import struct
import zlib
from dataclasses import dataclass
from typing import Optional

ROCE_PORT = 4791
DEFAULT_PKEY = 0xFFFF
PSN_MASK = 0xFFFFFF
MCAST_QPN = 0xFFFFFF
IB_MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}     # IB MTU -> its enum value (ibv_mtu, the tools' exchange)
IB_MTUS = tuple(IB_MTU_ENUM)
# Path MTUs beyond InfiniBand's 4096, for the user-space transport on the HB domain's links only: NVLink carries no
# Ethernet frames, and cutting its data into 4 KiB RoCE packets would only multiply the emulation's per-packet work
LARGE_MTUS = (8192, 16384, 32768)
ROCE_MTUS = IB_MTUS + LARGE_MTUS

# --- RoCE v2 GIDs of IPv4 addresses (IPv4-mapped IPv6, ::ffff:a.b.c.d)
def ipv4_to_gid(ip: str) -> bytes:
    """RoCE v2 GID of an IPv4 address (IPv4-mapped IPv6, ::ffff:a.b.c.d)."""
    return bytes(10) + b"\xff\xff" + socket.inet_aton(ip)


def gid_to_ipv4(gid: bytes) -> str:
    """IPv4 address of an IPv4-mapped RoCE v2 GID; ValueError for other GIDs."""
    if len(gid) != 16 or gid[:12] != bytes(10) + b"\xff\xff":
        raise ValueError(f"not an IPv4-mapped GID: {gid.hex()}")
    return socket.inet_ntoa(gid[12:])


# --- opcodes (IBTA vol.1 table 38; RC = 0x00.., UC = 0x20.., UD = 0x60..)
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B
READ_REQUEST, READ_RESP_FIRST, READ_RESP_MIDDLE, READ_RESP_LAST, READ_RESP_ONLY = 0x0C, 0x0D, 0x0E, 0x0F, 0x10
ACKNOWLEDGE = 0x11
UD_SEND_ONLY, UD_SEND_ONLY_IMM = 0x64, 0x65
CNP = 0x81                 # RoCEv2 congestion notification packet
CNP_RESERVED = 16          # reserved bytes after a CNP's BTH
# IP ECN codepoints (the TOS byte's low two bits) and the DSCP ConnectX gives CNPs (np_cnp_dscp)
ECN_MASK, ECT0, ECN_CE = 0x03, 0x02, 0x03
CNP_DSCP = 48

OPCODE_NAMES = {
    SEND_FIRST: "RC_SEND_FIRST", SEND_MIDDLE: "RC_SEND_MIDDLE", SEND_LAST: "RC_SEND_LAST",
    SEND_LAST_IMM: "RC_SEND_LAST_WITH_IMMEDIATE", SEND_ONLY: "RC_SEND_ONLY",
    SEND_ONLY_IMM: "RC_SEND_ONLY_WITH_IMMEDIATE", WRITE_FIRST: "RC_RDMA_WRITE_FIRST",
    WRITE_MIDDLE: "RC_RDMA_WRITE_MIDDLE", WRITE_LAST: "RC_RDMA_WRITE_LAST",
    WRITE_LAST_IMM: "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", WRITE_ONLY: "RC_RDMA_WRITE_ONLY",
    WRITE_ONLY_IMM: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", READ_REQUEST: "RC_RDMA_READ_REQUEST",
    READ_RESP_FIRST: "RC_RDMA_READ_RESPONSE_FIRST", READ_RESP_MIDDLE: "RC_RDMA_READ_RESPONSE_MIDDLE",
    READ_RESP_LAST: "RC_RDMA_READ_RESPONSE_LAST", READ_RESP_ONLY: "RC_RDMA_READ_RESPONSE_ONLY",
    ACKNOWLEDGE: "RC_ACKNOWLEDGE", UD_SEND_ONLY: "UD_SEND_ONLY", UD_SEND_ONLY_IMM: "UD_SEND_ONLY_WITH_IMMEDIATE",
    CNP: "CNP",
}

# extension-header flags
RETH, AETH, DETH, IMM = 1, 2, 4, 8
RETH_LEN, AETH_LEN, DETH_LEN, IMM_LEN, BTH_LEN, ICRC_LEN = 16, 4, 8, 4, 12, 4
# opcode -> extension headers, in wire order (DETH, RETH, AETH, ImmDt never co-occur beyond these)
OPCODE_EXT = {
    SEND_FIRST: 0, SEND_MIDDLE: 0, SEND_LAST: 0, SEND_LAST_IMM: IMM, SEND_ONLY: 0, SEND_ONLY_IMM: IMM,
    WRITE_FIRST: RETH, WRITE_MIDDLE: 0, WRITE_LAST: 0, WRITE_LAST_IMM: IMM, WRITE_ONLY: RETH,
    WRITE_ONLY_IMM: RETH | IMM, READ_REQUEST: RETH, READ_RESP_FIRST: AETH, READ_RESP_MIDDLE: 0,
    READ_RESP_LAST: AETH, READ_RESP_ONLY: AETH, ACKNOWLEDGE: AETH,
    UD_SEND_ONLY: DETH, UD_SEND_ONLY_IMM: DETH | IMM, CNP: 0,
}
# opcodes that carry payload
OPCODE_HAS_PAYLOAD = {op for op in OPCODE_EXT if op not in (READ_REQUEST, ACKNOWLEDGE, CNP)}

# AETH syndromes
AETH_ACK = 0x1F            # ACK, credit code 31 (no end-to-end credits), as rxe sends
AETH_TYPE_MASK = 0x60
AETH_TYPE_ACK, AETH_TYPE_RNR, AETH_TYPE_NAK = 0x00, 0x20, 0x60
NAK_PSN_SEQ_ERR, NAK_INVALID_REQ, NAK_REM_ACCESS_ERR, NAK_REM_OP_ERR = 0, 1, 2, 3


class DecodeError(ValueError):
    """A packet that is not a valid RoCEv2 packet; .reason names the drop counter."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(slots=True)
class Packet:
    """A decoded RoCEv2 packet. Header fields are plain ints; payload is a memoryview/bytes."""
    src_ip: str
    dst_ip: str
    sport: int
    opcode: int
    dqpn: int
    psn: int
    ackreq: bool = False
    se: bool = False
    migreq: bool = False
    pad: int = 0
    tver: int = 0
    pkey: int = DEFAULT_PKEY
    fecn: bool = False
    becn: bool = False
    # RETH
    va: int = 0
    rkey: int = 0
    dma_len: int = 0
    # AETH
    syndrome: int = 0
    msn: int = 0
    # DETH
    qkey: int = 0
    src_qp: int = 0
    # ImmDt (raw 32-bit value in network order as an int)
    imm: Optional[int] = None
    payload: bytes = b""
    # IP fields kept for byte-exact re-encoding
    ip_id: int = 0
    ttl: int = 64
    tos: int = 0
    icrc: int = 0

    @property
    def name(self) -> str:
        return OPCODE_NAMES.get(self.opcode, f"0x{self.opcode:02x}")


_IPUDP = struct.Struct("!BBHHHBBH4s4sHHHH")
_BTH = struct.Struct("!BBHBBHBBH")   # opcode, flags, pkey, byte4, dqpn(3 as B+H), byte8, psn(3 as B+H)
_RETH = struct.Struct("!QII")
_DETH = struct.Struct("!II")
_U32 = struct.Struct("!I")
_ICRC = struct.Struct("<I")
_FF8 = b"\xff" * 8
_CRC_FF8 = zlib.crc32(_FF8)


def ip_checksum(hdr) -> int:
    s = sum(struct.unpack("!10H", bytes(hdr[:20])))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def psn_add(psn: int, n: int) -> int:
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed 24-bit a - b, in [-2^23, 2^23)."""
    d = (a - b) & PSN_MASK
    return d - 0x1000000 if d & 0x800000 else d


def rc_udp_sport(lqpn: int, rqpn: int) -> int:
    """Linux rdma_get_udp_sport(0, lqpn, rqpn): the RC source port, identical in both directions."""
    v = (lqpn * rqpn) & 0xFFFFFFFFFFFFFFFF
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xFFFFF
    low = (fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)
    return low | 0xC000


def ud_udp_sport(src_qpn: int) -> int:
    """Linux rxe UD source port: 0xC000 + (hash_32(src_qpn, 14) & 0x3fff)."""
    h = ((src_qpn * 0x61C88647) & 0xFFFFFFFF) >> (32 - 14)
    return 0xC000 + (h & 0x3FFF)


def ext_headers(opcode: int, va=0, rkey=0, dma_len=0, syndrome=0, msn=0, qkey=0, src_qp=0, imm=None) -> bytes:
    ext = OPCODE_EXT[opcode]
    out = b""
    if ext & DETH:
        out += _DETH.pack(qkey & 0xFFFFFFFF, src_qp & 0xFFFFFF)
    if ext & RETH:
        out += _RETH.pack(va, rkey, dma_len)
    if ext & AETH:
        out += _U32.pack(((syndrome & 0xFF) << 24) | (msn & 0xFFFFFF))
    if ext & IMM:
        if imm is None:
            raise ValueError(f"{OPCODE_NAMES[opcode]} needs immediate data")
        out += _U32.pack(imm & 0xFFFFFFFF)
    return out


def encode(src_ip: bytes, dst_ip: bytes, sport: int, ip_id: int, opcode: int, dqpn: int, psn: int,
           hdrs: bytes = b"", payload=b"", ackreq=False, se=False, migreq=False, ttl=64, tos=0,
           pkey=DEFAULT_PKEY, fecn=False, becn=False, tver=0, dport=ROCE_PORT) -> bytearray:
    """Build a whole IPv4 RoCEv2 packet. src_ip/dst_ip are 4-byte packed addresses, hdrs the
    extension headers (ext_headers()). Returns the bytes to put on the wire (ICRC included)."""
    plen = len(payload)
    pad = (-plen) & 3
    hl = len(hdrs)
    n = 28 + BTH_LEN + hl + plen + pad + ICRC_LEN
    buf = bytearray(n)
    # masked variant first (TOS, TTL, IP csum, UDP csum = 0xff..; BTH byte 4 = 0xff), then CRC, then patch
    _IPUDP.pack_into(buf, 0, 0x45, 0xFF, n, ip_id & 0xFFFF, 0x4000, 0xFF, 17, 0xFFFF, src_ip, dst_ip,
                     sport, dport, n - 20, 0xFFFF)
    flags = (0x80 if se else 0) | (0x40 if migreq else 0) | (pad << 4) | (tver & 0xF)
    _BTH.pack_into(buf, 28, opcode, flags, pkey, 0xFF, dqpn >> 16 & 0xFF, dqpn & 0xFFFF,
                   0x80 if ackreq else 0, psn >> 16 & 0xFF, psn & 0xFFFF)
    o = 28 + BTH_LEN
    if hl:
        buf[o:o + hl] = hdrs
        o += hl
    if plen:
        buf[o:o + plen] = payload
    crc = zlib.crc32(memoryview(buf)[:n - 4], _CRC_FF8)
    _ICRC.pack_into(buf, n - 4, crc)
    buf[1] = tos
    buf[8] = ttl
    buf[10] = buf[11] = 0
    buf[26] = buf[27] = 0
    buf[32] = (0x80 if fecn else 0) | (0x40 if becn else 0)
    struct.pack_into("!H", buf, 10, ip_checksum(buf))
    return buf


def encode_cnp(src_ip: bytes, dst_ip: bytes, sport: int, ip_id: int, dqpn: int) -> bytearray:
    """A CNP to queue pair `dqpn` (the sender of the marked packets), as ConnectX sends them: BECN set,
    PSN 0, 16 zero bytes, DSCP 48 and not ECN-capable (a switch never marks a CNP)."""
    return encode(src_ip, dst_ip, sport, ip_id, CNP, dqpn, 0, bytes(CNP_RESERVED), becn=True, tos=CNP_DSCP << 2)


def compute_icrc(pkt) -> int:
    """ICRC of a whole IPv4 RoCEv2 packet (the value its last 4 bytes must hold, little-endian)."""
    mv = memoryview(pkt)
    ihl = (mv[0] & 0x0F) * 4
    m = bytearray(mv[:ihl + 8 + BTH_LEN])
    m[1] = 0xFF
    m[8] = 0xFF
    m[10] = m[11] = 0xFF
    m[ihl + 6] = m[ihl + 7] = 0xFF
    m[ihl + 8 + 4] = 0xFF
    crc = zlib.crc32(m, _CRC_FF8)
    return zlib.crc32(mv[ihl + 8 + BTH_LEN:len(mv) - ICRC_LEN], crc)


# Long on purpose: a straight-line parse of one packet, header after header, each check with its reason.
def decode(pkt, verify_icrc: bool = True) -> Packet:
    """Parse a whole IPv4 packet. Raises DecodeError(reason) for anything that is not valid RoCEv2."""
    mv = memoryview(pkt)
    n = len(mv)
    if n < 20:
        raise DecodeError("truncated", f"{n} bytes, no IPv4 header")
    (vihl, tos, tot, ip_id, frag, ttl, proto, _csum, src, dst, sport, dport, ulen, _ucsum) = \
        _IPUDP.unpack_from(mv, 0) if n >= 28 else (mv[0], 0, 0, 0, 0, 0, 0, 0, b"", b"", 0, 0, 0, 0)
    if vihl >> 4 != 4:
        raise DecodeError("malformed", "not IPv4")
    if vihl != 0x45:
        raise DecodeError("malformed", "IPv4 options are not supported")
    if n < 28:
        raise DecodeError("truncated", f"{n} bytes, no UDP header")
    if proto != 17 or dport != ROCE_PORT:
        raise DecodeError("not_roce", f"proto {proto} dport {dport}")
    if frag & 0x3FFF:
        raise DecodeError("malformed", "IP fragment")
    if tot > n:
        raise DecodeError("truncated", f"IP total length {tot} > {n} captured")
    if ulen != tot - 20:
        raise DecodeError("malformed", f"UDP length {ulen} != IP payload {tot - 20}")
    if tot < 28 + BTH_LEN + ICRC_LEN:
        raise DecodeError("truncated", "no room for BTH and ICRC")
    mv = mv[:tot]
    opcode, flags, pkey, b4, q_hi, q_lo, b8, p_hi, p_lo = _BTH.unpack_from(mv, 28)
    ext = OPCODE_EXT.get(opcode)
    if ext is None:
        raise DecodeError("bad_opcode", f"opcode 0x{opcode:02x}")
    if flags & 0x0F:
        raise DecodeError("bad_version", f"BTH TVer {flags & 0xF}")
    pad = (flags >> 4) & 3
    icrc = _ICRC.unpack_from(mv, tot - 4)[0]
    if verify_icrc and compute_icrc(mv) != icrc:
        raise DecodeError("bad_icrc")
    p = Packet(socket.inet_ntoa(src), socket.inet_ntoa(dst), sport, opcode, (q_hi << 16) | q_lo,
               (p_hi << 16) | p_lo, ackreq=bool(b8 & 0x80), se=bool(flags & 0x80), migreq=bool(flags & 0x40),
               pad=pad, tver=flags & 0xF, pkey=pkey, fecn=bool(b4 & 0x80), becn=bool(b4 & 0x40),
               ip_id=ip_id, ttl=ttl, tos=tos, icrc=icrc)
    o = 28 + BTH_LEN
    end = tot - ICRC_LEN
    if opcode == CNP:
        if end - o != CNP_RESERVED or pad:
            raise DecodeError("bad_cnp", f"{end - o} bytes after the BTH, pad {pad}")
        p.payload = mv[o:end]           # the reserved bytes, kept for re-encoding
        return p
    need = (DETH_LEN if ext & DETH else 0) + (RETH_LEN if ext & RETH else 0) + \
        (AETH_LEN if ext & AETH else 0) + (IMM_LEN if ext & IMM else 0)
    if o + need > end:
        raise DecodeError("truncated", f"{p.name} needs {need} header bytes")
    if ext & DETH:
        p.qkey, sq = _DETH.unpack_from(mv, o)
        p.src_qp = sq & 0xFFFFFF
        o += DETH_LEN
    if ext & RETH:
        p.va, p.rkey, p.dma_len = _RETH.unpack_from(mv, o)
        o += RETH_LEN
    if ext & AETH:
        a = _U32.unpack_from(mv, o)[0]
        p.syndrome, p.msn = a >> 24, a & 0xFFFFFF
        o += AETH_LEN
    if ext & IMM:
        p.imm = _U32.unpack_from(mv, o)[0]
        o += IMM_LEN
    plen = end - o - pad
    if plen < 0:
        raise DecodeError("malformed", "pad count exceeds payload")
    if plen and opcode not in OPCODE_HAS_PAYLOAD:
        raise DecodeError("malformed", f"{p.name} carries {plen} payload bytes")
    p.payload = mv[o:o + plen]
    return p


def reencode(p: Packet) -> bytearray:
    """Encode a decoded Packet again (used to check byte-exactness against captures)."""
    hdrs = ext_headers(p.opcode, p.va, p.rkey, p.dma_len, p.syndrome, p.msn, p.qkey, p.src_qp, p.imm)
    return encode(socket.inet_aton(p.src_ip), socket.inet_aton(p.dst_ip), p.sport, p.ip_id, p.opcode,
                  p.dqpn, p.psn, hdrs, p.payload, ackreq=p.ackreq, se=p.se, migreq=p.migreq, ttl=p.ttl,
                  tos=p.tos, pkey=p.pkey, fecn=p.fecn, becn=p.becn, tver=p.tver)
