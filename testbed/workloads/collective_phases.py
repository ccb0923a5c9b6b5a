"""Per-phase figures of a hierarchical collective's row: how long each phase (HB reduce-scatter, rail exchange,
HB all-gather, ...) took and how close it came to its own bound (its bytes over the rate of the link it uses),
so a slow link or step shows by name. The ranks log the phases (hosts/collectives/phases.py); the models are
testbed/model/bounds.py's `phases` and, for the pipelined variant, `pipelined_time`.

A phase's time is the mean over iterations of the mean over ranks (each rank's phases add up to its own time
for the operation, so the phases add up to about the row's time).
"""
from __future__ import annotations

from testbed.model import bounds

PIPELINED = "hierarchical-pipelined"


def phase_rows(op: str, algo: str, nbytes: int, c: bounds.Cluster, outs: list[dict]) -> list[dict]:
    """[{name, link, seconds, samples, bound_seconds, ratio}] in the order the phases ran; [] when the
    ranks logged none (flat algorithms)."""
    spans: dict[str, list[float]] = {}
    for o in outs:
        for it in o.get("phases") or []:
            for name, seconds in it or []:
                spans.setdefault(name, []).append(seconds)
    if not spans:
        return []
    ranks = max(1, len(outs))
    modelled = {p.name: p for p in bounds.phases(op, algo, nbytes, c)} if algo != PIPELINED else {}
    rows = []
    for name, times in spans.items():
        mean = sum(times) / len(times)          # every (rank, iteration) that ran the phase, equally weighted
        if algo == PIPELINED:
            bound, link = bounds.pipelined_time(op, nbytes, c), "hb+nic"
        elif name in modelled:
            bound, link = modelled[name].seconds, modelled[name].link
        else:
            bound, link = None, "?"
        rows.append({"name": name, "link": link, "seconds": round(mean, 6), "samples": len(times) // ranks,
                     "bound_seconds": round(bound, 6) if bound is not None else None,
                     "ratio": round(bound / mean, 4) if bound and mean > 0 else None})
    return rows


def extra_fields(op: str, algo: str, nbytes: int, c: bounds.Cluster, outs: list[dict]) -> dict:
    """What a hierarchical row adds: its phases, and for the pipelined variant the sequential bound it beats."""
    out = {}
    ph = phase_rows(op, algo, nbytes, c, outs)
    if ph:
        out["phases"] = ph
    if algo == PIPELINED:
        seq = bounds.bound_busbw(op, "hierarchical", nbytes, c) / 1e6
        out["sequential_bound_busbw_MBps"] = round(seq, 4)
    return out


def rank_options(spec: dict, size: int, c: bounds.Cluster) -> dict:
    """What the ranks of a pipelined collective are told: how many pieces (the count its model assumes)."""
    if spec["algo"] != PIPELINED:
        return {}
    return {"pieces": bounds.pipeline_pieces(spec["op"], size, c)}


def table_lines(r: dict) -> str:
    """Lines under a row's nccl-tests line: one per phase, its time, its bound and their ratio."""
    lines = []
    for p in r.get("phases", []):
        bound = f"{p['bound_seconds'] * 1e6:>10.0f}" if p["bound_seconds"] is not None else f"{'-':>10}"
        ratio = f"{p['ratio']:>6.2f}" if p["ratio"] is not None else f"{'-':>6}"
        lines.append(f"#   phase {p['name']:<18} {p['link']:>6} {p['seconds'] * 1e6:>12.0f} us  bound {bound} us "
                     f"ratio {ratio}")
    if "sequential_bound_busbw_MBps" in r:
        seq = r["sequential_bound_busbw_MBps"]
        lines.append(f"#   sequential bound {seq:.3f} MB/s: busbw is {r['busbw_MBps'] / seq:.2f} of it")
    return "\n".join(lines)
