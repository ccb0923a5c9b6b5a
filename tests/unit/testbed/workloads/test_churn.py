"""The churn workload's pure parts: its seeded fault schedule, its validation, and its report from the ranks'
outputs (no fabric)."""
import pytest

from testbed.fabric.topo import build
from testbed.scenario.schema import ScenarioError
from testbed.workloads import churn, churn_plan

HOSTS = [f"s{s}g{g}" for s in range(2) for g in range(4)]


def test_the_same_seed_gives_the_same_faults_and_another_seed_others():
    a = churn_plan.plan(7, 600, HOSTS)
    assert a == churn_plan.plan(7, 600, HOSTS)
    assert a != churn_plan.plan(8, 600, HOSTS)
    assert len(a) > 30 and {f["kind"] for f in a} == set(churn_plan.KINDS) | {"gpu-restart", "nic-up"}


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("max_down", [1, 2])
def test_every_failure_comes_back_in_time_spaced_and_bounded(seed, max_down):
    gap, quiet, duration = 4.0, 10.0, 300
    faults = churn_plan.plan(seed, duration, HOSTS, interval_s=5, down_s=(3, 8), max_down=max_down, gap_s=gap,
                             quiet_s=quiet)
    times = [f["at"] for f in faults]
    assert times == sorted(times) and all(b - a >= gap - 1e-3 for a, b in zip(times, times[1:]))
    assert times[0] >= gap and times[-1] <= duration - quiet
    out, back_at = {}, {}
    for f in faults:
        if f["kind"] in churn_plan.RETURN:
            assert f["target"] not in out                                   # a GPU fails only while in the job
            assert f["at"] - back_at.get(f["target"], -1e9) >= 2 * gap - 1e-3     # ... and after it rejoined
            out[f["target"]] = f
            assert len(out) <= max_down
        else:
            failure = out.pop(f["target"])
            assert f["kind"] == churn_plan.RETURN[failure["kind"]] and f["at"] - failure["at"] >= 3 - 1e-3
            back_at[f["target"]] = f["at"]
    assert not out                                                          # everything came back


def test_only_the_kinds_asked_for_are_drawn():
    faults = churn_plan.plan(3, 600, HOSTS, kinds=["nic-down"])
    assert {f["kind"] for f in faults} == {"nic-down", "nic-up"}


FABRIC = build("rail-optimized", 2, 2)


@pytest.mark.parametrize("change,message", [
    ({"max_down": 3}, "churn with max_down 3 needs at least 5 GPUs; the fabric has 4"),
    ({"down_s": [9, 3]}, "churn down_s [9, 3]: the minimum exceeds the maximum"),
    ({"duration_s": 20}, "churn duration_s 20 leaves no time for a fault (the last 10 s are quiet)"),
])
def test_what_cannot_run_is_refused_in_one_line(change, message):
    with pytest.raises(ScenarioError) as err:
        churn.validate(FABRIC, {"type": "churn", "duration_s": 60, **change})
    assert str(err.value) == message


def test_docker_hosts_are_accepted():
    churn.validate(FABRIC, {"type": "churn", "duration_s": 60}, {"hosts": "docker"})


def test_the_schedule_is_the_seeded_plan_over_the_fabrics_gpus():
    spec = {"type": "churn", "duration_s": 90, "seed": 5, "interval_s": 8}
    faults = churn.schedule(FABRIC, spec)
    assert faults == churn_plan.plan(5, 90, ["s0g0", "s0g1", "s1g0", "s1g1"], interval_s=8, quiet_s=10)
    assert faults and churn.warnings(FABRIC, spec) == []


class Plan:
    t0 = 1000.0

    def __init__(self, events):
        self.events = events

    def results(self, port_events):
        return [dict(e) for e in self.events]


class Manager:
    fenced = {"s1g1"}
    events = []


def output(host, steps=40, world=4):
    return {"rank": 0, "host": host, "steps": steps, "world": world, "count": 16, "recoveries": [
        {"epoch": 1, "policy": "shrink", "error": "x", "detected_at": 1005.0, "detected_by": "heartbeats",
         "decided_at": 1005.3, "failed": ["s1g1"], "lost_steps": 1, "world": 3, "reformed_at": 1005.5,
         "first_success_at": 1006.0},
        {"epoch": 2, "policy": "rejoin", "decided_at": 1010.0, "failed": [], "lost_steps": 0, "joined": ["s1g1"],
         "world": 4, "reformed_at": 1010.4, "first_success_at": 1010.9}],
        "state": {"history": [], "worlds": [[4, steps]], "diverged": 0, "synced": 0}}


def test_the_report_counts_steps_lost_recovery_time_and_rejoins():
    events = [{"kind": "gpu-crash", "target": "s1g1", "at_s": 4.0},
              {"kind": "gpu-restart", "target": "s1g1", "at_s": 9.0}]
    out = {h: output(h) for h in ("s0g0", "s0g1", "s1g0", "s1g1")}
    r = churn.report({"duration_s": 60}, 4, out, ["s1g1: hosts.agents.collective_rank was killed"], Manager(),
                     Plan(events), FABRIC)
    assert r["ok"], r["checks"]
    assert (r["steps_completed"], r["steps_lost"], r["failures"], r["rejoins"]) == (40, 1, 1, 1)
    assert r["recovery_s"] == 2.0 and r["rejoin_s"] == 0.9       # the crash at 4 s, its first step after at 6 s
    crash, back = r["events"]
    assert crash["detected_s"] == 5.0 and crash["recovered_s"] == 5.5 and crash["recovery"] == "shrink"
    assert back["detected_s"] == 10.0 and back["recovered_s"] == 10.4 and back["recovery"] == "rejoin"
    assert "40 steps in 60 s, 1 failures, 1 rejoins, 1 steps lost" in churn.summary(r)


def test_a_gpu_that_never_rejoined_fails_the_report():
    events = [{"kind": "gpu-crash", "target": "s1g1", "at_s": 4.0},
              {"kind": "gpu-restart", "target": "s1g1", "at_s": 20.0}]
    out = {h: output(h) for h in ("s0g0", "s0g1", "s1g0")}
    r = churn.report({"duration_s": 60}, 4, out, [], Manager(), Plan(events), FABRIC)
    check = {c["name"]: c for c in r["checks"]}
    assert not r["ok"] and not check["recovered"]["ok"] and "gpu-restart s1g1 at 20.0 s" in check["recovered"]["detail"]
