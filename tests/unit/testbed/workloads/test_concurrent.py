"""The concurrent workload without a fabric: placement forms, overlap refusal (exit 2, one line), a job's view of
the fabric, and the slowdown records."""
import os
import subprocess
import sys

import pytest

from testbed import PROJECT_ROOT
from testbed.fabric.topo import build
from testbed.scenario.loader import validate as validate_doc
from testbed.scenario.schema import ScenarioError
from testbed.workloads import concurrent, concurrent_placement, traffic
from testbed.workloads.concurrent_placement import JobFabric, place, place_jobs


@pytest.fixture(scope="module")
def fabric():
    return build("rail-optimized", 4, 4, spines=2, nic_mbps=10)


def test_hosts_and_selectors(fabric):
    assert place(fabric, {"hosts": ["s1g0", "s0g2"]}, set()) == ["s0g2", "s1g0"]
    assert place(fabric, {"servers": [0, 1], "rails": [0]}, set()) == ["s0g0", "s1g0"]
    assert place(fabric, {"rails": [3]}, set()) == ["s0g3", "s1g3", "s2g3", "s3g3"]
    assert place(fabric, {"servers": [2]}, set()) == ["s2g0", "s2g1", "s2g2", "s2g3"]


@pytest.mark.parametrize("placement, says", [
    ({"hosts": ["s9g0"]}, "'s9g0' is not a GPU host"),
    ({"hosts": ["s0g0", "s0g0"]}, "listed twice"),
    ({"servers": [4]}, "placement.servers: 4 is out of range"),
    ({"rails": [7]}, "placement.rails: 7 is out of range"),
    ({"count": 17}, "only 16 GPUs are free"),
    ({"count": 5, "policy": "rail-aligned"}, None),          # 5 = 1 server x 5 rails: no such block
])
def test_bad_placements_say_why(fabric, placement, says):
    with pytest.raises(ScenarioError, match=says or "no rail-aligned block"):
        place(fabric, placement, set())


def test_count_policies(fabric):
    assert place(fabric, {"count": 6, "policy": "packed"}, set()) == \
        ["s0g0", "s0g1", "s0g2", "s0g3", "s1g0", "s1g1"]
    assert place(fabric, {"count": 6, "policy": "spread"}, set()) == \
        ["s0g0", "s0g1", "s1g0", "s1g1", "s2g0", "s3g0"]
    # rail-aligned: the same rails on every server (as many servers as divide the count)
    assert place(fabric, {"count": 8, "policy": "rail-aligned"}, set()) == \
        ["s0g0", "s0g1", "s1g0", "s1g1", "s2g0", "s2g1", "s3g0", "s3g1"]
    # with s0g0 taken, rail-aligned moves to rails every server has free; spread takes s0's next GPU
    taken = {"s0g0"}
    assert place(fabric, {"count": 4, "policy": "rail-aligned"}, taken) == ["s0g1", "s1g1", "s2g1", "s3g1"]
    assert place(fabric, {"count": 4, "policy": "spread"}, taken) == ["s0g1", "s1g0", "s2g0", "s3g0"]


def test_count_placements_take_the_gpus_earlier_jobs_left(fabric):
    jobs = [{"name": "a", "placement": {"rails": [0]}},
            {"name": "b", "placement": {"count": 4, "policy": "rail-aligned"}},
            {"name": "c", "placement": {"count": 2, "policy": "packed"}}]
    a, b, c = place_jobs(fabric, jobs)
    assert b == ["s0g1", "s1g1", "s2g1", "s3g1"] and c == ["s0g2", "s0g3"]
    assert not set(a) & set(b) and not set(b) & set(c)


def test_overlapping_jobs_are_refused_unless_allowed(fabric):
    jobs = [{"name": "a", "placement": {"servers": [0]}}, {"name": "b", "placement": {"rails": [0]}}]
    with pytest.raises(ScenarioError, match=r"jobs.1 \(b\): s0g0 already placed for job 'a'.*allow_overlap"):
        place_jobs(fabric, jobs)
    assert place_jobs(fabric, jobs, allow_overlap=True)[1] == ["s0g0", "s1g0", "s2g0", "s3g0"]


def test_two_collectives_may_not_share_a_gpu_even_when_overlap_is_allowed(fabric):
    ring = {"type": "collective", "op": "allreduce", "algo": "ring"}
    spec = {"type": "concurrent", "allow_overlap": True,
            "jobs": [{**ring, "name": "a", "placement": {"servers": [0, 1], "rails": [0]}},
                     {**ring, "name": "b", "placement": {"servers": [1, 2], "rails": [0]}}]}
    with pytest.raises(ScenarioError, match="both run RoCE ranks on s1g0"):
        concurrent.validate(fabric, spec, {})
    spec["jobs"][1] = {"type": "traffic", "name": "b", "placement": {"servers": [1, 2], "rails": [0]}}
    concurrent.validate(fabric, spec, {})
    spec["jobs"][1]["protocol"] = "roce"                # RoCE traffic's ranks hold their NICs as a collective's
    with pytest.raises(ScenarioError, match="jobs 'a' and 'b' both run RoCE ranks on s1g0"):
        concurrent.validate(fabric, spec, {})


def test_a_job_sees_only_its_gpus(fabric):
    view = JobFabric(fabric, ["s0g0", "s1g1", "s2g0"])
    assert [h.name for h in view.gpus()] == ["s0g0", "s1g1", "s2g0"]
    assert view.links is fabric.links and view.params is fabric.params
    # permutation over the job's servers, next server and next rail among its GPUs
    assert traffic.flow_pairs(view, {"pattern": "permutation"}) == [("s0g0", "s1g1"), ("s1g1", "s2g0"),
                                                                   ("s2g0", "s0g0")]
    # the whole fabric's permutation is unchanged
    assert ("s3g3", "s0g0") in traffic.flow_pairs(fabric, {"pattern": "permutation"})


def test_a_jobs_own_checks_run_on_its_gpus(fabric):
    spec = {"type": "concurrent", "jobs": [
        {"type": "collective", "name": "h", "op": "allreduce", "algo": "hierarchical",
         "placement": {"hosts": ["s0g0", "s1g0"]}}]}
    with pytest.raises(ScenarioError, match=r"jobs.0 \(h\): hierarchical algorithms need whole servers"):
        concurrent.validate(fabric, spec, {})


def test_the_scenario_schema_takes_jobs_and_refuses_a_job_without_placement():
    doc = {"name": "x", "fabric": {"kind": "rail-only", "servers": 2, "gpus_per_server": 2},
           "workloads": [{"type": "concurrent", "jobs": [
               {"type": "collective", "name": "a", "op": "allreduce", "algo": "ring", "placement": {"rails": [0]}},
               {"type": "traffic", "name": "b", "placement": {"count": 2, "policy": "spread"}}]}]}
    validate_doc(doc)
    del doc["workloads"][0]["jobs"][1]["placement"]
    with pytest.raises(ScenarioError, match="placement"):
        validate_doc(doc)


def test_slowdown_records():
    row = {"seconds": 1.0}
    alone = {"type": "collective", "ok": True, "rows": [row, {"seconds": 0.5}]}
    assert concurrent.measured_seconds(alone) == 1.5
    assert concurrent.measured_seconds({**alone, "ok": False}) is None
    flows = {"type": "traffic", "ok": True, "per_flow": [{"seconds": 2.0}, {"seconds": 3.0}, {"seconds": None}]}
    assert concurrent.measured_seconds(flows) == 3.0
    w = {"name": "w", "jobs": [{"job": "a", "type": "collective", "hosts": ["s0g0", "s1g0"], "seconds_alone": 1.5,
                                "seconds_together": 3.0, "slowdown": 2.0, "ok": True}], "max_slowdown": 2.0}
    assert concurrent.summary(w) == "1 jobs, slowdown a x2.00"
    assert "| a | collective | s0g0, s1g0 | 1.500 | 3.000 | 2.000 | yes |" in concurrent.report_section([w])
    assert concurrent.report_table([w])["rows"][0][1][-2:] == ["2.00", "yes"]


def test_the_cli_refuses_overlap_in_one_line_with_exit_2(tmp_path):
    path = tmp_path / "overlap.yaml"
    path.write_text("name: overlap\nfabric: {kind: rail-only, servers: 2, gpus_per_server: 2}\nworkloads:\n"
                    "  - type: concurrent\n    jobs:\n"
                    "      - {name: a, type: traffic, placement: {rails: [0]}}\n"
                    "      - {name: b, type: traffic, placement: {hosts: [s1g0, s1g1]}}\n")
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(path)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PROJECT_ROOT})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "s1g0 already placed for job 'a'" in done.stderr


def test_the_shipped_scenario_validates():
    from testbed.scenario.loader import load
    from testbed.runner import check, fabric_of
    doc = load(os.path.join(PROJECT_ROOT, "scenarios", "concurrent_rings.yaml"))
    check(doc, fabric_of(doc))
    assert [j["placement"] for j in doc["workloads"][0]["jobs"]] == [{"hosts": ["s0g0", "s1g1"]},
                                                                     {"hosts": ["s1g0", "s0g1"]}]


def test_placement_schema_is_the_modules():
    assert concurrent.SCHEMA["properties"]["jobs"]["items"]["allOf"][0]["then"]["properties"]["placement"] \
        is concurrent_placement.SCHEMA


@pytest.mark.parametrize("placement", [{"hosts": ["s0g0"], "count": 2}, {"policy": "spread"},
                                       {"servers": [0], "count": 1}])
def test_placement_forms_do_not_mix(fabric, placement):
    with pytest.raises(ScenarioError, match="do not go together"):
        place(fabric, placement, set())


def test_an_unknown_placement_key_is_named():
    doc = {"name": "x", "fabric": {"kind": "rail-only", "servers": 2, "gpus_per_server": 2},
           "workloads": [{"type": "concurrent", "jobs": [
               {"type": "traffic", "name": "a", "placement": {"rail": [0]}}]}]}
    with pytest.raises(ScenarioError, match="rail.*did you mean 'rails'"):
        validate_doc(doc)


def test_bytes_by_job_from_the_routes_counters():
    from testbed.workloads import concurrent_bytes
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=5)
    ip = {h: fabric.hosts[h].ip for h in fabric.hosts}
    up = next(l for l in fabric.links if l.kind == "uplink" and l.a == "rail0")      # rail0 -> a spine
    out, port = f"output:{up.a_port}", f"rail0:{up.a_port}"
    jobs = {"a": ["s0g0", "s1g1"], "b": ["s1g0", "s0g1"]}
    flows0 = {"rail0": {f"{ip['s1g1']}>{out}": 100, f"{ip['s0g1']}>{out}": 0, "*>drop": 5}}
    flows1 = {"rail0": {f"{ip['s1g1']}>{out}": 1100, f"{ip['s0g1']}>{out}": 2000, "*>drop": 5}}
    ports0 = {"rail0:1": {"rx_bytes": 0, "tx_bytes": 0}, port: {"rx_bytes": 0, "tx_bytes": 0}}
    ports1 = {"rail0:1": {"rx_bytes": 3000, "tx_bytes": 0}, port: {"rx_bytes": 0, "tx_bytes": 3010}}
    got = concurrent_bytes.attribute(fabric, jobs, (flows0, flows1), (ports0, ports1))
    assert got["switches"] == {"rail0": {"a": 1000, "b": 2000}}
    assert got["links"] == {port: {"a": 1000, "b": 2000}}
    assert got["deviation"] == {"rail0": 0.0, port: round(10 / 3010, 4)}
    assert concurrent_bytes.check(got)["ok"]
    assert concurrent_bytes.uplinks_by_job(fabric, got) == {f"rail0>{up.b}": {"a": 1000, "b": 2000}}
    # a switch whose routes went through a shared (select) group: its links are not split, its total is
    flows1["rail0"][f"{ip['s0g1']}>group:2"] = 500
    got = concurrent_bytes.attribute(fabric, jobs, (flows0, flows1), (ports0, ports1))
    assert port not in got["deviation"] and got["switches"]["rail0"]["b"] == 2500
    assert not concurrent_bytes.check(got)["ok"]          # 3500 forwarded against 3000 received


def test_a_multicast_job_is_not_warned_about_its_bytes(fabric):
    mc = {"type": "collective", "name": "mc", "op": "allgather", "algo": "multicast", "placement": {"rails": [0]}}
    assert not [w for w in concurrent.warnings(fabric, {"type": "concurrent", "jobs": [mc]}) if "bytes" in w]


def test_a_multicast_tree_flows_bytes_go_to_the_job_that_joined_its_group():
    """A tree flow's bytes: once for the switch (what it received), in full on each port its group copies to; the
    group's job is the one whose hosts joined it (a group joined across jobs is "other")."""
    from testbed.workloads import concurrent_bytes
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=5)
    jobs, groups = {"a": ["s0g0", "s1g0"], "b": ["s0g1", "s1g1"]}, {"239.1.2.3": ["s0g0", "s1g0"],
                                                                     "239.4.5.6": ["s0g0", "s1g1"]}
    flows0 = {"rail0": {}}
    flows1 = {"rail0": {"239.1.2.3>all:2,5": 4000, "239.1.2.3>all:1,2": 1000, "239.4.5.6>all:5": 10}}
    ports0 = {f"rail0:{p}": {"rx_bytes": 0, "tx_bytes": 0} for p in (1, 2, 5)}
    ports1 = {"rail0:1": {"rx_bytes": 4010, "tx_bytes": 1000}, "rail0:2": {"rx_bytes": 0, "tx_bytes": 5000},
              "rail0:5": {"rx_bytes": 1000, "tx_bytes": 4010}}
    got = concurrent_bytes.attribute(fabric, jobs, (flows0, flows1), (ports0, ports1), groups)
    assert got["switches"] == {"rail0": {"a": 5000, "other": 10}}
    assert got["links"] == {"rail0:1": {"a": 1000}, "rail0:2": {"a": 5000}, "rail0:5": {"a": 4000, "other": 10}}
    assert max(got["deviation"].values()) == 0.0 and concurrent_bytes.check(got)["ok"]
    # without the record of who joined, the bytes are still counted, as nobody's
    assert concurrent_bytes.attribute(fabric, jobs, (flows0, flows1), (ports0, ports1))["switches"] == \
        {"rail0": {"other": 5010}}


def test_the_job_links_heatmap_is_drawn_where_bytes_were_split(tmp_path):
    w = {"name": "w", "jobs": [{"job": "a"}, {"job": "b"}],
         "link_bytes_by_job": {"rail0:3": {"a": 1000, "b": 2000}},
         "uplink_bytes_by_job": {"rail0>spine1": {"a": 1000, "b": 2000}}}
    assert concurrent.report_plots([w, {**w, "name": "none", "link_bytes_by_job": {}}], str(tmp_path)) == \
        [str(tmp_path / "job_links_w.png")]
    assert (tmp_path / "job_links_w.png").stat().st_size > 1000


def test_a_job_name_used_twice_is_refused(fabric):
    job = {"type": "traffic", "name": "a", "placement": {"rails": [0]}}
    with pytest.raises(ScenarioError, match=r"a job name is used twice \(a\)"):
        concurrent.validate(fabric, {"type": "concurrent", "jobs": [job, {**job, "placement": {"rails": [1]}}]}, {})


def ring_result(ok=True, recoveries=(), first_error_at=None) -> dict:
    return {"type": "collective", "ok": ok, "rows": [{"correct": ok, "retransmits": 3}], "checks": [],
            "recoveries": list(recoveries), "first_error_at": first_error_at}


def test_a_fault_says_which_jobs_it_hit_and_how_each_took_it():
    """A GPU crash in job a while a and b run together: a is hit (its GPU), detected and shrunk; b is not hit and
    has nothing to report but its completion and its time. A link cut hits the job whose bytes crossed it; a fault
    in the alone part concerns the job running alone then."""
    from testbed.faults.jobs import describe
    from testbed.workloads.concurrent_faults import struck_jobs
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=5)
    t0 = 1000.0
    recovered = {"detected_at": 1011.0, "detected_by": "heartbeats", "reformed_at": 1011.5,
                 "first_success_at": 1013.0, "lost_steps": 1, "policy": "shrink", "failed": ["s1g1"]}
    up = next(l for l in fabric.links if l.kind == "uplink" and l.a == "rail0")
    w = {"name": "w", "link_bytes_by_job": {f"rail0:{up.a_port}": {"b": 5000}},
         "jobs": [{"job": "a", "hosts": ["s0g0", "s1g1"], "alone": ring_result(), "together":
                   ring_result(recoveries=[recovered]), "alone_at": 1001.0, "alone_wall_s": 3.0,
                   "together_at": 1008.0, "together_wall_s": 8.0,
                   "seconds_alone": 1.0, "seconds_together": 1.6, "slowdown": 1.6},
                  {"job": "b", "hosts": ["s1g0", "s0g1"], "alone": ring_result(), "together": ring_result(),
                   "alone_at": 1004.0, "alone_wall_s": 3.0, "together_at": 1008.0, "together_wall_s": 4.0,
                   "seconds_alone": 1.0, "seconds_together": 1.02, "slowdown": 1.02}]}
    crash = {"kind": "gpu-crash", "target": "s1g1", "at_s": 10.0}
    a, b = struck_jobs(w, crash, t0, fabric)
    assert (a["job"], a["part"], a["hit"], b["job"], b["hit"]) == ("a", "together", True, "b", False)
    assert "s1g1" in a["why"] and b["why"] is None
    assert (a["detected_s"], a["detected_by"], a["recovered_s"], a["first_success_s"], a["lost_steps"],
            a["recovery"]) == (11.0, "heartbeats", 11.5, 13.0, 1, "shrink")
    assert b["detected_s"] is None and b["recovery"] is None and b["ended"] == "completed" and b["exact"]
    line = describe({**crash, "jobs": [a, b]})
    assert "job w/a (together): hit (its GPU s1g1), detected at 11.0 s by heartbeats" in line
    assert "job w/b (together): not hit, completed, exact, slowdown x1.02" in line
    # b's bytes crossed the cut uplink; a finished before a later cut and is not among the jobs it struck
    cut = {"kind": "link-down", "target": f"{up.a}-{up.b}", "at_s": 13.0}
    a_view, = [v for v in struck_jobs(w, {**cut, "at_s": 11.0}, t0, fabric) if v["job"] == "b"]
    assert a_view["hit"] and "5000 B" in a_view["why"]
    assert [v["job"] for v in struck_jobs(w, {**cut, "at_s": 14.0}, t0, fabric)] == ["a"]
    # in the alone part: the job running alone then
    alone, = struck_jobs(w, {**crash, "at_s": 2.0}, t0, fabric)
    assert (alone["job"], alone["part"], alone["hit"]) == ("a", "alone", True)


def test_the_jobs_recoveries_are_the_workloads_own():
    """What the GPU fault records read (testbed/faults/recovered.py): every job's epochs, naming the job."""
    from testbed.workloads.concurrent import _recoveries
    epoch = {"detected_at": 5.0, "reformed_at": 6.0}
    got = _recoveries([{"job": "a", "alone": None, "together": ring_result(recoveries=[epoch], first_error_at=5.0)},
                       {"job": "b", "alone": ring_result(), "together": ring_result()}])
    assert got == {"recoveries": [{**epoch, "job": "a", "part": "together"}], "first_error_at": 5.0}


def test_faults_timed_from_a_concurrent_workload_wait_for_its_jobs_to_start_together():
    from testbed.workloads import hook
    assert hook("concurrent", "times_its_faults") is True and hook("collective", "times_its_faults") is False


def test_a_traffic_jobs_flows_cut_are_its_own():
    """A link cut while a traffic job and a ring run together: the traffic job's entry counts its flows that fell
    silent across the cut (`flows_cut`), the ring's has none to count; the fault's own `flows_cut` counts the
    concurrent workload's traffic flows too."""
    from testbed.faults import REGISTRY
    from testbed.workloads.concurrent_faults import struck_jobs
    fabric = build("rail-optimized", 2, 2, spines=2, oversubscription=1, nic_mbps=5)
    t0, up = 1000.0, next(l for l in fabric.links if l.kind == "uplink" and l.a == "rail0")
    silent = {"silences": [(1010.003, 0.4)]}        # cut at 1010.0: silent 3 ms later, for 0.4 s
    heard = {"silences": [(1002.0, 0.1)]}           # a silence long before the cut
    noise = {"type": "traffic", "ok": True, "checks": [], "per_flow": [silent, silent, heard]}
    job = {"alone_at": 1001.0, "alone_wall_s": 1.0, "together_at": 1008.0, "together_wall_s": 5.0,
           "seconds_alone": 1.0, "seconds_together": 1.1, "slowdown": 1.1}
    w = {"name": "w", "link_bytes_by_job": {},
         "jobs": [{**job, "job": "noise", "hosts": ["s0g0", "s1g0"], "alone": {**noise, "per_flow": [heard]},
                   "together": noise},
                  {**job, "job": "ring", "hosts": ["s0g1", "s1g1"], "alone": ring_result(),
                   "together": ring_result()}]}
    cut = {"kind": "link-down", "target": f"{up.a}-{up.b}", "at_s": 10.0}
    views = {v["job"]: v for v in struck_jobs(w, cut, t0, fabric)}
    assert views["noise"]["flows_cut"] == 2 and views["noise"]["hit"] and views["noise"]["resumed_s"] == 10.403
    assert views["ring"]["flows_cut"] is None and not views["ring"]["hit"]
    record = dict(cut)
    REGISTRY["link-down"].outcome(record, [w], t0, fabric)
    assert record["flows_cut"] == 2 and record["resumed_s"] == 10.403


def spare_doc(recovery: str, spares: int, crashes=("s1g0", "s1g1"), **fabric) -> dict:
    """Two rings side by side on the same servers, both with `recovery`, and GPU crashes timed from them."""
    def ring(name, hosts):
        return {"name": name, "type": "collective", "op": "allreduce", "algo": "ring", "sizes": ["64KiB"],
                "recovery": recovery, "placement": {"hosts": hosts}}
    return {"name": "spares", "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "spines": 2,
                                         **({"spares_per_server": spares} if recovery == "spare" else
                                            {"spare_servers": spares}), **fabric},
            "workloads": [{"type": "concurrent", "name": "two",
                           "jobs": [ring("a", ["s0g0", "s1g0"]), ring("b", ["s0g1", "s1g1"])]}],
            "faults": [{"workload": "two", "at": 1.0 + i, "kind": "gpu-crash", "target": t}
                       for i, t in enumerate(crashes)]}


@pytest.mark.parametrize("recovery,short,enough", [("spare", 1, 2), ("migrate", 1, 2)])
def test_faults_that_need_more_spares_than_the_jobs_can_share_are_refused(recovery, short, enough):
    """A spare one job takes is not offered to another: two jobs that each lose a GPU of server 1 need two spare
    GPUs there (spare), or two spare servers (migrate)."""
    from testbed import runner
    doc = spare_doc(recovery, short)
    with pytest.raises(ScenarioError, match="not offered to another") as err:
        runner.check(doc, runner.fabric_of(doc))
    assert "(a" in str(err.value) and "b" in str(err.value)
    for ok in (spare_doc(recovery, enough), spare_doc(recovery, short, crashes=("s1g0",)),
               spare_doc(recovery, short, crashes=("s1g0", "s0g1"))
               if recovery == "spare" else spare_doc(recovery, short, crashes=("s1g0",))):
        runner.check(ok, runner.fabric_of(ok))
    returns = {**doc, "faults": doc["faults"][:1] + [{"workload": "two", "at": 3.0, "kind": "gpu-restart",
                                                     "target": "s1g1"}]}
    runner.check(returns, runner.fabric_of(returns))       # a GPU that comes back takes no spare


def test_the_cli_refuses_too_few_shared_spares_in_one_line_with_exit_2(tmp_path):
    import yaml
    path = tmp_path / "spares.yaml"
    path.write_text(yaml.safe_dump(spare_doc("spare", 1)))
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(path)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PROJECT_ROOT})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "2 GPUs of server 1" in done.stderr and "has 1 spare GPU(s)" in done.stderr and "spares_per_server: 2" in done.stderr


def test_a_spare_one_job_took_is_not_offered_to_another_until_that_job_ends():
    """Two jobs' recovery managers on one network share its spares: the first takes server 1's only spare GPU,
    the second is refused it (its recovery's error says another job holds it), and gets it once the first has
    ended. A spare server is taken whole."""
    from testbed.fabric import spares
    from testbed.runtime.recovery import JobManager
    fabric = build("rail-optimized", 2, 2, spines=2, spares_per_server=1, spare_servers=1)
    ledger = spares.Ledger()

    def manager(store, hosts):
        m = JobManager.__new__(JobManager)
        m.fabric, m.store, m.ledger, m.used = fabric, store, ledger, set(hosts)
        return m
    a, b = manager("store-a", ["s0g0", "s1g0"]), manager("store-b", ["s0g1", "s1g1"])
    failed_a = {"name": "s1g0", "server": 1}
    spare = a._idle_spare_gpu(failed_a, taken=set())
    assert spare.server == 1 and a._idle_spare_gpu(failed_a, taken=set()).name == spare.name   # still a's
    with pytest.raises(spares.SpareError, match="1 held by other jobs"):
        b._idle_spare_gpu({"name": "s1g1", "server": 1}, taken=set())
    ledger.release("store-a")
    assert b._idle_spare_gpu({"name": "s1g1", "server": 1}, taken=set()).name == spare.name
    server = a._idle_spare_server(1, taken=set())
    assert all(not ledger.free(h.name, "store-b") for h in fabric.spares() if h.server == server)
    with pytest.raises(spares.SpareError, match="all in use"):
        b._idle_spare_server(0, taken=set())
