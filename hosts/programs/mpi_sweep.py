"""An MPI benchmark as a user brings one: mpi4py Allreduce and Allgather over a size sweep, every result checked
against numpy, printed like nccl-tests (size, count, type, time, algbw, busbw; busbw = algbw x 2(n-1)/n for
Allreduce, x (n-1)/n for Allgather, whose size is the gathered buffer's) and, last, as one JSON line.

    mpirun ... python hosts/programs/mpi_sweep.py --ops allreduce,allgather --sizes 4KiB,64KiB,256KiB
"""
import argparse
import json
import re
import sys
import time

import numpy as np
from mpi4py import MPI

UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20}


def size(text: str) -> int:
    m = re.fullmatch(r"(\d+)(B|KiB|MiB)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 4096, 64KiB or 1MiB")
    return int(m[1]) * UNITS[m[2] or ""]


def data(count: int, rank: int) -> np.ndarray:
    # small integers: float32 sums of them are exact, so the check is equality
    return ((np.arange(count) % 7) + rank).astype(np.float32)


def one(comm, op: str, nbytes: int, iters: int, warmup: int) -> dict:
    n, rank = comm.Get_size(), comm.Get_rank()
    count = nbytes // 4 if op == "allreduce" else nbytes // 4 // n          # per rank, for allgather
    send = data(count, rank)
    recv = np.empty(count if op == "allreduce" else count * n, dtype=np.float32)
    run = (lambda: comm.Allreduce(send, recv, op=MPI.SUM)) if op == "allreduce" else \
        (lambda: comm.Allgather(send, recv))
    times = []
    for i in range(warmup + iters):
        comm.Barrier()
        t0 = time.perf_counter()
        run()
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)        # as long as the slowest rank
        if i >= warmup:
            times.append(t)
    expected = sum(data(count, r) for r in range(n)) if op == "allreduce" else \
        np.concatenate([data(count, r) for r in range(n)])
    wrong = comm.allreduce(int(np.count_nonzero(recv != expected)), op=MPI.SUM)
    seconds = sum(times) / len(times)
    moved = recv.nbytes
    algbw = moved / seconds / 1e6
    factor = 2 * (n - 1) / n if op == "allreduce" else (n - 1) / n
    return {"op": op, "bytes": moved, "count": count, "seconds": seconds, "algbw_MBps": algbw,
            "busbw_MBps": algbw * factor, "wrong": wrong}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="allreduce,allgather")
    p.add_argument("--sizes", default="4KiB,64KiB,256KiB")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    rows = []
    for op in a.ops.split(","):
        if rank == 0:
            print(f"#  {op}, {n} ranks ({MPI.Get_library_version().splitlines()[0].strip()})")
            print(f"# {'size':>10} {'count':>10} {'type':>8} {'time(us)':>12} {'algbw MB/s':>11} "
                  f"{'busbw MB/s':>11} {'#wrong':>7}")
        for nbytes in (size(s) for s in a.sizes.split(",")):
            r = one(comm, op, nbytes, a.iters, a.warmup)
            rows.append(r)
            if rank == 0:
                print(f"  {r['bytes']:>10} {r['count']:>10} {'float':>8} {r['seconds'] * 1e6:>12.0f} "
                      f"{r['algbw_MBps']:>11.3f} {r['busbw_MBps']:>11.3f} {r['wrong']:>7}", flush=True)
    wrong = sum(r["wrong"] for r in rows)
    if rank == 0:
        print(json.dumps({"ranks": n, "rows": rows, "correct": wrong == 0,
                          "busbw_MBps": max(r["busbw_MBps"] for r in rows)}))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
