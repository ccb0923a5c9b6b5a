"""The adaptive retransmission timeout over real kernel sockets (root): two namespaces joined by a veth link shaped
at 5 Mbit/s with the fabric NICs' 1 MiB queue, and the same with a 20 ms delay line on it. A flow that loses the tail
of its window (nothing follows to reveal the gap) recovers after the timer it measured, in well under the fixed
timeout sized for full queues, and the data arrives bit-exact."""
import os
import time

import pytest

from hosts.rdma import Access, QPType, SendWR, WROpcode, open_device
from hosts.rdma import headers as H

pytestmark = pytest.mark.root
MiB = 1 << 20
MBPS = 5
FIXED_S = 6.76          # the collectives' fixed timeout on a 5 Mbit/s fabric (0.05 + 2 x its worst queueing delay)
TAIL = 8


@pytest.fixture(params=[0, 20], ids=["no-delay", "20ms"])
def link(request):
    from hosts.rdma.transport import have_raw_sockets
    if os.geteuid() != 0 or not have_raw_sockets():
        pytest.skip("needs root (CAP_SYS_ADMIN for network namespaces, CAP_NET_RAW for raw sockets)")
    from hosts.rdma.netns import VethPair, sh
    from testbed.fabric.delay import Delays, DelayUnavailable, End, LinkDelay
    from testbed.fabric.links import fabric_tag
    delay_ms = request.param
    veth = VethPair(f"{fabric_tag()}rt{os.getpid() % 1000}", net=81, mtu=9000)
    request.addfinalizer(veth.close)
    if delay_ms:
        try:
            delays = Delays()
        except DelayUnavailable as e:
            pytest.skip(f"no link delay here: {e}")
        request.addfinalizer(delays.close)
        ends = [End(dev, f"/run/netns/{ns}", mbps=MBPS, mtu=9000, queue_bytes=MiB) for ns, dev in zip(veth.ns, veth.ifs)]
        delays.apply(LinkDelay("rt", ends[0], ends[1], delay_ms * 1000))
    else:
        for ns, dev in zip(veth.ns, veth.ifs):
            sh("tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{MBPS}mbit", "burst", "32kb",
               "limit", MiB, ns=ns)
    return veth


def test_a_lost_tail_is_recovered_well_under_the_fixed_timeout(link):
    from hosts.rdma.netns import netns
    devs = []
    for ns, ip in zip(link.ns, link.ips):
        with netns(ns):
            devs.append(open_device(ip, backend="uroce", mtu=4096))
    a, b = devs
    try:
        pa, pb, ca, cb = a.alloc_pd(), b.alloc_pd(), a.create_cq(), b.create_cq()
        src, dst = bytearray(os.urandom(MiB)), bytearray(MiB)
        ma, mb = pa.reg_mr(src, Access.ALL), pb.reg_mr(dst, Access.ALL)
        opts = dict(timeout=FIXED_S, rto="adaptive", retry_cnt=7, rate_limit_bps=0.95 * MBPS * 1e6, max_outstanding=256)
        qa, qb = a.create_qp(pa, QPType.RC, ca, **opts), b.create_qp(pb, QPType.RC, cb, **opts)
        qa.connect(qb.info())
        qb.connect(qa.info())

        def write(wr_id):
            dst[:] = bytes(MiB)
            t = time.monotonic()
            qa.post_send(SendWR(WROpcode.RDMA_WRITE, [ma.sge()], remote_addr=mb.addr, rkey=mb.rkey, wr_id=wr_id))
            wc, = ca.wait(1, 60)
            assert wc.ok and dst == src, wc
            return time.monotonic() - t

        clean = write(0)                 # 1 MiB at 5 Mbit/s: ~1.8 s, and the round trips the timer learns from
        assert qa.srtt is not None and qa.timeout < FIXED_S / 4, (qa.srtt, qa.timeout)
        npkts = MiB // 4096
        lost = set()

        def drop(pkt):                   # the last TAIL packets of the second write, first transmission only
            k = (int.from_bytes(pkt[37:40], "big") - qa.psn) % (1 << 24) - npkts
            if pkt[28] in (H.WRITE_MIDDLE, H.WRITE_LAST) and npkts - TAIL <= k < npkts and k not in lost:
                lost.add(k)
                return True
            return False
        a.tx_drop_hook = drop
        lossy = write(1)
        print(f"clean {clean:.2f} s, with the tail lost {lossy:.2f} s; srtt {qa.srtt:.3f} s, timer {qa.timeout:.3f} s, "
              f"{qa.counters['timeouts']} timeouts")
        assert len(lost) == TAIL and qa.counters["timeouts"] >= 1
        assert lossy - clean < FIXED_S / 4, (lossy, clean)
    finally:
        for d in devs:
            d.close(linger=0)
