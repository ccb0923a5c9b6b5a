"""Bit-parity of the shared state (hosts/recovery/shared_state.py) across a job's ranks: every digest a rank
reported after a step must equal numpy's state after that step, computed here from the worlds the steps ran
with, and the ranks must agree on those worlds. Any difference is divergence.
"""
from __future__ import annotations

from hosts.recovery.shared_state import expected_digests, steps_worlds


def check(outputs: list[dict], count: int) -> dict:
    """{"ranks", "steps", "divergent", "first_divergent", "sync_mismatches"} over the outputs carrying a state."""
    states = [(o["host"], o["state"]) for o in outputs if o.get("state")]
    expected: dict[tuple, list[str]] = {}
    divergent, first, steps = 0, None, 0
    longest = max((steps_worlds(s["worlds"]) for _, s in states), key=len, default=[])
    for host, state in states:
        worlds = steps_worlds(state["worlds"])
        if worlds != longest[:len(worlds)]:           # ranks that disagree on what ran: every step of theirs
            divergent += len(state["history"])
            first = 0 if first is None else first
            continue
        key = tuple(worlds)
        if key not in expected:
            expected[key] = expected_digests(worlds, count)
        for step, world, got in state["history"]:
            steps = max(steps, step + 1)
            if step >= len(worlds) or worlds[step] != world or expected[key][step] != got:
                divergent += 1
                first = step if first is None else min(first, step)
    return {"ranks": len(states), "steps": steps, "divergent": divergent, "first_divergent": first,
            "sync_mismatches": sum(s["diverged"] for _, s in states),
            "synced": sum(s["synced"] for _, s in states)}
