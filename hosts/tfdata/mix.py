"""ApplyOffRatio: take a fraction `ratio` of batches from the remote source and the rest from the local one.

Each source runs in its own thread and fills a small queue. The consumer takes whichever source is ready,
in any order (non-deterministic), but never lets a source run more than `slack` batches ahead of its share,
so the ratio holds over the run. A fixed alternation would run at the slower source's pace at every
step; this order adapts, and the quota stops a fast source from taking over the other's share. A source
that has used its share blocks, so it does not spend CPU on batches nobody will take.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterable


class Mixer:
    def __init__(self, local: Iterable | None, remote: Iterable | None, ratio: float, slack: int = 2,
                 depth: int = 2):
        self.ratio, self.slack = ratio, slack
        self.taken = {"local": 0, "remote": 0}
        self.queues: dict[str, queue.Queue] = {}
        self.ready = threading.Condition()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        for name, src, share in (("local", local, 1 - ratio), ("remote", remote, ratio)):
            if src is not None and share > 0:
                self.queues[name] = queue.Queue(depth)
                threading.Thread(target=self._produce, args=(name, src), daemon=True).start()
        if not self.queues:
            raise ValueError("Mixer needs a source with a non-zero share")

    def _produce(self, name: str, src: Iterable) -> None:
        try:
            for item in src:
                while not self._stop.is_set():
                    try:
                        self.queues[name].put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                with self.ready:
                    self.ready.notify_all()
                if self._stop.is_set():
                    return
            raise RuntimeError(f"{name} source ended")      # sources repeat: an end is a failure
        except BaseException as exc:          # surfaced to the consumer, not lost in a thread
            self.errors.append(exc)
        with self.ready:
            self.ready.notify_all()

    def _allowed(self, name: str) -> bool:
        n = sum(self.taken.values()) + 1
        share = self.ratio if name == "remote" else 1 - self.ratio
        return self.taken[name] < share * n + self.slack

    def get(self, timeout: float = 60.0):
        """Next batch and the name of the source it came from."""
        with self.ready:
            ok = self.ready.wait_for(lambda: self._pick() is not None or self.errors, timeout)
            if self._pick() is None and self.errors:      # batches already made are still served first
                raise RuntimeError(f"input source failed: {self.errors[0]!r}")
            if not ok:
                raise TimeoutError(f"no batch within {timeout} s (taken {self.taken})")
            name = self._pick()
            item = self.queues[name].get_nowait()
            self.taken[name] += 1
            return item, name

    def _pick(self) -> str | None:
        # The source furthest behind its share goes first when both are ready.
        order = sorted(self.queues, key=lambda s: self.taken[s] - (self.ratio if s == "remote" else 1 - self.ratio)
                       * sum(self.taken.values()))
        for name in order:
            if self._allowed(name) and not self.queues[name].empty():
                return name
        return None

    def close(self) -> None:
        self._stop.set()
