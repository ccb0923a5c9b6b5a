"""Checks on a results.json beyond the code that wrote it: its schema (testbed/results/results_schema.py) and its
one time base (a value that looks like Unix time sits only under an *_at key or timings.workloads_start).

tests/conftest.py applies them to every results.json a test's run writes under its tmp_path.
"""
from __future__ import annotations

import glob
import json
import os

from testbed.results import results_schema

# Unix times of 2001..2286: floats in this range are moments; byte counts are integers
EPOCH_RANGE = (1e9, 1e10)


def epoch_outside_at(doc, path: str = "") -> list[str]:
    """Values that look like Unix time under a key not named for it."""
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, float) and EPOCH_RANGE[0] <= v < EPOCH_RANGE[1]:
                if not (k.endswith("_at") or f"{path}.{k}" == ".timings.workloads_start"):
                    found.append(f"{path}.{k}: {v} looks like Unix time, not a *_at key")
            else:
                found += epoch_outside_at(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            if isinstance(v, float) and EPOCH_RANGE[0] <= v < EPOCH_RANGE[1]:
                found.append(f"{path}[{i}]: {v} looks like Unix time in a list")
            else:
                found += epoch_outside_at(v, f"{path}[{i}]")
    return found


def problems(results: dict) -> list[str]:
    return results_schema.errors(results) + epoch_outside_at(results)


def written_under(root: str) -> list[str]:
    """The results.json files a run wrote under root in a version this schema reads (files a test made up
    itself carry no schema_version, or another major one)."""
    found = []
    for path in glob.glob(os.path.join(root, "**", "results.json"), recursive=True):
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and results_schema.known_version(doc):
            found.append(path)
    return found


def check_tree(root: str) -> list[str]:
    """Every problem of every run-written results.json under root, prefixed with its file."""
    out = []
    for path in written_under(root):
        with open(path) as f:
            out += [f"{path}: {p}" for p in problems(json.load(f))]
    return out
