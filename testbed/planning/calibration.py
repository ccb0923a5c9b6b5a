"""Per-operation efficiency factors (measured busbw / analytical bound) that calibrate the predictions.

An efficiency of 1.0 means the operation runs at the bound its links allow (ideal); 0.8 means it takes 1/0.8 times
as long. Keys are an operation and an algorithm:

    allreduce: ring, hierarchical      (TP and DP gradients)
    alltoall:  direct, rail-forward    (MoE dispatch and combine; rail-forward = rail-only's two-step route)
    sendrecv:  p2p                     (pipeline activations)

Two input forms, told apart by a top-level "workloads" key:
- a factors file: {"allreduce": {"ring": 0.9, "hierarchical": 0.8}, "alltoall": 0.7, "default": 1.0}; a number
  for an operation applies to all its algorithms, "default" to everything not named;
- a testbed results.json: every collective row under "workloads" with op, algo, bytes, busbw_MBps and
  bound_busbw_MBps contributes; per (op, algo) the factor is sum(busbw x bytes) / sum(bound x bytes), so large
  messages, which dominate a full-scale iteration, weigh most.
Anything not given stays at 1.0, and the output says which factors were measured and which were assumed.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from testbed.planning.counts import PlanError

OPS = {"allreduce": ("ring", "hierarchical"), "alltoall": ("direct", "rail-forward"), "sendrecv": ("p2p",)}
OP_ALIASES = {"allreduce": "allreduce", "alltoall": "alltoall", "a2a": "alltoall", "sendrecv": "sendrecv",
              "p2p": "sendrecv", "allgather": "allgather", "reducescatter": "reducescatter",
              "broadcast": "broadcast"}
ALGO_ALIASES = {"ring": "ring", "hierarchical": "hierarchical", "hier": "hierarchical", "railaware": "hierarchical",
                "direct": "direct", "pairwise": "direct", "railforward": "rail-forward", "twostep": "rail-forward",
                "railonly": "rail-forward", "rail": "rail-forward", "p2p": "p2p", "sendrecv": "p2p"}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def normalise_op(name: str) -> str:
    return OP_ALIASES.get(_key(name), _key(name))


def normalise_algo(name: str) -> str:
    return ALGO_ALIASES.get(_key(name), _key(name))


@dataclass
class Calibration:
    factors: dict[tuple[str, str], float] = field(default_factory=dict)   # (op, algo or "*") -> efficiency
    default: float = 1.0
    source: str | None = None          # None = uncalibrated

    @property
    def calibrated(self) -> bool:
        return self.source is not None and bool(self.factors or self.default != 1.0)

    def efficiency(self, op: str, algo: str) -> float:
        return self.factors.get((op, algo), self.factors.get((op, "*"), self.default))

    def measured(self, op: str, algo: str) -> bool:
        return (op, algo) in self.factors or (op, "*") in self.factors

    def to_json(self) -> dict:
        return {"calibrated": self.calibrated, "source": self.source, "default": self.default,
                "factors": {f"{op}/{algo}": v for (op, algo), v in sorted(self.factors.items())}}


def uniform(efficiency: float, source: str = "uniform") -> Calibration:
    return Calibration({}, efficiency, source)


def _check_factor(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1.5:
        raise PlanError(f"calibration {where}: an efficiency must be a number in (0, 1.5], got {value!r}")
    return float(value)


def from_factors(doc: dict, source: str) -> Calibration:
    cal = Calibration(source=source)
    for op, value in doc.items():
        if op == "default":
            cal.default = _check_factor(value, "default")
        elif isinstance(value, dict):
            for algo, v in value.items():
                cal.factors[(normalise_op(op), normalise_algo(algo))] = _check_factor(v, f"{op}/{algo}")
        else:
            cal.factors[(normalise_op(op), "*")] = _check_factor(value, op)
    return cal


def _collective_rows(node):
    """Every dict under node that looks like one collective measurement."""
    if isinstance(node, dict):
        if "op" in node and "busbw_MBps" in node and "bound_busbw_MBps" in node:
            yield node
        for v in node.values():
            yield from _collective_rows(v)
    elif isinstance(node, list):
        for v in node:
            yield from _collective_rows(v)


def from_results(doc: dict, source: str) -> Calibration:
    sums: dict[tuple[str, str], list[float]] = {}
    for row in _collective_rows(doc.get("workloads")):
        try:
            busbw, bound = float(row["busbw_MBps"]), float(row["bound_busbw_MBps"])
            weight = float(row.get("bytes") or 1)
        except (TypeError, ValueError):
            continue
        if bound <= 0 or busbw < 0 or row.get("correct") is False:
            continue
        key = (normalise_op(row["op"]), normalise_algo(row.get("algo", "*")))
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += busbw * weight
        acc[1] += bound * weight
    if not sums:
        raise PlanError(f"calibration {source}: no collective rows with busbw_MBps and bound_busbw_MBps "
                        "under 'workloads'")
    return Calibration({k: num / den for k, (num, den) in sums.items()}, 1.0, source)


def load(path: str) -> Calibration:
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise PlanError(f"cannot read calibration {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"calibration {path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(doc, dict):
        raise PlanError(f"calibration {path} must be a JSON object")
    return from_results(doc, path) if "workloads" in doc else from_factors(doc, path)
