"""FastFlow's smart offloading policy (Um et al., VLDB 2023, Algorithm 1), on measured profiles.

Throughputs are in steps/s; cycles are local CPU seconds per step (only their ratio is used).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Candidate:
    rthp: float            # throughput with everything preprocessed remotely by this pipeline
    ocycle: float          # local CPU per step with this offloaded pipeline


@dataclass
class Profile:
    gthp: float            # model alone, input cached
    lthp: float            # local pipeline + model
    pcycle: float          # local CPU per step without offloading
    candidates: dict[str, Candidate] = field(default_factory=dict)   # "p'1", "p'2", "p'3"


def decide(p: Profile, threshold: float = 1.1) -> dict:
    """Returns {"offload", "branch", "pipeline", "scores", "upper", "lower", "off_ratio"}."""
    out = {"offload": False, "pipeline": None, "scores": {}, "upper": None, "lower": None, "off_ratio": 0.0}
    if p.gthp <= p.lthp:
        return {**out, "branch": "no-offload: Gthp <= Lthp (input is not the bottleneck)"}
    if p.gthp / p.lthp < threshold:
        return {**out, "branch": f"no-offload: Gthp/Lthp = {p.gthp / p.lthp:.3f} < threshold {threshold}"}
    if not p.candidates:
        return {**out, "branch": "no-offload: no candidate pipeline could be profiled"}
    scores = {name: p.lthp * (1 - c.ocycle / p.pcycle) + c.rthp for name, c in p.candidates.items()}
    best = max(scores, key=scores.get)
    c = p.candidates[best]
    upper = c.rthp
    lower = (p.gthp - p.lthp) * (1 + c.ocycle / p.pcycle)
    if lower < upper:
        ratio, branch = upper / p.gthp, "offload: Lower < Upper, OffRatio = Upper/Gthp"
    else:
        ratio, branch = c.rthp / (p.lthp + c.rthp), "offload: Lower >= Upper, OffRatio = Rthp/(Lthp+Rthp)"
    # Upper/Gthp exceeds 1 when the remote side alone outruns the GPU: everything goes remote.
    return {**out, "offload": True, "branch": branch, "pipeline": best, "scores": scores,
            "upper": upper, "lower": lower, "off_ratio": min(1.0, ratio)}
