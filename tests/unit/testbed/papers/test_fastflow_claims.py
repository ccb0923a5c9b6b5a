"""`testbed paper fastflow`: Algorithm 1 as the paper gives it, and each claim's verdict from synthetic runs of the
offload workload (its rows, as offload.one_run writes them)."""
import pytest

from hosts.tfdata.policy import Candidate, Profile, decide
from testbed.papers import DIFFERS, PARTLY, REPRODUCED, fastflow

GTHP = 25.0


def row(policy, steps, ratio=0.0, seed=0, profile_s=0.0, lthp=4.0, rthp=8.0, applied=None, decision=None,
        idle=60.0):
    metrics = {"measured_ratio": ratio if applied is None else applied, "cpu_idle_mean_pct": idle}
    if policy == "fastflow":
        offload, chosen, off = fastflow.algorithm_1(GTHP, lthp, 0.07, {"p'3": (rthp, 0.01)})
        metrics["profile"] = {"Gthp": GTHP, "Lthp": lthp, "Pcycle": 0.07,
                              "candidates": {"p'3": {"Rthp": rthp, "Ocycle": 0.01}}}
        metrics["decision"] = decision or {"offload": offload, "pipeline": chosen, "off_ratio": off}
        metrics["measured_ratio"] = off if applied is None else applied
    return {"policy": policy, "seed": seed, "steps_per_s": steps, "off_ratio": ratio, "profile_s": profile_s,
            "epoch_s_with_profiling": profile_s + 1000 / steps, "metrics": metrics}


def sweep(ff_steps=12.0, ff_ratio=0.67, profile_s=16.0, best=(0.75, 11.5), seed=0):
    rates = {0.0: 4.0, 0.25: 5.3, 0.5: 8.0, 0.75: 11.0, 1.0: 8.0}
    rates[best[0]] = best[1]
    return [row("fastflow", ff_steps, ff_ratio, seed, profile_s, applied=ff_ratio)] + \
        [row("ratio=0" if r == 0 else f"ratio={r:g} p'3", v, r, seed) for r, v in rates.items()]


def cost(lthp, ff_steps, seed=0):
    """FastFlow and TF-NO at one prep cost (Lthp: the local pipeline's rate)."""
    return [row("fastflow", ff_steps, seed=seed, lthp=lthp, rthp=40.0), row("ratio=0", lthp, seed=seed)]


def runs(**kw):
    return {2: cost(25.0, 24.8), 4: cost(16.0, 24.0), 16: sweep(**kw)}


SETTINGS = {"candidates": ["p'3"]}


@pytest.mark.parametrize("gthp,lthp,rthp,ocycle", [(25, 4, 8, 0.01), (25, 20, 30, 0.02), (25, 24, 8, 0.01),
                                                   (25, 30, 8, 0.01), (25, 4, 30, 0.05), (10, 2, 3, 0.069)])
def test_algorithm_1_as_transcribed_agrees_with_the_trainers_policy(gthp, lthp, rthp, ocycle):
    d = decide(Profile(gthp, lthp, 0.07, {"p'3": Candidate(rthp, ocycle)}))
    offload, chosen, ratio = fastflow.algorithm_1(gthp, lthp, 0.07, {"p'3": (rthp, ocycle)})
    assert (offload, chosen) == (d["offload"], d["pipeline"]) and ratio == pytest.approx(d["off_ratio"])


def test_algorithm_1_takes_both_branches_and_declines_below_the_threshold():
    assert fastflow.algorithm_1(25, 24, 0.07, {"p'3": (8, 0.01)}) == (False, None, 0.0)    # 25/24 < 1.1
    _, _, even = fastflow.algorithm_1(25, 4, 0.07, {"p'3": (8, 0.01)})                       # Lower >= Upper
    assert even == pytest.approx(8 / 12)
    _, _, upper = fastflow.algorithm_1(25, 20, 0.07, {"p'3": (10, 0.01)})                    # Lower < Upper
    assert upper == pytest.approx(10 / 25)
    assert fastflow.algorithm_1(25, 4, 0.07, {"p'2": (6, 0.01), "p'3": (8, 0.01)})[1] == "p'3"


def test_fastflow_claims_reproduce_on_runs_that_behave_as_the_paper_says():
    verdicts = {c.key: c.verdict for c in fastflow.from_runs(runs(), SETTINGS)}
    assert verdicts == {"rule-branch": REPRODUCED, "rule-off-ratio": REPRODUCED,
                        "speedup-grows-with-stall": REPRODUCED, "speedup-low-stall": REPRODUCED,
                        "fig9-interior-best": REPRODUCED, "ff-vs-best-steps": REPRODUCED,
                        "ff-vs-best-epoch": PARTLY}
    epoch = next(c for c in fastflow.from_runs(runs(), SETTINGS) if c.key == "ff-vs-best-epoch")
    assert "16 s of profiling" in epoch.why


def test_a_run_that_applied_another_ratio_or_branch_differs():
    r = runs()
    r[16][0]["metrics"]["measured_ratio"] = 0.4                 # Algorithm 1 says 0.67
    r[2][0]["metrics"]["decision"] = {"offload": True, "pipeline": "p'3", "off_ratio": 1.0}   # it should decline
    claims = {c.key: c for c in fastflow.from_runs(r, SETTINGS)}
    assert claims["rule-off-ratio"].verdict == DIFFERS
    assert claims["rule-branch"].ours == [0.0, 1.0, 1.0] and claims["rule-branch"].verdict == REPRODUCED  # median
    r[4][0]["metrics"]["decision"] = {"offload": False, "pipeline": None, "off_ratio": 0.0}
    assert {c.key: c for c in fastflow.from_runs(r, SETTINGS)}["rule-branch"].verdict == DIFFERS


def test_a_speed_up_that_does_not_follow_the_stall_differs_and_says_where():
    r = runs()
    r[4] = cost(16.0, 60.0)                    # more speed-up at batch 4 (stall 36%) than at 16 (84%): x3.75 > x3
    claims = {c.key: c for c in fastflow.from_runs(r, SETTINGS)}
    assert claims["speedup-grows-with-stall"].verdict == DIFFERS
    assert "batch 4: stall 36%, x3.75" in claims["speedup-grows-with-stall"].why


def test_a_sweep_lowest_at_an_end_and_a_slower_fastflow_differ():
    r = runs(best=(1.0, 14.0), ff_steps=9.0)
    claims = {c.key: c for c in fastflow.from_runs(r, SETTINGS)}
    assert claims["fig9-interior-best"].verdict == DIFFERS and "at an end" in claims["fig9-interior-best"].why
    assert claims["ff-vs-best-steps"].median == pytest.approx(9 / 14) and claims["ff-vs-best-steps"].verdict == DIFFERS
    assert "the best fixed ratio was 1" in claims["ff-vs-best-steps"].why


def test_rounds_are_compared_within_themselves_and_cpu_shortage_is_named():
    r = {b: rows + [dict(x, seed=1) for x in rows] for b, rows in runs().items()}
    for x in r[16]:
        x["metrics"] = dict(x["metrics"], cpu_idle_mean_pct=5.0)
    claims = {c.key: c for c in fastflow.from_runs(r, SETTINGS)}
    assert len(claims["ff-vs-best-steps"].ours) == 2 and len(claims["speedup-grows-with-stall"].ours) == 2
    assert claims["ff-vs-best-epoch"].why.startswith("the machine was short of CPU")


def test_rank_correlation():
    assert fastflow.rank_correlation([0.1, 0.5, 0.9], [1.0, 1.5, 3.0]) == pytest.approx(1.0)
    assert fastflow.rank_correlation([0.1, 0.5, 0.9], [3.0, 1.5, 1.0]) == pytest.approx(-1.0)
    assert fastflow.rank_correlation([0.1, 0.5, 0.9], [1.0, 3.0, 2.0]) == pytest.approx(0.5)


def test_fastflow_names_tensorflow_when_the_machine_lacks_it(monkeypatch):
    from testbed.workloads import offload
    monkeypatch.setattr(offload, "tensorflow_installed", lambda: False)
    assert "make setup EXTRAS=tf" in fastflow.missing()
    monkeypatch.setattr(offload, "tensorflow_installed", lambda: True)
    assert fastflow.missing() == ""
