"""Plain-text tables for `testbed plan`."""
from __future__ import annotations

from testbed.planning.costs import Savings, UnitCosts, cost_usd, percent, power_watts
from testbed.planning.counts import FabricCount


def table(header: list[str], rows: list[list], right: set[int] | None = None) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    right = right if right is not None else set(range(1, len(header)))

    def line(r):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    lines = [line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]]
    return "\n".join(s.rstrip() for s in lines)


def fabric_rows(fabrics: list[FabricCount], units: UnitCosts) -> str:
    rows = [[f.kind, f.tiers, " + ".join(f"{n} {name}" for name, n in f.tier_switches), f.switches, f.links,
             f.transceivers, f"{cost_usd(f, units) / 1e6:.1f}", f"{power_watts(f, units) / 1e6:.2f}"]
            for f in fabrics]
    return table(["fabric", "tiers", "switches by tier", "switches", "links", "transceivers", "cost $M",
                  "power MW"], rows, right={1, 3, 4, 5, 6, 7})


def savings_line(s: Savings) -> str:
    return (f"rail-only saves {percent(s.cost_fraction)}% of the network cost (${s.cost_usd / 1e6:.1f}M) and "
            f"{percent(s.power_fraction)}% of the network power ({s.power_watts / 1e6:.2f} MW) of rail-optimized")


def units_line(u: UnitCosts) -> str:
    return (f"assumptions: ${u.port_usd:g} and {u.port_watts:g} W per switch port (all R ports of a switch), "
            f"${u.transceiver_usd:g} and {u.transceiver_watts:g} W per transceiver "
            "(--port-usd, --port-watts, --transceiver-usd, --transceiver-watts)")


def paper_table(pairs: list[tuple[FabricCount, FabricCount]], savings: list[Savings]) -> str:
    rows = [[so.gpus, so.radix, so.switches, ro.switches, so.transceivers, ro.transceivers,
             f"{percent(s.cost_fraction)}%", f"{percent(s.power_fraction)}%"]
            for (so, ro), s in zip(pairs, savings)]
    return table(["#GPUs", "radix", "N_SW SOTA", "N_SW rail-only", "N_TR SOTA", "N_TR rail-only", "cost", "power"],
                 rows)
