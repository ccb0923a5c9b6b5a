"""Both ends of hosts.agents.wan_transfer in-process over the transport's in-memory fabric, with a delay on every
packet: the bytes arrive exact over 1 and 3 striped queue pairs, the round trip is measured, and an end whose
peer never comes fails in one line."""
import threading

import jsonschema

from hosts.agents.wan_transfer import run
from hosts.rdma import open_device
from hosts.rdma.transport import MemoryFabric
from hosts.spec.results import WAN_TRANSFER
from hosts.spec.wan import WanTransferSpec

DELAY_S = 0.005


def test_both_ends_move_the_bytes_exactly_over_striped_queue_pairs(tmp_path):
    fabric = MemoryFabric(delay=lambda pkt: DELAY_S)
    opener = lambda ip, **kw: open_device(ip, transport=fabric.attach(ip), **kw)     # noqa: E731
    common = dict(store=str(tmp_path), size=300_000, connections=(1, 3), window=4, chunk=65536, pings=3,
                  timeout_s=20)
    out = {}
    recv = threading.Thread(target=lambda: out.update(recv=run(WanTransferSpec(role="recv", ip="10.0.0.2", **common),
                                                               opener)))
    recv.start()
    out["send"] = run(WanTransferSpec(role="send", ip="10.0.0.1", **common), opener)
    recv.join(30)
    for doc in out.values():
        jsonschema.validate(doc, WAN_TRANSFER)
    assert [r["exact"] for r in out["recv"]["runs"]] == [True, True]
    assert [r["connections"] for r in out["send"]["runs"]] == [1, 3]
    assert all(r["rtt_s"] >= 2 * DELAY_S for r in out["send"]["runs"])


def test_an_end_whose_peer_never_comes_fails_in_one_line(tmp_path):
    fabric = MemoryFabric()
    spec = WanTransferSpec(role="send", ip="10.0.0.1", store=str(tmp_path), size=1000, connections=(1,), window=4,
                           timeout_s=1)
    out = run(spec, lambda ip, **kw: open_device(ip, transport=fabric.attach(ip), **kw))
    assert out == {"role": "send", "error": "waited 1 s for the receiver's queue pairs"}
