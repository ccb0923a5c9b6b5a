"""Faults: what a scenario breaks while its workloads run, one FaultKind per `kind:` (testbed/faults/kind.py
lists what a kind answers). REGISTRY maps each kind's name to it, in the schema's order.

Adding a fault kind is one FaultKind (in the module of its family, or a module of its own), its tests, and its
place in REGISTRY; the scenario schema (SCHEMA), the schedule, `testbed fault`, the outcomes and the report ask
the kinds and never compare kind names.

    links.py     link-down, link-up, link-flap, switch-down, port-disable (the controller reroutes)
    gpus.py      gpu-crash, gpu-hang, gpu-stall, gpu-declared, server-down (the job recovers)
    cables.py    nic-down, partition (the cables of GPUs: the job recovers)
    returns.py   gpu-restart, nic-up (GPUs that come back and rejoin)
The machinery: targets.py (what a target names), cut.py and signals.py (how a fault is done), schedule.py (when),
outcomes.py, jobs.py and timing.py (what it did), record.py (its record in results.json), echo.py (shown as it
happens), running.py (a live run's fabric, for `testbed fault`).
"""
from __future__ import annotations

from testbed.faults import cables, gpus, links, returns
from testbed.faults.kind import FaultError, FaultKind
from testbed.faults.schema import fault_schema

REGISTRY: dict[str, FaultKind] = {k.name: k for k in (*links.KINDS, *gpus.KINDS, *cables.KINDS, *returns.KINDS)}
SCHEMA = fault_schema(list(REGISTRY.values()))

# `testbed fault` actions: action -> (kind, up)
HAND = {action: (kind, up) for kind in REGISTRY.values() for action, up in kind.hand.items()}

__all__ = ["FaultError", "FaultKind", "HAND", "REGISTRY", "SCHEMA"]
