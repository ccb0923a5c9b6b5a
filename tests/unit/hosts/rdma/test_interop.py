"""The tools' sides (hosts/rdma/interop.py) against each other, in-process: two uroce devices on the transport's
in-memory fabric, the tools' TCP exchange over loopback. Against the real tools on kernel rxe:
the integration test test_rxe_interop.py (root, QEMU)."""
import threading

import pytest

from hosts.rdma import open_device
from hosts.rdma.interop import perftest_bw, rc_pingpong
from hosts.rdma.transport import MemoryFabric

CLIENT, SERVER = "127.0.77.1", "127.0.77.2"


@pytest.fixture
def devices():
    fab = MemoryFabric()
    a = open_device(CLIENT, backend="uroce", transport=fab.attach(CLIENT))
    b = open_device(SERVER, backend="uroce", transport=fab.attach(SERVER))
    yield a, b
    a.close(linger=0)
    b.close(linger=0)


def both(client, server):
    out = {}
    t = threading.Thread(target=lambda: out.update(server=server()))
    t.start()
    out["client"] = client()
    t.join(30)
    return out["client"], out["server"]


def test_rc_pingpong_client_and_server(devices):
    a, b = devices
    # our side does not echo as the tool does, so the data check is the real tool's test
    c, s = both(lambda: rc_pingpong(a, SERVER, port=18611, size=1024, iters=40, timeout=20, check_data=False),
                lambda: rc_pingpong(b, None, port=18611, size=1024, iters=40, timeout=20, check_data=False))
    assert c["role"] == "client" and s["role"] == "server"
    assert c["bytes"] == s["bytes"] == 2 * 40 * 1024
    assert c["remote"]["qpn"] == s["local"]["qpn"] and s["remote"]["ip"] == CLIENT


@pytest.mark.parametrize("verb", ["write", "read"])
def test_perftest_bw_client_reports_to_the_server(devices, verb):
    a, b = devices
    port = 18612 if verb == "write" else 18613
    c, s = both(lambda: perftest_bw(a, verb, SERVER, port=port, size=4096, iters=30, timeout=20),
                lambda: perftest_bw(b, verb, None, port=port, size=4096, iters=30, timeout=20))
    assert c["tool"] == s["tool"] == f"{verb}_bw" and c["bw_avg_MiBps"] > 0
    assert s["peer_report"] == {"size": 4096, "iters": 30, "bw_avg_MiBps": c["bw_avg_MiBps"]}
    assert c["remote"]["rkey"] == s["local"]["rkey"]
