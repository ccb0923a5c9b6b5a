"""Silent mistakes made loud: what runs otherwise than the scenario reads is warned about and recorded, and a
fault that did not happen as asked fails the run's checks."""
import pytest

from testbed import runner
from testbed.fabric import topo
from testbed.faults import outcomes
from testbed.workloads import collective, collective_fabric, collective_rows


def scenario(**extra):
    doc = {"name": "w", "fabric": {"kind": "rail-only", "servers": 2, "gpus_per_server": 2},
           "workloads": [{"type": "connectivity"}]}
    doc.update(extra)
    return doc


def test_ignored_fabric_keys_rounded_sizes_and_cut_captures_are_warned():
    doc = scenario(fabric={"kind": "rail-only", "servers": 2, "gpus_per_server": 2, "spines": 4},
                   workloads=[{"type": "collective", "op": "allgather", "algo": "ring", "sizes": [1001, "1MiB"]},
                              {"type": "collective", "op": "allreduce", "algo": "ring", "sizes": [1002],
                               "dtype": "float16"}],
                   capture=[{"point": "s0g0/nic", "snaplen": 100}])
    w = runner.warnings(doc, runner.fabric_of(doc))
    assert w[0] == "fabric.spines: a rail-only fabric has no use for it; ignored"
    assert w[1] == ("workloads.0: size 1001 B is not a whole number of float32 elements per rank of 4: "
                    "992 B will run (and be reported)")
    assert len(w) == 3 and w[2].startswith("capture.0: snaplen 100 cuts frames")   # 1002 B of float16 is whole


def test_a_clean_scenario_has_no_warnings():
    doc = scenario(fabric={"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "spines": 2},
                   workloads=[{"type": "collective", "op": "alltoall", "algo": "direct", "sizes": ["64KiB"]}])
    assert runner.warnings(doc, runner.fabric_of(doc)) == []


def test_what_ran_matches_the_model_of_the_rank_programs():
    fabric = topo.build("rail-only", 3, 3)                  # 9 ranks: nothing divides evenly
    for op in ("allreduce", "allgather", "alltoall", "reduce_scatter", "broadcast"):
        ran = collective_fabric.ran_bytes(op, 1_000_003, 4, 9)
        assert ran <= 1_000_003 and ran % 4 == 0
        if op in ("allgather", "alltoall"):
            assert ran % 36 == 0
    assert collective.warnings(fabric, {"op": "allreduce", "algo": "ring", "sizes": ["1MiB"]}) == []


def test_faults_that_did_not_happen_fail_the_checks():
    records = [{"kind": "link-down", "target": "rail0-spine0", "at_s": None},
               {"kind": "gpu-crash", "target": "s1g1", "at_s": 2.0, "processes": 0},
               {"kind": "gpu-crash", "target": "s1g0", "at_s": 2.0, "processes": 3},
               {"kind": "link-flap", "target": "rail1-spine0", "at_s": 1.0}]
    checks = outcomes.checks(records)
    assert [c["name"] for c in checks] == ["faults.0 link-down rail0-spine0", "faults.1 gpu-crash s1g1"]
    assert not any(c["ok"] for c in checks)
    assert "never injected" in checks[0]["detail"] and "hit no process" in checks[1]["detail"]


@pytest.mark.root
def test_a_run_records_what_ran_and_fails_on_a_fault_never_injected(tmp_path):
    doc = scenario(workloads=[{"type": "collective", "op": "allgather", "algo": "ring", "sizes": [1001],
                               "iterations": 1}],
                   faults=[{"at": 120.0, "kind": "link-down", "target": "s0g0/nic"}])
    r = runner.run(doc, str(tmp_path), echo=lambda *a: None)
    row = r["workloads"][0]["rows"][0]
    assert row["requested_bytes"] == 1001 and row["bytes"] == 992 and row["correct"]
    assert "# note: 1001 B asked, 992 B ran" in collective_rows.table(r["workloads"][0])
    assert r["warnings"] and "992 B will run" in r["warnings"][0]
    failed = [c for c in r["checks"] if not c["ok"]]
    assert not r["ok"] and [c["name"] for c in failed] == ["faults.0 link-down s0g0/nic"], r["checks"]
    with open(tmp_path / "summary.md") as f:
        assert "## Warnings" in f.read()


def test_a_multipath_routing_mode_on_a_fabric_without_spines_is_warned():
    doc = scenario(routing={"mode": "spray"})
    assert runner.warnings(doc, runner.fabric_of(doc)) == [
        "routing.mode: spray spreads traffic over spines, and a rail-only fabric has none (one path between any "
        "two NICs): no traffic takes another path"]
    for mode in ("ecmp", "single"):
        doc = scenario(routing={"mode": mode})
        assert runner.warnings(doc, runner.fabric_of(doc)) == []
    doc = scenario(fabric={"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2}, routing={"mode": "split:4"})
    assert runner.warnings(doc, runner.fabric_of(doc)) == []


def collective_result(requested, ran):
    rows = [{"bytes": b, "requested_bytes": q, "bus_ratio": 0.8, "count": b // 4, "dtype": "float32",
             "seconds": 0.1, "algbw_MBps": 1.0, "busbw_MBps": 1.0, "bound_busbw_MBps": 1.2, "correct": True,
             "op": "allgather", "algo": "ring", "ranks": 4} for q, b in zip(requested, ran)]
    return {"type": "collective", "name": "ag", "op": "allgather", "algo": "ring", "ranks": 4, "rows": rows,
            "ok": True, "wall_s": 1.0, "cpu_idle_mean_pct": 50.0}


def test_the_summary_flags_a_size_that_ran_rounded():
    assert "ROUNDED: 1001 B asked, 992 B ran" in collective.summary(collective_result([1001, 4096], [992, 4096]))
    assert "ROUNDED" not in collective.summary(collective_result([4096], [4096]))
    results = {"workloads": [collective_result([1001], [992])], "checks": [], "faults": []}
    assert "ROUNDED: 1001 B asked, 992 B ran" in runner.summary_table(results)


def test_a_gpu_fault_that_hit_no_process_says_so_in_the_summary():
    fault = {"kind": "gpu-crash", "target": "s1g1", "at_s": 2.0, "processes": 0, "detected_s": None,
             "recovered_s": None, "first_success_s": None, "lost_steps": None, "recovery": None}
    results = {"workloads": [], "checks": outcomes.checks([fault]), "faults": [fault]}
    table = runner.summary_table(results)
    assert "fault gpu-crash s1g1: at 2.0 s, detected at never: it hit no process" in table
    assert "[FAIL] faults.0 gpu-crash s1g1: hit no process" in table
    fault["processes"] = 2
    assert "hit no process" not in runner.summary_table({"workloads": [], "checks": [], "faults": [fault]})
