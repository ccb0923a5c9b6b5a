"""Analytical models that measurements are compared against.

Rates are in bytes/s: C_S is a GPU's NIC (scale-out) rate, C_F its HB-domain (scale-up) rate.
x = GPUs per HB domain, y = HB domains (servers), n = x*y ranks. S is the operation's size in bytes
as nccl-tests counts it (AllGather: the whole output buffer; AlltoAll: one rank's send buffer).

busbw factors follow nccl-tests: AllReduce 2(n-1)/n, AllGather / ReduceScatter / AlltoAll (n-1)/n,
Broadcast 1. The bound busbw of an algorithm is the busbw it would reach running exactly at its
model time: busbw_bound = S * factor / T_model.
"""
from __future__ import annotations

from dataclasses import dataclass


def bus_factor(op: str, n: int) -> float:
    if n <= 1:
        return 1.0
    return {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(op, (n - 1) / n)


@dataclass(frozen=True)
class Cluster:
    x: int          # GPUs per HB domain
    y: int          # HB domains
    c_s: float      # NIC rate, bytes/s
    c_f: float      # HB rate, bytes/s

    @property
    def n(self) -> int:
        return self.x * self.y

    def ring_rate(self) -> float:
        """A ring through all ranks crosses the NIC unless everything is in one HB domain."""
        return self.c_f if self.y == 1 else min(self.c_s, self.c_f)


def time_model(op: str, algo: str, size: float, c: Cluster) -> float:
    """Completion time in seconds of `op` with `algo` moving `size` bytes, at the link bounds."""
    n, x, y = c.n, c.x, c.y
    if n <= 1:
        return 0.0
    if op == "allreduce" and algo == "hierarchical":
        hb = 2 * (x - 1) / x * size / c.c_f if x > 1 else 0.0
        rail = 2 * (y - 1) / y * (size / x) / c.c_s if y > 1 else 0.0
        return hb + rail
    if op == "allgather" and algo == "hierarchical":
        # Wang et al.: (y-1)D/(xy C_S) + (x-1)D/(x C_F)
        return (y - 1) * size / (x * y * c.c_s) + (x - 1) * size / (x * c.c_f)
    if op == "alltoall":
        d = size / n                           # bytes per ordered pair (size = one rank's send buffer)
        rail_opt = x * (y - 1) * d / c.c_s
        if algo == "two-step":                 # rail-only: through the HB domain, then the rail
            return rail_opt + y * (x - 1) * d / c.c_f
        return max(rail_opt, (x - 1) * d / c.c_f)
    # ring-like algorithms (ring, rd, rhd, chain): every byte crosses the ring's slowest link
    return size * bus_factor(op, n) / c.ring_rate()


def bound_busbw(op: str, algo: str, size: float, c: Cluster) -> float:
    t = time_model(op, algo, size, c)
    return size * bus_factor(op, c.n) / t if t > 0 else float("inf")
