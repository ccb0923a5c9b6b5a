"""Rail-only: one switch per rail and no spines; traffic between rails is relayed through the HB domain."""
from __future__ import annotations

from testbed.fabric.kinds.base import FabricKind


class RailOnly(FabricKind):
    name = "rail-only"
    summary = "one switch per rail, no spines: cross-rail traffic is relayed through the HB domain"
    spines = False
    cross_rail = False
    ignored = ("spines", "oversubscription")

    def reachable(self, src, dst) -> bool:
        if src.kind == dst.kind == "gpu":
            return src.rank == dst.rank          # no spine: only within a rail
        return True


RAIL_ONLY = RailOnly()
