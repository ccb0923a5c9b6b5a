"""An emulation testbed for AI-training networks: GPU fabrics on Mininet + Open vSwitch, an SDN
controller on the Ryu API, and real workloads in the emulated hosts."""

import os

__version__ = "0.1.0"

# Every object the testbed creates on the machine (bridges, root-namespace links, run directories)
# carries this prefix, so that `testbed clean` can remove exactly its own.
PREFIX = "tb-"
RUN_ROOT = "/run/testbed"

# The repository: where the `hosts` package that runs inside emulated hosts, the scripts and docker/ live.
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
