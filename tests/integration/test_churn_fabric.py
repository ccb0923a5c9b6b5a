"""Churn (root): GPUs that come back rejoin the job, and a job under seeded failures and returns keeps its
shared state exact.

A restarted GPU's rank asks to rejoin; the communicator grows at the next step boundary and the newcomer is
sent the shared state over the network by a live peer; every rank's state after every step is checked bit for
bit against numpy's. The 10-minute churn run is a benchmark (benchmarks/churn.py), not part of the suite.
"""
import pytest

from testbed import runner

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.alone]   # a neighbour's load could stall a live GPU's beats
FABRIC = {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "nic_mbps": 10}


def run(tmp_path, doc):
    runner.check(doc, runner.fabric_of(doc))
    return runner.run(doc, str(tmp_path / doc["name"]), echo=lambda *a: None)


def test_a_restarted_gpu_rejoins_with_the_state_copied_from_a_live_peer(tmp_path):
    doc = {"name": "rejoin", "fabric": FABRIC,
           "workloads": [{"type": "collective", "op": "allreduce", "algo": "ring", "sizes": ["128KiB"],
                          "iterations": 60, "timeout_s": 20, "recovery": "shrink", "state": True}],
           "faults": [{"at": 3.0, "kind": "gpu-crash", "target": "s1g1"},
                      {"at": 6.0, "kind": "gpu-restart", "target": "s1g1"}]}
    r = run(tmp_path, doc)
    assert r["ok"], r["checks"]
    w = r["workloads"][0]
    row, = w["rows"]
    assert row["ranks"] == 4 and row["correct"]                 # the job ended as it began, exact
    state = row["state"]
    assert state["ranks"] == 4 and state["divergent"] == 0 and state["sync_mismatches"] == 0
    assert state["synced"] == 1 and state["steps"] == 61         # the newcomer was sent the state, once
    shrink, grow = w["recoveries"]
    assert shrink["failed"] == ["s1g1"] and shrink["world"] == 3
    assert grow["policy"] == "rejoin" and grow["joined"] == ["s1g1"] and grow["world"] == 4
    assert grow["lost_steps"] == 0
    crash, back = r["faults"]
    assert crash["recovery"] == "shrink" and back["recovery"] == "rejoin" and back["processes"] == 1
    assert back["at_s"] < back["detected_s"] <= back["recovered_s"] <= back["first_success_s"]
    print(f"rejoin: admitted {back['detected_s'] - back['at_s']:.2f} s after the restart, in the grown "
          f"communicator after {back['recovered_s'] - back['at_s']:.2f} s, first step with it after "
          f"{back['first_success_s'] - back['at_s']:.2f} s; {state['steps']} steps, divergence 0")


@pytest.mark.parametrize("hosts", ["netns", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_short_churn_run_recovers_every_failure_and_keeps_the_state_exact(tmp_path, hosts, request):
    # seed 44: a crash, a crash of rank 0, a NIC cut, a hang and a stall, each GPU back 4-5 s later, and 4 s
    # (gap_s) between a return and the next failure. On Docker hosts a crash kills the container, a hang
    # pauses it, and the returning rank starts it again.
    if hosts == "docker":
        request.getfixturevalue("docker_engine")
    doc = {"name": "churn-short", "fabric": FABRIC, "hosts": hosts,
           "workloads": [{"type": "churn", "duration_s": 60, "seed": 44, "interval_s": 2, "down_s": [3, 6]}]}
    r = run(tmp_path, doc)
    assert r["fabric"]["host_backend"] == hosts
    w = r["workloads"][0]
    assert r["ok"], ([c for c in r["checks"] if not c["ok"]], w.get("events"))
    kinds = [e["kind"] for e in w["events"]]
    assert {"gpu-crash", "gpu-hang", "gpu-stall", "nic-down", "gpu-restart", "nic-up"} == set(kinds)
    assert w["failures"] == 5 and w["rejoins"] == 5 and w["final_world"] == 4
    assert w["divergence"]["divergent"] == 0 and w["divergence"]["sync_mismatches"] == 0
    assert w["divergence"]["ranks"] == 4 and w["divergence"]["synced"] >= 1
    assert w["steps_completed"] > 50 and 0 <= w["steps_lost"] <= 5
    assert 0 < w["recovery_s"] < 5 * 10
    print(f"churn 60 s: {w['steps_completed']} steps, {w['steps_lost']} lost, {w['failures']} failures, "
          f"{w['recovery_s']:.1f} s in recovery, {w['rejoin_s']:.1f} s growing, divergence 0")
