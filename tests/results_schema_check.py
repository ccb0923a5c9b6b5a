"""Checks on a results.json beyond the code that wrote it: its schema (testbed/results/results_schema.py) and its
one time base (a value that looks like a moment of the run in Unix time, a number within a day of its start,
sits only under an *_at key or timings.workloads_start).

tests/conftest.py applies them to every results.json a test's run writes under its tmp_path.
"""
from __future__ import annotations

import datetime
import glob
import json
import os

from testbed.results import results_schema

DAY = 86400.0


def origin(results: dict) -> float | None:
    """The run's start in Unix time: timings.workloads_start, else `started`."""
    t0 = results.get("timings", {}).get("workloads_start")
    if t0 is None and results.get("started"):
        t0 = datetime.datetime.fromisoformat(results["started"]).timestamp()
    return t0


def epoch_outside_at(results: dict) -> list[str]:
    """Moments of the run in Unix time (floats within a day of its start) under a key not named for it."""
    t0 = origin(results)
    if t0 is None:
        return []

    def moment(v) -> bool:
        return isinstance(v, float) and abs(v - t0) < DAY

    def walk(doc, path: str) -> list[str]:
        found = []
        if isinstance(doc, dict):
            for k, v in doc.items():
                if moment(v) and not (k.endswith("_at") or f"{path}.{k}" == ".timings.workloads_start"):
                    found.append(f"{path}.{k}: {v} looks like Unix time, not a *_at key")
                else:
                    found += walk(v, f"{path}.{k}")
        elif isinstance(doc, list):
            for i, v in enumerate(doc):
                found += [f"{path}[{i}]: {v} looks like Unix time in a list"] if moment(v) else walk(v, f"{path}[{i}]")
        return found
    return walk(results, "")


def problems(results: dict) -> list[str]:
    return results_schema.errors(results) + epoch_outside_at(results)


def written_under(root: str) -> tuple[list[str], list[str]]:
    """(the results.json files a run wrote under root in a version this schema reads, those that are no JSON).
    Files a test made up itself carry no schema_version, or another major one; a test that writes broken JSON on
    purpose removes it before it ends."""
    found, broken = [], []
    for path in glob.glob(os.path.join(root, "**", "results.json"), recursive=True):
        try:
            with open(path) as f:
                doc = json.load(f)
        except ValueError as e:
            broken.append(f"{path}: not JSON: {e}")
            continue
        if isinstance(doc, dict) and results_schema.known_version(doc):
            found.append(path)
    return found, broken


def check_tree(root: str) -> list[str]:
    """Every problem of every run-written results.json under root, prefixed with its file; a results.json that is
    no JSON is one."""
    found, out = written_under(root)
    for path in found:
        with open(path) as f:
            out += [f"{path}: {p}" for p in problems(json.load(f))]
    return out
