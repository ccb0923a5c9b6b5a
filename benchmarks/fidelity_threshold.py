"""Benchmark: below what machine-wide CPU idle does timing in the emulation distort? (the fidelity guard's threshold)

    .venv/bin/python benchmarks/fidelity_threshold.py [SECONDS_PER_LEVEL] [REPEATS]     (default 4 2)

A probe stands for one emulated process that must keep a pace (a rank's sender, a switch's forwarding
thread): every 1 ms it does a fixed 0.25 ms of CPU work, then sleeps until its next slot. Background
processes with a duty cycle (busy, then asleep, in 10 ms periods) add load level by level, in cores. For
each level: the machine's mean idle as the fidelity guard samples it, and the probe's distortion: the
share of its pace it kept, how much longer a unit of work took than unloaded, and its 99th-percentile
wake-up lateness. No root, no fabric; it loads the machine for about a minute and a half.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import statistics
import sys
import time

from testbed.monitor.fidelity import CpuSampler

PERIOD_S, WORK_S, SLICE_S = 1e-3, 2.5e-4, 10e-3
LATE_S = 5e-3      # two packet times at the default 5 Mbit/s NIC: figures in ms (gaps, convergence) move by that
LEVELS = (0.0, 0.5, 0.8, 1.0, 1.2, 1.4, 1.5, 1.6, 1.7, 1.8, 2.0, 2.5)     # background cores on a 2-core machine


def spin(n: int) -> None:
    x = 0
    for i in range(n):
        x += i


def calibrate() -> int:
    """Loop iterations that take WORK_S on an idle CPU (the fastest of several tries)."""
    n, best = 20000, math.inf
    for _ in range(20):
        t0 = time.perf_counter()
        spin(n)
        best = min(best, time.perf_counter() - t0)
    return int(n * WORK_S / best)


def hog(duty: float, stop) -> None:
    while not stop.is_set():
        end = time.perf_counter() + duty * SLICE_S
        while time.perf_counter() < end:
            pass
        if duty < 1:
            time.sleep((1 - duty) * SLICE_S)


def probe(n: int, seconds: float, out) -> None:
    """Every PERIOD_S a fixed unit of work, for `seconds` of wall time; behind its slots it catches up unslept."""
    t0 = time.perf_counter()
    slot, units, late, work = t0, 0, [], []
    while time.perf_counter() - t0 < seconds:
        w0 = time.perf_counter()
        spin(n)
        work.append(time.perf_counter() - w0)
        units += 1
        slot += PERIOD_S
        now = time.perf_counter()
        if slot > now:
            time.sleep(slot - now)
        late.append(max(0.0, time.perf_counter() - slot))
    late.sort()
    out.put({"kept": units / (seconds / PERIOD_S), "work_s": statistics.fmean(work),
             "late_p99_s": late[int(0.99 * (len(late) - 1))]})


def level(load: float, n: int, seconds: float) -> dict:
    """One background load: hogs started, the probe and the idle sampler over the same seconds."""
    stop, out = mp.Event(), mp.Queue()
    count = math.ceil(load) if load else 0
    hogs = [mp.Process(target=hog, args=(load / count, stop)) for _ in range(count)]
    for h in hogs:
        h.start()
    time.sleep(0.5)                          # the hogs at their pace before sampling
    p = mp.Process(target=probe, args=(n, seconds, out))
    with CpuSampler(period=0.25) as cpu:
        p.start()
        result = out.get()
        p.join()
    stop.set()
    for h in hogs:
        h.join()
    return result | cpu.report()


def main(seconds: float, repeats: int) -> None:
    n = calibrate()
    rows = []
    for _ in range(repeats):
        rows += [(load, level(load, n, seconds)) for load in LEVELS]
    base = min(r["work_s"] for load, r in rows if load == 0)
    print(f"{'load cores':>10} {'idle mean %':>11} {'idle min %':>10} {'pace kept %':>11} "
          f"{'work x':>7} {'late p99 ms':>11}")
    for load, r in sorted(rows, key=lambda x: x[0]):
        print(f"{load:10.2f} {r['cpu_idle_mean_pct']:11.1f} {r['cpu_idle_min_pct']:10.1f} {100 * r['kept']:11.1f} "
              f"{r['work_s'] / base:7.2f} {1e3 * r['late_p99_s']:11.2f}")
    bad = [r["kept"] < 0.98 or r["work_s"] > 1.5 * base or r["late_p99_s"] > LATE_S for _, r in rows]
    distorted = [r["cpu_idle_mean_pct"] for (_, r), b in zip(rows, bad) if b]
    clean = [r["cpu_idle_mean_pct"] for (_, r), b in zip(rows, bad) if not b]
    print(f"\ndistorted (pace < 98%, work > 1.5x or p99 late > {LATE_S * 1e3:g} ms) at mean idle up to "
          f"{max(distorted, default=float('nan')):.1f}%; undistorted down to {min(clean, default=float('nan')):.1f}%")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0, int(sys.argv[2]) if len(sys.argv) > 2 else 2)
