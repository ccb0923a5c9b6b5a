"""Network cost and power from switch-port and transceiver counts.

cost  = switches x radix x (price per switch port) + transceivers x (price per transceiver)
power = switches x radix x (watts per switch port) + transceivers x (watts per transceiver)

A switch is bought and powered whole, so all R ports of every switch count, used or not. The seed text of the
Rail-only paper gives its savings (38-77 % cost, 37-75 % power; 117-234 million dollars for 32768 GPUs and
1.7-6.9 MW) but not its unit prices, so the defaults are 400 Gb/s figures chosen to be consistent with those
published savings: $1400 and 17.5 W per switch port, $385 and 9 W per transceiver. Every one of them is an option.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from testbed.planning.counts import FabricCount


@dataclass(frozen=True)
class UnitCosts:
    port_usd: float = 1400.0           # per 400G switch port
    transceiver_usd: float = 385.0     # per 400G optical transceiver
    port_watts: float = 17.5
    transceiver_watts: float = 9.0

    def to_json(self) -> dict:
        return asdict(self)


def cost_usd(fabric: FabricCount, units: UnitCosts) -> float:
    return fabric.switch_ports * units.port_usd + fabric.transceivers * units.transceiver_usd


def power_watts(fabric: FabricCount, units: UnitCosts) -> float:
    return fabric.switch_ports * units.port_watts + fabric.transceivers * units.transceiver_watts


@dataclass(frozen=True)
class Savings:
    cost_usd: float                    # baseline minus candidate
    power_watts: float
    cost_fraction: float               # of the baseline
    power_fraction: float

    def to_json(self) -> dict:
        return asdict(self)


def savings(baseline: FabricCount, candidate: FabricCount, units: UnitCosts) -> Savings:
    """What the candidate (rail-only) saves over the baseline (rail-optimized)."""
    base_cost, base_power = cost_usd(baseline, units), power_watts(baseline, units)
    d_cost = base_cost - cost_usd(candidate, units)
    d_power = base_power - power_watts(candidate, units)
    return Savings(d_cost, d_power, d_cost / base_cost if base_cost else 0.0,
                   d_power / base_power if base_power else 0.0)


def percent(fraction: float) -> int:
    """Whole percent, halves rounded up (the paper's table prints whole percents)."""
    return int(fraction * 100 + 0.5)
