"""Links carry everything about a cable: rate, MTU, shaping and queue, worked out once (links.new_link)."""
import pytest

from hosts.rdma.mtu import HB_MTU
from testbed.fabric import kinds, links
from testbed.fabric.topo import build


@pytest.mark.parametrize("kind", kinds.NAMES)
@pytest.mark.parametrize("oversubscription", [1, 2])
def test_every_link_carries_its_mtu_shaping_and_queue(kind, oversubscription):
    f = build(kind, 3, 2, nic_mtu=1500, oversubscription=oversubscription, cpu_hosts=1, spares_per_server=1)
    for l in f.links + [c for cs in f.circuits.values() for c in cs]:
        assert l.mtu == (HB_MTU if l.kind == "hb" else 1500)
        unshaped = l.kind == "frontend" or (l.kind == "uplink" and oversubscription == 1)
        assert l.shaped is not unshaped and links.is_patch(f, l) is unshaped
        assert l.queue_bytes == (None if unshaped else links.tbf_limit(l.mbps, l.mtu))
        assert l.delay_ms == 0


def test_a_shaped_links_qdisc_uses_its_queue():
    link = build("rail-optimized", 2, 2).links[0]
    assert links.tbf_of("eth0", link) == links.tbf("eth0", link.mbps, link.mtu)
    assert f"limit {link.queue_bytes}" in links.tbf_of("eth0", link)

