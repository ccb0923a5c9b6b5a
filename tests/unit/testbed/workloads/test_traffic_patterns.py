"""The traffic workload's background patterns (incast, permutation, all-to-all) and offered load, on a job's
hosts (odd counts) and on the whole fabric, and the one-line refusals of bad input."""
import os
import subprocess
import sys

import pytest

from testbed import PROJECT_ROOT
from testbed.fabric.topo import build
from testbed.scenario.loader import validate as validate_doc
from testbed.scenario.schema import ScenarioError
from testbed.workloads import traffic
from testbed.workloads.concurrent_placement import JobFabric

THREE = ["s0g0", "s1g1", "s2g2"]
FIVE = ["s0g0", "s0g1", "s1g0", "s2g3", "s3g2"]


@pytest.fixture(scope="module")
def fabric():
    return build("rail-optimized", 4, 4, spines=2, nic_mbps=10)


@pytest.mark.parametrize("hosts", [THREE, FIVE])
def test_incast_sends_from_every_other_host_to_the_first(fabric, hosts):
    pairs = traffic.flow_pairs(JobFabric(fabric, hosts), {"pattern": "incast"})
    assert pairs == [(h, hosts[0]) for h in hosts[1:]]


def test_incast_to_a_named_target(fabric):
    pairs = traffic.flow_pairs(JobFabric(fabric, FIVE), {"pattern": "incast", "target": "s2g3"})
    assert pairs == [(h, "s2g3") for h in FIVE if h != "s2g3"]


def test_incast_on_the_whole_fabric(fabric):
    pairs = traffic.flow_pairs(fabric, {"pattern": "incast", "target": "s3g3"})
    assert len(pairs) == 15 and {d for _, d in pairs} == {"s3g3"} and len({s for s, _ in pairs}) == 15


def test_incast_on_rail_only_leaves_out_the_other_rails():
    rail_only = build("rail-only", 3, 2, nic_mbps=10)
    assert traffic.flow_pairs(rail_only, {"pattern": "incast"}) == [("s1g0", "s0g0"), ("s2g0", "s0g0")]


@pytest.mark.parametrize("hosts", [THREE, FIVE])
def test_all_to_all_is_every_ordered_pair(fabric, hosts):
    pairs = traffic.flow_pairs(JobFabric(fabric, hosts), {"pattern": "all-to-all"})
    assert sorted(pairs) == sorted((a, b) for a in hosts for b in hosts if a != b)


def test_permutation_of_an_odd_job_is_one_cycle_over_its_servers(fabric):
    pairs = traffic.flow_pairs(JobFabric(fabric, FIVE), {"pattern": "permutation"})
    assert sorted(s for s, _ in pairs) == sorted(FIVE)           # every host sends once
    assert all(fabric.hosts[s].server != fabric.hosts[d].server for s, d in pairs)
    # server 0's two GPUs go to server 1 (rail +1), server 3's to server 0
    assert ("s0g0", "s1g0") in pairs and ("s3g2", "s0g1") in pairs


def test_load_paces_each_sender_at_its_share_of_its_nic(fabric):
    flows = traffic.plan_flows(JobFabric(fabric, FIVE), {"pattern": "all-to-all", "load": 0.5, "size": "4MiB"})
    assert len(flows) == 20 and all(f["bytes"] == 4 << 20 for f in flows)
    for h in FIVE:                                # 4 flows per sender: 0.5 x 10 Mbit/s between them
        assert sum(f["rate_mbps"] for f in flows if f["src"] == h) == pytest.approx(5.0)
    incast = traffic.plan_flows(JobFabric(fabric, THREE), {"pattern": "incast", "load": 0.8, "flows_per_pair": 2})
    assert [f["rate_mbps"] for f in incast] == pytest.approx([4.0] * 4)


@pytest.mark.parametrize("spec, says", [
    ({"pattern": "incast", "target": "s9g9"}, "target names unknown host 's9g9'"),
    ({"pattern": "incast", "target": "s3g3"}, "target 's3g3' is not one of its GPUs \\(s0g0, s1g1, s2g2\\)"),
    ({"pattern": "permutation", "target": "s0g0"}, "target is for pattern incast"),
    ({"pattern": "incast", "load": 0.5, "rate_mbps": 3}, "rate_mbps or load, not both"),
    ({"pattern": "incast", "protocol": "udp", "congestion": "dcqcn"}, "congestion is for protocol roce, not udp"),
])
def test_bad_patterns_say_why(fabric, spec, says):
    with pytest.raises(ScenarioError, match=says):
        traffic.plan_flows(JobFabric(fabric, THREE), spec)


def test_incast_with_one_host_is_refused(fabric):
    with pytest.raises(ScenarioError, match="at least 2 hosts, has 1"):
        traffic.flow_pairs(JobFabric(fabric, ["s0g0"]), {"pattern": "incast"})


@pytest.mark.parametrize("load", [0, 1.5, -0.2])
def test_a_load_outside_0_1_is_refused_by_the_schema(load):
    doc = {"name": "x", "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2},
           "workloads": [{"type": "traffic", "pattern": "incast", "load": load}]}
    with pytest.raises(ScenarioError, match="load"):
        validate_doc(doc)
    doc["workloads"][0]["load"] = 1
    validate_doc(doc)


@pytest.mark.parametrize("job, says", [
    ("{name: bg, type: traffic, pattern: incast, target: s1g1, placement: {rails: [0]}}",
     "jobs.0 (bg): traffic incast target 's1g1' is not one of its GPUs (s0g0, s1g0)"),
    ("{name: bg, type: traffic, pattern: incast, placement: {hosts: [s1g1]}}",
     "jobs.0 (bg): traffic pattern 'incast' needs at least 2 hosts, has 1"),
    ("{name: bg, type: traffic, pattern: incast, load: 2, placement: {rails: [0]}}", "load"),
    ("{name: bg, type: traffic, protocol: roce, congestion: fast, placement: {rails: [0]}}", "congestion"),
    ("{name: bg, type: traffic, protocol: tcp, congestion: delay, placement: {rails: [0]}}",
     "jobs.0 (bg): traffic congestion is for protocol roce, not tcp"),
])
def test_the_cli_refuses_a_bad_background_job_in_one_line_with_exit_2(tmp_path, job, says):
    path = tmp_path / "bg.yaml"
    path.write_text("name: bg\nfabric: {kind: rail-optimized, servers: 2, gpus_per_server: 2}\nworkloads:\n"
                    f"  - type: concurrent\n    jobs:\n      - {job}\n")
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(path)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PROJECT_ROOT})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert says in done.stderr


def test_roce_ranks_pace_each_sender_at_its_offered_load_and_pair_their_flows(fabric):
    """protocol roce: a rank per host; each flow is a send at its source and a receive at its destination (the
    same flow numbers, in the same order), and a sender's queue pairs share its offered rate, at most the shaped
    NIC's rate."""
    job = JobFabric(fabric, FIVE)
    flows = traffic.plan_flows(job, {"pattern": "all-to-all", "protocol": "roce", "load": 0.5})
    assert {f["proto"] for f in flows} == {"roce"} and len(flows) == 20
    ranks = traffic.roce_ranks(job, flows, "single", "/store", 100.0, "dcqcn")
    assert sorted(ranks) == sorted(FIVE)
    names = [p.name for p in ranks["s0g0"].peers]
    assert all(p.server is None for p in ranks["s0g0"].peers)      # same-server flows take the NICs too
    for h, r in ranks.items():
        assert r.peers[r.rank].name == h and r.start_at == 100.0 and r.congestion == "dcqcn"
        assert r.rate_limit_bps.nic == pytest.approx(0.5 * 10e6)     # 4 flows sharing half of 10 Mbit/s
        assert [names[s.peer] for s in r.sends] == [f["dst"] for f in flows if f["src"] == h]
        assert [names[s.peer] for s in r.recvs] == [f["src"] for f in flows if f["dst"] == h]
    full = traffic.roce_ranks(job, traffic.plan_flows(job, {"pattern": "incast", "protocol": "roce", "load": 1}),
                              "single", "/store", 0.0, None)
    assert all(r.rate_limit_bps.nic == pytest.approx(10e6) for r in full.values())     # a NIC at line rate


def test_roce_flow_results_fail_on_wrong_or_missing_data(fabric):
    job = JobFabric(fabric, THREE)
    good = {"flow": 0, "proto": "roce", "src": "s1g1", "dst": "s0g0", "bytes": 100, "expected_bytes": 100,
            "mbps": 1.0, "error": None, "lost_packets": None, "reordered": None}
    assert traffic.summarize(job, {"protocol": "roce"}, [good], {})["ok"]
    short = {**good, "bytes": 0, "error": "data differs from what was sent"}
    result = traffic.summarize(job, {"protocol": "roce"}, [good, {**short, "flow": 1}], {})
    assert not result["ok"] and "flow 1" in result["checks"][0]["detail"]
