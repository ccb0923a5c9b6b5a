"""Rail-optimized: rail switches (one per local rank) under a spine layer."""
from __future__ import annotations

from testbed.fabric.kinds.base import FabricKind


class RailOptimized(FabricKind):
    name = "rail-optimized"
    summary = "rails under a spine layer"
    planner_what = "rail-optimized fabric"


RAIL_OPTIMIZED = RailOptimized()
