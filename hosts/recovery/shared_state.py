"""A job's shared state (what PCCL calls the shared state: the model every rank holds), for the collective
benchmark with `state` on: each completed AllReduce step adds its result to every rank's copy. Inputs are
integer-valued float32, so the sums are exact and every copy must be bit-identical to the others and to
numpy's (the testbed recomputes it from the worlds each step ran with).

A rank that joins a running job (a restarted GPU, a spare) has no state: at the start of every re-formed
epoch the members say in the epoch's store whether they hold the state and its digest; if anyone lacks it,
or two digests differ, the state is broadcast over the network from the first member that holds it, and
every holder compares what arrived with its own copy (a difference is divergence, counted, never hidden).
A step lost to a failure is rolled back on the ranks that had completed it before it is run again.
"""
from __future__ import annotations

import hashlib

import numpy as np

from hosts.collectives import algorithms
from hosts.collectives.benchmark import make_input


def digest(x: np.ndarray) -> str:
    return hashlib.sha256(x.tobytes()).hexdigest()[:16]


def steps_worlds(runs: list[list]) -> list[int]:
    """[world, steps] runs -> the world of each step."""
    return [world for world, n in runs for _ in range(n)]


def expected_digests(worlds: list[int], count: int) -> list[str]:
    """numpy's state after each step, given the world each step ran with: the running sum of the benchmark's
    inputs of ranks 0..world-1."""
    sums: dict[int, np.ndarray] = {}
    state = np.zeros(count, np.float32)
    out = []
    for world in worlds:
        if world not in sums:
            sums[world] = np.sum(np.stack([make_input(r, count, np.float32) for r in range(world)]),
                                 axis=0).astype(np.float32)
        state += sums[world]
        out.append(digest(state))
    return out


class SharedState:
    def __init__(self, count: int, fresh: bool):
        """fresh: this rank starts with the job (zeros); otherwise it must be sent the state before its first step."""
        self.value = np.zeros(count, np.float32)
        self.held = fresh
        self._before: tuple[int, np.ndarray] | None = None      # (step, state before it) for a rollback
        self.history: list[list] = []          # [step, world, digest] after each completed step
        self.worlds: list[list] = []           # [world, steps] runs: the world of every step since the job began
        self.diverged = 0                      # syncs where a holder's copy differed from the root's
        self.synced = 0                        # broadcasts received

    def apply(self, step: int, world: int, result: np.ndarray) -> None:
        self._before = (step, self.value.copy())
        self.value += result
        self.history.append([step, world, digest(self.value)])
        if self.worlds and self.worlds[-1][0] == world:
            self.worlds[-1][1] += 1
        else:
            self.worlds.append([world, 1])

    def resume_at(self, step: int) -> None:
        """The job resumes at `step`: undo it if this rank had completed it (it is run again)."""
        if self._before is not None and self._before[0] == step and self.history and self.history[-1][0] == step:
            self.value = self._before[1]
            self.history.pop()
            self.worlds[-1][1] -= 1
            if not self.worlds[-1][1]:
                self.worlds.pop()
        self._before = None

    def sync(self, comm, store, rank: int, names: list[str], log: list | None = None) -> list:
        """At an epoch's start: make sure every member holds the same state (see the module's docstring).
        `log`: this rank's records of the job's past epochs; returns the holders' records merged (past_records),
        which a newcomer keeps with the state (so the job's history outlives the ranks that recorded it)."""
        store.set(f"state/{rank}", {"held": self.held, "digest": digest(self.value) if self.held else None,
                                    "worlds": self.worlds, "log": log or []})
        said = [store.get(f"state/{r}", what=f"{names[r]}'s state digest") for r in range(len(names))]
        holders = [r for r, s in enumerate(said) if s["held"]]
        if not holders:
            raise RuntimeError("no member of the new epoch holds the shared state")
        if len(holders) == len(said) and len({s["digest"] for s in said}) == 1:
            return past_records([said[r]["log"] for r in holders])     # every copy equal: nothing to send
        got = algorithms.broadcast(comm, self.value.copy(), root=holders[0])     # received in place
        if self.held and not np.array_equal(got, self.value):
            self.diverged += 1
        if not self.held:
            self.value, self.held, self.worlds = got, True, [list(w) for w in said[holders[0]]["worlds"]]
            self.synced += 1
        return past_records([said[r]["log"] for r in holders])


def past_records(logs: list[list[dict]]) -> list[dict]:
    """One record per past epoch, in epoch order: from the first log that has it (the first holder's log comes
    first), else from any other member's. Not the first holder's alone: a member that joined in epoch E never
    recorded E (it was not there to re-form), so once it is the first holder and every rank that lived through
    E has been replaced, E's record would be gone."""
    merged: dict[int, dict] = {}
    for log in logs:
        for record in log:
            merged.setdefault(record["epoch"], record)
    return [merged[e] for e in sorted(merged)]
