"""The progress watchdog: a rank whose heartbeats go on but whose work has stopped (a hung kernel).

Heartbeats come from their own thread, so a rank whose compute or communication path hangs (its main loop
blocked in a kernel that never returns) keeps beating. NCCL's watchdog and TorchFT find it by progress
instead: every rank publishes a progress count (bumped whenever its main loop moves: a step's input ready,
a collective started or done, a barrier passed) and whether it is now waiting on its peers. A peer is
stalled when its count has not moved for `bound` seconds while it is not waiting (it is busy with
something that never ends) and this rank has itself waited, without moving, for `bound` seconds (it waits
on that peer). Ranks that only wait are victims and never blamed, so one hung rank is named once, not the
whole ring stuck behind it. The bound must outlast the longest stretch of work outside a wait (a step's
compute); a program that publishes no progress is never judged.
"""
from __future__ import annotations

import time


class Watchdog:
    def __init__(self, bound: float):
        self.bound = bound
        self.progress, self.waiting = 0, False       # this rank's, as published in its beats
        self._moved_at = time.monotonic()
        self._peers: dict[str, dict] = {}             # name -> {progress, waiting, since}

    def step(self, waiting: bool) -> None:
        """This rank moved on; `waiting`: it now waits on its peers (a barrier, a collective, a decision)."""
        self.progress += 1
        self.waiting = waiting
        self._moved_at = time.monotonic()

    def heard(self, name: str, progress: int, waiting: bool, now: float) -> None:
        peer = self._peers.setdefault(name, {"progress": None, "waiting": False, "since": now})
        if progress != peer["progress"]:
            peer["progress"], peer["since"] = progress, now
        peer["waiting"] = waiting

    def forget(self, keep) -> None:
        self._peers = {n: p for n, p in self._peers.items() if n in keep}

    def restart_clocks(self, now: float) -> None:
        """This rank was starved: it cannot tell who stood still."""
        self._moved_at = max(self._moved_at, now)
        for peer in self._peers.values():
            peer["since"] = now

    def stalled(self, now: float) -> dict[str, float]:
        """Peers stalled while this rank waits on them: name -> seconds their progress stood still."""
        if not self.waiting or now - self._moved_at <= self.bound:
            return {}
        return {name: now - p["since"] for name, p in self._peers.items()
                if p["progress"] and not p["waiting"] and now - p["since"] > self.bound}
