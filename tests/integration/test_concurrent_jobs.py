"""Integration (root): several jobs on one fabric at once (the `concurrent` workload). Jobs on disjoint rails of a
rail-only fabric share no link and run as fast together as alone; two rings routed over the same shaped spine
uplinks of a 1:1 rail-optimized fabric share them and each slows down by about half. Every job's collective is
checked against numpy's, alone and together, and the fabric's bytes split by job add up to its port counters."""
import statistics

import pytest

from controllers.routes import Topology
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.workloads import concurrent

pytestmark = [pytest.mark.root, pytest.mark.alone]    # slowdowns are timing ratios: they need CPU headroom

NIC_MBPS = 5
RING = {"type": "collective", "op": "allreduce", "algo": "ring", "sizes": ["1MiB"], "iterations": 2}


def ring(name: str, hosts: list[str]) -> dict:
    return {**RING, "name": name, "placement": {"hosts": hosts}}


def run_jobs(fabric, spec: dict, routing: str = "single") -> dict:
    """A concurrent workload validated and run on its own fabric (single-path routes), its slowdowns printed."""
    concurrent.validate(fabric, spec, {})
    with Network(fabric, routing=routing, route_groups=True) as net:     # as the runner brings it up for them
        result = concurrent.run(net, spec)
    print(describe(result), [c for c in result["checks"] if not c["ok"]])
    return result


def assert_exact(result: dict, parts=("alone", "together")) -> None:
    """Every collective job's every size equal to numpy's on every rank, alone and together."""
    for job in result["jobs"]:
        for when in parts:
            run = job[when]
            assert run["ok"], (job["job"], when, run["checks"])
            if job["type"] == "collective":
                assert run["rows"] and all(r["correct"] for r in run["rows"]), (job["job"], when)


def describe(result: dict) -> str:
    return ", ".join(f"{j['job']} {j['seconds_alone']} s alone, {j['seconds_together']} s together "
                     f"(x{j['slowdown']})" for j in result["jobs"])


def test_jobs_on_disjoint_rails_of_rail_only_do_not_slow_each_other():
    """Two rings and a traffic job, one rail each: no link in common, so each runs as fast as alone (the median
    of the jobs' slowdowns at most 1.1, and none above 1.2: a 2-core machine's noise)."""
    fabric = build("rail-only", 2, 3, nic_mbps=NIC_MBPS)
    spec = {"type": "concurrent", "jobs": [
        {**RING, "name": "rail0", "placement": {"rails": [0]}},
        {**RING, "name": "rail1", "placement": {"rails": [1]}},
        {"type": "traffic", "name": "rail2", "placement": {"rails": [2]}, "size": "512KiB", "protocol": "udp"}]}
    result = run_jobs(fabric, spec)
    assert result["ok"], result["checks"]
    assert_exact(result)
    assert [j["hosts"] for j in result["jobs"]] == [["s0g0", "s1g0"], ["s0g1", "s1g1"], ["s0g2", "s1g2"]]
    # each rail switch carried one job only: the bytes by job say so, and add up to the port counters
    assert result["job_bytes_deviation"] <= 0.02
    assert {sw: set(by) for sw, by in result["switch_bytes_by_job"].items() if sw.startswith("rail")} == \
        {"rail0": {"rail0"}, "rail1": {"rail1"}, "rail2": {"rail2"}}, result["switch_bytes_by_job"]
    slowdowns = [j["slowdown"] for j in result["jobs"]]
    assert statistics.median(slowdowns) <= 1.1 and max(slowdowns) <= 1.2, slowdowns


def uplink_of(fabric, src: str, dst: str) -> str:
    """The spine uplink that single-path routing gives src's packets to dst (the controller's own route table)."""
    routes = Topology(fabric.to_controller()).routes("single")
    leaf = f"rail{fabric.hosts[src].rank}"
    port = routes[leaf][fabric.hosts[dst].ip][0]
    return next(f"{l.a}-{l.b}" for l in fabric.links if l.kind == "uplink" and l.a == leaf and l.a_port == port)


def test_two_rings_over_one_shaped_uplink_slow_each_other_down():
    """Each ring joins rail 0 and rail 1 of different servers; single-path routing takes both rings' rail0 ->
    spine and rail1 -> spine hops over the same uplink, shaped to one NIC's rate on this 1:1 fabric. Each
    ring gets half of it together: slowdown >= 1.5 (2 ideally)."""
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=NIC_MBPS)
    assert fabric.params.faithful              # the uplinks are shaped (fabric.ideal_uplinks off)
    a, b = ["s0g0", "s1g1"], ["s1g0", "s0g1"]
    assert uplink_of(fabric, "s0g0", "s1g1") == uplink_of(fabric, "s1g0", "s0g1")
    assert uplink_of(fabric, "s1g1", "s0g0") == uplink_of(fabric, "s0g1", "s1g0")
    spec = {"type": "concurrent", "jobs": [ring("ring-a", a), ring("ring-b", b)]}
    result = run_jobs(fabric, spec)
    assert result["ok"], result["checks"]
    assert_exact(result)
    assert all(j["slowdown"] >= 1.5 for j in result["jobs"]), describe(result)
    # the routes' counters split every switch's and every uplink's bytes by job, adding up to the port counters
    assert result["job_bytes_deviation"] <= 0.02
    shared = result["uplink_bytes_by_job"][uplink_of(fabric, "s0g0", "s1g1").replace("-", ">")]
    assert set(shared) == {"ring-a", "ring-b"} and min(shared.values()) >= 1 << 20, shared


@pytest.mark.parametrize("routing", ["ecmp", "spray"])
def test_bytes_by_job_on_every_link_under_ecmp_and_spraying(routing):
    """Two rings across the spines, routed by ECMP (each queue pair hashed onto an uplink) or sprayed (every
    packet hashed anew): each multi-path route's own group counts what each of its ports sent, so every link's
    bytes split by job, the uplinks' included, and add up to its port counter within 2%."""
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=NIC_MBPS)
    spec = {"type": "concurrent", "alone": False,
            "jobs": [{**ring("ring-a", ["s0g0", "s1g1"]), "sizes": ["512KiB"]},
                     {**ring("ring-b", ["s1g0", "s0g1"]), "sizes": ["512KiB"]}]}
    result = run_jobs(fabric, spec, routing)
    assert result["ok"], [c for c in result["checks"] if not c["ok"]]
    assert_exact(result, parts=("together",))
    uplinks = result["uplink_bytes_by_job"]
    print(routing, uplinks, result["job_bytes_deviation"])
    assert result["job_bytes_deviation"] <= 0.02
    # the rail switches send to the spines through ECMP groups: their uplinks split by job (before, only
    # single-path ports were), each ring's share at least its 2 iterations' cross-spine half of 512 KiB
    crossed = {job: sum(by.get(job, 0) for link, by in uplinks.items() if link.startswith("rail"))
               for job in ("ring-a", "ring-b")}
    assert all(n >= 512 * 1024 for n in crossed.values()), crossed
    if routing == "spray":          # every ring's packets over both spines
        for job in ("ring-a", "ring-b"):
            assert len({link.split(">")[1] for link, by in uplinks.items()
                        if link.startswith("rail") and by.get(job, 0) > 0}) == 2, uplinks


def test_training_and_program_jobs_run_side_by_side():
    """A training iteration (tp 2, dp 2) on servers 0-1 and a torch.distributed program on rail 0 of servers 2-3:
    each completes with its own checks passed, alone and together, and each rail switch's bytes split between the
    two jobs add up to its port counters. (The training checks that no byte crossed the spines, a figure of the
    whole fabric's counters: the program stays on one rail, so the check holds beside it.)"""
    pytest.importorskip("torch", reason="the program job runs torch.distributed (make setup EXTRAS=torch)")
    fabric = build("rail-optimized", 4, 2, spines=2, nic_mbps=NIC_MBPS)
    spec = {"type": "concurrent", "jobs": [
        {"type": "training_iteration", "name": "train", "plan": {"tp": 2, "pp": 1, "dp": 2}, "micro_batches": 2,
         "target_s": 2, "iterations": 2, "placement": {"servers": [0, 1]}},
        {"type": "program", "name": "gloo", "command": "{python} hosts/programs/torch_gloo.py --sizes 64KiB --steps 2",
         "timeout_s": 120, "placement": {"servers": [2, 3], "rails": [0]}}]}
    result = run_jobs(fabric, spec)
    assert result["ok"], [c for c in result["checks"] if not c["ok"]]
    assert [j["hosts"] for j in result["jobs"]] == [["s0g0", "s0g1", "s1g0", "s1g1"], ["s2g0", "s3g0"]]
    assert all(j["slowdown"] is not None for j in result["jobs"])
    assert result["job_bytes_deviation"] <= 0.02
    by_job = result["switch_bytes_by_job"]
    assert set(by_job["rail0"]) == {"train", "gloo"} and set(by_job["rail1"]) == {"train"}, by_job


def test_an_incast_background_job_slows_a_ring_at_its_receiver():
    """A UDP incast (every other GPU to s1g1, each sender at 0.3 of its NIC: 0.9 of s1g1's downlink) beside a ring
    that receives at s1g1: the ring gets what is left of that NIC's link and slows down (slowdown > 1.2), and
    the switch port down to s1g1 carried the incast's bytes (its routes' counters: the two jobs share s1g1, so
    its route's bytes count for one of them, the later, and their sum is the port's)."""
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=NIC_MBPS)
    incast = {"type": "traffic", "name": "incast", "pattern": "incast", "target": "s1g1", "load": 0.3,
              "size": "1MiB", "protocol": "udp", "expect": {"max_loss": 0.5},   # background: loss is its price
              "placement": {"servers": [0, 1]}}
    spec = {"type": "concurrent", "allow_overlap": True,
            "jobs": [{**ring("ring", ["s0g0", "s1g1"]), "sizes": ["512KiB"]}, incast]}
    result = run_jobs(fabric, spec)
    assert result["ok"], [c for c in result["checks"] if not c["ok"]]
    assert_exact(result)
    ring_job, bg = result["jobs"]
    assert ring_job["slowdown"] > 1.2, describe(result)
    flows = bg["together"]["per_flow"]
    assert sorted(f["src"] for f in flows) == ["s0g0", "s0g1", "s1g0"] and {f["dst"] for f in flows} == {"s1g1"}
    nic = fabric.attachment("s1g1")
    down = f"{nic.a}:{nic.a_port}" if nic.b == "s1g1" else f"{nic.b}:{nic.b_port}"
    print(down, result["link_bytes_by_job"].get(down), bg["together"]["delivered_bytes"])
    assert all(f["bytes"] >= 0.5 * f["expected_bytes"] for f in flows), flows
    # alone, each sender offered its load and no more: 0.3 x 5 Mbit/s
    assert all(f["mbps"] <= 1.1 * 0.3 * NIC_MBPS for f in bg["alone"]["per_flow"]), bg["alone"]["per_flow"]
    assert sum(result["link_bytes_by_job"][down].values()) >= bg["together"]["delivered_bytes"], \
        result["link_bytes_by_job"][down]


def crash_scenario() -> dict:
    """Job `hit` (rail 0 of three servers) runs by itself with a GPU crash, then beside job `other` (rail 1) with
    the same crash, timed from the moment the jobs start together. Both recover by shrinking."""
    hit = {**RING, "name": "hit", "sizes": ["512KiB"], "iterations": 4, "timeout_s": 20, "recovery": "shrink",
           "placement": {"rails": [0]}}
    other = {**RING, "name": "other", "sizes": ["512KiB"], "iterations": 4, "timeout_s": 20,
             "placement": {"rails": [1]}}
    crash = {"at": 2.5, "kind": "gpu-crash", "target": "s2g0"}
    return {"name": "concurrent-crash",
            "fabric": {"kind": "rail-only", "servers": 3, "gpus_per_server": 2, "nic_mbps": NIC_MBPS},
            "routing": {"mode": "single"},
            "workloads": [{"type": "concurrent", "name": "by-itself", "alone": False, "jobs": [hit]},
                          {"type": "concurrent", "name": "side-by-side", "jobs": [hit, other]}],
            "faults": [{**crash, "workload": "by-itself"}, {**crash, "workload": "side-by-side"}]}


@pytest.mark.slow
def test_a_gpu_crash_in_one_job_leaves_the_other_job_alone(tmp_path):
    """A GPU crash in job `hit` while job `other` runs beside it on another rail: the fault's record names both
    jobs, `hit` as hit (its GPU) and `other` as not. `hit` detects it by heartbeats, shrinks and ends with numpy's
    result as it does by itself; `other` has no recovery, ends exact, and its measured time stays within 10% of
    its time alone."""
    from testbed import runner
    doc = crash_scenario()
    runner.check(doc, runner.fabric_of(doc))
    out = runner.run(doc, str(tmp_path / "run"), echo=lambda *a: None)
    print(runner.summary_table(out))
    assert out["ok"], [c for c in out["checks"] if not c["ok"]]
    by_itself, side_by_side = out["faults"]
    views = {j["job"]: j for j in side_by_side["jobs"]}
    assert set(views) == {"hit", "other"} and {j["part"] for j in views.values()} == {"together"}, views
    alone_view, = by_itself["jobs"]
    hit, other = views["hit"], views["other"]
    # the crashed job: found by its heartbeats, re-formed without s2g0, exact, as when it ran by itself
    for view, fault in ((alone_view, by_itself), (hit, side_by_side)):
        assert view["hit"] and "s2g0" in view["why"], view
        assert view["detected_by"] == "heartbeats" and view["recovery"] == "shrink", view
        assert 0 < view["detected_s"] - fault["at_s"] < 3 and view["recovered_s"] > view["detected_s"], view
        assert view["ended"] == "completed" and view["exact"], view
    assert hit["lost_steps"] == alone_view["lost_steps"]
    assert side_by_side["detected_by"] == "heartbeats" and side_by_side["recovery"] == "shrink", side_by_side
    # the other job: untouched
    assert not other["hit"] and other["detected_s"] is None and other["recovery"] is None, other
    assert other["ended"] == "completed" and other["exact"], other
    jobs = {j["job"]: j for j in out["workloads"][1]["jobs"]}
    assert not jobs["other"]["together"]["recoveries"] and jobs["hit"]["together"]["recoveries"]
    assert abs(jobs["other"]["slowdown"] - 1) <= 0.10, describe(out["workloads"][1])


def run_one_cut(doc: dict, tmp_path):
    """Run a scenario with one link fault that passes; its results, the fault's record and each job's view of it."""
    from testbed import runner
    runner.check(doc, runner.fabric_of(doc))
    out = runner.run(doc, str(tmp_path / "run"), echo=lambda *a: None)
    print(runner.summary_table(out))
    assert out["ok"], [c for c in out["checks"] if not c["ok"]]
    fault, = out["faults"]
    return out, fault, {j["job"]: j for j in fault["jobs"]}


def test_a_link_cut_names_the_jobs_whose_bytes_crossed_it(tmp_path):
    """A spine uplink on ring-a's path cut for 1 s while ring-a (across the spines) and ring-c (on rail 2) run
    together: the fault's record names ring-a as hit (its bytes crossed the link) and ring-c as not; both end
    with numpy's result. The controller rerouted, so the bytes by job are reported but not checked (a replaced
    route's counters go with it)."""
    doc = {"name": "concurrent-cut",
           "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 3, "spines": 2,
                      "oversubscription": 1, "nic_mbps": NIC_MBPS},
           "routing": {"mode": "single"},
           "workloads": [{"type": "concurrent", "name": "two", "alone": False,
                          "jobs": [ring("ring-a", ["s0g0", "s1g1"]), ring("ring-c", ["s0g2", "s1g2"])]}],
           "faults": [{"workload": "two", "at": 1.5, "kind": "link-down", "target": "path:s0g0>s1g1",
                       "duration": 1.0}]}
    out, fault, views = run_one_cut(doc, tmp_path)
    assert views["ring-a"]["hit"] and "crossed" in views["ring-a"]["why"], views
    assert not views["ring-c"]["hit"], views
    assert all(v["ended"] == "completed" and v["exact"] for v in views.values()), views
    w = out["workloads"][0]
    assert w["rerouted"] >= 1 and not any(c["name"] == "two: job bytes" for c in out["checks"])


def test_a_link_cut_counts_the_flows_it_cut_per_traffic_job(tmp_path):
    """The NIC cable of a UDP traffic job's receiver cut for 1 s while a ring runs on rail 2: the traffic job's entry counts its 4 flows as cut and says when they resumed;
    the ring, which measures no flows, was not hit; the fault's own `flows_cut` counts the job's flows."""
    cross = {"type": "traffic", "name": "cross", "pattern": "pairs", "pairs": [["s0g1", "s1g0"]],
             "flows_per_pair": 4, "size": "256KiB", "rate_mbps": 0.5, "protocol": "udp",
             "expect": {"max_loss": 0.5}, "placement": {"hosts": ["s0g1", "s1g0"]}}
    doc = {"name": "concurrent-cut-flows",
           "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 3, "spines": 2,
                      "oversubscription": 1, "nic_mbps": NIC_MBPS},
           "routing": {"mode": "single", "failover": False},
           "workloads": [{"type": "concurrent", "name": "two", "alone": False,
                          "jobs": [cross, ring("ring-c", ["s0g2", "s1g2"])]}],
           # the receiver's NIC cable: no other path, so every flow falls silent (a spine uplink's cut is routed
           # around in ~10 ms, under the flows' silence threshold of 1.5 packet times)
           "faults": [{"workload": "two", "at": 1.5, "kind": "link-down", "target": "s1g0-rail0",
                       "duration": 1.0}]}
    out, fault, views = run_one_cut(doc, tmp_path)
    assert views["cross"]["hit"] and views["cross"]["flows_cut"] == 4, views["cross"]
    assert fault["at_s"] < views["cross"]["resumed_s"], views["cross"]
    assert not views["ring-c"]["hit"] and views["ring-c"]["flows_cut"] is None and views["ring-c"]["exact"], views
    assert fault["flows_cut"] == 4 and fault["resumed_s"] == views["cross"]["resumed_s"], fault


@pytest.mark.slow
def test_two_jobs_that_lose_gpus_of_one_server_never_hold_one_spare_at_once(tmp_path):
    """Two rings, each with a GPU on server 1 and recovery `spare`, lose those GPUs at the same moment. Server 1
    has two spare GPUs; the spare one job takes is not offered to the other while it holds it, so each job
    re-forms with a spare of its own and both end with numpy's result. (A job whose crash is found late, after
    the other job has ended and parked its spare, may take that one: never while the other holds it.)"""
    from testbed import runner
    job = {**RING, "sizes": ["256KiB"], "iterations": 4, "timeout_s": 30, "recovery": "spare"}
    doc = {"name": "concurrent-spares",
           # two GPUs of each job on server 1: a job that lost all of its GPUs there takes the server for down
           "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 4, "spines": 2,
                      "oversubscription": 1, "nic_mbps": NIC_MBPS, "spares_per_server": 2},
           "routing": {"mode": "single"},
           "workloads": [{"type": "concurrent", "name": "two", "alone": False,
                          "jobs": [{**job, "name": "a", "placement": {"hosts": ["s0g0", "s0g1", "s1g0", "s1g1"]}},
                                   {**job, "name": "b", "placement": {"hosts": ["s0g2", "s0g3", "s1g2", "s1g3"]}}]}],
           "faults": [{"workload": "two", "at": 1.0, "kind": "gpu-crash", "target": t} for t in ("s1g0", "s1g2")]}
    runner.check(doc, runner.fabric_of(doc))
    out = runner.run(doc, str(tmp_path / "run"), echo=lambda *a: None)
    print(runner.summary_table(out))
    assert out["ok"], [c for c in out["checks"] if not c["ok"]]
    taken, reformed = {}, {}
    for fault in out["faults"]:
        view, = [j for j in fault["jobs"] if j["hit"]]
        assert view["recovery"] == "spare" and view["ended"] == "completed" and view["exact"], view
        assert fault["replaced_by"] and set(fault["replaced_by"]) == {fault["target"]}, fault
        taken[view["job"]] = fault["replaced_by"][fault["target"]]
        reformed[view["job"]] = fault["recovered_s"]
    assert sorted(taken) == ["a", "b"], taken
    assert all(fabric_spare.startswith("s1spare") for fabric_spare in taken.values()), taken
    if len(set(taken.values())) == 1:       # one spare for both: the second took it once the first had ended
        jobs = {j["job"]: j for j in out["workloads"][0]["jobs"]}
        assert None not in reformed.values(), reformed
        first, second = sorted(taken, key=reformed.get)
        # the fault's times count from the workloads' start; the job's start is a Unix time
        ended = jobs[first]["together_at"] - out["timings"]["workloads_start"] + jobs[first]["together_wall_s"]
        assert reformed[second] >= ended, (taken, reformed, ended)


def test_a_multicast_jobs_bytes_are_attributed_though_its_trees_are_gone():
    """A multicast AllGather beside a ring, across the spines: the trees' flows go when the ranks leave their groups,
    but the controller keeps their last byte counts (FLOW_REMOVED), so the multicast job's bytes split by switch
    and link too, and every switch and link adds up to its port counters within 2%. Three ranks, two on rail 0:
    rail 0's tree rules change ports as the third joins and leaves, each change a flow of its own."""
    fabric = build("rail-optimized", 3, 2, spines=2, oversubscription=1, nic_mbps=NIC_MBPS)
    spec = {"type": "concurrent", "alone": False, "jobs": [
        {"type": "collective", "name": "gather", "op": "allgather", "algo": "multicast", "sizes": ["256KiB"],
         "iterations": 2, "placement": {"hosts": ["s0g0", "s1g0", "s2g1"]}},
        {**ring("ring", ["s2g0", "s0g1"]), "sizes": ["256KiB"]}]}
    result = run_jobs(fabric, spec, "ecmp")
    assert result["ok"], [c for c in result["checks"] if not c["ok"]]
    assert_exact(result, parts=("together",))
    print(result["job_bytes_deviation"], result["uplink_bytes_by_job"])
    assert result["job_bytes_deviation"] <= 0.02
    assert any(c["name"] == "job bytes" and c["ok"] for c in result["checks"])
    # the gather's tree crosses a spine: its shards (2 iterations of about 85 KiB from each rank, plus a warm-up)
    # are on the uplinks, and every rank's port sent it the other ranks' shards
    gather_up = sum(by.get("gather", 0) for by in result["uplink_bytes_by_job"].values())
    assert gather_up >= 2 * 2 * 85 * 1024, result["uplink_bytes_by_job"]
    host_ports = {f"{l.b}:{l.b_port}": l.a for l in fabric.links
                  if l.a in ("s0g0", "s1g0", "s2g1") and l.b.startswith("rail")}
    got = {host: result["link_bytes_by_job"].get(port, {}).get("gather", 0) for port, host in host_ports.items()}
    assert len(got) == 3 and all(n >= 2 * 2 * 85 * 1024 for n in got.values()), (got, result["link_bytes_by_job"])
