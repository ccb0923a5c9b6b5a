"""Integration (root): FSDP's layer exchange on rail-optimized 2x4, in sequence and overlapped in one stream, both
exact on every rank and near the NIC's bound; overlapped, the AllGather shares the NIC with the ReduceScatter,
so it takes longer than alone, while the exchange as a whole takes no longer than in sequence."""
import pytest

from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import collective

pytestmark = [pytest.mark.root, pytest.mark.alone]   # both near their bound: CPU headroom


def test_fsdp_exchange_overlapped_shares_the_nic_and_costs_no_more_than_in_sequence():
    fabric = build("rail-optimized", 2, 4, nic_mbps=5)
    with Network(fabric) as net:
        seq, ovl = (collective.run(net, {"op": "fsdp", "algo": algo, "sizes": ["2MiB"], "iterations": 2})
                    for algo in ("sequential", "overlapped"))
    assert seq["ok"] and ovl["ok"], (seq["checks"], ovl["checks"])
    s, o = seq["rows"][0], ovl["rows"][0]
    assert s["correct"] and o["correct"] and s["ranks"] == o["ranks"] == 8
    assert s["bus_ratio"] >= 0.7 and o["bus_ratio"] >= 0.7, (s["bus_ratio"], o["bus_ratio"])
    ps, po = ({p["name"]: p for p in r["phases"]} for r in (s, o))
    assert set(ps) == set(po) == {"allgather", "reduce_scatter"}
    # in sequence the two halves add up to the exchange; overlapped, each runs to about its end
    assert 0.9 * s["seconds"] <= ps["allgather"]["seconds"] + ps["reduce_scatter"]["seconds"] <= 1.02 * s["seconds"]
    assert po["allgather"]["seconds"] >= 1.4 * ps["allgather"]["seconds"], (po["allgather"], ps["allgather"])
    assert o["seconds"] <= 1.15 * s["seconds"], (o["seconds"], s["seconds"])
    print(f"sequential {s['seconds']:.3f} s ({s['bus_ratio']}), overlapped {o['seconds']:.3f} s ({o['bus_ratio']}); "
          f"AllGather {ps['allgather']['seconds']:.3f} s alone, {po['allgather']['seconds']:.3f} s overlapped")
