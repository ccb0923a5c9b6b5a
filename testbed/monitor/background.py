"""A sampler that runs in a thread of its own until stopped: what the monitors share."""
from __future__ import annotations

import threading


class Background:
    """Subclasses define _run, which returns once self._stop is set (self._stop.wait(period) paces it)."""

    def __init__(self, name: str):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def _run(self) -> None:
        raise NotImplementedError

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
