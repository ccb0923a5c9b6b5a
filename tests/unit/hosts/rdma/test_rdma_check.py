"""hosts.rdma.check (RC SEND/WRITE/READ with every byte verified) between two in-process uroce endpoints;
the same program runs with the pyverbs backend in a kernel-rxe guest (tests/test_rxe_interop.py)."""
import socket
import threading

import pytest

from hosts.rdma import check, open_device
from hosts.rdma.transport import MemoryFabric

SIZES = (1, 1024, 4097, 70000)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pair():
    port = _free_port()
    fab = MemoryFabric()
    a = open_device("127.0.0.1", backend="uroce", transport=fab.attach("127.0.0.1"))
    b = open_device("127.0.0.2", backend="uroce", transport=fab.attach("127.0.0.2"))
    out = {}

    def serve():
        try:
            out["server"] = check.server(a, port=port, timeout=20)
        except Exception as e:          # reported by the assertions below
            out["server_error"] = e
    t = threading.Thread(target=serve, name="check-server")
    t.start()
    try:
        out["client"] = check.client(b, "127.0.0.1", sizes=SIZES, port=port, timeout=20)
    finally:
        t.join(30)
        a.close()
        b.close()
    return out


def test_all_operations_verified():
    out = _pair()
    cli, srv = out["client"], out["server"]
    for op in ("send", "write", "read"):
        assert cli["verified"][op] == list(SIZES) and cli["mismatch"][op] == []
    assert srv["verified"] == {"send": list(SIZES), "write": list(SIZES)}
    assert cli["backend"] == cli["peer_backend"] == "uroce" and cli["bytes_per_op"] == sum(SIZES)


def test_a_wrong_byte_is_reported(monkeypatch):
    """The side that checks finds data that differs from what the other side meant to send."""
    orig = check.pattern

    def pattern(seed, op, size):
        data = orig(seed, op, size)
        if threading.current_thread().name == "check-server" and op in ("send", "read") and size == 4097:
            data = bytes([data[0] ^ 1]) + data[1:]     # the server expects / serves one flipped bit
        return data
    monkeypatch.setattr(check, "pattern", pattern)
    cli = _pair()["client"]
    assert cli["mismatch"] == {"send": [4097], "write": [], "read": [4097]}
    assert 4097 not in cli["verified"]["send"] and 4097 not in cli["verified"]["read"]


def test_bad_arguments_are_one_line_errors(capsys):
    with pytest.raises(SystemExit) as e:
        check.main(["--ip", "127.0.0.1", "--sizes", "1,x"])
    assert e.value.code == 2 and "--sizes must be distinct non-negative integers" in capsys.readouterr().err
    assert check.main(["--ip", "192.0.2.55", "--backend", "rxe"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
