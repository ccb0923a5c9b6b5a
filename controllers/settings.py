"""The settings controllers/run.py hands to the os-ken apps.

os-ken instantiates the apps itself, with no arguments of ours, so run.py puts the settings in the
environment and the apps read them back here: the variable names live in this module only.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

TOPOLOGY, ROUTING, STATE, FAILOVER = "TESTBED_TOPOLOGY", "TESTBED_ROUTING", "TESTBED_STATE", "TESTBED_FAILOVER"
DELAY = "TESTBED_CONTROLLER_DELAY_MS"
ROUTE_GROUPS = "TESTBED_ROUTE_GROUPS"


@dataclass(frozen=True)
class Settings:
    topology: dict                 # the fabric's JSON description (testbed/fabric/topo.py writes it)
    routing: str                   # single, ecmp or rr
    failover: bool                 # data-plane fast failover (select groups watch their ports)
    state_path: Optional[str]      # where the apps write their installed state (controllers/state.py)
    delay_s: float = 0.0           # how long the routing app waits before acting on a port change
    route_groups: bool = False     # a group of its own for every multi-path route (its buckets count per port)


def export(topology_path: str, routing: str, state_path: str, failover: bool, delay_ms: float = 0.0,
           route_groups: bool = False) -> None:
    os.environ.update({TOPOLOGY: topology_path, ROUTING: routing, STATE: state_path,
                       FAILOVER: "1" if failover else "0", DELAY: str(delay_ms),
                       ROUTE_GROUPS: "1" if route_groups else "0"})


def load() -> Settings:
    with open(os.environ[TOPOLOGY]) as f:
        topology = json.load(f)
    return Settings(topology, os.environ.get(ROUTING, "ecmp"), os.environ.get(FAILOVER, "0") == "1",
                    os.environ.get(STATE), float(os.environ.get(DELAY, "0")) / 1e3,
                    os.environ.get(ROUTE_GROUPS, "0") == "1")
