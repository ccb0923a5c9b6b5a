"""The churn workload's fault schedule: seeded random failures of GPUs (crash, hang, stall, NIC cut) and their
returns (gpu-restart, nic-up), at random times. The same arguments give the same schedule, so a churn run
that went wrong can be run again as it was.

Failures come at exponentially distributed intervals (mean `interval_s`, after a floor of `gap_s` since the
previous event, so each re-formation is over before the next event); each failed GPU comes back after a
uniform `down_s` draw and is not failed again for 2 `gap_s` (it rejoins first); at most `max_down` GPUs are
out at once; nothing happens in the last `quiet_s`, so every GPU is back in the job when it ends.
"""
from __future__ import annotations

import random

from testbed.faults import REGISTRY

# the failures a GPU comes back from, each with the fault kind that brings it back
RETURN = {name: kind.back for name, kind in REGISTRY.items() if kind.back}
KINDS = list(RETURN)


def plan(seed: int, duration: float, hosts: list[str], kinds: list[str] = KINDS, interval_s: float = 10.0,
         down_s: tuple[float, float] = (3.0, 8.0), max_down: int = 1, gap_s: float = 4.0,
         quiet_s: float = 10.0) -> list[dict]:
    """The faults, in time order: {"at", "kind", "target"} (the fault schedule's entries)."""
    rng = random.Random(seed)
    end = duration - quiet_s
    out: dict[str, tuple[float, str]] = {}          # host -> (when it comes back, how it failed)
    back_at: dict[str, float] = {}                  # host -> when it last came back
    faults: list[dict] = []
    last = 0.0
    while True:
        candidate = last + gap_s + rng.expovariate(1.0 / interval_s)
        down = rng.uniform(*down_s)
        ready = [h for h in hosts if h not in out and candidate - back_at.get(h, -1e9) >= 2 * gap_s]
        fits = bool(ready) and len(out) < max_down and candidate + down + gap_s * max_down <= end
        if out and (not fits or min(t for t, _ in out.values()) <= candidate):
            host = min(out, key=lambda h: out[h][0])         # the next GPU due back comes back
            back, kind = out.pop(host)
            last = back_at[host] = max(back, last + gap_s)
            faults.append({"at": round(last, 3), "kind": RETURN[kind], "target": host})
        elif fits:
            kind = rng.choice(kinds)
            host = rng.choice(ready)
            out[host] = (candidate + down, kind)
            last = candidate
            faults.append({"at": round(last, 3), "kind": kind, "target": host})
        elif candidate + down + gap_s * max_down > end:
            return faults
        # else: no GPU is ready to fail yet; draw again from the same point
