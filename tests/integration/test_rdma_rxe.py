"""Backend selection and the pyverbs (kernel rxe) backend. Tests that need a kernel RDMA device skip
with the reason when there is none."""
import json
import os
import socket
import subprocess
import sys

import pytest

import hosts.rdma as rdma
from hosts.rdma import RdmaError, open_device
from hosts.rdma.rxe import find_gid, hw_counters, ipv4_gid, timeout_code
from hosts.rdma.transport import MemoryFabric
from tests.paths import ROOT


def _fake_sysfs(root, dev, gids):
    for i, (gid, typ) in enumerate(gids):
        d = root / dev / "ports" / "1"
        (d / "gids").mkdir(parents=True, exist_ok=True)
        (d / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
        (d / "gids" / str(i)).write_text(gid + "\n")
        (d / "gid_attrs" / "types" / str(i)).write_text(typ + "\n")


def test_find_gid_in_sysfs(tmp_path):
    _fake_sysfs(tmp_path, "rxe0", [("fe80:0000:0000:0000:5054:00ff:fe00:0001", "RoCE v2"),
                                   (ipv4_gid("10.77.0.1"), "RoCE v2")])
    _fake_sysfs(tmp_path, "rxe1", [(ipv4_gid("10.77.0.2"), "IB/RoCE v1"), (ipv4_gid("10.77.0.2"), "RoCE v2")])
    assert ipv4_gid("10.77.0.1") == "0000:0000:0000:0000:0000:ffff:0a4d:0001"
    assert find_gid("10.77.0.1", str(tmp_path)) == ("rxe0", 1, 1)
    assert find_gid("10.77.0.2", str(tmp_path)) == ("rxe1", 1, 1)
    assert find_gid("10.77.0.3", str(tmp_path)) is None
    assert find_gid("10.77.0.1", str(tmp_path / "absent")) is None


def test_hw_counters_from_sysfs(tmp_path):
    d = tmp_path / "rxe0" / "ports" / "1" / "hw_counters"
    d.mkdir(parents=True)
    (d / "sent_pkts").write_text("1234\n")
    (d / "rcvd_seq_err").write_text("7\n")
    (d / "garbage").write_text("n/a\n")
    assert hw_counters("rxe0", 1, str(tmp_path)) == {"sent_pkts": 1234, "rcvd_seq_err": 7}
    assert hw_counters("rxe9", 1, str(tmp_path)) == {}


def test_timeout_code():
    assert timeout_code(4.096e-6 * 2 ** 14) == 14
    assert timeout_code(0.05) == 14          # 67 ms >= 50 ms
    assert timeout_code(1e-9) == 1 and timeout_code(1e9) == 31


def test_auto_selects_uroce_without_device(monkeypatch):
    monkeypatch.setattr(rdma, "rdma_devices", lambda: [])
    fab = MemoryFabric()
    d = open_device("10.9.5.1", transport=fab.attach("10.9.5.1"))
    try:
        assert d.backend == "uroce"
    finally:
        d.close()


def test_rxe_backend_explains_what_is_missing():
    try:
        import pyverbs  # noqa: F401
        have = True
    except ImportError:
        have = False
    with pytest.raises(RdmaError) as e:
        open_device("192.0.2.77", backend="rxe")
    assert ("pyverbs" in str(e.value)) if not have else ("no RDMA device" in str(e.value))


def _rxe_ip():
    devs = rdma.rdma_devices()
    if not devs:
        pytest.skip("no kernel RDMA device (/sys/class/infiniband is empty): the rxe backend cannot be exercised here "
                    "(tests/integration/test_rxe_interop.py runs this loopback in the QEMU guest's kernel rxe)")
    try:
        import pyverbs  # noqa: F401
    except ImportError:
        pytest.skip("pyverbs is not importable (Debian package python3-pyverbs)")
    for dev in devs:
        gdir = f"/sys/class/infiniband/{dev}/ports/1/gids"
        for idx in sorted(os.listdir(gdir), key=int):
            g = open(f"{gdir}/{idx}").read().strip()
            if g.startswith("0000:0000:0000:0000:0000:ffff:"):
                b = bytes.fromhex(g.replace(":", ""))[12:]
                return socket.inet_ntoa(b)
    pytest.skip("no RDMA device has an IPv4 RoCE v2 GID")


# The kernel-rxe loopback: two RC queue pairs of one device, WRITE, READ and SEND with immediate between them.
# A script, so that it runs unchanged here (when this machine has an rxe device) and in the QEMU guest's kernel
# rxe (tests/integration/test_rxe_interop.py), where it always can. Prints what arrived, as JSON.
LOOPBACK = """
import json, os, sys
from hosts.rdma import Access, QPType, RecvWR, SendWR, WCOpcode, WROpcode, open_device
dev = open_device(sys.argv[1], backend="rxe")
try:
    pd, cq = dev.alloc_pd(), dev.create_cq()
    src, dst, back = bytearray(os.urandom(1 << 20)), bytearray(1 << 20), bytearray(1 << 20)
    ms, md, mb = pd.reg_mr(src, Access.ALL), pd.reg_mr(dst, Access.ALL), pd.reg_mr(back, Access.LOCAL_WRITE)
    a, b = dev.create_qp(pd, QPType.RC, cq), dev.create_qp(pd, QPType.RC, cq)
    a.connect(b.info())
    b.connect(a.info())
    a.post_send(SendWR(WROpcode.RDMA_WRITE, [ms.sge()], wr_id=1, remote_addr=md.addr, rkey=md.rkey))
    write = cq.wait(1, 30)
    write_ok = bool(write) and write[0].ok and dst == src
    a.post_send(SendWR(WROpcode.RDMA_READ, [mb.sge()], wr_id=2, remote_addr=md.addr, rkey=md.rkey))
    read = cq.wait(1, 30)
    read_ok = bool(read) and read[0].ok and back == src
    b.post_recv(RecvWR([md.sge(0, 4096)], wr_id=3))
    a.post_send(SendWR(WROpcode.SEND_WITH_IMM, [ms.sge(0, 3000)], wr_id=4, imm=0x1234))
    recv = [w for w in cq.wait(2, 30) if w.opcode == WCOpcode.RECV]
    print(json.dumps({"backend": dev.backend, "write": write_ok, "read": read_ok,
                      "recv": [{"ok": w.ok, "imm": w.imm, "byte_len": w.byte_len} for w in recv],
                      "sent": bytes(src[:3000]) == bytes(dst[:3000])}))
finally:
    dev.close()
"""


def check_loopback(output: str) -> None:
    res = json.loads(output.strip().splitlines()[-1])
    assert res["backend"] == "rxe" and res["write"] and res["read"], res
    assert res["recv"] == [{"ok": True, "imm": 0x1234, "byte_len": 3000}] and res["sent"], res


@pytest.mark.root
def test_rxe_loopback_write_read_send():
    ip = _rxe_ip()
    r = subprocess.run([sys.executable, "-c", LOOPBACK, ip], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    check_loopback(r.stdout)
