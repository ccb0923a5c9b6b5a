"""fabric.pfc: the key and its bad values; which switch queues pause which upstream ports (up-down routing's
feeders); and the Xoff/Xon logic with its counters, driven by a fake clock and fake queues."""
import pytest
import yaml

from testbed.cli import main
from testbed.fabric import pfc, topo
from testbed.fabric.params import FabricParams, TopologyError

PFC = {"xoff_kb": 64, "xon_kb": 32}


def test_off_unless_set_and_one_set_or_one_per_tier():
    assert FabricParams("rail-optimized").pfc is None
    assert pfc.Plan.of(topo.build("rail-optimized", 2, 2), lambda h: None).points == ()
    every = FabricParams("rail-optimized", pfc=PFC)
    assert every.pfc_thresholds("nic") == every.pfc_thresholds("uplink") == {"xoff_kb": 64.0, "xon_kb": 32.0}
    assert every.pfc_thresholds("frontend") is None
    tiers = FabricParams("rail-optimized", pfc={"uplink": PFC})
    assert tiers.pfc_thresholds("uplink")["xoff_kb"] == 64.0 and tiers.pfc_thresholds("nic") is None
    assert FabricParams(**tiers.to_json()) == tiers


@pytest.mark.parametrize("value, message", [
    ({"xoff_kb": 32, "xon_kb": 32}, r"pfc: xon_kb \(32\) must be below xoff_kb \(32\)"),
    ({"xoff_kb": 10, "xon_kb": 40}, r"pfc: xon_kb \(40\) must be below xoff_kb \(10\)"),
    ({"xoff_kb": -5, "xon_kb": 0}, r"pfc.xoff_kb must be a queue in KiB in \[0, 1048576\], got -5"),
    ({"xoff_kb": 64, "xon_kb": -1}, r"pfc.xon_kb must be a queue in KiB"),
    ({"xoff_kb": "high", "xon_kb": 1}, "pfc.xoff_kb must be a queue in KiB"),
    ({"xoff_kb": 64}, "pfc needs xon_kb"),
    ({"xoff_kb": 64, "xon_kb": 32, "quanta": 3}, "pfc: unknown key 'quanta'"),
    ({"nic": {"xoff_kb": 1, "xon_kb": 2}}, r"pfc.nic: xon_kb \(2\) must be below xoff_kb \(1\)"),
    ({"spine": PFC}, "pfc: unknown key 'spine'"),
    (64, r"pfc must be a map \{xoff_kb, xon_kb\}, got 64"),
])
def test_a_bad_value_is_named(value, message):
    with pytest.raises(TopologyError, match=message):
        FabricParams("rail-optimized", pfc=value)


def test_a_scenario_with_a_bad_value_is_refused_with_exit_status_2(tmp_path, capsys):
    doc = {"name": "bad-pfc", "fabric": {"kind": "rail-only", "pfc": {"xoff_kb": 20, "xon_kb": 50}},
           "workloads": [{"type": "connectivity"}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "xon_kb" in err and len(err.strip().splitlines()) == 1


def test_xoff_must_leave_the_queue_room_and_delayed_links_are_refused():
    assert pfc.problems(topo.build("rail-optimized", 2, 2, queue_kb=256, pfc=PFC)) == []
    deep = topo.build("rail-optimized", 2, 2, queue_kb=256, pfc={"xoff_kb": 256, "xon_kb": 10})
    assert "is not below the queue of" in pfc.problems(deep)[0]
    delayed = topo.build("rail-optimized", 2, 2, pfc=PFC, delay_us=100)
    assert "has a delay" in pfc.problems(delayed)[0]


def test_a_queue_pauses_the_ports_that_can_feed_it():
    """Rail-optimized, 2 x 2, one spine: into a host, every other link of its leaf; into the spine (up), only the
    leaf's hosts; from the spine down, the other leaf."""
    fabric = topo.build("rail-optimized", 2, 2, spines=1, pfc=PFC)
    plan = pfc.Plan.of(fabric, lambda host: f"/ns/{host}")
    feeds = {p.name: set(p.feeds) for p in plan.points}
    assert feeds["rail0>s1g0"] == {"s0g0>rail0", "spine0>rail0"}
    assert feeds["rail0>spine0"] == {"s0g0>rail0", "s1g0>rail0"}
    assert feeds["spine0>rail0"] == {"rail1>spine0"}
    assert not any(p.startswith("s0g0>") for p in feeds)             # a host sends no pauses
    gate = plan.gates["s0g0>rail0"]
    assert (gate.dev, gate.netns) == ("eth0", "/ns/s0g0") and plan.gates["spine0>rail0"].netns is None
    assert pfc.Plan.from_json(plan.to_json()) == plan


def test_a_tier_without_thresholds_sends_no_pauses():
    fabric = topo.build("rail-optimized", 2, 2, spines=1, pfc={"uplink": PFC})
    points = pfc.Plan.of(fabric, lambda h: None).points
    assert points and {p.name for p in points} == {"rail0>spine0", "rail1>spine0", "spine0>rail0", "spine0>rail1"}


POINTS = [pfc.Point("leaf>h1", "d1", xoff=1000, xon=500, feeds=("h0>leaf", "spine>leaf")),
          pfc.Point("spine>leaf", "d2", xoff=1000, xon=500, feeds=("leaf2>spine",))]


def test_xoff_pauses_the_feeders_until_xon_with_hysteresis():
    logic = pfc.Pausing(POINTS)
    assert logic.step(0.0, {"leaf>h1": 1000}) == ([], [])                  # at Xoff: not past it
    assert logic.step(1.0, {"leaf>h1": 1001}) == (["h0>leaf", "spine>leaf"], [])
    assert logic.step(2.0, {"leaf>h1": 600}) == ([], [])                   # between Xon and Xoff: held
    assert logic.step(2.5, {}) == ([], [])                                  # a missed reading changes nothing
    assert logic.step(3.0, {"leaf>h1": 499}) == ([], ["h0>leaf", "spine>leaf"])
    assert logic.step(4.0, {"leaf>h1": 900}) == ([], [])                   # below Xoff again: no new pause
    c = logic.counters(5.0)
    assert c["gates"]["h0>leaf"] == {"pauses": 1, "paused_s": 2.0}
    assert c["points"]["leaf>h1"] == {"xoffs": 1, "asserted_s": 2.0}
    assert c["gates"]["leaf2>spine"] == {"pauses": 0, "paused_s": 0.0}


def test_a_gate_fed_by_two_points_stays_paused_while_either_asserts_and_spreading_counts_each_pause():
    points = [pfc.Point("a", "da", 100, 50, ("up",)), pfc.Point("b", "db", 100, 50, ("up", "other"))]
    logic = pfc.Pausing(points)
    assert logic.step(0.0, {"a": 200, "b": 0}) == (["up"], [])
    assert logic.step(1.0, {"a": 200, "b": 200}) == (["other"], [])
    assert logic.step(2.0, {"a": 0, "b": 200}) == ([], [])                  # b still asserts: up stays paused
    assert logic.step(3.0, {"a": 0, "b": 0}) == ([], ["other", "up"])
    assert logic.step(4.0, {"a": 500, "b": 0}) == (["up"], [])
    c = logic.counters(4.5)                                                 # an ongoing pause counts to now
    assert c["gates"]["up"] == {"pauses": 2, "paused_s": 3.5} and c["gates"]["other"] == {"pauses": 1, "paused_s": 2.0}
    assert logic.release(5.0) == ["up"] and logic.counters(6.0)["gates"]["up"]["paused_s"] == 4.0
    assert pfc.totals(logic.counters(6.0)) == {"pauses": 3, "paused_s": 6.0}


def test_growth_is_the_rows_pfc_fields():
    assert pfc.growth({"pauses": 3, "paused_s": 1.5}, {"pauses": 10, "paused_s": 4.25}) == \
        {"pfc_pauses": 7, "pfc_paused_s": 2.75}
    assert pfc.totals({}) == {"pauses": 0, "paused_s": 0}


def test_the_queue_is_the_last_bytes_that_arrived_and_their_parts_are_their_feeds():
    parts = pfc.QueueParts()
    assert parts.parts("q", 1000) is None                                  # nothing known: None
    parts.add("q", {"a": 600, "b": 0})
    parts.add("q", {"b": 300, "c": 100})
    assert parts.parts("q", 400) == {"b": 300, "c": 100}                    # the newest batch alone
    assert parts.parts("q", 700) == {"b": 300, "c": 100, "a": 300}          # and half of the one before
    assert parts.parts("q", 2000) == {"a": 1200, "b": 600, "c": 200}        # more than was read: in proportion


def test_an_asserting_queue_pauses_only_the_feeds_above_their_share():
    point = pfc.Point("leaf>h1", "d1", xoff=900, xon=300, feeds=("h0>leaf", "h2>leaf", "h3>leaf"))
    logic = pfc.Pausing([point])
    # shares: Xoff 300 and Xon 100 per feed; h3 sends elsewhere, none of its frames are in the queue
    assert logic.step(0.0, {"leaf>h1": 1000}, {"leaf>h1": {"h0>leaf": 500, "h2>leaf": 500}}) == \
        (["h0>leaf", "h2>leaf"], [])
    assert logic.step(1.0, {"leaf>h1": 800}, {"leaf>h1": {"h0>leaf": 700, "h2>leaf": 100}}) == ([], [])   # Xon's share
    assert logic.step(2.0, {"leaf>h1": 800}, {"leaf>h1": {"h0>leaf": 750, "h2>leaf": 50}}) == ([], ["h2>leaf"])
    assert logic.step(3.0, {"leaf>h1": 200}, {"leaf>h1": {"h0>leaf": 200}}) == ([], ["h0>leaf"])       # below Xon
    assert logic.counters(4.0)["gates"]["h3>leaf"] == {"pauses": 0, "paused_s": 0.0}
    assert logic.counters(4.0)["unattributed"] == {}
    assert logic.step(5.0, {"leaf>h1": 1000}) == (["h0>leaf", "h2>leaf", "h3>leaf"], [])   # parts unknown: all
    assert logic.counters(5.0)["unattributed"] == {"leaf>h1": 1}


def test_a_feeds_bytes_in_several_congested_queues_are_added_up():
    # h0 fills two congested queues with 250 bytes each: under its share of either Xoff (900 / 3 = 300) alone
    points = [pfc.Point(q, "d" + q, xoff=900, xon=300, feeds=("h0>leaf", "h2>leaf", "h3>leaf"))
              for q in ("leaf>h1", "leaf>h4")]
    logic = pfc.Pausing(points)
    queues = {"leaf>h1": 1000, "leaf>h4": 1000}
    parts = {"leaf>h1": {"h0>leaf": 250, "h2>leaf": 750}, "leaf>h4": {"h0>leaf": 250, "h3>leaf": 750}}
    assert logic.step(0.0, queues, parts) == (["h0>leaf", "h2>leaf", "h3>leaf"], [])
    # one queue drains below Xon: h0's 250 in the other is still above its share of Xon (100), so it stays paused
    assert logic.step(1.0, {"leaf>h1": 200, "leaf>h4": 1000},
                      {"leaf>h4": {"h0>leaf": 250, "h3>leaf": 750}}) == ([], ["h2>leaf"])
    assert logic.step(2.0, {"leaf>h4": 1000}, {"leaf>h4": {"h0>leaf": 50, "h3>leaf": 950}}) == ([], ["h0>leaf"])
    single = pfc.Pausing(points[:1])                                        # one queue alone: h0 under its share
    assert single.step(0.0, {"leaf>h1": 1000}, {"leaf>h1": {"h0>leaf": 250, "h2>leaf": 750}}) == (["h2>leaf"], [])


def test_the_ingress_of_each_feed_is_the_switchs_own_port_on_its_link():
    fabric = topo.build("rail-only", 4, 1, pfc=PFC)
    point = next(p for p in pfc.Plan.of(fabric, lambda h: None).points if p.name == "rail0>s1g0")
    assert point.feeds == ("s0g0>rail0", "s2g0>rail0", "s3g0>rail0")
    assert [i.rsplit("-", 1)[1] for i in point.ingress] == ["p1", "p3", "p4"]
