"""Comparing input-pipeline offloading policies so that the comparison holds up (the `offload` workload's figures).

Every policy runs `repeats` times and is reported by its median with the spread (min-max) of its runs.
Fixed off-ratios are swept for every candidate pipeline FastFlow may choose (p'2, p'3), so FastFlow is judged
against the sweep of the very pipeline it chose. FastFlow's epoch time includes its profiling (counted as
overhead: its profiling steps are not counted as training); its steady training rate is reported beside it.
The baselines are rows of the sweep: TF-NO = ratio 0 (local only), TF-DSLR = 0.5 and TF-DSR = 1 of the
batch-wise remote pipeline (p'3, the whole pipeline on tf.data.service).
"""
from __future__ import annotations

import statistics

from testbed.schema_words import INT, NUM, STR, arr, d, dur, nullable, obj

BUDGET_TOLERANCE = 1.15        # CPU is sampled over the run's window: a held quota reads at most ~10% above
RATIO_TOLERANCE = 0.1          # the mixer keeps each source within 2 batches of its share over ~100 steps


SPREAD = obj({"median": NUM, "min": NUM, "max": NUM, "runs": INT}, ["median", "min", "max", "runs"])

# The offload workload's keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {
    "rows": arr(obj({"pipeline": STR, "policy": STR, "throughput_eps": NUM, "steps_per_s": NUM,
                     "profile_s": dur("FastFlow's profiling."), "epoch_s_with_profiling": dur("the epoch's time."),
                     "off_ratio": NUM, "candidate": nullable(STR), "seed": INT, "metrics": {"type": "object"}},
                    ["pipeline", "policy", "steps_per_s", "off_ratio"], closed=False), "One trainer run each."),
    "policies": arr(obj({"pipeline": STR, "policy": STR, "candidate": nullable(STR), "off_ratio": SPREAD,
                         "steps_per_s": SPREAD, "epoch_s": d(SPREAD, "Seconds (a duration): the epoch's time, "
                                                                     "profiling included (median, min, max)."),
                         "speedup_vs_tf_no": NUM},
                        ["pipeline", "policy"], closed=False), "Medians and spreads per policy."),
    "cpu_bound_runs": INT, "candidates": arr(STR), "epoch_steps": INT,
    "trainer": d(STR, "The GPU host the trainer ran in."),
    "cpu_hosts": arr(STR, "The CPU hosts that ran tf.data.service (the dispatcher on the first)."),
}

def fixed_policy(ratio: float, candidate: str | None) -> str:
    """A sweep point's name: ratio 0 reads no remote pipeline, so it has no candidate."""
    return "ratio=0" if ratio == 0 else f"ratio={ratio:g} {candidate}"


def baseline_candidate(candidates: list[str]) -> str:
    return "p'3" if "p'3" in candidates else candidates[-1]


def baselines(candidates: list[str]) -> dict[str, str]:
    """Baseline label -> the sweep policy it is."""
    c = baseline_candidate(candidates)
    return {"TF-NO": fixed_policy(0, c), "TF-DSLR": fixed_policy(0.5, c), "TF-DSR": fixed_policy(1, c)}


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": len(values)}


def aggregate(rows: list[dict]) -> list[dict]:
    """One entry per (pipeline, policy), in the order first run: medians and spreads of its runs."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["pipeline"], r["policy"]), []).append(r)
    out = []
    for (pipeline, policy), runs in groups.items():
        chosen = [r["candidate"] for r in runs if r["candidate"]]
        out.append({"pipeline": pipeline, "policy": policy,
                    "candidate": statistics.mode(chosen) if chosen else None,
                    "off_ratio": spread([r["off_ratio"] for r in runs]),
                    "steps_per_s": spread([r["steps_per_s"] for r in runs]),
                    "epoch_s": spread([r["epoch_s_with_profiling"] for r in runs])})
    return out


def _find(policies: list[dict], pipeline: str, policy: str) -> dict | None:
    return next((p for p in policies if p["pipeline"] == pipeline and p["policy"] == policy), None)


def sweep_of(policies: list[dict], pipeline: str, candidate: str | None = None) -> list[dict]:
    """The sweep's policies of a pipeline (of one candidate, with local-only ratio 0 in every candidate's sweep)."""
    return [p for p in policies if p["pipeline"] == pipeline and p["policy"].startswith("ratio=")
            and (candidate is None or p["candidate"] in (None, candidate))]


def best(sweep: list[dict]) -> dict:
    return max(sweep, key=lambda p: p["steps_per_s"]["median"])


def checks(pipeline: str, rows: list[dict], policies: list[dict], s: dict) -> list[dict]:
    """The decision's quality (medians), and what makes the figures comparable at all: each run kept its CPU
    budget and took the share of remote batches its policy names."""
    ff = _find(policies, pipeline, "fastflow")
    no = _find(policies, pipeline, "ratio=0")
    mine = sweep_of(policies, pipeline, ff["candidate"] or baseline_candidate(s["candidates"]))
    top = best(mine)
    f, n, t = ff["steps_per_s"]["median"], no["steps_per_s"]["median"], top["steps_per_s"]["median"]
    ratio = ff["off_ratio"]["median"]
    near = abs(ratio - top["off_ratio"]["median"]) <= s["ratio_tolerance"] or f >= s["best_fraction"] * t
    return [
        {"name": f"{pipeline}: fastflow >= tf-no", "ok": f >= (1 - s["noise"]) * n,
         "detail": f"medians {f:.2f} vs {n:.2f} steps/s over {ff['steps_per_s']['runs']} runs "
                   f"(noise allowance {s['noise']:.0%})"},
        {"name": f"{pipeline}: fastflow ratio near the best of its candidate's sweep", "ok": near,
         "detail": f"chose {ff['candidate'] or 'no offload'} at {ratio:.2f} ({f:.2f} steps/s); best of that sweep "
                   f"{top['policy']} ({t:.2f}); near = within {s['ratio_tolerance']} in ratio or "
                   f">= {s['best_fraction']:.0%} of its throughput"},
        budget_check(pipeline, rows, s["local_cores"]),
        ratio_check(pipeline, rows),
    ]


def budget_check(pipeline: str, rows: list[dict], cores: float) -> dict:
    """Fails when a trainer used more local CPU than its budget: the quota was not enforced (no cgroup), and
    local-versus-offloaded figures would compare different machines."""
    local = [r for r in rows if r["off_ratio"] < 1]
    worst = max(local, key=lambda r: r["metrics"]["local_cpu_cores"], default=None)
    used = worst["metrics"]["local_cpu_cores"] if worst else 0.0
    return {"name": f"{pipeline}: local CPU budget held", "ok": used <= cores * BUDGET_TOLERANCE,
            "detail": f"most local CPU in a run: {used:.2f} cores ({worst['policy'] if worst else '-'}), "
                      f"budget {cores:g} (+{BUDGET_TOLERANCE - 1:.0%} for sampling)"}


def ratio_check(pipeline: str, rows: list[dict]) -> dict:
    """Fails when a run's share of remote batches was not the off-ratio it is reported under."""
    off = [(r, abs(r["metrics"]["measured_ratio"] - r["off_ratio"])) for r in rows]
    r, miss = max(off, key=lambda x: x[1])
    return {"name": f"{pipeline}: off-ratios applied", "ok": miss <= RATIO_TOLERANCE,
            "detail": f"largest miss {miss:.3f} ({r['policy']}: asked {r['off_ratio']:.2f}, "
                      f"took {r['metrics']['measured_ratio']:.2f} remote), tolerance {RATIO_TOLERANCE}"}


def _cell(x: dict, fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(x['median'])} [{fmt.format(x['min'])}-{fmt.format(x['max'])}]"


def comparison_table(pipeline: str, policies: list[dict], candidates: list[str], epoch_steps: int) -> str:
    """TF-NO, TF-DSLR, TF-DSR, the sweep's best and FastFlow: medians [min-max] of their runs."""
    no = _find(policies, pipeline, "ratio=0")
    entries = [(label, _find(policies, pipeline, policy)) for label, policy in baselines(candidates).items()]
    entries += [("sweep best", best(sweep_of(policies, pipeline))), ("FastFlow", _find(policies, pipeline, "fastflow"))]
    runs = max(p["steps_per_s"]["runs"] for _, p in entries if p)
    lines = [f"# {pipeline}: median [min-max] of {runs} runs; epoch = {epoch_steps} steps, FastFlow's with its profiling",
             f"{'policy':11} {'cand':5} {'ratio':>5} {'steps/s':>20} {'epoch s':>22} {'x tf-no':>7}"]
    for label, p in entries:
        if p is None:
            lines.append(f"{label:11} (not in the sweep)")
            continue
        speedup = no["epoch_s"]["median"] / p["epoch_s"]["median"] if no else float("nan")
        lines.append(f"{label:11} {p['candidate'] or '-':5} {p['off_ratio']['median']:5.2f} "
                     f"{_cell(p['steps_per_s']):>20} {_cell(p['epoch_s'], '{:.1f}'):>22} {speedup:7.2f}")
    return "\n".join(lines)
