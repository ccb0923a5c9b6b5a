"""The scenario stage: a scenario file read, validated and turned into the dict the runner runs.

- loader.py     the schema (fabric, faults, captures + every workload's SCHEMA), validation, `--set`, load
- marks.py      JSON paths -> FILE:LINE:COLUMN, for error messages
- reference.py  docs/scenario-reference.md, generated from the schema
- schema.py     the shared vocabulary (ScenarioError, sizes, rates) that workload schemas use too

`from testbed import scenario; scenario.load(path)` reads a scenario. The loader's names are looked up when
first used, not imported here: the workloads import schema.py, and the loader imports the workloads, so an
eager import would make `import testbed.workloads` circular.
"""
from __future__ import annotations

PUBLIC = ("SCHEMA", "ScenarioError", "apply_set", "export", "host_limits", "load", "parse_size", "problems",
          "read", "validate")


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'testbed.scenario' has no attribute {name!r}")
    from testbed.scenario import loader
    return getattr(loader, name)


def __dir__():
    return sorted(set(globals()) | set(PUBLIC))
