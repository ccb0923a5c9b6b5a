"""An emulated GPU: each step takes 1/steps_per_s seconds of sleep, which leaves both cores to the input
pipelines and the network (a real training step would compete with them for the 2 cores)."""
from __future__ import annotations

import time


class EmulatedGPU:
    def __init__(self, steps_per_s: float):
        self.period = 1.0 / steps_per_s
        self.busy_until = 0.0

    def step(self, batch) -> None:
        # The step starts when the batch is there and the previous step is done; no catching up later.
        start = max(time.monotonic(), self.busy_until)
        self.busy_until = start + self.period
        time.sleep(max(0.0, self.busy_until - time.monotonic()))
