"""Where the ranks of a (p, t, d) parallelism plan sit, and which ranks talk to which.

Megatron's order: the tensor-parallel index varies fastest, then the data-parallel index, then the stage,

    rank = tp + t * (dp + d * pp)

and ranks fill the GPUs server by server (rank r on GPU r % K of server r // K, K GPUs per HB domain). With t
dividing K a TP group is t neighbouring GPUs of one HB domain. DP groups stride t ranks and pipeline neighbours
are t*d ranks apart: when K divides t*d both sit on the same rail of other servers (the layout the Rail-only
paper assumes, so that rail switches carry all network traffic); when t*d divides K they share an HB domain.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp index, dp index, stage) of a rank."""
        return rank % self.tp, rank // self.tp % self.dp, rank // (self.tp * self.dp)

    def rank(self, tp: int, dp: int, stage: int) -> int:
        return tp + self.tp * (dp + self.dp * stage)

    def tp_group(self, rank: int) -> list[int]:
        _, dp, stage = self.coords(rank)
        return [self.rank(i, dp, stage) for i in range(self.tp)]

    def dp_group(self, rank: int) -> list[int]:
        tp, _, stage = self.coords(rank)
        return [self.rank(tp, i, stage) for i in range(self.dp)]

    def prev_stage(self, rank: int) -> int | None:
        """The rank that sends this one its activations (None on the first stage)."""
        return rank - self.tp * self.dp if rank >= self.tp * self.dp else None

    def next_stage(self, rank: int) -> int | None:
        return rank + self.tp * self.dp if rank + self.tp * self.dp < self.world else None

    def peers(self, rank: int) -> list[int]:
        """Every rank this one may exchange data with, in ascending order."""
        out = set(self.tp_group(rank)) | set(self.dp_group(rank))
        out |= {r for r in (self.prev_stage(rank), self.next_stage(rank)) if r is not None}
        out.discard(rank)
        return sorted(out)

    def roles(self) -> dict[tuple[int, int], set[str]]:
        """(a, b) -> the groups ("tp", "dp", "pp") in which ranks a and b may exchange data, both directions."""
        out: dict[tuple[int, int], set[str]] = {}
        for r in range(self.world):
            for role, group in (("tp", self.tp_group(r)), ("dp", self.dp_group(r)),
                                ("pp", [x for x in (self.prev_stage(r), self.next_stage(r)) if x is not None])):
                for q in group:
                    if q != r:
                        out.setdefault((r, q), set()).add(role)
        return out


def gpu_of(rank: int, gpus_per_server: int) -> tuple[int, int]:
    """(server, local rank) of a rank: GPUs are filled server by server."""
    return rank // gpus_per_server, rank % gpus_per_server
