"""A `program` job's traffic over time as its ranks receive it, and the silences in it.

A user's program shows no progress the testbed can read, but its ranks must receive bytes to move on: the
switches' ports that face the job's NICs count what was delivered to them. A sampler reads those counters
(the switch ends of the NIC links, in the machine's namespace: a file read each) every PERIOD_S while the job
runs; a silence is a stretch in which the job's NICs together received less than QUIET_BYTES per sample
(pure ACKs and ARP stay under it, one data segment does not). A cut that stalls TCP until a retransmission
after the reroute shows as a silence that ends; a job that hangs, as one that runs to its end.
"""
from __future__ import annotations

import threading
import time

from testbed.fabric.links import switch_port

PERIOD_S = 0.05
QUIET_BYTES = 600           # below one full data segment (1500 B MTU) in a sample: nothing moved
MIN_SILENCE_S = 0.15        # shorter stretches are ordinary pauses between a program's steps


def nic_devices(fabric, hosts: list) -> list[str]:
    """The switch-side devices of the hosts' NIC links (what they transmit reaches the host)."""
    devs = []
    for h in hosts:
        try:
            link = fabric.attachment(h.name, "nic")
        except KeyError:
            continue
        node, port = (link.b, link.b_port) if link.a == h.name else (link.a, link.a_port)
        devs.append(switch_port(node, port))
    return devs


def read_bytes(devs: list[str]) -> int | None:
    """Bytes the devices have sent, summed; None if none of them can be read (no such device here)."""
    total, seen = 0, False
    for dev in devs:
        try:
            with open(f"/sys/class/net/{dev}/statistics/tx_bytes") as f:
                total += int(f.read())
            seen = True
        except (OSError, ValueError):
            continue
    return total if seen else None


class Sampler:
    """samples = [(wall-clock time, bytes delivered to the job's NICs so far)], taken by a thread."""

    def __init__(self, devs: list[str], period: float = PERIOD_S):
        self.devs, self.period = devs, period
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tb-program-traffic")

    def _run(self) -> None:
        while True:
            got = read_bytes(self.devs)
            if got is not None:
                self.samples.append((time.time(), got))
            if self._stop.wait(self.period):
                return

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def silences(samples: list[tuple[float, int]], quiet: int = QUIET_BYTES,
             min_s: float = MIN_SILENCE_S) -> list[tuple[float, float, bool]]:
    """(start, length, resumed) of every silence of at least min_s after the job's first traffic: from the
    last sample that saw bytes arrive to the last quiet one before bytes arrived again (the time known to be
    silent). resumed is False for a silence that lasted to the last sample (the job ended, or hung, in it)."""
    out = []
    last_active = None          # time of the last sample in which bytes arrived
    prev_t = None
    for (t0, b0), (t1, b1) in zip(samples, samples[1:]):
        if b1 - b0 >= quiet or b1 < b0:      # a counter that went back: a re-created device, count it as traffic
            if last_active is not None and prev_t is not None and prev_t - last_active >= min_s:
                out.append((last_active, prev_t - last_active, True))
            last_active = t1
        prev_t = t1
    if last_active is not None and prev_t is not None and prev_t - last_active >= min_s:
        out.append((last_active, prev_t - last_active, False))
    return out


def summary(samples: list[tuple[float, int]], started: float) -> dict:
    """For the job's result: its silences ([seconds from the job's start, length, resumed]) and the longest."""
    rows = [[round(s - started, 3), round(length, 3), resumed] for s, length, resumed in silences(samples)]
    return {"silences": rows, "longest_silence_s": max((r[1] for r in rows), default=None),
            "traffic_samples": len(samples)}
