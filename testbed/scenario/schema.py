"""The scenario file's shared vocabulary: its error, sizes (4096, 64KiB, 1MiB), rates and counts.

The scenario (testbed/scenario/loader.py) and every workload's own part of the schema (testbed/workloads/) use it.
"""
from __future__ import annotations

import re
from decimal import Decimal

SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$")
SIZE_UNITS = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
MAX_FLOW_BYTES = 1 << 30

SIZE = {"type": ["integer", "string"]}     # parse_size() checks the form and says what is wrong
RATE = {"type": "number", "exclusiveMinimum": 0}
POSITIVE_INT = {"type": "integer", "minimum": 1}
NAME = {"type": "string", "description": "The workload's name in the results and for a fault's `workload`. "
        "Default: TYPE#INDEX (collective#1: the second workload)."}


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message is one line naming the problem.

    path (the JSON path of the offending value, e.g. ("workloads", 0, "sizes")) and key (an offending key
    under it) say where it is when the raiser knows; testbed/scenario/marks.py turns them into a file line."""

    def __init__(self, message: str, path=(), key=None):
        super().__init__(message)
        self.path, self.key = tuple(path), key


def parse_size(value, low: int = 1, high: int = MAX_FLOW_BYTES) -> int:
    """'1MiB' -> 1048576; plain integers are bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        m = SIZE_RE.match(str(value))
        if not m:
            raise ScenarioError(f"size {value!r} is not a size like 4096, 64KiB, 1MiB or 10MB")
        size = int(Decimal(m.group(1)) * SIZE_UNITS[m.group(2)])     # exact: a float of 400 digits is inf
    if not low <= size <= high:
        raise ScenarioError(f"size {value!r} must be between {_human(low)} and {_human(high)}")
    return size


def _human(n: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} B"
