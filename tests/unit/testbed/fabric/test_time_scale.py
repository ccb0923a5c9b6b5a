"""fabric.time_scale: K. The rates and delays given are a real fabric's; the fabric runs them with rates / K
and delays x K (bandwidth-delay products in packets, and byte counts, are the real ones). docs/fabrics.md."""
import pytest

from testbed.fabric.params import FabricParams
from testbed.fabric.topo import build_from


def test_rates_are_divided_and_delays_multiplied_by_the_time_scale():
    p = FabricParams("rail-optimized", 2, 4, spines=2, nic_mbps=400_000, delay_us={"nic": 1, "uplink": 2},
                     links={"rail0-spine1": {"mbps": 200_000, "delay_us": 50}}, time_scale=40_000)
    assert (p.nic_mbps, p.hb_mbps) == (10.0, 90.0)                 # hb: 9 x the real NIC rate, scaled alike
    assert p.delay_us == {"nic": 40_000.0, "uplink": 80_000.0}
    assert p.links == {"rail0-spine1": {"mbps": 5.0, "delay_us": 2_000_000.0}}
    f = build_from(p)
    named = {l.name: l for l in f.links}
    assert named["s0g0-rail0"].mbps == 10.0 and named["s0g0-rail0"].delay_us == 40_000
    assert named["rail0-spine0"].mbps == 10.0 and named["rail0-spine0"].delay_us == 80_000   # 2 servers x 10 / 2
    assert named["rail0-spine1"].mbps == 5.0 and named["rail0-spine1"].delay_us == 2_000_000
    assert named["s0g0-hb0"].delay_us == 0
    # bandwidth-delay product of a NIC link, in bytes: the real one (400 Gbit/s x 1 us = 50 kB)
    nic = named["s0g0-rail0"]
    assert nic.mbps * 1e6 / 8 * nic.delay_us / 1e6 == pytest.approx(400e9 / 8 * 1e-6)


def test_the_figures_given_are_kept_printed_and_build_the_same_fabric_again():
    p = FabricParams("clos", 2, 2, nic_mbps=100_000, delay_us=5, time_scale=10_000)
    assert p.to_json()["nic_mbps"] == 100_000 and p.to_json()["delay_us"] == 5
    assert FabricParams(**p.to_json()) == p                  # state.json -> the same fabric (faults, clean)
    r = p.results_values()
    assert (r["nic_mbps"], r["hb_mbps"], r["delay_us"], r["time_scale"]) == (10.0, 90.0, 50_000.0, 10_000.0)
    assert r["time_scaled_from"] == {"nic_mbps": 100_000, "hb_mbps": 900_000, "delay_us": 5, "links": None,
                                   "wan": None}
    assert p.time_scaling() == ["time_scale 10000: rates / 10000, delays x 10000",
                                "  nic_mbps: 100000 -> 10", "  hb_mbps: 900000 -> 90", "  delay_us: 5 -> 50000"]


def test_no_time_scale_changes_nothing():
    p = FabricParams("clos", 2, 2, nic_mbps=5, delay_us=100)
    assert (p.nic_mbps, p.delay_us, p.time_scale) == (5.0, 100.0, 1.0)
    assert p.time_scaling() == [] and "time_scaled_from" not in p.results_values()
    assert p.to_json()["nic_mbps"] == 5.0


def test_a_scaled_rate_must_fit_the_machine():
    with pytest.raises(ValueError, match="nic_mbps must be a rate"):
        FabricParams("clos", 2, 2, nic_mbps=400_000, time_scale=2)
