"""Pipeline schedules: the order in which one stage runs the forward (F) and backward (B) passes of m micro-batches.

    one_f_one_b(stage, stages, m)   1F1B (PipeDream-Flush, Megatron's default): stage s runs p-s-1 forwards to
                                    fill the pipeline, then alternates one forward and one backward, then drains
    gpipe(stage, stages, m)         every forward, then every backward

A step is ("F" | "B", micro-batch). Before a step a stage receives its input from the neighbouring stage
(activations from s-1 for F, gradients from s+1 for B) and afterwards sends its output on. Both schedules idle
each stage for (p-1) passes' worth of time: the bubble ratio (p-1)/(m+p-1); `simulate` computes it.
"""
from __future__ import annotations


def one_f_one_b(stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    warmup = min(stages - stage - 1, m)
    steps = [("F", i) for i in range(warmup)]
    for j in range(m - warmup):
        steps += [("F", warmup + j), ("B", j)]
    return steps + [("B", j) for j in range(m - warmup, m)]


def gpipe(stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


SCHEDULES = {"1f1b": one_f_one_b, "gpipe": gpipe}


def in_flight(steps: list[tuple[str, int]]) -> int:
    """The most micro-batches whose activations a stage holds at once (forward done, backward not yet)."""
    held = most = 0
    for kind, _ in steps:
        held += 1 if kind == "F" else -1
        most = max(most, held)
    return most


def simulate(stages: int, m: int, schedule: str, forward: float, backward: float, transfer: float = 0.0) -> float:
    """Makespan of an ideal pipeline running `schedule` (every pass and hand-over takes the time given)."""
    programs = [SCHEDULES[schedule](s, stages, m) for s in range(stages)]
    done: dict[tuple[str, int, int], float] = {}
    free, pos = [0.0] * stages, [0] * stages
    while any(pos[s] < len(programs[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while pos[s] < len(programs[s]):
                kind, i = programs[s][pos[s]]
                if kind == "F":
                    dep = ("F", s - 1, i) if s > 0 else None
                else:
                    dep = ("B", s + 1, i) if s < stages - 1 else ("F", s, i)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (transfer if dep[1] != s else 0.0)
                start = max(free[s], ready)
                free[s] = done[(kind, s, i)] = start + (forward if kind == "F" else backward)
                pos[s] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {schedule} deadlocks with {stages} stages and {m} micro-batches")
    return max(free)
