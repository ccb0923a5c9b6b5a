"""The pyverbs backend (hosts/rdma/rxe.py) for real: inside a QEMU/TCG guest running the kernel's rdma_rxe, it
does RC SEND, RDMA WRITE and RDMA READ with our user-space RoCE endpoint (uroce) in an emulated host, both ways,
and every byte arrives as sent (hosts/rdma/verify.py). The guest image carries Python 3, pyverbs and a copy of
hosts/rdma (scripts/rxe-guest-build); the test skips, with the reason, only where that image cannot be had.
"""
import json
import os
import subprocess
import sys

import pytest

from testbed import pcap, rxe_guest
from testbed.rxe_guest import RxeLan

pytestmark = pytest.mark.root
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUEST_N, UROCE_N = 2, 3
GUEST_VERIFY = "cd /opt/testbed && python3 -m hosts.rdma.verify --backend rxe --timeout 90 --size {size} --ip {ip}"


def image_has_python() -> bool:
    files = rxe_guest.image_files()
    manifest = files[0].parent / "manifest" if files else None
    return bool(manifest and manifest.exists() and "pyverbs" in manifest.read_text())


@pytest.fixture(scope="module")
def lab():
    why = rxe_guest.ensure_image()
    if not why and not image_has_python():
        why = "the rxe guest image has no Python/pyverbs (install python3-pyverbs: scripts/setup does)"
    if why:
        print(f"SKIP: {why}")
        pytest.skip(why)
    lan = RxeLan(tag=f"{os.getpid() % 100000}v", subnet="10.79.0.0/24")
    try:
        g = lan.guest(lan.addr(GUEST_N), name="rxe-pyverbs")
        g.launch()
        ns = lan.host(lan.addr(UROCE_N))
        g.wait_ready()
        print(f"guest kernel {g.info.get('kernel')}: rxe0 ACTIVE after {g.boot_seconds:.1f} s")
        yield lan, g, ns
    finally:
        lan.close()


def uroce(ns, ip, *args):
    return ["ip", "netns", "exec", ns, sys.executable, "-m", "hosts.rdma.verify", "--backend", "uroce",
            "--timeout", "90", "--ip", ip, *args]


def verdict(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("{")]
    assert lines, output
    return json.loads(lines[-1])


def test_uroce_requester_against_pyverbs_responder(lab, tmp_path):
    """uroce SENDs, WRITEs and READs; the guest's pyverbs QP receives, is written and is read."""
    lan, g, ns = lab
    size = 64 * 1024 + 3
    cap = lan.capture(tmp_path / "rxe.pcap")
    guest = g.spawn(GUEST_VERIFY.format(size=size, ip=g.ip))
    try:
        assert g.wait_listen(18516, timeout=60, proc=guest), guest.output if guest.done else g.console_tail()
        mine = subprocess.run(uroce(ns, lan.addr(UROCE_N), "--size", str(size), g.ip), cwd=REPO,
                              capture_output=True, text=True, timeout=180)
        theirs = guest.wait(120)
    finally:
        lan.stop_capture(cap)
    r = verdict(mine.stdout + mine.stderr)
    assert r == {**r, "send": True, "write": True, "read": True, "peer_backend": "rxe", "bytes": size}, r
    assert mine.returncode == 0 and theirs.ok, theirs.output
    assert verdict(theirs.output) == {"send": True, "write": True}
    s = pcap.summarize(str(tmp_path / "rxe.pcap"))
    # both stacks' packets, every ICRC valid: requests from uroce, ACKs and READ responses from the kernel
    assert s["roce_packets"] > 3 * size // 1024 and s["bad_icrc"] == 0 and s["malformed"] == 0, s
    assert {"RC_RDMA_READ_RESPONSE_FIRST", "RC_SEND_FIRST", "RC_RDMA_WRITE_FIRST"} <= set(s["opcodes"]), s
    print(f"uroce -> pyverbs/rxe: {size} B each of SEND, WRITE, READ in {r['seconds']} s; {s['roce_packets']} "
          f"RoCE packets, 0 bad ICRC")


@pytest.mark.parametrize("size", [1, 256 * 1024 + 5])
def test_pyverbs_requester_against_uroce_responder(lab, size):
    """The guest's pyverbs QP posts SEND, WRITE and READ work requests; uroce answers; bytes checked both ends."""
    lan, g, ns = lab
    responder = subprocess.Popen(uroce(ns, lan.addr(UROCE_N), "--size", str(size)), cwd=REPO,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        res = g.run(GUEST_VERIFY.format(size=size, ip=g.ip) + f" {lan.addr(UROCE_N)}", timeout=180)
        out, _ = responder.communicate(timeout=60)
    finally:
        if responder.poll() is None:
            responder.kill()
            responder.wait()
    r = verdict(res.output)
    assert res.ok and r == {**r, "send": True, "write": True, "read": True, "backend": "rxe",
                            "peer_backend": "uroce"}, res.output
    assert responder.returncode == 0 and verdict(out) == {"send": True, "write": True}, out
    print(f"pyverbs/rxe -> uroce: {size} B each of SEND, WRITE, READ in {r['seconds']} s")
