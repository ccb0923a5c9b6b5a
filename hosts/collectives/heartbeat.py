"""Communicator heartbeats: how a rank learns, within about a second, that a peer crashed or hung.

Every rank publishes a beat (a counter in a small file of the job's store directory) every `period`
seconds from its own thread, and watches the beats of the peers it currently works with. A peer whose
counter has not moved for `timeout` seconds is declared failed. A crashed process (SIGKILL) and a hung
one (SIGSTOP stops all its threads) both fall silent, so both are found the same way, long before the
transport's retransmission timers give up (seconds, as they must outlast full queues).

Silence is measured on the watcher's own monotonic clock, from the last time it saw the counter move,
so the ranks' clocks need not agree. A watcher that was itself starved (its loop late by more than half
the timeout: the 2-core machine was busy, or the process was stopped) restarts every peer's clock
instead of blaming them, which keeps load from producing false positives. A peer that has not
published yet (a spare still starting) gets `join_grace` seconds. A rank that leaves the job normally
publishes LEFT, so that its silence afterwards is not a failure. A rank whose GPU is declared failed
(the operator or a health check takes it out of service) publishes DECLARED, and its watchers fail it at
once, without waiting out the timeout.
"""
from __future__ import annotations

import os
import struct
import threading
import time
from typing import Callable

LEFT = (1 << 64) - 1
DECLARED = LEFT - 1
_BEAT = struct.Struct("<Q")


class Heartbeat:
    def __init__(self, directory: str, name: str, period: float = 0.15, timeout: float = 1.0,
                 join_grace: float = 30.0):
        if not 0 < period < timeout:
            raise ValueError(f"heartbeat period {period} s must be positive and shorter than its timeout {timeout} s")
        self.directory, self.name = directory, name
        self.period, self.timeout, self.join_grace = period, timeout, join_grace
        os.makedirs(directory, exist_ok=True)
        self._fd = os.open(self._path(name), os.O_CREAT | os.O_RDWR, 0o644)
        self._count = 0
        self._lock = threading.Lock()
        self._peers: dict[str, dict] = {}          # name -> {fd, value, since (monotonic), watched_at}
        self._failed: dict[str, tuple[float, float]] = {}     # name -> (silence s, wall time declared)
        self._declared: set[str] = set()           # peers whose GPU was declared failed (no silence needed)
        self.on_failure: Callable[[], None] | None = None       # called from the heartbeat thread
        self.max_silence = 0.0       # longest a live peer's counter stood still (the margin to `timeout`)
        self.max_loop_gap = 0.0      # longest gap between two of our own beats (our own starvation)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-heartbeat")

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, f"hb-{name}")

    # -- what the communicator uses -----------------------------------------------------------
    def start(self) -> "Heartbeat":
        self._beat()
        self._thread.start()
        return self

    def watch(self, names) -> None:
        """Watch exactly these peers from now on. Peers kept from the previous set keep their clocks;
        a peer the job has just agreed is alive (it re-joined) starts with a clean record."""
        now = time.monotonic()
        with self._lock:
            for name in set(self._peers) - set(names):
                fd = self._peers.pop(name)["fd"]
                if fd is not None:
                    os.close(fd)
            for name in names:
                self._failed.pop(name, None)
                if name not in self._peers:
                    self._peers[name] = {"fd": None, "value": None, "since": now, "watched_at": now}

    def failed(self) -> dict[str, tuple[float, float]]:
        """Watched peers declared failed: name -> (seconds silent, wall-clock time declared)."""
        with self._lock:
            return {n: v for n, v in self._failed.items() if n in self._peers}

    def failure(self) -> str | None:
        """One line naming a failed peer, or None."""
        failed = self.failed()
        if not failed:
            return None
        name, (silence, _) = min(failed.items(), key=lambda kv: kv[1][1])
        if self.was_declared(name):
            return f"{name} was declared failed"
        return f"{name} missed its heartbeats for {silence:.2f} s"

    def was_declared(self, name: str) -> bool:
        """Whether the peer's GPU was declared failed (rather than falling silent)."""
        with self._lock:
            return name in self._declared

    def stats(self) -> dict:
        return {"period_s": self.period, "timeout_s": self.timeout, "beats": self._count,
                "max_peer_silence_s": round(self.max_silence, 4), "max_own_gap_s": round(self.max_loop_gap, 4)}

    def stop(self, left: bool = True) -> None:
        """Stop beating; with left=True tell the watchers that we left rather than failed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if left:
            os.pwrite(self._fd, _BEAT.pack(LEFT), 0)
        os.close(self._fd)
        self.watch(())

    def declare_failed(self) -> None:
        """This rank's GPU is out of service: stop beating and tell the watchers so."""
        self._stop.set()
        os.pwrite(self._fd, _BEAT.pack(DECLARED), 0)

    # -- the thread ---------------------------------------------------------------------------
    def _beat(self) -> None:
        self._count += 1
        os.pwrite(self._fd, _BEAT.pack(self._count), 0)

    def _read(self, name: str, peer: dict):
        if peer["fd"] is None:
            try:
                peer["fd"] = os.open(self._path(name), os.O_RDONLY)
            except FileNotFoundError:
                return None
        data = os.pread(peer["fd"], _BEAT.size, 0)
        return _BEAT.unpack(data)[0] if len(data) == _BEAT.size else None

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.period):
            now = time.monotonic()
            gap, last = now - last, now
            self.max_loop_gap = max(self.max_loop_gap, gap)
            self._beat()
            starved = gap > self.timeout / 2
            newly = False
            with self._lock:
                for name, peer in self._peers.items():
                    value = self._read(name, peer)
                    if starved:                  # we were not running: we cannot tell who was silent
                        peer["since"] = now
                    if value == DECLARED and name not in self._failed:
                        self._declared.add(name)
                        self._failed[name] = (now - peer["since"], time.time())
                        newly = True
                        continue
                    if value is not None and value != peer["value"]:
                        if peer["value"] is not None and not starved:
                            self.max_silence = max(self.max_silence, now - peer["since"])
                        peer["value"], peer["since"] = value, now
                        continue
                    if value == LEFT or name in self._failed:
                        continue
                    limit = self.timeout if value is not None else self.join_grace
                    if now - peer["since"] > limit:
                        self._failed[name] = (now - peer["since"], time.time())
                        newly = True
            if newly and self.on_failure is not None:
                self.on_failure()
