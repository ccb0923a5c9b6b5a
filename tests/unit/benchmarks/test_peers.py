"""benchmarks/peers.py's payload caps: what a full frame of each transport leaves for the payload."""
import os
import sys

import pytest

from hosts.rdma import headers as H
from hosts.rdma.mtu import roce_mtu

from tests.paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import peers  # noqa: E402


@pytest.mark.parametrize("nic_mtu", [1500, 4200, 9000])
def test_the_roce_cap_is_a_full_send_packets_payload_over_its_bytes_on_the_shaper(nic_mtu):
    mtu = roce_mtu(nic_mtu)
    pkt = H.encode(bytes(4), bytes(4), 49152, 1, H.SEND_MIDDLE, 17, 0, payload=bytes(mtu))
    assert len(pkt) <= nic_mtu
    assert peers.payload_caps(nic_mtu)["RoCEv2 SEND"] == pytest.approx(mtu / (len(pkt) + 14))


def test_tcp_on_jumbo_frames_carries_more_than_roce_and_neither_reaches_the_line_rate():
    caps = peers.payload_caps(9000)
    assert caps["RoCEv2 SEND"] < caps["TCP"] < 1.0
    assert caps["TCP"] == pytest.approx((9000 - 52) / 9014)
