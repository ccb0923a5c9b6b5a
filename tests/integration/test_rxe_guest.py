"""Kernel Soft-RoCE (rdma_rxe) in two QEMU/TCG guests on a private bridge: the guest harness works.

Needs root, qemu-system-x86 and the guest image (scripts/rxe-guest-build; built on first use when apt can
download the kernel package). Skips with the reason otherwise.
"""
import os
import time
from pathlib import Path

import pytest

from tools.rxe_guest_image import DEFAULT_IMAGE_DIR, ensure_image
from tools.rxe_lan import RxeLan, parse_perftest, run_pair

pytestmark = [pytest.mark.root, pytest.mark.qemu]


@pytest.fixture(scope="module")
def pair():
    why = ensure_image()
    if why:
        print(f"SKIP: {why}")
        pytest.skip(why)
    lan = RxeLan(subnet="10.77.0.0/24")
    try:
        a = lan.guest(lan.addr(1), name="rxe-a")
        b = lan.guest(lan.addr(2), name="rxe-b")
        a.launch()
        b.launch()
        a.wait_ready()
        b.wait_ready()
        print(f"boot to rxe0 ACTIVE: {a.boot_seconds:.1f} s / {b.boot_seconds:.1f} s "
              f"(two guests in parallel), kernel {a.info.get('kernel')}")
        yield a, b
    finally:
        lan.close()


def sent_packets(guest) -> int:
    """The packets the guest's rxe device has sent (its hardware counter)."""
    r = guest.run("cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts", timeout=20)
    assert r.ok, r.output
    return int(r.output.split()[-1])


def test_guest_boots_with_active_rxe(pair):
    a, b = pair
    # the image is also kept as this machine's copy, which a fresh clone takes instead of building it again
    if os.environ.get("RXE_GUEST_CACHE") is None and not os.environ.get("RXE_GUEST_DIR"):
        made = (DEFAULT_IMAGE_DIR / "manifest").read_text().splitlines()[0]
        assert Path("/var/cache/tb-rxe-guest/manifest").read_text().splitlines()[0] == made
    for g in (a, b):
        assert g.alive
        assert g.info["ip"].startswith(g.ip + "/")
        assert g.gid_index >= 0
        r = g.run("cat /sys/class/infiniband/rxe0/ports/1/state; ibv_devinfo -d rxe0; "
                  f"cat /sys/class/infiniband/rxe0/ports/1/gids/{g.gid_index}", timeout=20)
        assert r.ok, r.output
        assert "ACTIVE" in r.output and "PORT_ACTIVE" in r.output
        assert "link_layer:\t\tEthernet" in r.output
        # the RoCE v2 GID carries the IPv4 address
        octets = [int(x) for x in g.ip.split(".")]
        assert r.output.strip().endswith("ffff:%02x%02x:%02x%02x" % tuple(octets))
    # exit status and output come back; failures are reported, not hidden
    r = a.run("echo out; echo err >&2; exit 3", timeout=10)
    assert r.status == 3 and "out" in r.output and "err" in r.output
    # a command can be killed
    p = a.spawn("sleep 60")
    time.sleep(0.3)
    p.kill()
    assert p.wait(10).status == -15
    # the guests reach each other over the bridge
    assert a.run(f"ping -c 1 -W 5 {b.ip}", timeout=15).ok


def test_rc_pingpong_between_guests(pair):
    a, b = pair
    iters, size = 200, 4096
    t0 = time.monotonic()
    srv, cli = run_pair(a, b, f"ibv_rc_pingpong -d rxe0 -g {a.gid_index} -n {iters} -s {size}",
                        f"ibv_rc_pingpong -d rxe0 -g {b.gid_index} -n {iters} -s {size} {{server}}", timeout=60)
    print(cli.output)
    assert srv.ok, srv.output
    assert cli.ok, cli.output
    for r in (srv, cli):
        assert f"{size * iters * 2} bytes in" in r.output
        assert f"{iters} iters in" in r.output
    print(f"rc_pingpong took {time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize("tool", ["ib_write_bw", "ib_read_bw"])
def test_perftest_between_guests(pair, tool):
    a, b = pair
    size, iters = 65536, 100
    args = f"-d rxe0 -F -s {size} -n {iters}"
    before = sent_packets(a) + sent_packets(b)
    t0 = time.monotonic()
    srv, cli = run_pair(a, b, f"{tool} {args} -x {a.gid_index}", f"{tool} {args} -x {b.gid_index} {{server}}",
                        timeout=90)
    assert srv.ok, srv.output
    assert cli.ok, cli.output
    rep = parse_perftest(cli.output)
    assert rep is not None, cli.output
    sent = sent_packets(a) + sent_packets(b) - before
    print(f"{tool}: {rep}, {sent} RoCE packets sent by the two rxe devices ({time.monotonic() - t0:.1f} s)")
    assert rep["bytes"] == size and rep["iterations"] == iters
    # the data crossed the wire: at least one packet per 4096 bytes (RoCE's largest MTU). perftest's own
    # bandwidth comes from the guest's cycle counter, which can read 0.00 MB/s under TCG
    assert sent >= size * iters // 4096, sent
    # the server prints the client's report it received over the TCP exchange
    assert parse_perftest(srv.output) is not None
