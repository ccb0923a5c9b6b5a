"""Malformed traffic is dropped and counted without hurting the endpoint; tshark decodes uroce output."""
import os
import random
import shutil
import subprocess
import time

import pytest
from scapy.all import IP, UDP, Raw, fuzz, raw
from scapy.contrib.roce import BTH

from hosts.rdma import AddressHandle, QPType, RecvWR, SendWR, WROpcode
from hosts.rdma import headers as H
from hosts.rdma.transport import PcapWriter


def valid_write(p, psn=0, dqpn=None):
    hdrs = H.ext_headers(H.WRITE_ONLY, va=p.mb.addr, rkey=p.mb.rkey, dma_len=16)
    return bytes(H.encode(bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2]), 0xC000, 1, H.WRITE_ONLY,
                          p.qb.qpn if dqpn is None else dqpn, psn, hdrs, b"x" * 16))


def inject(dev, pkts):
    for b in pkts:
        dev.transport._push(bytes(b))


def settle(dev, n, timeout=5):
    t = time.monotonic() + timeout
    while dev.counters["rx_packets"] < n and time.monotonic() < t:
        time.sleep(0.01)


def test_fuzz_is_dropped_counted_and_harmless(make_pair):
    p = make_pair()
    rng = random.Random(5)
    good = valid_write(p, psn=12345)
    cases = {
        "truncated": [good[:n] for n in (0, 1, 19, 27, 30, 43, len(good) - 1)],
        "bad_icrc": [good[:-4] + os.urandom(4)] + [
            bytes(b ^ (1 << rng.randrange(8)) if i == k else b for i, b in enumerate(good))
            for k in (45, 50, 60, 70)],
        "unknown_qp": [valid_write(p, dqpn=0x777)],
        "bad_opcode": [],
        "malformed": [b"\x46" + good[1:]],
    }
    # scapy: random BTH fields with a correct ICRC (so they pass the CRC and exercise the parser)
    fz = []
    for _ in range(300):
        pkt = IP(src="10.9.0.1", dst="10.9.0.2", flags="DF") / UDP(sport=0xC000, dport=4791, chksum=0) / \
            fuzz(BTH(pkey=0xFFFF, icrc=None)) / Raw(os.urandom(rng.randrange(0, 64)))
        fz.append(raw(pkt))
    for name, pkts in cases.items():
        inject(p.b, pkts)
    inject(p.b, fz)
    total = sum(len(v) for v in cases.values()) + len(fz)
    settle(p.b, total)
    c = p.b.counters
    assert c["rx_packets"] == total
    for name, pkts in cases.items():
        assert c["drop_" + name] >= len(pkts), (name, dict(c))
    dropped = sum(v for k, v in c.items() if k.startswith("drop_"))
    assert dropped == c["rx_dropped"] >= total - 20, dict(c)    # a few fuzzed ones may be valid-looking requests
    assert p.b.last_error is None and p.a.last_error is None
    # the endpoint still works
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [p.ma.sge(0, 300_000)], remote_addr=p.mb.addr, rkey=p.mb.rkey))
    wc = p.ca.wait(1, 10)
    assert wc and wc[0].ok and p.dst[:300_000] == p.src[:300_000]


def test_fuzz_ud_and_valid_icrc_garbage(make_pair):
    p = make_pair()
    rng = random.Random(9)
    pkts = []
    for _ in range(300):
        op = rng.choice(sorted(H.OPCODE_EXT))
        body = os.urandom(rng.randrange(0, 40))
        pkts.append(bytes(H.encode(bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2]), 0xC000, 1, op,
                                   rng.choice([p.qb.qpn, 0xFFFFFF, 1, rng.getrandbits(24)]),
                                   rng.getrandbits(24), body[:0], body if op in H.OPCODE_HAS_PAYLOAD else b"")))
    inject(p.b, pkts)
    settle(p.b, len(pkts))
    assert p.b.counters["rx_packets"] == len(pkts)
    assert p.b.last_error is None
    p.qb.post_recv(RecvWR([p.mb.sge(0, 4096)]))


def test_tshark_decodes_uroce_capture(make_pair, tmp_path):
    tshark = shutil.which("tshark")
    if not tshark:
        pytest.skip("tshark is not installed")
    pcap = tmp_path / "uroce.pcap"
    w = PcapWriter(str(pcap))
    p = make_pair()
    p.a.tap = w.write
    p.b.tap = w.write
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [p.ma.sge(0, 5000)], remote_addr=p.mb.addr, rkey=p.mb.rkey))
    p.qa.post_send(SendWR(WROpcode.RDMA_READ, [p.ma.sge(0, 5000)], remote_addr=p.mb.addr, rkey=p.mb.rkey))
    p.qb.post_recv(RecvWR([p.mb.sge(0, 4096)]))
    p.qa.post_send(SendWR(WROpcode.SEND_WITH_IMM, [p.ma.sge(0, 3000)], imm=5))
    p.qb.post_recv(RecvWR([]))
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE_WITH_IMM, [p.ma.sge(0, 100)], remote_addr=p.mb.addr,
                          rkey=p.mb.rkey, imm=6))
    assert len(p.ca.wait(4, 10)) == 4
    ud = p.a.create_qp(p.pa, QPType.UD, p.ca, qkey=1)
    ud.post_send(SendWR(WROpcode.SEND_WITH_IMM, [p.ma.sge(0, 64)], imm=1, ah=AddressHandle("10.9.0.2", 0x55, 1)))
    assert p.ca.wait(1, 5)
    time.sleep(0.05)
    w.close()
    out = subprocess.run([tshark, "-r", str(pcap), "-T", "fields", "-e", "frame.protocols",
                          "-e", "infiniband.bth.opcode", "-e", "_ws.malformed", "-e", "_ws.expert"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [(r + "\t\t\t").split("\t") for r in out.stdout.splitlines() if r.strip()]
    assert len(rows) >= 14
    assert all("infiniband" in r[0] for r in rows), rows
    assert not any(r[2] for r in rows), "malformed packets"
    ops = {int(r[1]) for r in rows}
    assert {H.WRITE_FIRST, H.WRITE_LAST, H.READ_REQUEST, H.READ_RESP_FIRST, H.READ_RESP_LAST, H.ACKNOWLEDGE,
            H.SEND_FIRST, H.SEND_LAST_IMM, H.WRITE_ONLY_IMM, H.UD_SEND_ONLY_IMM} <= ops
    # no malformed packets and no expert warnings in the whole capture
    chk = subprocess.run([tshark, "-r", str(pcap), "-Y", "_ws.malformed || _ws.expert.severity >= warning"],
                         capture_output=True, text=True, timeout=60)
    assert chk.returncode == 0 and chk.stdout.strip() == "", chk.stdout + chk.stderr
    # every packet's ICRC, recomputed from what tshark saw
    icrc = subprocess.run([tshark, "-r", str(pcap), "-T", "fields", "-e", "infiniband.invariant.crc"],
                          capture_output=True, text=True, timeout=60)
    from scapy.all import rdpcap
    mine = [H.decode(bytes(x)).icrc for x in rdpcap(str(pcap))]
    assert [int(v, 16) for v in icrc.stdout.split()] == [int.from_bytes(m.to_bytes(4, "little"), "big")
                                                         for m in mine]
