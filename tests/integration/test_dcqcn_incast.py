"""Integration (root): DCQCN under a 7-to-1 incast on a fabric whose switch ports mark ECN (benchmarks/congestion.py's
incast: uroce RC queue pairs in the hosts' namespaces, 1.5 Gbit/s NICs at time scale 300, RED marking from 8 to
40 KiB of the port's queue). DCQCN holds the queue into the receiver: nothing dropped or resent, and the port's
queue, sampled every 50 ms, under Kmax for most of the run; the marks reached the senders as CNPs."""
import os
import sys

import pytest

from testbed.fabric import ecn
from testbed.fabric.network import Network
from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import congestion  # noqa: E402  (the benchmark's incast, run once here)

pytestmark = [pytest.mark.root, pytest.mark.alone]   # paced senders need the CPU to keep their pace


@pytest.fixture(scope="module", autouse=True)
def can_mark():
    lacking = ecn.missing()
    if lacking:
        pytest.skip(f"cannot mark ECN here: {lacking}")


def test_dcqcn_keeps_an_incast_from_dropping_and_its_queue_under_kmax():
    fabric = congestion.incast_fabric(queue_kb=256, mtu=1500)
    with Network(fabric) as net:
        r = congestion.incast_once(net, fabric, "dcqcn", 256 * 1024, roce_mtu=1024)
    print({k: v for k, v in r.items() if k != "series"}, "queue KiB over the run:", [round(q) for q in r["series"]])
    assert r["drops"] == 0 and r["retransmits"] == 0, r
    assert r["under_kmax"] > 0.5, r
    assert r["marks"] > 0 and r["cnps"] > 0, r
