"""fabric.ecn: RED-style marking thresholds {kmin_kb, kmax_kb, pmax}, for every tier or per tier; bad values
refused with the key named, in the model and in a scenario (exit status 2)."""
import pytest
import yaml

from testbed.cli import main
from testbed.fabric import ecn, topo
from testbed.fabric.params import FabricParams, TopologyError

RED = {"kmin_kb": 5, "kmax_kb": 200, "pmax": 0.2}


def test_off_unless_set():
    p = FabricParams("rail-optimized")
    assert p.ecn is None and all(p.ecn_thresholds(t) is None for t in ("nic", "uplink", "hb"))
    assert ecn.port_ends(topo.build("rail-optimized", 2, 2)) == []


def test_one_set_for_every_tier_or_a_set_per_tier():
    every = FabricParams("rail-optimized", ecn=RED)
    assert every.ecn_thresholds("uplink") == every.ecn_thresholds("hb") == {"kmin_kb": 5.0, "kmax_kb": 200.0,
                                                                            "pmax": 0.2}
    assert every.ecn_thresholds("frontend") is None
    tiers = FabricParams("rail-optimized", ecn={"uplink": RED})
    assert tiers.ecn_thresholds("uplink")["kmax_kb"] == 200.0 and tiers.ecn_thresholds("nic") is None
    assert FabricParams(**tiers.to_json()) == tiers


def test_the_marking_ports_are_the_switch_ends_of_their_tiers_links():
    fabric = topo.build("rail-optimized", 2, 2, spines=2, ecn={"uplink": RED})
    ends = ecn.port_ends(fabric)
    assert ends and all(l.kind == "uplink" and node in fabric.switches for node, _, l in ends)
    assert len(ends) == 2 * len([l for l in fabric.links if l.kind == "uplink"])
    every = ecn.port_ends(topo.build("rail-optimized", 2, 2, ecn=RED))
    assert {l.kind for _, _, l in every} == {"nic", "uplink", "hb"}
    assert not any(node.startswith("s") and "g" in node for node, _, _ in every)     # no host end


@pytest.mark.parametrize("value, message", [
    ({"kmin_kb": 50, "kmax_kb": 20, "pmax": 0.1}, r"ecn: kmin_kb \(50\) is above kmax_kb \(20\)"),
    ({"kmin_kb": 5, "kmax_kb": 20, "pmax": 0}, r"ecn.pmax must be a probability in \(0, 1\], got 0"),
    ({"kmin_kb": 5, "kmax_kb": 20, "pmax": 1.5}, r"ecn.pmax must be a probability in \(0, 1\], got 1.5"),
    ({"kmin_kb": -1, "kmax_kb": 20, "pmax": 0.5}, r"ecn.kmin_kb must be a queue in KiB in \[0, 1048576\], got -1"),
    ({"kmin_kb": 1, "kmax_kb": "deep", "pmax": 0.5}, "ecn.kmax_kb must be a queue in KiB"),
    ({"kmin_kb": 1, "kmax_kb": 20}, "ecn needs pmax"),
    ({"kmin_kb": 1, "kmax_kb": 20, "pmax": 0.5, "weight": 2}, "ecn: unknown key 'weight'"),
    ({"uplink": {"kmin_kb": 9, "kmax_kb": 3, "pmax": 1}}, r"ecn.uplink: kmin_kb \(9\) is above kmax_kb"),
    ({"spine": RED}, "ecn: unknown key 'spine'"),
    (0.5, r"ecn must be a map \{kmin_kb, kmax_kb, pmax\}, got 0.5"),
])
def test_a_bad_value_is_named(value, message):
    with pytest.raises(TopologyError, match=message):
        FabricParams("rail-optimized", ecn=value)


def test_a_scenario_with_a_bad_value_is_refused_with_exit_status_2(tmp_path, capsys):
    doc = {"name": "bad-ecn", "fabric": {"kind": "rail-only", "ecn": {"kmin_kb": 50, "kmax_kb": 20, "pmax": 0.1}},
           "workloads": [{"type": "connectivity"}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "kmin_kb" in err and len(err.strip().splitlines()) == 1


def test_the_curve_is_reds():
    t = ecn.Thresholds(10_000, 20_000, 0.2)
    assert ecn.mark_probability(9_999, t) == 0 and ecn.mark_probability(20_000, t) == 1
    assert ecn.mark_probability(10_000, t) == 0
    assert ecn.mark_probability(15_000, t) == pytest.approx(0.1, abs=1e-9)
    assert ecn.mark_probability(19_999, t) == pytest.approx(0.2, abs=1e-4)
    step = ecn.Thresholds(8_000, 8_000, 0.5)                  # kmin = kmax: a step, DCTCP's
    assert (ecn.mark_probability(7_999, step), ecn.mark_probability(8_000, step)) == (0, 1)


def test_a_ports_pause_clock_counts_only_ended_pauses_and_the_one_in_progress_from_its_start():
    clock = ecn.PauseClock()
    assert ecn.PAUSE.unpack(clock.value()) == (0, 0)
    assert ecn.PAUSE.unpack(clock.pause(1000)) == (1000, 0)
    assert ecn.PAUSE.unpack(clock.pause(1500)) == (1000, 0)     # already paused: the pause began at 1000
    assert ecn.PAUSE.unpack(clock.resume(4000)) == (0, 3000)
    assert ecn.PAUSE.unpack(clock.resume(5000)) == (0, 3000)    # not paused: nothing to add
    clock.pause(6000)
    assert ecn.PAUSE.unpack(clock.resume(6500)) == (0, 3500)
