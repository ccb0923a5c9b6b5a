"""Interoperability of the user-space RoCEv2 endpoint (hosts.rdma, backend uroce) with Linux's own rxe.

A QEMU/TCG guest runs the stock Debian kernel with rdma_rxe and rdma-core's real tools; a uroce endpoint
in a network namespace on the same bridge is their peer, speaking the tools' TCP connection set-up
(hosts/rdma/interop.py, hosts/rdma/oob.py). Every combination of tool and role must complete with the expected
byte counts; the traffic is captured on the bridge, every packet must carry a valid ICRC and tshark must decode
all of it as InfiniBand/RoCE with no malformed packet.

Needs root, qemu-system-x86, tcpdump, tshark and the guest image (scripts/rxe-guest-build).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.test_rdma_rxe import LOOPBACK, check_loopback
from tests.paths import ROOT
from tools.rxe_guest_image import ensure_image, image_has_python
from tools.rxe_lan import RxeLan, parse_perftest

pytestmark = [pytest.mark.qemu]

REPO = Path(ROOT)
GOLDEN = REPO / "tests" / "data" / "rxe"
UROCE_IP_N, GUEST_IP_N = 10, 1
ITERS = {"rc_pingpong": 200, "write_bw": 200, "read_bw": 200}
SIZE = {"rc_pingpong": 4096, "write_bw": 65536, "read_bw": 65536}
PMTU = 1024


# ------------------------------------------------------------------------------------- pcap helpers
def read_pcap(path):
    """Frames of a classic pcap file (Ethernet link type), as bytes."""
    data = Path(path).read_bytes()
    magic = data[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",
              b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
    assert endian, f"{path}: not a classic pcap file"
    off, frames = 24, []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def roce_fields(frame):
    """(src ip, dst ip, opcode, psn, dest qp, icrc ok, udp sport) of an Ethernet/IPv4/UDP-4791 frame, else None."""
    if len(frame) < 14 + 20 + 8 + 12 + 4 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0xF) * 4
    total = struct.unpack("!H", ip[2:4])[0]
    ip = ip[:total]
    if ip[9] != 17 or struct.unpack("!H", ip[ihl + 2:ihl + 4])[0] != 4791:
        return None
    # ICRC: CRC-32 over 8 bytes of 0xFF, then the IPv4 header with TOS, TTL and checksum masked,
    # the UDP header with the checksum masked, and the BTH with its FECN/BECN/resv byte masked, then the rest
    iph = bytearray(ip[:ihl])
    iph[1], iph[8], iph[10:12] = 0xFF, 0xFF, b"\xff\xff"
    udp = bytearray(ip[ihl:ihl + 8])
    udp[6:8] = b"\xff\xff"
    bth = bytearray(ip[ihl + 8:ihl + 20])
    bth[4] = 0xFF
    crc = zlib.crc32(b"\xff" * 8 + bytes(iph) + bytes(udp) + bytes(bth) + ip[ihl + 20:-4])
    ok = crc == struct.unpack("<I", ip[-4:])[0]
    src, dst = ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20]))
    opcode = bth[0]
    dqp = int.from_bytes(bth[5:8], "big")
    psn = int.from_bytes(bth[9:12], "big") & 0xFFFFFF
    sport = struct.unpack("!H", ip[ihl:ihl + 2])[0]
    return src, dst, opcode, psn, dqp, ok, sport


def tshark_summary(path):
    """(frames, frames decoded with a BTH, malformed frames) according to tshark."""
    def count(flt):
        r = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", flt, "-T", "fields", "-e", "frame.number"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return len([x for x in r.stdout.split() if x.strip()])
    return count("frame"), count("infiniband.bth"), count("_ws.malformed")


def test_icrc_checker_on_golden_captures():
    """The ICRC check used below accepts every packet of the reference kernel-rxe captures."""
    files = sorted(GOLDEN.glob("*.pcap"))
    if not files:
        pytest.skip(f"reference captures not found in {GOLDEN}")
    for f in files:
        pk = [roce_fields(fr) for fr in read_pcap(f)]
        assert pk and all(p is not None and p[5] for p in pk), f.name


def test_oob_message_formats():
    """The exchange messages have the tools' exact sizes and field layout."""
    from hosts.rdma import oob
    gid = oob.ipv4_to_gid("10.77.0.2")
    m = oob.PingpongDest(qpn=0x11, psn=0x2AA614, gid=gid).pack()
    assert m == b"0000:000011:2aa614:00000000000000000000ffff0a4d0002\0" and len(m) == 52
    d = oob.PingpongDest.unpack(m)
    assert (d.qpn, d.psn, d.ip) == (0x11, 0x2AA614, "10.77.0.2")
    k = oob.PerftestDest(qpn=0x12, psn=0x8E7805, rkey=0x33B, vaddr=0x7FA480BAF000, gid=gid, out_reads=128)
    b = k.pack()
    assert len(b) == 108 and b.startswith(b"0000:0080:000012:8e7805:0000033b:00007fa480baf000:00:00:")
    assert b.endswith(b":ff:ff:0a:4d:00:02:00000000:\0")
    assert oob.PerftestDest.unpack(b) == k
    k.gid = None
    assert len(k.pack()) == 59 and oob.PerftestDest.unpack(k.pack()) == k


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def lab():
    why = ensure_image()
    if why:
        print(f"SKIP: {why}")
        pytest.skip(why)
    for tool in ("tcpdump", "tshark"):
        if not shutil.which(tool):
            print(f"SKIP: {tool} not installed")
            pytest.skip(f"{tool} not installed")
    # our own modules: missing pieces are a failure, not a skip
    import hosts.rdma.interop
    import hosts.rdma.uroce
    assert all(hasattr(hosts.rdma.interop, f) for f in ("rc_pingpong", "perftest_bw")), \
        "hosts.rdma.interop lacks its out-of-band helpers"
    assert hasattr(hosts.rdma.uroce, "Device"), "hosts.rdma.uroce lacks its Device"
    lan = RxeLan(tag=f"{os.getpid() % 100000}i", subnet="10.78.0.0/24")
    try:
        g = lan.guest(lan.addr(GUEST_IP_N), name="rxe-guest")
        g.launch()
        ns = lan.host(lan.addr(UROCE_IP_N))
        g.wait_ready()
        print(f"guest kernel {g.info.get('kernel')}: rxe0 ACTIVE after {g.boot_seconds:.1f} s")
        yield lan, g, ns
    finally:
        lan.close()


def _uroce_listening(ns, port=18515):
    r = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                       text=True)
    return bool(r.stdout.strip())


GUEST_CMD = {
    "rc_pingpong": "ibv_rc_pingpong -d rxe0 -g {gidx} -n {iters} -s {size}",
    "write_bw": "ib_write_bw -d rxe0 -F -x {gidx} -n {iters} -s {size}",
    "read_bw": "ib_read_bw -d rxe0 -F -x {gidx} -n {iters} -s {size}",
}
# opcodes the requester / responder of each test must send
REQ_OPS = {"rc_pingpong": {0x00, 0x01, 0x02}, "write_bw": {0x06, 0x07, 0x08}, "read_bw": {0x0C}}
RESP_OPS = {"rc_pingpong": {0x11}, "write_bw": {0x11}, "read_bw": {0x0D, 0x0E, 0x0F}}


@pytest.mark.root
@pytest.mark.parametrize("uroce_role", ["server", "client"])
@pytest.mark.parametrize("tool", ["rc_pingpong", "write_bw", "read_bw"])
def test_uroce_with_kernel_rxe(lab, tool, uroce_role, tmp_path):
    lan, g, ns = lab
    iters, size = ITERS[tool], SIZE[tool]
    uroce_ip = lan.addr(UROCE_IP_N)
    gcmd = GUEST_CMD[tool].format(gidx=g.gid_index, iters=iters, size=size)
    ucmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "hosts.rdma.interop", tool, "--ip", uroce_ip,
            "-n", str(iters), "-s", str(size), "--timeout", "40"]
    pcap = tmp_path / f"{tool}-{uroce_role}.pcap"
    cap = lan.capture(pcap)
    t0 = time.monotonic()
    uro = gproc = None
    try:
        if uroce_role == "server":
            uro = subprocess.Popen(ucmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 15
            while not _uroce_listening(ns) and uro.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            gres = g.run(f"{gcmd} {uroce_ip}", timeout=60)
        else:
            gproc = g.spawn(gcmd)
            assert g.wait_listen(18515, timeout=20, proc=gproc), "guest tool did not listen"
            uro = subprocess.Popen(ucmd + [g.ip], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
            gres = gproc.wait(60)
        uout, _ = uro.communicate(timeout=60)
    finally:
        if uro is not None and uro.poll() is None:
            uro.kill()
            uro.wait()
        if gproc is not None and not gproc.done:
            gproc.kill()
        lan.stop_capture(cap)
    elapsed = time.monotonic() - t0
    print(f"--- guest ({tool}, status {gres.status}):\n{gres.output}\n--- uroce ({uroce_role}):\n{uout}")
    assert gres.ok, f"guest {tool} failed:\n{gres.output}\nuroce:\n{uout}"
    assert uro.returncode == 0, f"uroce failed:\n{uout}\nguest:\n{gres.output}"
    res = json.loads(uout.strip().splitlines()[-1])

    # ---- outcome as both sides report it
    if tool == "rc_pingpong":
        assert f"{size * iters * 2} bytes in" in gres.output
        assert res["bytes"] == size * iters * 2
        assert res["data_mismatches"] == 0   # every echoed message came back intact
    else:
        rep = parse_perftest(gres.output)
        assert rep is not None and rep["bytes"] == size and rep["iterations"] == iters, gres.output
        if uroce_role == "server":
            # the guest client measured its own transfer and sent us its report
            assert res["peer_report"]["iters"] == iters and res["peer_report"]["size"] == size
            if tool == "write_bw":
                assert res["bytes_written_nonzero"] > size // 2   # the kernel's writes landed in our MR
        else:
            assert res["bw_avg_MiBps"] > 0
    qc = res["qp_counters"]
    moved = size * iters
    if tool == "rc_pingpong" or (tool == "write_bw") == (uroce_role == "client"):
        assert qc["tx_bytes"] >= moved          # we sent the payload
    if tool == "rc_pingpong" or (tool == "write_bw") == (uroce_role == "server"):
        assert qc["rx_bytes"] >= moved          # we received the payload

    # ---- the wire: every packet a valid RoCEv2 packet in both directions
    stats = " ".join(lan.capture_stats.split())
    print(f"tcpdump: {stats}")
    got = [int(w) for w in stats.split() if w.isdigit()]
    assert len(got) >= 3 and got[0] == got[1] and got[2] == 0, f"capture incomplete: {stats}"
    pkts = [p for p in (roce_fields(f) for f in read_pcap(pcap)) if p is not None]
    assert pkts, "nothing captured"
    bad = [p for p in pkts if not p[5]]
    assert not bad, f"{len(bad)} of {len(pkts)} packets with a bad ICRC"
    ops = {ip: Counter(p[2] for p in pkts if p[0] == ip) for ip in (uroce_ip, g.ip)}
    print(f"opcodes uroce: {dict(ops[uroce_ip])}  kernel: {dict(ops[g.ip])}")
    if tool == "rc_pingpong":
        for ip in ops:   # both sides send multi-packet SENDs and ACK the other's
            assert REQ_OPS[tool] <= set(ops[ip]) and RESP_OPS[tool] <= set(ops[ip]), ops
    else:
        req = uroce_ip if uroce_role == "client" else g.ip
        rsp = g.ip if req == uroce_ip else uroce_ip
        assert REQ_OPS[tool] <= set(ops[req]) and RESP_OPS[tool] <= set(ops[rsp]), ops
        data_ops = {0x06, 0x07, 0x08} if tool == "write_bw" else {0x0D, 0x0E, 0x0F}
        carrier = req if tool == "write_bw" else rsp
        psns = {p[3] for p in pkts if p[0] == carrier and p[2] in data_ops}
        assert len(psns) == iters * (size // PMTU), "data packets missing from the capture"
    # RC flows use one UDP source port, derived from both QPNs, in both directions (as kernel rxe does)
    sports = {ip: {p[6] for p in pkts if p[0] == ip} for ip in (uroce_ip, g.ip)}
    assert sports[uroce_ip] == sports[g.ip] and len(sports[g.ip]) == 1, sports
    frames, bth, malformed = tshark_summary(pcap)
    print(f"tshark: {frames} frames, {bth} decoded as InfiniBand BTH, {malformed} malformed; {elapsed:.1f} s")
    assert frames == len(pkts) and bth == frames and malformed == 0


# ------------------------------------------------------------------ the pyverbs backend inside the guest
GUEST_SRC = "/tmp/src"
CHECK_SIZES = (1, 1000, 1024, 4097, 65536, (1 << 20) + 13)
CHECK_OPS = {"send": {0x00, 0x01, 0x02, 0x04}, "write": {0x06, 0x07, 0x08, 0x0A}, "read": {0x0C}}


def _upload_hosts_package(g, ns, ip):
    """Copy this checkout's hosts/rdma package and CPU budget code into the guest once (the guest runs the code
    under test). It goes over the bridge: served once from the host namespace `ns` (address `ip`), fetched
    by the guest's python (the serial console is far slower)."""
    if getattr(g, "_tb_src", False):
        return
    import io
    import socket
    import tarfile
    import threading

    from hosts.rdma.netns import netns
    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w:gz") as tf:
        for f in [REPO / "hosts" / "__init__.py", REPO / "hosts" / "cgroups.py", REPO / "hosts" / "tfdata" / "__init__.py",
                  REPO / "hosts" / "tfdata" / "budget.py",
                  *sorted((REPO / "hosts" / "rdma").glob("*.py"))]:
            tf.add(f, arcname=str(f.relative_to(REPO)))
    data = blob.getvalue()
    with netns(ns):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind((ip, 0))
    ls.listen(1)
    ls.settimeout(60)

    def serve():
        try:
            conn, _ = ls.accept()
            with conn:
                conn.sendall(data)
        except OSError:
            pass
        finally:
            ls.close()
    t0 = time.monotonic()
    threading.Thread(target=serve, daemon=True).start()
    # one interpreter start (seconds under TCG): fetch, unpack, then import what the tests run there with the
    # guest's trimmed standard library
    fetch = (f"import io, socket, tarfile; s = socket.create_connection(('{ip}', {ls.getsockname()[1]}), 30); "
             "b = b''.join(iter(lambda: s.recv(65536), b'')); print(len(b), 'bytes'); "
             "tarfile.open(fileobj=io.BytesIO(b)).extractall('.'); "
             "import importlib; importlib.invalidate_caches(); "
             "import pyverbs.device, hosts.rdma.rxe, hosts.rdma.check, hosts.tfdata.budget")
    r = g.run(f"mkdir -p {GUEST_SRC} && cd {GUEST_SRC} && python3 -c \"{fetch}\"", timeout=60)
    ls.close()
    assert r.ok and f"{len(data)} bytes" in r.output, \
        f"copying hosts code into the guest, or importing pyverbs and it there, failed:\n{r.output}"
    print(f"hosts code ({len(data)} bytes) copied into the guest and imported in {time.monotonic() - t0:.1f} s")
    g._tb_src = True


@pytest.mark.root
@pytest.mark.parametrize("guest_role", ["client", "server"])
def test_pyverbs_backend_in_guest(lab, guest_role, tmp_path):
    """hosts/rdma/rxe.py (pyverbs on the guest's kernel rxe0) against the uroce endpoint: RC SEND, WRITE and
    READ of 1 B .. 1 MiB, every byte verified by the side that received it. The guest is the requester of
    every operation when it is the client and the responder when it is the server."""
    lan, g, ns = lab
    if not image_has_python():
        why = "the guest image has no python3/pyverbs and could not be rebuilt (scripts/rxe-guest-build)"
        print(f"SKIP: {why}")
        pytest.skip(why)
    uroce_ip = lan.addr(UROCE_IP_N)
    _upload_hosts_package(g, ns, uroce_ip)
    sizes = ",".join(map(str, CHECK_SIZES))
    gcmd = f"cd {GUEST_SRC} && python3 -m hosts.rdma.check --backend rxe --ip {g.ip} --sizes {sizes} --timeout 90"
    ucmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "hosts.rdma.check", "--backend", "uroce",
            "--ip", uroce_ip, "--sizes", sizes, "--timeout", "90"]
    pcap = tmp_path / f"check-{guest_role}.pcap"
    cap = lan.capture(pcap)
    t0 = time.monotonic()
    uro = gproc = None
    try:
        if guest_role == "client":
            uro = subprocess.Popen(ucmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 15
            while not _uroce_listening(ns) and uro.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            gres = g.run(f"{gcmd} {uroce_ip}", timeout=120)
        else:
            gproc = g.spawn(gcmd)     # the uroce client retries connecting until the guest's python listens
            uro = subprocess.Popen(ucmd + [g.ip], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
            gres = gproc.wait(120)
        uout, _ = uro.communicate(timeout=120)
    finally:
        if uro is not None and uro.poll() is None:
            uro.kill()
            uro.wait()
        if gproc is not None and not gproc.done:
            gproc.kill()
        lan.stop_capture(cap)
    elapsed = time.monotonic() - t0
    print(f"--- guest (rxe/pyverbs, {guest_role}, status {gres.status}):\n{gres.output}\n--- uroce:\n{uout}")
    assert gres.ok, f"guest failed:\n{gres.output}\nuroce:\n{uout}"
    assert uro.returncode == 0, f"uroce failed:\n{uout}\nguest:\n{gres.output}"
    results = {"guest": json.loads(gres.output.strip().splitlines()[-1]),
               "uroce": json.loads(uout.strip().splitlines()[-1])}
    cli = results["guest" if guest_role == "client" else "uroce"]
    assert results["guest"]["backend"] == "rxe" and results["uroce"]["backend"] == "uroce"
    for op in CHECK_OPS:   # every size of every operation arrived intact
        assert cli["verified"][op] == list(CHECK_SIZES) and cli["mismatch"][op] == [], (op, cli)
    # the wire: kernel rxe and uroce spoke RoCEv2 to each other, every packet with a valid ICRC
    pkts = [p for p in (roce_fields(f) for f in read_pcap(pcap)) if p is not None]
    assert pkts and all(p[5] for p in pkts), "packets with a bad ICRC"
    req = g.ip if guest_role == "client" else uroce_ip
    rsp = uroce_ip if req == g.ip else g.ip
    req_ops = Counter(p[2] for p in pkts if p[0] == req)
    rsp_ops = Counter(p[2] for p in pkts if p[0] == rsp)
    for op, codes in CHECK_OPS.items():
        assert codes & set(req_ops), f"no {op} packets from the requester: {dict(req_ops)}"
    assert {0x0D, 0x0E, 0x0F} <= set(rsp_ops) and 0x11 in rsp_ops, dict(rsp_ops)   # READ responses, ACKs
    print(f"pyverbs in the guest as {guest_role}: {sum(CHECK_SIZES)} B per operation, op times {cli['seconds']}, "
          f"{len(pkts)} packets, {elapsed:.1f} s")


@pytest.mark.root
def test_rxe_loopback_in_guest(lab):
    """tests/integration/test_rdma_rxe.py's kernel-rxe loopback (hosts/rdma/rxe.py: WRITE, READ and SEND with
    immediate between two queue pairs of rxe0), run in the guest, whose kernel has the rxe this machine lacks."""
    lan, g, ns = lab
    if not image_has_python():
        why = "the guest image has no python3/pyverbs and could not be rebuilt (scripts/rxe-guest-build)"
        print(f"SKIP: {why}")
        pytest.skip(why)
    _upload_hosts_package(g, ns, lan.addr(UROCE_IP_N))
    t0 = time.monotonic()
    r = g.run(f"cd {GUEST_SRC} && python3 - {g.ip} <<'PY'\n{LOOPBACK}\nPY", timeout=120)
    print(f"--- guest (rxe loopback, status {r.status}, {time.monotonic() - t0:.1f} s):\n{r.output}")
    assert r.ok, r.output
    check_loopback(r.output)


GUEST_BUDGET = """
import json, subprocess, sys, time
from hosts.tfdata import budget
h = budget.hierarchy()
p = subprocess.Popen([sys.executable, "-c", "import time\\nt = time.time()\\nwhile time.time() - t < 2: pass"])
applied = budget.limit("guest", p.pid, CORES)
t0 = time.monotonic()
path = budget.group_path("guest")
cpu_max = open(path + "/cpu.max").read().strip()
p.wait()
wall = time.monotonic() - t0
stat = dict(l.split() for l in open(path + "/cpu.stat"))
print(json.dumps({"hierarchy": repr(h), "version": h.version, "applied": applied, "cpu_max": cpu_max,
                  "subtree_control": open(h.root + "/cgroup.subtree_control").read().split(),
                  "usage_s": int(stat["usage_usec"]) / 1e6, "wall_s": wall, "throttled_s": budget.throttled_s("guest"),
                  "removed": (budget.remove("guest"), not __import__("os").path.exists(path))[1]}))
"""


@pytest.mark.root
def test_cpu_budget_on_cgroup_v2_in_guest(lab):
    """The offload CPU budget (hosts/tfdata/budget.py) on a real cgroup v2 kernel: the guest mounts only the
    unified hierarchy; the cpu controller is enabled in the root's subtree_control, cpu.max is written and a
    busy loop gets no more than its quota. (This machine's own cgroups are v1: tests/test_cgroups.py.)"""
    lan, g, ns = lab
    if not image_has_python():
        why = "the guest image has no python3 and could not be rebuilt (scripts/rxe-guest-build)"
        print(f"SKIP: {why}")
        pytest.skip(why)
    _upload_hosts_package(g, ns, lan.addr(UROCE_IP_N))
    cores = 0.25
    script = GUEST_BUDGET.replace("CORES", str(cores))
    t0 = time.monotonic()
    r = g.run("grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup || exit 9\n"
              f"cd {GUEST_SRC} && python3 - <<'PY'\n{script}\nPY", timeout=60)
    print(r.output)
    assert r.ok, r.output
    res = json.loads(r.output.strip().splitlines()[-1])
    print(f"cgroup v2 budget in the guest: {res['usage_s']:.2f} s CPU in {res['wall_s']:.2f} s "
          f"({res['usage_s'] / res['wall_s']:.2f} core under {cores}), throttled {res['throttled_s']:.2f} s; "
          f"{time.monotonic() - t0:.1f} s")
    assert res["version"] == 2 and res["applied"]["cgroup"] == "v2"
    assert "cpu" in res["subtree_control"]
    assert res["cpu_max"] == f"{int(cores * 20000)} 20000"
    assert res["usage_s"] <= cores * res["wall_s"] * 1.15 and res["throttled_s"] > 0.5
    assert res["removed"]
