"""A PyTorch job as a user brings one: torch.distributed with the gloo backend (env:// rendezvous: RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets them), an all_reduce size sweep checked against numpy and
printed like nccl-tests (busbw = algbw x 2(n-1)/n), then a few DistributedDataParallel steps of a small model;
the last line is JSON: the sweep, the losses, and whether every rank ended with the same weights.

    python hosts/programs/torch_gloo.py --sizes 4KiB,64KiB,256KiB --steps 5
"""
import argparse
import datetime
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20}


def size(text: str) -> int:
    for unit, factor in UNITS.items():
        if text.endswith(unit):
            return int(text[:-len(unit)]) * factor
    return int(text)


def data(count: int, rank: int) -> np.ndarray:
    return ((np.arange(count) % 7) + rank).astype(np.float32)      # exact float32 sums: checked by equality


def sweep(sizes: list[int], iters: int, rank: int, n: int) -> list[dict]:
    rows = []
    if rank == 0:
        print(f"#  all_reduce (gloo), {n} ranks")
        print(f"# {'size':>10} {'count':>10} {'type':>8} {'time(us)':>12} {'algbw MB/s':>11} {'busbw MB/s':>11} "
              f"{'#wrong':>7}")
    for nbytes in sizes:
        count = nbytes // 4
        times, t = [], torch.zeros(1)
        for i in range(iters + 1):                   # the first is a warm-up
            x = torch.from_numpy(data(count, rank))
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            t[0] = time.perf_counter() - t0
            dist.all_reduce(t, op=dist.ReduceOp.MAX)            # as long as the slowest rank
            if i:
                times.append(float(t[0]))
        wrong = torch.tensor([int(np.count_nonzero(x.numpy() != sum(data(count, r) for r in range(n))))])
        dist.all_reduce(wrong)
        seconds = sum(times) / len(times)
        algbw = count * 4 / seconds / 1e6
        row = {"bytes": count * 4, "count": count, "seconds": seconds, "algbw_MBps": algbw,
               "busbw_MBps": algbw * 2 * (n - 1) / n, "wrong": int(wrong[0])}
        rows.append(row)
        if rank == 0:
            print(f"  {row['bytes']:>10} {count:>10} {'float':>8} {seconds * 1e6:>12.0f} {algbw:>11.3f} "
                  f"{row['busbw_MBps']:>11.3f} {row['wrong']:>7}", flush=True)
    return rows


def train(steps: int, rank: int) -> tuple[list[float], float]:
    """DDP steps of a small regression model on each rank's own batch; (global losses, weight spread)."""
    torch.manual_seed(0)                                  # DDP broadcasts rank 0's weights anyway
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 32, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True)                 # the same function on every rank, different samples
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()                                   # DDP all-reduces the gradients (gloo, over the NIC)
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / dist.get_world_size())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    first = flat.clone()
    dist.broadcast(first, src=0)                          # rank 0's weights, bit for bit
    spread = torch.tensor([float((flat - first).abs().max())])
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    return losses, float(spread[0])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="4KiB,64KiB,256KiB")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(1)                              # one emulated GPU, one core's worth of work
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("TB_TIMEOUT_S", 60))))
    rank, n = dist.get_rank(), dist.get_world_size()
    rows = sweep([size(s) for s in a.sizes.split(",")], a.iters, rank, n)
    losses, spread = train(a.steps, rank) if a.steps else ([], 0.0)       # --steps 0: the sweep alone
    if rank == 0:
        if losses:
            print(f"# DDP {a.steps} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}, weights differ by at most "
                  f"{spread}")
        print(json.dumps({"ranks": n, "rows": rows, "busbw_MBps": max(r["busbw_MBps"] for r in rows),
                          "correct": all(r["wrong"] == 0 for r in rows), "losses": losses,
                          "loss_ratio": losses[-1] / losses[0] if losses else None, "weight_spread": spread,
                          "torch": torch.__version__}))
    dist.barrier()                                        # every rank done before rank 0's store goes away
    dist.destroy_process_group()
    return 0 if all(r["wrong"] == 0 for r in rows) and spread == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
