"""uroce over real kernel sockets between two network namespaces (root): iptables loss, multicast
with IGMP, a tcpdump capture decoded by tshark."""
import os
import shutil
import subprocess
import time

import pytest

from hosts.rdma import (
    GRH_LEN,
    Access,
    AddressHandle,
    QPType,
    RecvWR,
    SendWR,
    WROpcode,
    open_device,
)
from hosts.rdma import headers as H

pytestmark = pytest.mark.root
MiB = 1 << 20


@pytest.fixture
def veth(request):
    from hosts.rdma.transport import have_raw_sockets
    if os.geteuid() != 0 or not have_raw_sockets():
        pytest.skip("needs root (CAP_SYS_ADMIN for network namespaces, CAP_NET_RAW for raw sockets)")
    if not shutil.which("ip"):
        pytest.skip("iproute2 is not installed")
    from hosts.rdma.netns import VethPair
    tag = f"r{os.getpid() % 10000}{request.node.name[-3:].replace('[', '').replace(']', '')}"[:9]
    try:
        v = VethPair(tag, net=78)
    except RuntimeError as e:
        if "not permitted" in str(e):
            pytest.skip(f"cannot create network namespaces here: {e}")
        raise
    request.addfinalizer(v.close)
    return v


class Ends:
    def __init__(self, v, **qp):
        from hosts.rdma.netns import netns
        self.devs = []
        for ns, ip in zip(v.ns, v.ips):
            with netns(ns):
                self.devs.append(open_device(ip, backend="uroce"))
        self.a, self.b = self.devs
        self.pa, self.pb = self.a.alloc_pd(), self.b.alloc_pd()
        self.ca, self.cb = self.a.create_cq(), self.b.create_cq()
        self.src = bytearray(os.urandom(MiB))
        self.dst = bytearray(MiB)
        self.ma = self.pa.reg_mr(self.src, Access.ALL)
        self.mb = self.pb.reg_mr(self.dst, Access.ALL)
        self.qa = self.a.create_qp(self.pa, QPType.RC, self.ca, **qp)
        self.qb = self.b.create_qp(self.pb, QPType.RC, self.cb, **qp)
        self.qa.connect(self.qb.info())
        self.qb.connect(self.qa.info())

    def close(self):
        for d in self.devs:
            d.close()
        assert all(d.last_error is None for d in self.devs)


@pytest.fixture
def ends(veth, request):
    made = []

    def make(**kw):
        e = Ends(veth, **kw)
        made.append(e)
        return e
    yield make
    for e in made:
        e.close()


def _wait_listening(proc, timeout=10):
    """Wait until tcpdump reports that it captures (it prints 'listening on' to stderr)."""
    import select
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([proc.stderr], [], [], 0.2)
        if r and "listening on" in proc.stderr.readline():
            return
    raise AssertionError("tcpdump did not start")


def _transfer_all(e):
    e.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [e.ma.sge()], remote_addr=e.mb.addr, rkey=e.mb.rkey, wr_id=1))
    wc = e.ca.wait(1, 60)
    assert wc and wc[0].ok and e.dst == e.src
    back = bytearray(MiB)
    mback = e.pa.reg_mr(back, Access.LOCAL_WRITE)
    e.qa.post_send(SendWR(WROpcode.RDMA_READ, [mback.sge()], remote_addr=e.mb.addr, rkey=e.mb.rkey, wr_id=2))
    wc = e.ca.wait(1, 60)
    assert wc and wc[0].ok and back == e.src
    for i in range(8):
        e.qb.post_recv(RecvWR([e.mb.sge(i * 4096, 4096)], wr_id=i))
    for i in range(8):
        e.qa.post_send(SendWR(WROpcode.SEND_WITH_IMM, [e.ma.sge(i * 3000, 3000)], imm=i))
    assert all(w.ok for w in e.ca.wait(8, 60))
    wcs = e.cb.wait(8, 60)
    assert [(w.imm, w.byte_len) for w in wcs] == [(i, 3000) for i in range(8)]
    for i in range(8):
        assert e.dst[i * 4096:i * 4096 + 3000] == e.src[i * 3000:i * 3000 + 3000]


def test_kernel_sockets_transfer(ends):
    e = ends(rate_limit_bps=400e6)
    _transfer_all(e)
    assert e.qa.counters["retransmits"] == 0
    assert e.b.counters["rx_dropped"] == 0


@pytest.mark.parametrize("loss,mode", [(0.01, "gbn"), (0.05, "gbn"), (0.05, "selective")])
def test_iptables_random_loss(veth, ends, loss, mode):
    from hosts.rdma.netns import sh
    for ns, dev in zip(veth.ns, veth.ifs):
        sh("iptables", "-A", "OUTPUT", "-o", dev, "-p", "udp", "--dport", "4791", "-m", "statistic",
           "--mode", "random", "--probability", loss, "-j", "DROP", ns=ns)
    e = ends(rate_limit_bps=200e6, timeout=0.02, retry_cnt=50, retransmit=mode)
    _transfer_all(e)
    out = sh("iptables", "-L", "OUTPUT", "-v", "-n", "-x", ns=veth.ns[0])
    dropped = int([ln for ln in out.splitlines() if "statistic" in ln][0].split()[0])
    assert dropped > 0
    print(f"loss {loss} {mode}: iptables dropped {dropped} (side a), counters a {dict(e.qa.counters)}")
    assert e.qa.counters["retransmits"] >= dropped * 0.5, (dropped, dict(e.qa.counters))


def test_multicast_join_sends_igmp_and_delivers(veth):
    from hosts.rdma.netns import netns, sh
    if not shutil.which("tcpdump"):
        pytest.skip("tcpdump is not installed")
    cap = subprocess.Popen(["ip", "netns", "exec", veth.ns[0], "tcpdump", "--immediate-mode", "-i", veth.ifs[0], "-n",
                            "-v", "-l", "-c", "1", "igmp"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_listening(cap)
    devs = []
    try:
        for ns, ip in zip(veth.ns, veth.ips):
            with netns(ns):
                devs.append(open_device(ip, backend="uroce"))
        a, b = devs
        grp = "239.7.7.7"
        pa, pb, ca, cb = a.alloc_pd(), b.alloc_pd(), a.create_cq(), b.create_cq()
        ba, bb = bytearray(os.urandom(4096)), bytearray(4096)
        ma, mb = pa.reg_mr(ba), pb.reg_mr(bb)
        qa = a.create_qp(pa, QPType.UD, ca, qkey=7)
        qb = b.create_qp(pb, QPType.UD, cb, qkey=7)
        qb.attach_mcast(grp)
        assert grp in {".".join(str(int(x[i:i + 2], 16)) for i in (6, 4, 2, 0))
                       for x in [ln.split()[0] for ln in sh("cat", "/proc/net/igmp", ns=veth.ns[1]).splitlines()
                                 if ln.startswith("\t\t")]}
        out = cap.communicate(timeout=10)[0]
        assert "igmp" in out.lower() and grp in out, out
        qb.post_recv(RecvWR([mb.sge(0, 2048)], wr_id=1))
        qa.post_send(SendWR(WROpcode.SEND_WITH_IMM, [ma.sge(0, 1000)], imm=3,
                            ah=AddressHandle(grp, H.MCAST_QPN, 7)))
        wc = cb.wait(1, 5)
        assert wc and wc[0].imm == 3 and wc[0].src_ip == a.ip
        assert bb[GRH_LEN:GRH_LEN + 1000] == ba[:1000]
        assert bb[20 + 8] == 255, "multicast TTL 255"
        qb.detach_mcast(grp)
    finally:
        if cap.poll() is None:
            cap.kill()
        for d in devs:
            d.close()


def test_tcpdump_capture_decodes_as_roce(veth, ends, tmp_path):
    if not (shutil.which("tcpdump") and shutil.which("tshark")):
        pytest.skip("tcpdump and tshark are needed")
    pcap = tmp_path / "wire.pcap"
    cap = subprocess.Popen(["ip", "netns", "exec", veth.ns[1], "tcpdump", "-Z", "root", "-i", veth.ifs[1], "-w", str(pcap),
                            "-U", "--immediate-mode", "-B", "16384", "udp port 4791"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        _wait_listening(cap)
        e = ends(rate_limit_bps=100e6, sport_mode="packet")
        e.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [e.ma.sge(0, 64 * 1024)], remote_addr=e.mb.addr, rkey=e.mb.rkey))
        e.qa.post_send(SendWR(WROpcode.RDMA_READ, [e.ma.sge(0, 16 * 1024)], remote_addr=e.mb.addr, rkey=e.mb.rkey))
        assert len(e.ca.wait(2, 10)) == 2
        time.sleep(0.3)
    finally:
        cap.terminate()
        cap.wait(5)
    r = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.protocols", "-e", "ip.ttl",
                        "-e", "ip.flags.df", "-e", "udp.checksum", "-e", "udp.srcport"],
                       capture_output=True, text=True, timeout=60)
    rows = [ln.split("\t") for ln in r.stdout.splitlines() if ln.strip()]
    assert len(rows) >= 64 + 16 + 2
    assert all("infiniband" in row[0] for row in rows)
    assert all(row[1] == "64" and row[2] in ("1", "True") and row[3] == "0x0000" for row in rows), rows[:3]
    assert len({row[4] for row in rows}) > 20, "per-packet source ports"
    bad = subprocess.run(["tshark", "-r", str(pcap), "-Y", "_ws.malformed"], capture_output=True, text=True)
    assert bad.stdout.strip() == ""
    from scapy.all import IP, raw, rdpcap
    for p in rdpcap(str(pcap)):
        H.decode(raw(p[IP]))            # every ICRC on the wire is valid


def test_bench_smoke():
    """The benchmark runs end to end (its figures are printed by hosts.rdma.bench, not asserted)."""
    from hosts.rdma.transport import have_raw_sockets
    if os.geteuid() != 0 or not have_raw_sockets():
        pytest.skip("needs root for network namespaces, tbf and raw sockets")
    from hosts.rdma import bench
    res = bench.run(rate_mbit=50, size=256 * 1024, iters=1, tag=f"s{os.getpid() % 100000}")
    assert res["WRITE"]["ok"] and res["READ"]["ok"]
    assert 0 < res["WRITE"]["frac_bound"] < 1.2


def _need_root_for_bench():
    from hosts.rdma.transport import have_raw_sockets
    if os.geteuid() != 0 or not have_raw_sockets():
        pytest.skip("needs root for network namespaces, tbf and raw sockets")


@pytest.mark.parametrize("ib_mtu", H.IB_MTUS)
def test_bench_runs_at_every_roce_mtu(ib_mtu):
    """The benchmark's veth links carry every RoCE MTU's largest packets: WRITE and READ complete and match."""
    _need_root_for_bench()
    from hosts.rdma import bench
    res = bench.run(rate_mbit=50, size=96 * 1024 + 5, iters=1, mtu=ib_mtu, tag=f"u{ib_mtu}{os.getpid() % 1000}")
    assert res["WRITE"]["ok"] and res["READ"]["ok"]


def test_a_roce_mtu_the_link_cannot_carry_is_refused_at_connect():
    """RoCE MTU 4096 on 1500-byte veths: the kernel would refuse every full packet; connect() says so in one line
    (the kernel's route MTU) and the namespaces are gone afterwards."""
    _need_root_for_bench()
    from hosts.rdma import RdmaError, bench
    tag = f"x{os.getpid() % 100000}"
    with pytest.raises(RdmaError) as e:
        bench.run(rate_mbit=50, size=4096, iters=1, mtu=4096, link_mtu=1500, tag=tag)
    assert ("RoCE MTU 4096 needs a link MTU of at least 4160 bytes, but the path from 10.79.0.1 to 10.79.0.2 has "
            "1500 (use RoCE MTU 1024 or less, or raise the link MTU)") in str(e.value)
    assert f"tb-rdma-{tag}-" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_ce_marks_answered_with_cnps_over_kernel_sockets(veth, ends):
    """iptables on side a sets CE on its data packets, as a congested switch queue would: side b's uroce answers
    with CNPs over the kernel's sockets, side a's DCQCN cuts its rate on them, and the data arrives intact."""
    from hosts.rdma.netns import sh
    sh("iptables", "-t", "mangle", "-A", "OUTPUT", "-p", "udp", "--dport", "4791", "-m", "length", "--length",
       "200:65535", "-j", "ECN", "--ecn-ip-ect", "3", ns=veth.ns[0])
    e = ends(rate_limit_bps=50e6, cc="dcqcn", time_scale=100)
    # every packet marked, for ever: DCQCN takes the rate towards its floor (256 KiB take ~10 s, a fake clock says)
    size = 256 * 1024
    e.qa.post_send(SendWR(WROpcode.RDMA_WRITE, [e.ma.sge(0, size)], wr_id=1, remote_addr=e.mb.addr, rkey=e.mb.rkey))
    wc = e.ca.wait(1, 60)
    assert wc and wc[0].ok, wc
    assert e.dst[:size] == e.src[:size]
    marked, sent, got = e.qb.counters["ecn_ce_received"], e.qb.counters["cnp_sent"], e.qa.counters["cnp_received"]
    print(f"CE-marked packets received {marked}, CNPs sent {sent}, received {got}, cuts {e.qa.cc.decreases}")
    assert marked >= size // 1024 and 0 < sent <= marked and got == sent
    assert e.qa.cc.decreases > 0 and e.qa.cc.rate_bps < 50e6
