"""Placement: which machine emulates which switch and host when a fabric is spread over several machines.

By rails: each machine takes whole leaves (a rail switch with the GPUs whose NIC sits on it; on clos a ToR
with its servers), in contiguous, balanced blocks, and a share of the spines (round robin). A server's HB
switch goes to the machine holding most of its GPUs; its spare GPUs go with it. The front-end switch and the
CPU hosts go to the first machine. A link whose ends are on two machines has to cross the machines' own
network: on rail-only only HB links do, on rail-optimized HB and rail-spine links, on clos only ToR-spine links
(a server stays on one machine); front-end links and parked spare NICs may cross too.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from testbed.fabric.topo import Fabric, Link

MACHINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
LEAF_KINDS = ("rail", "tor")


class PlacementError(ValueError):
    """A placement that cannot be made, named in one line."""


@dataclass(frozen=True)
class Placement:
    machines: tuple[str, ...]
    node_machine: dict[str, str]          # every switch and host -> the machine that emulates it

    def crossing(self, fabric: Fabric) -> list[Link]:
        """The links cabled between machines."""
        return [l for l in fabric.links if self.node_machine[l.a] != self.node_machine[l.b]]

    def nodes_of(self, fabric: Fabric, machine: str) -> dict[str, list[str]]:
        """A machine's switches and hosts, in the fabric's order."""
        mine = [n for n, m in self.node_machine.items() if m == machine]
        return {"switches": [n for n in mine if n in fabric.switches], "hosts": [n for n in mine if n in fabric.hosts]}

    def to_json(self, fabric: Fabric) -> dict:
        """The form results.json and `testbed topo --json` carry."""
        crossing = self.crossing(fabric)
        return {"machines": {m: self.nodes_of(fabric, m) for m in self.machines},
                "crossing": [{"a": l.a, "b": l.b, "kind": l.kind, "mbps": l.mbps} for l in crossing],
                "crossing_mbps": sum(l.mbps for l in crossing)}

    def describe(self, fabric: Fabric) -> list[str]:
        """One line per machine, then the links between machines by kind, with their summed rate."""
        lines = []
        for m in self.machines:
            mine = self.nodes_of(fabric, m)
            lines.append(f"  {m}: {len(mine['switches'])} switches ({', '.join(mine['switches'])}), "
                         f"{len(mine['hosts'])} hosts")
        crossing = self.crossing(fabric)
        by_kind = Counter(l.kind for l in crossing)
        rate = {k: sum(l.mbps for l in crossing if l.kind == k) for k in by_kind}
        parts = [f"{by_kind[k]} {k} ({rate[k]:g} Mbit/s)" for k in sorted(by_kind)]
        lines.append(f"  between machines: {len(crossing)} links" + (f": {', '.join(parts)}" if parts else ""))
        return lines


def check_machines(machines) -> tuple[str, ...]:
    """Machine names: a non-empty list of distinct host names."""
    if not isinstance(machines, (list, tuple)) or not machines:
        raise PlacementError("machines must be a non-empty list of names")
    for name in machines:
        if not isinstance(name, str) or not MACHINE_NAME.match(name):
            raise PlacementError(f"machine name {name!r} is not a host name (letters, digits, '.', '_', '-')")
    twice = sorted(n for n, c in Counter(machines).items() if c > 1)
    if twice:
        raise PlacementError(f"machine {twice[0]!r} is named twice")
    return tuple(machines)


def place(fabric: Fabric, machines) -> Placement:
    """Spread the fabric over the machines by rails (module docstring); raises PlacementError."""
    machines = check_machines(machines)
    leaves = [s.name for s in fabric.switches.values() if s.kind in LEAF_KINDS]
    if len(machines) > len(leaves):
        unit = fabric.design.leaf_unit
        raise PlacementError(f"{len(machines)} machines but the fabric has {len(leaves)} {unit}s: "
                             f"each machine needs at least one whole {unit}")
    where: dict[str, str] = {}
    for index, leaf in enumerate(leaves):          # contiguous blocks, the first ones one larger
        where[leaf] = machines[index * len(machines) // len(leaves)]
    spines = [s.name for s in fabric.switches.values() if s.kind == "spine"]
    for index, spine in enumerate(spines):
        where[spine] = machines[index % len(machines)]
    for name, switch in fabric.switches.items():
        if switch.kind == "frontend":
            where[name] = machines[0]
    parked = set(fabric.circuits)                 # spare GPUs of servers' HB domains: their NIC has no fixed leaf
    for host in fabric.hosts.values():
        if host.kind == "cpu":
            where[host.name] = machines[0]
        elif host.name not in parked:             # on its NIC's leaf
            nic = fabric.attachment(host.name)
            where[host.name] = where[nic.b if nic.a == host.name else nic.a]
    domains: Counter = Counter()
    for name, switch in fabric.switches.items():
        if switch.kind == "hb":                    # with most of its server's GPUs; ties: fewest HB domains so far
            members = [l.a if l.b == name else l.b for l in fabric.links if l.kind == "hb" and name in (l.a, l.b)]
            votes = Counter(where[m] for m in members if m in where)
            where[name] = max(machines, key=lambda m: (votes[m], -domains[m], -machines.index(m)))
            domains[where[name]] += 1
    for host in parked:                            # a spare GPU in a server's HB domain: with its HB switch
        where[host] = where[fabric.attachment(host, "hb").b]
    return Placement(machines, {n: where[n] for n in [*fabric.switches, *fabric.hosts]})
