"""Out-of-band key-value store for rendezvous, on a directory every rank can see.

The emulated hosts share the machine's file system (as torch.distributed's FileStore uses a shared
file), so connection set-up needs no network path between arbitrary ranks: on a rail-only fabric
most rank pairs have none. Values are JSON; writes are atomic (rename).
"""
from __future__ import annotations

import json
import os
import time


class StoreTimeout(TimeoutError):
    pass


class FileStore:
    def __init__(self, path: str, timeout: float = 60.0):
        self.path = path
        self.timeout = timeout
        os.makedirs(path, exist_ok=True)

    def _file(self, key: str) -> str:
        return os.path.join(self.path, key.replace("/", "__"))

    def set(self, key: str, value) -> None:
        tmp = self._file(key) + f".tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(value, f)
        os.replace(tmp, self._file(key))

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
            if time.monotonic() > deadline:
                raise StoreTimeout(f"waited {self.timeout if timeout is None else timeout:.0f} s for "
                                   f"{what or key}")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def barrier(self, name: str, rank: int, world: int, timeout: float | None = None) -> None:
        self.set(f"barrier/{name}/{rank}", 1)
        for r in range(world):
            self.get(f"barrier/{name}/{r}", timeout, what=f"rank {r} at barrier {name!r}")
