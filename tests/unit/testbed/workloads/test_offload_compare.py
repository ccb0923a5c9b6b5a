"""The offload comparison on made-up runs (no TensorFlow, no root): every candidate swept, medians and spreads,
FastFlow judged against its own candidate's sweep with its profiling in its epoch time, and checks that fail."""
import pytest

from testbed.fabric.topo import build
from testbed.workloads import offload
from testbed.workloads import offload_compare as compare

S = {**offload.DEFAULTS, "repeats": 3}


def run(policy, candidate, ratio, steps, *, seed=0, profile_s=0.0, cpu=0.3, measured=None, pipeline="compute"):
    return {"pipeline": pipeline, "policy": policy, "candidate": candidate if ratio else None, "off_ratio": ratio,
            "steps_per_s": steps, "profile_s": profile_s, "seed": seed,
            "epoch_s_with_profiling": profile_s + S["epoch_steps"] / steps,
            "metrics": {"local_cpu_cores": cpu if ratio < 1 else 0.05,
                        "measured_ratio": ratio if measured is None else measured}}


def rounds(ff_steps=(18, 20, 19), ff_ratio=0.75, ff_cand="p'2", **ff):
    """Three rounds: local only ~8 steps/s; p'2 peaks at 0.75 (20), p'3 at 1 (15); FastFlow profiles 15 s."""
    curve = {"p'2": {0.25: 10, 0.5: 13, 0.75: 20, 1: 16}, "p'3": {0.25: 10, 0.5: 12, 0.75: 14, 1: 15}}
    rows = []
    for seed, jitter in enumerate((0.0, 0.4, -0.3)):
        rows.append(run("fastflow", ff_cand, ff_ratio, ff_steps[seed], seed=seed, profile_s=15.0, **ff))
        rows.append(run("ratio=0", None, 0.0, 8 + jitter, seed=seed))
        for cand, points in curve.items():
            rows += [run(compare.fixed_policy(r, cand), cand, r, v + jitter, seed=seed) for r, v in points.items()]
    return rows


def test_a_round_sweeps_every_candidate_fastflow_may_choose():
    plan = offload.plan(S)
    assert plan[0] == ("fastflow", None, None) and plan[1] == ("ratio=0", 0.0, None)
    swept = {(c, r) for _, r, c in plan[2:]}
    assert swept == {(c, r) for c in ("p'2", "p'3") for r in (0.25, 0.5, 0.75, 1.0)}
    assert len(plan) == 2 + 2 * 4                    # ratio 0 (local only) runs once, not once per candidate


def test_policies_are_medians_with_their_spread_and_fastflow_pays_for_its_profiling():
    policies = compare.aggregate(rounds())
    ff = next(p for p in policies if p["policy"] == "fastflow")
    assert ff["steps_per_s"] == {"median": 19, "min": 18, "max": 20, "runs": 3}
    assert ff["candidate"] == "p'2"
    # the epoch of 1000 steps includes 15 s of profiling: median of 15 + 1000/steps
    assert ff["epoch_s"]["median"] == pytest.approx(15 + 1000 / 19, abs=1e-3)
    no = next(p for p in policies if p["policy"] == "ratio=0")
    assert no["steps_per_s"]["median"] == 8 and no["steps_per_s"]["min"] == 7.7 and no["steps_per_s"]["max"] == 8.4


def test_fastflow_is_judged_against_the_sweep_of_the_candidate_it_chose():
    rows = rounds()
    checks = {c["name"]: c for c in compare.checks("compute", rows, compare.aggregate(rows), S)}
    assert all(c["ok"] for c in checks.values()), checks
    near = checks["compute: fastflow ratio near the best of its candidate's sweep"]
    assert "best of that sweep ratio=0.75 p'2" in near["detail"]
    # FastFlow choosing p'3 at 0.25 is far from p'3's best (ratio 1, 15 steps/s) and slower than 90% of it
    rows = rounds(ff_steps=(10, 10, 10), ff_ratio=0.25, ff_cand="p'3")
    checks = {c["name"]: c for c in compare.checks("compute", rows, compare.aggregate(rows), S)}
    near = checks["compute: fastflow ratio near the best of its candidate's sweep"]
    assert not near["ok"] and "best of that sweep ratio=1 p'3" in near["detail"]


def test_fastflow_slower_than_local_only_fails():
    rows = rounds(ff_steps=(7, 7.2, 6.9))
    checks = {c["name"]: c for c in compare.checks("compute", rows, compare.aggregate(rows), S)}
    assert not checks["compute: fastflow >= tf-no"]["ok"]


def test_a_budget_not_enforced_or_a_ratio_not_applied_fails_the_comparison():
    rows = rounds()
    rows[1]["metrics"]["local_cpu_cores"] = 0.9          # TF-NO used 3x its 0.3-core budget: no quota held
    rows[4]["metrics"]["measured_ratio"] = 0.3           # asked 0.75, took 0.3 remote
    checks = {c["name"]: c for c in compare.checks("compute", rows, compare.aggregate(rows), S)}
    budget, ratio = checks["compute: local CPU budget held"], checks["compute: off-ratios applied"]
    assert not budget["ok"] and "0.90 cores (ratio=0)" in budget["detail"]
    assert not ratio["ok"] and "asked 0.75, took 0.30" in ratio["detail"]


def test_the_table_has_the_baselines_the_sweeps_best_and_fastflow_with_spread():
    rows = rounds()
    w = {"policies": compare.aggregate(rows), "candidates": ["p'2", "p'3"], "epoch_steps": 1000}
    for p in w["policies"]:
        p["speedup_vs_tf_no"] = 1.0
    table, = offload.tables(w)
    lines = table.splitlines()
    assert [l.split()[0] for l in lines[2:]] == ["TF-NO", "TF-DSLR", "TF-DSR", "sweep", "FastFlow"]
    assert "3 runs" in lines[0] and "with its profiling" in lines[0]
    dslr, best = lines[3].split(), lines[5].split()
    assert dslr[1:3] == ["p'3", "0.50"] and "12.00 [11.70-12.40]" in lines[3]
    assert best[2:4] == ["p'2", "0.75"]
    assert "19.00 [18.00-20.00]" in lines[6]
    assert "fastflow p'2 ratio 0.75, 19.00 steps/s [18.00-20.00]" in offload.summary(w)


def test_warnings_name_missing_baselines_and_too_few_repeats():
    fabric = build("rail-optimized", 1, 2, spines=1, cpu_hosts=2)
    assert offload.warnings(fabric, {"type": "offload"}) == []
    w = offload.warnings(fabric, {"type": "offload", "ratios": [0, 0.25], "repeats": 1})
    assert w == ["ratios has no 0.5: the TF-DSLR baseline will be missing from the comparison",
                 "ratios has no 1: the TF-DSR baseline will be missing from the comparison",
                 "repeats 1: medians of fewer than 3 runs, the spread says little"]
