"""Analytical models that measurements are compared against.

Rates are in bytes/s: C_S is a GPU's NIC (scale-out) rate, C_F its HB-domain (scale-up) rate.
x = GPUs per HB domain, y = HB domains (servers), n = x*y ranks. S is the operation's size in bytes
as nccl-tests counts it (AllGather: the whole output buffer; AlltoAll: one rank's send buffer).

Hierarchical algorithms are modelled phase by phase (`phases`): each phase's bytes per rank over the rate of
the one link it uses (HB or NIC). The sequential model is their sum; the pipelined model (`pipelined_time`)
runs the schedule of hosts/collectives/pipeline.py: pieces of the buffer go through the phases one after the
other, while each link carries whatever pieces are ready.

busbw factors follow nccl-tests: AllReduce 2(n-1)/n, AllGather / ReduceScatter / AlltoAll (n-1)/n,
Broadcast 1; FSDP's exchange (an AllGather and a ReduceScatter of the layer, S its size) 2(n-1)/n. The bound busbw of an algorithm is the busbw it would reach running exactly at its
model time: busbw_bound = S * factor / T_model.
"""
from __future__ import annotations

from dataclasses import dataclass

from hosts.collectives.pipeline import MAX_PIECES


def bus_factor(op: str, n: int) -> float:
    if n <= 1:
        return 1.0
    return {"allreduce": 2 * (n - 1) / n, "fsdp": 2 * (n - 1) / n, "broadcast": 1.0}.get(op, (n - 1) / n)


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
    if algo in ("hierarchical", "two-step") and phases(op, algo, size, c):
        return sum(p.seconds for p in phases(op, algo, size, c))      # sequential: one phase after the other
    if algo == "hierarchical-pipelined" and op in ("allreduce", "allgather"):
        return pipelined_time(op, size, c)
    if op == "alltoall":
        d = size / n                           # bytes per ordered pair (size = one rank's send buffer)
        return max(x * (y - 1) * d / c.c_s, (x - 1) * d / c.c_f)
    # ring-like algorithms (ring, rd, rhd, chain): every byte crosses the ring's slowest link
    return size * bus_factor(op, n) / c.ring_rate()


def bound_busbw(op: str, algo: str, size: float, c: Cluster) -> float:
    t = time_model(op, algo, size, c)
    return size * bus_factor(op, c.n) / t if t > 0 else float("inf")


@dataclass(frozen=True)
class Phase:
    name: str       # as hosts/collectives/phases.py logs it
    link: str       # "hb" or "nic"
    bytes: float    # what each rank sends over that link in this phase
    rate: float     # the link's rate, bytes/s

    @property
    def seconds(self) -> float:
        return self.bytes / self.rate


def phases(op: str, algo: str, size: float, c: Cluster) -> list[Phase]:
    """The phases of a hierarchical algorithm in the order they run, [] for any other algorithm.

    AllReduce: HB reduce-scatter (x-1)/x S, the rail's allreduce of a 1/x part 2(y-1)/y S/x, HB all-gather
    (x-1)/x S. AllGather (Wang et al.): rail (y-1) S/(xy), then HB (x-1) S/x. Two-step all-to-all with d = S/n
    per pair: HB y(x-1)d, then rail x(y-1)d."""
    x, y = c.x, c.y

    def hb(name: str, nbytes: float) -> Phase:
        return Phase(name, "hb", nbytes, c.c_f)

    def nic(name: str, nbytes: float) -> Phase:
        return Phase(name, "nic", nbytes, c.c_s)
    if op == "allreduce" and algo in ("hierarchical", "hierarchical-pipelined"):
        return [hb("hb_reduce_scatter", (x - 1) / x * size), nic("rail_exchange", 2 * (y - 1) / y * size / x),
                hb("hb_allgather", (x - 1) / x * size)]
    if op == "allgather" and algo in ("hierarchical", "hierarchical-pipelined"):
        return [nic("rail_allgather", (y - 1) * size / (x * y)), hb("hb_allgather", (x - 1) * size / x)]
    if op == "alltoall" and algo == "two-step":
        d = size / c.n
        return [hb("hb_exchange", y * (x - 1) * d), nic("rail_exchange", x * (y - 1) * d)]
    if op == "fsdp":           # ring algorithms: the ring's slowest link bounds them (ring_rate)
        link, one = ("hb" if y == 1 else "nic"), (c.n - 1) / c.n * size
        # overlapped, both run from the start to about the end over a link that carries both
        each = one if algo == "sequential" else 2 * one
        return [Phase("allgather", link, each, c.ring_rate()), Phase("reduce_scatter", link, each, c.ring_rate())]
    return []


def pipeline_stages(op: str, size: float, c: Cluster) -> list[Phase]:
    """The stages one piece goes through in the pipelined variant (its rail allreduce is two direct steps)."""
    ph = phases(op, "hierarchical", size, c)
    if op == "allreduce":
        half = Phase("rail_exchange", "nic", ph[1].bytes / 2, c.c_s)
        return [ph[0], half, half, ph[2]]
    return ph


# What each piece costs beyond its bytes in this emulation (its messages' completions and reductions in Python,
# the last ACK's round trip). It only chooses the piece count.
PIECE_OVERHEAD_S = 0.005


def pipeline_pieces(op: str, size: float, c: Cluster) -> int:
    """The piece count the testbed asks the ranks for: the one that minimises the pipelined time plus
    PIECE_OVERHEAD_S per piece (more pieces fill the pipeline faster but each costs its overhead)."""
    return min(range(1, MAX_PIECES + 1), key=lambda k: pipelined_time(op, size, c, k) + k * PIECE_OVERHEAD_S)


def pipelined_time(op: str, size: float, c: Cluster, k: int | None = None) -> float:
    """The pipeline of hosts/collectives/pipeline.py with k pieces (by default pipeline_pieces): each link
    carries its stages' pieces one after the other in lock-step order (stage j of piece p at step p + j), a
    piece's stage starting once its previous stage is done and the link is free. k = 1 is the sequential
    model; many pieces approach the busiest link's total (pipelined_limit)."""
    k = k or pipeline_pieces(op, size, c)
    stages = pipeline_stages(op, size, c)
    free: dict[str, float] = {}
    done: dict[tuple[int, int], float] = {}
    for _, j, p in sorted((p + j, j, p) for p in range(k) for j in range(len(stages))):
        st = stages[j]
        start = max(free.get(st.link, 0.0), done.get((j - 1, p), 0.0))
        done[(j, p)] = free[st.link] = start + st.seconds / k
    return max(done.values())


def pipelined_limit(op: str, size: float, c: Cluster) -> float:
    """The pipeline's time with infinitely many pieces: the busiest link's total."""
    load: dict[str, float] = {}
    for ph in phases(op, "hierarchical", size, c):
        load[ph.link] = load.get(ph.link, 0.0) + ph.seconds
    return max(load.values())
