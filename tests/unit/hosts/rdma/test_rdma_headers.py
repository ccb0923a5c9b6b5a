"""RoCEv2 codec against captures of real Linux rxe traffic, and against scapy."""
import collections
import pathlib
import socket

import pytest
from scapy.all import IP, UDP, raw, rdpcap
from scapy.contrib.roce import BTH

from hosts.rdma import headers as H
from tests.paths import DATA

RXE = pathlib.Path(DATA) / "rxe"
EXPECTED = {
    "rc_write.pcap": {"RC_RDMA_WRITE_FIRST": 20, "RC_RDMA_WRITE_MIDDLE": 40, "RC_RDMA_WRITE_LAST": 20,
                      "RC_ACKNOWLEDGE": 20},
    "rc_read.pcap": {"RC_RDMA_READ_REQUEST": 20, "RC_RDMA_READ_RESPONSE_FIRST": 20,
                     "RC_RDMA_READ_RESPONSE_MIDDLE": 40, "RC_RDMA_READ_RESPONSE_LAST": 20},
    "ud_send.pcap": {"UD_SEND_ONLY": 20},
}


def _ip_packets(name):
    return [raw(p[IP]) for p in rdpcap(str(RXE / name))]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_capture_parses_verifies_and_reencodes(name):
    pkts = _ip_packets(name)
    hist = collections.Counter()
    for b in pkts:
        p = H.decode(b)                       # verifies the ICRC
        assert H.compute_icrc(b) == p.icrc
        assert bytes(H.reencode(p)) == b, f"{p.name} psn {p.psn:#x} differs after re-encoding"
        assert p.tos == 0 and p.ttl == 64 and b[6] & 0x40, "TOS 0, TTL 64, DF"
        assert b[26:28] == b"\0\0", "UDP checksum 0"
        hist[p.name] += 1
    assert dict(hist) == EXPECTED[name]


def test_golden_fields():
    w = [H.decode(b) for b in _ip_packets("rc_write.pcap")]
    first = next(p for p in w if p.opcode == H.WRITE_FIRST)
    assert (first.dma_len, first.dqpn, first.src_ip) == (4096, 0x11, "10.77.0.2")
    assert all(p.syndrome == H.AETH_ACK for p in w if p.opcode == H.ACKNOWLEDGE)
    assert all(p.ackreq for p in w if p.opcode == H.WRITE_LAST)
    assert {p.sport for p in w} == {H.rc_udp_sport(0x12, 0x11)} == {49458}
    r = [H.decode(b) for b in _ip_packets("rc_read.pcap")]
    reqs = [p for p in r if p.opcode == H.READ_REQUEST]
    assert all(H.psn_diff(b.psn, a.psn) == 4 for a, b in zip(reqs, reqs[1:]))
    u = [H.decode(b) for b in _ip_packets("ud_send.pcap")]
    assert {(p.qkey, p.src_qp, p.sport, len(p.payload)) for p in u} == {(0x11111111, 0x12, 63494, 1024)}


def test_sport_formulas_match_rxe():
    assert [H.rc_udp_sport(0x11, 0x12), H.rc_udp_sport(0x12, 0x13), H.rc_udp_sport(0x13, 0x14)] == \
        [49458, 49494, 49532]
    assert H.rc_udp_sport(0x12, 0x11) == H.rc_udp_sport(0x11, 0x12)
    assert H.ud_udp_sport(0x12) == 63494


ALL_OPCODES = sorted(op for op in H.OPCODE_EXT if op != H.CNP)      # CNPs: test_dcqcn.py


@pytest.mark.parametrize("opcode", ALL_OPCODES, ids=[H.OPCODE_NAMES[o] for o in ALL_OPCODES])
@pytest.mark.parametrize("plen", [0, 1, 3, 1024])
def test_encode_roundtrip_and_scapy_icrc(opcode, plen):
    payload = bytes((i * 7) & 0xFF for i in range(plen)) if opcode in H.OPCODE_HAS_PAYLOAD else b""
    hdrs = H.ext_headers(opcode, va=0x7F0012345678, rkey=0x1234, dma_len=8192, syndrome=0x1F, msn=5,
                         qkey=0x11111111, src_qp=0x12, imm=0xCAFEBABE)
    b = bytes(H.encode(socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2"), 0xC123, 77, opcode,
                       0x345, 0xFFFFFE, hdrs, payload, ackreq=True, se=True))
    p = H.decode(b)
    assert (p.opcode, p.dqpn, p.psn, p.ackreq, p.se, bytes(p.payload)) == (opcode, 0x345, 0xFFFFFE, True, True,
                                                                         payload)
    assert p.pad == (-len(payload)) & 3
    assert bytes(H.reencode(p)) == b
    # scapy's independent ICRC computation agrees
    s = IP(b)
    assert s[UDP].dport == 4791 and s.haslayer(BTH)
    rebuilt = s.copy()
    rebuilt[BTH].icrc = None
    assert raw(rebuilt) == b
    assert IP(b)[IP].chksum == IP(raw(IP(b[:20] + b[20:]))).chksum


def test_psn_arithmetic():
    assert H.psn_add(0xFFFFFF, 2) == 1
    assert H.psn_diff(1, 0xFFFFFF) == 2
    assert H.psn_diff(0xFFFFFF, 1) == -2


@pytest.mark.parametrize("mutate,reason", [
    (lambda b: b[:20], "truncated"),
    (lambda b: b[:30], "truncated"),
    (lambda b: b[:-1], "truncated"),
    (lambda b: b"\x60" + b[1:], "malformed"),
    (lambda b: b[:22] + b"\x12\x34" + b[24:], "not_roce"),
    (lambda b: b[:28] + b"\x55" + b[29:], "bad_opcode"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "bad_icrc"),
    (lambda b: b[:60] + bytes([b[60] ^ 0x80]) + b[61:], "bad_icrc"),
])
def test_decode_rejects(mutate, reason):
    b = _ip_packets("rc_write.pcap")[0]
    with pytest.raises(H.DecodeError) as e:
        H.decode(mutate(b))
    assert e.value.reason == reason
