"""The emulated miniature of a planned fabric, built with the emulation's own builder and counted against the plan.

`testbed.fabric.topo.build` makes the fabric the emulator runs: one switch per rail (rail-only, rail-optimized) or per
server (clos), two switch tiers at most, and each leaf's uplinks bundled into one link per spine whose rate is the
leaf's GPU capacity / (spines x oversubscription). The planner counts the same small cluster with a radix chosen so
that its leaves are the builder's (one rail or one server per leaf); the bundled uplinks are compared in NIC-link
units (uplink rate / NIC rate). What differs from the full-scale plan is listed as scaled parameters.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from testbed.fabric import kinds as fabric_kinds
from testbed.fabric.topo import TopologyError, build
from testbed.planning.counts import FabricCount, PlanError, count, leaf_gpu_ports

DEFAULT_SERVERS = 4
DEFAULT_GPUS_PER_SERVER = 4
DEFAULT_NIC_MBPS = 5.0          # the emulator's default NIC rate


def next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def miniature_radix(kind: str, servers: int, gpus_per_server: int, oversubscription: float = 1.0) -> int:
    """The radix at which the planner's leaves are the builder's: one rail (or server) per leaf."""
    design = fabric_kinds.get(kind)
    if not design.spines:
        return max(2, next_power_of_two(servers))     # one switch per rail, never two rails on one switch
    group = design.groups(servers, gpus_per_server)[1]
    radix = 4
    while leaf_gpu_ports(radix, oversubscription) < group:
        radix *= 2
    return radix


@dataclass
class Comparison:
    item: str
    planned: float
    emulated: float

    @property
    def ok(self) -> bool:
        return math.isclose(self.planned, self.emulated, rel_tol=1e-9, abs_tol=1e-9)


@dataclass
class MiniatureCheck:
    planned: FabricCount
    rows: list[Comparison]
    spines: int
    not_comparable: str = ""        # why the builder's fabric is not the planner's minimal one, if it is not

    @property
    def ok(self) -> bool:
        return not self.not_comparable and all(r.ok for r in self.rows)

    def to_json(self) -> dict:
        return {"planned": self.planned.to_json(), "spines": self.spines, "ok": self.ok,
                "not_comparable": self.not_comparable or None,
                "rows": [{"item": r.item, "planned": r.planned, "emulated": r.emulated, "ok": r.ok}
                         for r in self.rows]}


def _shape_problem(kind: str, planned: FabricCount, servers: int, gpus_per_server: int) -> str:
    """Why the builder's fabric differs from the planner's minimal one ("" when they are the same shape)."""
    leaves, design = planned.tier_switches[0][1], fabric_kinds.get(kind)
    if not design.spines:
        return "" if leaves == gpus_per_server else f"the plan puts {planned.rails_per_switch} rails on one switch"
    expected = design.groups(servers, gpus_per_server)[0]
    if planned.tiers == 1:
        return f"{planned.gpus} GPUs fit one {planned.radix}-port switch; the builder still makes leaves and spines"
    if planned.tiers > 2:
        return f"the plan needs {planned.tiers} switch tiers at radix {planned.radix}; the builder has two"
    if leaves != expected:
        return f"the plan has {leaves} leaves at radix {planned.radix}, the builder one per " \
               f"{design.leaf_group} ({expected})"
    return ""


def check_miniature(kind: str, servers: int, gpus_per_server: int, oversubscription: float = 1.0,
                    nic_mbps: float = DEFAULT_NIC_MBPS, hb_ratio: float = 9.0) -> MiniatureCheck:
    """Plan the small cluster, build it with testbed.fabric.topo, and compare the counts item by item."""
    radix = miniature_radix(kind, servers, gpus_per_server, oversubscription)
    planned = count(kind, servers * gpus_per_server, gpus_per_server, radix, oversubscription)
    spines = planned.tier_switches[-1][1] if planned.tiers >= 2 else 1
    problem = _shape_problem(kind, planned, servers, gpus_per_server)
    if problem:
        return MiniatureCheck(planned, [], spines, problem)
    try:
        fabric = build(kind, servers, gpus_per_server, spines=spines, oversubscription=oversubscription,
                       nic_mbps=nic_mbps, hb_mbps=nic_mbps * hb_ratio)
    except TopologyError as exc:
        raise PlanError(f"miniature: {exc}") from None
    kinds = Counter(s.kind for s in fabric.switches.values())
    links = Counter(l.kind for l in fabric.links)
    per_leaf = Counter()
    for l in fabric.links:
        if l.kind == "uplink":
            per_leaf[l.a] += l.mbps / nic_mbps
    # a leaf's bundled uplinks carry m/X NIC links of capacity; the plan cables ceil(m/X) whole links
    uplink_links = sum(math.ceil(units - 1e-9) for units in per_leaf.values())
    leaf_kind = fabric_kinds.get(kind).leaf
    planned_spines = planned.tier_switches[1][1] if planned.tiers == 2 else 0
    planned_uplinks = planned.links - planned.gpus
    rows = [
        Comparison("GPUs", planned.gpus, len(fabric.gpus())),
        Comparison("HB domains", planned.gpus // planned.hb_size, kinds["hb"]),
        Comparison("leaf (rail/ToR) switches", planned.tier_switches[0][1], kinds[leaf_kind]),
        Comparison("spine switches", planned_spines, kinds["spine"]),
        Comparison("GPU-to-leaf links", planned.gpus, links["nic"]),
        Comparison("uplink capacity (NIC links)", planned.gpus / oversubscription if planned.tiers == 2 else 0,
                   sum(per_leaf.values())),
        Comparison("uplinks (whole NIC links)", planned_uplinks, uplink_links),
        Comparison("transceivers", planned.transceivers, 2 * (links["nic"] + uplink_links)),
    ]
    return MiniatureCheck(planned, rows, spines)


def scaled_parameters(full: FabricCount, mini: FabricCount, nic_gbps: float, hb_gbps: float,
                      nic_mbps: float, spines: int) -> list[str]:
    """What the miniature changes with respect to the full-scale plan."""
    out = [f"GPUs {full.gpus} -> {mini.gpus}; HB-domain size {full.hb_size} -> {mini.hb_size}; "
           f"rails {full.hb_size} -> {mini.hb_size} of {mini.gpus // mini.hb_size} GPUs",
           f"radix {full.radix} -> {mini.radix} (so that a leaf holds one rail or server, as the builder makes it)",
           f"NIC rate {nic_gbps:g} Gb/s -> {nic_mbps:g} Mb/s (x{nic_mbps / (nic_gbps * 1000):.3g}); HB rate "
           f"{hb_gbps:g} Gb/s -> {nic_mbps * hb_gbps / nic_gbps:g} Mb/s (the HB/NIC ratio {hb_gbps / nic_gbps:g} kept)"]
    if mini.tiers == 2:
        out.append(f"uplinks: each leaf's ceil(m/X) NIC-rate uplinks bundled into {spines} links, one per spine")
    if full.tiers != mini.tiers:
        out.append(f"switch tiers {full.tiers} -> {mini.tiers}: the emulation builder makes "
                   f"{'leaves and one spine tier' if fabric_kinds.get(full.kind).spines else 'one switch per rail'}, "
                   "so the miniature keeps the rail structure but not the tier count")
    return out
