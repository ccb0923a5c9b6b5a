"""Out-of-band key-value store for rendezvous, on a directory every rank can see.

The emulated hosts share the machine's file system (as torch.distributed's FileStore uses a shared
file), so connection set-up needs no network path between arbitrary ranks: on a rail-only fabric
most rank pairs have none. Values are JSON; writes are atomic (rename).
"""
from __future__ import annotations

import json
import os
import threading
import time


class StoreTimeout(TimeoutError):
    pass


class StoreInterrupted(StoreTimeout):
    """A wait given up because a party it waits for was declared failed (heartbeats)."""


class FileStore:
    def __init__(self, path: str, timeout: float = 60.0, interrupt=None):
        self.path = path
        self.timeout = timeout
        # interrupt() -> a reason to stop waiting (a failed peer), or None; checked while waiting
        self.interrupt = interrupt
        os.makedirs(path, exist_ok=True)

    def _file(self, key: str) -> str:
        return os.path.join(self.path, key.replace("/", "__"))

    def set(self, key: str, value) -> None:
        # a writer's own temporary file: ranks that share a process (rank_host.py) are its threads
        tmp = self._file(key) + f".tmp{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "w") as f:
            json.dump(value, f)
        os.replace(tmp, self._file(key))

    def delete(self, key: str) -> None:
        try:
            os.remove(self._file(key))
        except FileNotFoundError:
            pass

    def keys(self, prefix: str) -> list[str]:
        """The keys below `prefix` (e.g. "join/"): their remainders."""
        head = prefix.replace("/", "__")
        return sorted(f[len(head):] for f in os.listdir(self.path)
                      if f.startswith(head) and ".tmp" not in f)

    def exists(self, key: str) -> bool:
        return os.path.exists(self._file(key))

    def get(self, key: str, timeout: float | None = None, what: str | None = None):
        """Wait for `key`; `what` names the awaited party in the timeout error."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        delay = 0.001
        while True:
            try:
                with open(self._file(key)) as f:
                    return json.load(f)
            except (FileNotFoundError, ValueError):
                pass
            if self.interrupt is not None and (reason := self.interrupt()):
                raise StoreInterrupted(f"gave up waiting for {what or key}: {reason}")
            if time.monotonic() > deadline:
                raise StoreTimeout(f"waited {self.timeout if timeout is None else timeout:.0f} s for "
                                   f"{what or key}")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def barrier(self, name: str, rank: int, world: int, timeout: float | None = None) -> float:
        """Wait for every rank; returns when the last one arrived (wall clock)."""
        self.set(f"barrier/{name}/{rank}", time.time())
        return max(self.get(f"barrier/{name}/{r}", timeout, what=f"rank {r} at barrier {name!r}")
                   for r in range(world))
