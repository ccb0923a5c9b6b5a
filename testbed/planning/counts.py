"""Switch, link and transceiver counts of a full-scale GPU fabric built from radix-R switches.

The method (minimal counts; every switch has R ports, every GPU one NIC port):

Fabrics. A cluster has G GPUs in HB domains of K GPUs (G/K servers). GPUs with the same local rank form a rail of
n = G/K GPUs; there are K rails.
- rail-optimized: one folded-Clos (fat tree) over all G GPUs whose leaves are rail switches: a leaf holds GPUs of
  one rail only, so a rail of n GPUs needs ceil(n/d) leaves, and a leaf serves floor(d/n) whole rails when rails
  are smaller than a leaf (d = GPU ports of a leaf, below). This is the "SOTA" column of the Rail-only paper.
- clos: the same fat tree with ToR leaves, a leaf holding whole servers (floor(d/K) per leaf) or, for servers
  larger than a leaf, ceil(K/d) leaves per server.
- rail-only: no spine between rails. Each rail is its own network: one switch when n <= R, and then one switch
  serves floor(R/n) small rails; otherwise a fat tree of n GPUs per rail, counted as below, times K rails.

Fat tree over L leaves. A leaf with m GPU ports needs ceil(m/X) uplinks for an oversubscription X (1 = non-blocking),
so d, the most GPU ports a leaf can take, is the largest d with d + ceil(d/X) <= R (R/2 when X = 1). U is the sum of
the leaves' uplinks. Above the leaves the tree is non-blocking: each middle-tier switch has R/2 ports down and R/2
up, the top tier has all R ports down. A t-tier tree reaches at most 2 (R/2)^(t-1) leaves (every leaf must reach
every top switch through distinct paths), so t is the smallest tier count with L <= 2 (R/2)^(t-1), and
    leaves = L,   each middle tier = ceil(U / (R/2)),   top tier = ceil(U / R).
With X = 1 that is 3G/R switches for two tiers and 5G/R for three (the classic fat tree). A fabric that fits one
switch (G <= R, or a rail of n <= R GPUs) has a single tier. The halving of R needs R to be a power of two; a
single-switch fabric does not.

Links and transceivers. Links = G GPU-to-leaf links + (t - 1) U switch-to-switch links. Every link is optical with
a transceiver at each end (the NIC end included), so transceivers = 2 x links: 2G, 4G and 6G for one, two and three
non-blocking tiers.

Table II of Wang et al. (Rail-only) is this method at K = 256 (GH200 HB domains, as the paper assumes for both
columns; the rail-optimized count does not depend on K as long as rails fill whole leaves): for 32768 and 65536
GPUs at radix 64, 128 and 256 it gives the paper's switch and transceiver counts cell by cell.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from testbed.fabric import kinds
from testbed.fabric.kinds import RAIL_ONLY, RAIL_OPTIMIZED

PAPER_HB_SIZE = 256            # GH200: 256 GPUs per NVLink domain, the HB size behind Table II
PAPER_GPUS = (32768, 65536)
PAPER_RADIXES = (64, 128, 256)


class PlanError(ValueError):
    """Bad planner input; the message is one line naming the parameter."""


@dataclass(frozen=True)
class FabricCount:
    kind: str
    gpus: int
    hb_size: int
    radix: int
    oversubscription: float
    tiers: int                                   # switch tiers a packet can climb (1 = one switch)
    tier_switches: tuple[tuple[str, int], ...]   # (tier name, switches), bottom up
    links: int                                   # GPU-to-leaf links included
    gpu_ports_per_leaf: int
    rails_per_switch: int = 0                    # rail-only with small rails: rails sharing one switch
    notes: tuple[str, ...] = field(default=())

    @property
    def switches(self) -> int:
        return sum(n for _, n in self.tier_switches)

    @property
    def transceivers(self) -> int:
        return 2 * self.links

    @property
    def switch_ports(self) -> int:
        return self.switches * self.radix

    def to_json(self) -> dict:
        return {"kind": self.kind, "gpus": self.gpus, "hb_size": self.hb_size, "radix": self.radix,
                "oversubscription": self.oversubscription, "tiers": self.tiers,
                "switches_by_tier": dict(self.tier_switches), "switches": self.switches,
                "links": self.links, "transceivers": self.transceivers, "switch_ports": self.switch_ports,
                "gpu_ports_per_leaf": self.gpu_ports_per_leaf, "rails_per_switch": self.rails_per_switch,
                "notes": list(self.notes)}


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def leaf_gpu_ports(radix: int, oversubscription: float) -> int:
    """The most GPU ports a leaf can take while keeping ceil(d / X) uplinks."""
    d = radix
    while d > 0 and d + math.ceil(d / oversubscription - 1e-9) > radix:
        d -= 1
    return d


def _leaf_loads(groups: int, group_size: int, d: int) -> list[tuple[int, int]]:
    """[(GPU ports used, number of such leaves)] when groups (rails or servers) are not split below a leaf."""
    if group_size <= d:
        per_leaf = d // group_size
        full, rest = divmod(groups, per_leaf)
        loads = [(per_leaf * group_size, full)]
        if rest:
            loads.append((rest * group_size, 1))
    else:
        full, rest = divmod(group_size, d)
        loads = [(d, full * groups)]
        if rest:
            loads.append((rest, groups))
    return [(m, c) for m, c in loads if c]


def _tier_names(tiers: int, leaf: str, prefix: str = "") -> list[str]:
    names = [leaf] + [f"{prefix}spine"] + [f"{prefix}core"] + [f"{prefix}core{i}" for i in range(2, tiers)]
    return names[:tiers]


def fat_tree(groups: int, group_size: int, radix: int, oversubscription: float, leaf: str,
             prefix: str = "", what: str = "fabric") -> tuple[int, list[tuple[str, int]], int, int]:
    """(tiers, [(tier, switches)], links, GPU ports per leaf) of a folded Clos over groups x group_size GPUs."""
    gpus = groups * group_size
    if gpus <= radix:
        return 1, [(leaf, 1)], gpus, gpus
    if not is_power_of_two(radix) or radix < 4:
        raise PlanError(f"radix {radix} is not a power of two >= 4; the fat-tree method needs one to build the "
                        f"{gpus}-GPU {what} from {radix}-port switches")
    d = leaf_gpu_ports(radix, oversubscription)
    loads = _leaf_loads(groups, group_size, d)
    leaves = sum(c for _, c in loads)
    uplinks = sum(c * math.ceil(m / oversubscription - 1e-9) for m, c in loads)
    half = radix // 2
    tiers = 2
    while leaves > 2 * half ** (tiers - 1):
        tiers += 1
    counts = [leaves] + [math.ceil(uplinks / half)] * (tiers - 2) + [math.ceil(uplinks / radix)]
    names = _tier_names(tiers, leaf, prefix)
    return tiers, list(zip(names, counts)), gpus + (tiers - 1) * uplinks, d


def check_inputs(gpus: int, hb_size: int, radix: int, oversubscription: float) -> None:
    for name, value in (("--gpus", gpus), ("--hb-size", hb_size), ("--radix", radix)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise PlanError(f"{name} must be a positive integer, got {value!r}")
    if radix < 2:
        raise PlanError(f"--radix must be at least 2, got {radix}")
    if not oversubscription >= 1:
        raise PlanError(f"--oversubscription must be a ratio >= 1, got {oversubscription!r}")
    if gpus % hb_size:
        raise PlanError(f"--hb-size {hb_size} does not divide --gpus {gpus}: a cluster is made of whole HB domains")


def count(kind: str, gpus: int, hb_size: int, radix: int, oversubscription: float = 1.0) -> FabricCount:
    """Minimal switch, link and transceiver counts of one fabric kind (see the module docstring)."""
    check_inputs(gpus, hb_size, radix, oversubscription)
    rail = gpus // hb_size                      # GPUs per rail = HB domains
    x = float(oversubscription)
    try:
        design = kinds.get(kind)
    except kinds.UnknownKind as exc:
        raise PlanError(str(exc)) from None
    if design.spines:              # one fat tree whose leaves each hold a rail's or a server's GPUs
        groups, group_size = design.groups(rail, hb_size)
        tiers, tier_switches, links, d = fat_tree(groups, group_size, radix, x, design.planner_leaf,
                                                  what=design.planner_what)
        return FabricCount(kind, gpus, hb_size, radix, x, tiers, tuple(tier_switches), links, d)
    if rail <= radix:
        per_switch = radix // rail
        switches = math.ceil(hb_size / per_switch)
        notes = (f"one {radix}-port switch serves {per_switch} rails of {rail} GPUs",) if per_switch > 1 else ()
        return FabricCount(kind, gpus, hb_size, radix, x, 1, (("rail switch", switches),), gpus, rail,
                           rails_per_switch=per_switch, notes=notes)
    tiers, per_rail, links, d = fat_tree(rail, 1, radix, x, "rail leaf", prefix="rail ", what="rail")
    tier_switches = tuple((name, n * hb_size) for name, n in per_rail)
    return FabricCount(kind, gpus, hb_size, radix, x, tiers, tier_switches, links * hb_size, d,
                       notes=(f"each of the {hb_size} rails is a {tiers}-tier fat tree of {rail} GPUs",))


def paper_table(hb_size: int = PAPER_HB_SIZE) -> list[tuple[FabricCount, FabricCount]]:
    """(rail-optimized, rail-only) for the clusters of the paper's Table II."""
    return [(count(RAIL_OPTIMIZED.name, g, hb_size, r), count(RAIL_ONLY.name, g, hb_size, r))
            for g in PAPER_GPUS for r in PAPER_RADIXES]
