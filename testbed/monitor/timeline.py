"""Switch port counters sampled over a run, for utilisation-over-time plots."""
from __future__ import annotations

import threading
import time


class Timeline:
    """Samples net.counters() every `period` seconds in a thread: [(epoch, {"SWITCH:PORT": tx_bytes})]."""

    def __init__(self, net, period: float = 0.5):
        self.net, self.period = net, period
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-timeline")

    def _run(self) -> None:
        while True:
            try:
                counters = self.net.counters()
                self.samples.append((time.time(), {p: c["tx_bytes"] for p, c in counters.items()}))
            except Exception:  # a switch being reconfigured by a fault: skip this sample
                pass
            if self._stop.wait(self.period):
                return

    def start(self) -> "Timeline":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def rates(self, ports: list[str]) -> tuple[list[float], list[float]]:
        """(mid-interval times, Mbit/s summed over `ports`) between consecutive samples."""
        times, mbps = [], []
        for (t0, a), (t1, b) in zip(self.samples, self.samples[1:]):
            moved = sum(max(0, b.get(p, 0) - a.get(p, 0)) for p in ports)
            times.append((t0 + t1) / 2)
            mbps.append(moved * 8 / (t1 - t0) / 1e6)
        return times, mbps
