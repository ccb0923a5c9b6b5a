"""RoCE MTU against the link MTU (in-process fabric with a link MTU, no privileges): every IB MTU crosses a link of
exactly the MTU its largest packet needs; a QP whose packets cannot cross the path is refused at connect with one
line naming both MTUs, instead of retrying packets the kernel refuses until it goes to ERROR. The MTUs beyond
IB's 4096, which HB links carry, work the same way."""
import os

import pytest

from hosts.rdma import (AddressHandle, QPState, QPType, RdmaError, RecvWR, SendWR, WCStatus, WROpcode, bench,
                        open_device)
from hosts.rdma.headers import IB_MTUS, ROCE_MTUS
from hosts.rdma.mtu import ROCE_HEADERS, link_mtu_for, roce_mtu
from hosts.rdma.transport import MemoryFabric


@pytest.fixture
def two_devices():
    """make(link_mtu, ib_mtu) -> two uroce devices on an in-process fabric whose links have MTU link_mtu."""
    made = []

    def make(link_mtu, ib_mtu):
        fab = MemoryFabric(mtu=link_mtu)
        for ip in ("10.9.3.1", "10.9.3.2"):
            made.append(open_device(ip, backend="uroce", transport=fab.attach(ip), mtu=ib_mtu))
        return made[-2:]
    yield make
    for d in made:
        d.close(0)


@pytest.mark.parametrize("ib_mtu", ROCE_MTUS)
def test_every_roce_mtu_crosses_a_link_of_exactly_the_mtu_it_needs(make_pair, ib_mtu):
    sizes = []
    p = make_pair(fabric=MemoryFabric(mtu=link_mtu_for(ib_mtu), tap=lambda pkt: sizes.append(len(pkt))),
                  size=max(64 * 1024, 12 * ib_mtu), mtu=ib_mtu)
    p.qb.post_recv(RecvWR([p.mb.sge(0, ib_mtu)], wr_id=7))
    # a WRITE-only with immediate of a full MTU: the largest packet RoCE sends
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE_WITH_IMM, [p.ma.sge(0, ib_mtu)], wr_id=1,
                          remote_addr=p.mb.addr, rkey=p.mb.rkey, imm=5))
    p.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [p.ma.sge(0, 5 * ib_mtu + 3)], wr_id=2,
                          remote_addr=p.mb.addr, rkey=p.mb.rkey))
    p.qa.post_send(SendWR(WROpcode.RDMA_READ, [p.ma.sge(8 * ib_mtu, 3 * ib_mtu + 1)], wr_id=3,
                          remote_addr=p.mb.addr + ib_mtu, rkey=p.mb.rkey))
    wcs = p.ca.wait(3, 20)
    assert [(w.wr_id, w.status) for w in wcs] == [(i, WCStatus.SUCCESS) for i in (1, 2, 3)]
    assert p.dst[:5 * ib_mtu + 3] == p.src[:5 * ib_mtu + 3]
    assert p.src[8 * ib_mtu:11 * ib_mtu + 1] == p.dst[ib_mtu:4 * ib_mtu + 1]
    assert max(sizes) == ib_mtu + ROCE_HEADERS == link_mtu_for(ib_mtu)
    assert roce_mtu(link_mtu_for(ib_mtu), large=ib_mtu > max(IB_MTUS)) == ib_mtu
    assert sum(n > ib_mtu for n in sizes) == 1 + 5 + 3      # full packets: the messages cut at the MTU
    assert p.qa.counters["retransmits"] == 0 and p.a.counters["drop_tx_error"] == 0


@pytest.mark.parametrize("ib_mtu, link_mtu", [(2048, 1500), (4096, 1500), (4096, 4159), (1024, 1087)])
def test_a_roce_mtu_too_big_for_the_path_is_refused_at_connect(two_devices, ib_mtu, link_mtu):
    a, b = two_devices(link_mtu, ib_mtu)
    qa = a.create_qp(a.alloc_pd(), QPType.RC, a.create_cq())
    qb = b.create_qp(b.alloc_pd(), QPType.RC, b.create_cq(), mtu=min(IB_MTUS))
    with pytest.raises(RdmaError) as e:
        qa.connect(qb.info())
    msg = str(e.value)
    assert "\n" not in msg
    assert (f"RoCE MTU {ib_mtu} needs a link MTU of at least {ib_mtu + ROCE_HEADERS} bytes, but the path from "
            f"10.9.3.1 to 10.9.3.2 has {link_mtu} (use RoCE MTU {roce_mtu(link_mtu)} or less") in msg
    assert qa.state == QPState.INIT                # not ERROR: nothing was sent, the QP may connect again
    qb.connect(qa.info())                          # the peer's smaller MTU fits


def test_ud_message_longer_than_the_path_mtu_is_refused_at_post_send(two_devices):
    a, b = two_devices(1500, 4096)
    (pa, pb), (ca, cb) = (a.alloc_pd(), b.alloc_pd()), (a.create_cq(), b.create_cq())
    buf, rbuf = bytearray(os.urandom(4096)), bytearray(8192)
    ma, mb = pa.reg_mr(buf), pb.reg_mr(rbuf)
    qa, qb = a.create_qp(pa, QPType.UD, ca, qkey=7), b.create_qp(pb, QPType.UD, cb, qkey=7)
    qb.post_recv(RecvWR([mb.sge(0, 4096)], wr_id=1))
    qb.post_recv(RecvWR([mb.sge(4096, 4096)], wr_id=2))
    ah = AddressHandle(b.ip, qb.qpn, 7)
    with pytest.raises(RdmaError, match="UD message of 1445 bytes is a 1504-byte packet, longer than the MTU "
                                        "1500 of the path from 10.9.3.1 to 10.9.3.2"):
        qa.post_send(SendWR(WROpcode.SEND_WITH_IMM, [ma.sge(0, 1445)], ah=ah, imm=3, wr_id=9))
    qa.post_send(SendWR(WROpcode.SEND_WITH_IMM, [ma.sge(0, 1444)], ah=ah, imm=3, wr_id=10))   # 1500 bytes
    qa.post_send(SendWR(WROpcode.SEND, [ma.sge(0, 1448)], ah=ah, wr_id=11))                   # 1500 bytes
    assert [w.wr_id for w in ca.wait(2, 5)] == [10, 11]
    w1, w2 = cb.wait(2, 5)
    assert (w1.ok, w1.byte_len, w1.imm, w2.ok, w2.byte_len) == (True, 40 + 1444, 3, True, 40 + 1448)
    assert a.counters["drop_tx_error"] == 0


@pytest.mark.parametrize("ib_mtu, link_mtu", [(256, 1500), (1024, 1500), (2048, 2112), (4096, 4160)])
def test_the_bench_links_carry_its_roce_mtu(ib_mtu, link_mtu):
    assert bench.default_link_mtu(ib_mtu) == link_mtu


def test_the_bench_refuses_a_roce_mtu_its_link_cannot_carry(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--mtu", "4096", "--link-mtu", "1500"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "\n" not in err
    assert "RoCE MTU 4096 needs a link MTU of at least 4160 bytes, but the veth link has 1500" in err
