"""Integration (root): a site of a DiLoCo run cut off for longer than the transport's retries leaves the outer
steps and comes back with the global state (docs/diloco.md, "A site lost and back"); every replica bit-equal to
the numpy reference of the same membership history afterwards."""
import pytest

from testbed import runner

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_a_site_cut_past_the_retries_leaves_and_rejoins_with_every_replica_exact(tmp_path):
    """Site us loses its WAN links from second 1 to second OUT (longer than its leaders' retries): the outer
    steps in between have site eu alone, us trains on its own, asks to come back at each of its outer steps and
    takes the outer parameters and momentum from eu once the WAN is back; the run completes."""
    from testbed.scenario import load
    from tests.paths import ROOT
    out = 12.0
    scenario = load(f"{ROOT}/scenarios/diloco_sites.yaml", ["workloads.0.variants=[diloco]", "workloads.0.steps=24",
                                                            "workloads.0.rejoin=true", "workloads.0.timeout_s=40",
                                                            "fabric.wan.0.queue_kb=64", "fabric.queue_kb={nic: 32, uplink: 32, hb: 64}"])
    scenario["faults"] = [{"at": 1.0, "kind": "link-down", "target": "site:us", "duration": out - 1.0}]
    r = runner.run(scenario, str(tmp_path / "run"), echo=lambda *a: None)
    (row,) = r["workloads"][0]["variants"]
    m = row.get("membership") or {}
    print(f"errors {row.get('errors')}; membership {m}; replicas {row.get('replicas')}; faults {r['faults']}")
    base = r["workloads"][0]["started_s"]
    ev = {e["event"]: base + e["event_s"] for e in m.get("events", [])}
    if len(ev) == 2:
        fault, = r["faults"]
        print(f"outage {fault['restored_s'] - fault['at_s']:.1f} s; us left {ev['left'] - fault['at_s']:.2f} s "
              f"into it, rejoined {ev['rejoined'] - fault['restored_s']:.2f} s after it ended; resync "
              f"{m['resync_bytes']} B")
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    assert [0] in m["members"] and m["members"][-1] == [0, 1]            # us left, and was back at the end
    assert [e["event"] for e in m["events"] if e["site"] == 1] == ["left", "rejoined"]
    assert [s for _, s in m["resyncs"]] == [1] and m["resync_bytes"] == 2 * 4 * r["workloads"][0]["count"]
    assert row["replicas"] == {"ranks": 8, "wrong": [], "outer_agree": True, "sites_agree": True}
    # it left once its leader's retries had run out (the anchor's decision is written when both leaders'
    # exchanges have given up, which may be just after the links are back), and came back after the outage
    assert r["faults"][0]["at_s"] < ev["left"] < ev["rejoined"] and ev["rejoined"] > r["faults"][0]["restored_s"]


def test_an_8_bit_diloco_site_cut_past_the_retries_rejoins_exact_and_streaming_is_refused(tmp_path):
    """The same outage during 8-bit DiLoCo (the fault counts from the start of the quantised run, after the
    float32 one): the leaders' AllGather of payloads among the sites still reachable, us away and back with the
    state and its error-feedback residual cleared, every replica bit-equal to the numpy reference of that
    history (the reference quantises as the ranks do). Streaming with rejoin is refused before any bring-up."""
    from testbed.cli.validate import check
    from testbed.scenario import load
    from tests.paths import ROOT
    out = 12.0
    sets = ["workloads.0.variants=[diloco]", "workloads.0.steps=24", "workloads.0.rejoin=true",
            "workloads.0.timeout_s=40", "workloads.0.quantize=8", "workloads.0.name=q8",
            "workloads.0.faults_from_run=1", "fabric.wan.0.queue_kb=64", "fabric.queue_kb={nic: 32, uplink: 32, hb: 64}"]
    _, _, errors, _ = check(f"{ROOT}/scenarios/diloco_sites.yaml", sets[1:])      # variants as the file has them
    assert len(errors) == 1 and "diloco rejoin: not with streaming" in errors[0], errors
    scenario = load(f"{ROOT}/scenarios/diloco_sites.yaml", sets)
    scenario["faults"] = [{"at": 1.0, "kind": "link-down", "target": "site:us", "duration": out - 1.0,
                           "workload": "q8"}]
    r = runner.run(scenario, str(tmp_path / "run"), echo=lambda *a: None)
    plain, q8 = r["workloads"][0]["variants"]
    m = q8.get("membership") or {}
    print(f"errors {q8.get('errors')}; membership {m}; replicas {q8.get('replicas')}; faults {r['faults']}; "
          f"float32's membership {plain.get('membership')}")
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    assert (plain["quantize"], q8["quantize"]) == (0, 8)
    assert plain["membership"]["members"] == [[0, 1]] * 6 and plain["replicas"]["wrong"] == []   # untouched
    assert [0] in m["members"] and m["members"][-1] == [0, 1]
    assert [e["event"] for e in m["events"] if e["site"] == 1] == ["left", "rejoined"]
    assert [s for _, s in m["resyncs"]] == [1] and m["resync_bytes"] == 2 * 4 * r["workloads"][0]["count"]
    assert q8["replicas"] == {"ranks": 8, "wrong": [], "outer_agree": True, "sites_agree": True}
    base = r["workloads"][0]["started_s"]
    ev = {e["event"]: base + e["event_s"] for e in m["events"]}
    fault, = r["faults"]
    assert fault["at_s"] < ev["left"] < ev["rejoined"] and ev["rejoined"] > fault["restored_s"]
