"""Scenario files: YAML, validated against a JSON schema, with `--set key=value` overrides.

Errors are ScenarioError with one line that names the problem and where it is.
"""
from __future__ import annotations

import copy
import re

import jsonschema
import yaml

from testbed.fabric.topo import KINDS
from testbed.schema import RATE, SIZE, ScenarioError, parse_size
from testbed.workloads import REGISTRY

FABRIC = {
    "type": "object", "additionalProperties": False, "required": ["kind"],
    "properties": {
        "kind": {"enum": list(KINDS)},
        "servers": {"type": "integer", "minimum": 1},
        "gpus_per_server": {"type": "integer", "minimum": 1},
        "spines": {"type": "integer", "minimum": 1},
        "oversubscription": {"type": "number", "minimum": 1},
        "nic_mbps": RATE, "hb_mbps": RATE,
        "cpu_hosts": {"type": "integer", "minimum": 0},
        "spares_per_server": {"type": "integer", "minimum": 0},     # idle GPUs per HB domain (recovery: spare)
        "spare_servers": {"type": "integer", "minimum": 0},         # idle servers (recovery: migrate)
    },
}

FAULT = {"type": "object", "additionalProperties": False, "required": ["at", "kind", "target"],
         "properties": {"at": {"type": "number", "minimum": 0},
                        "kind": {"enum": ["link-down", "link-up", "link-flap", "switch-down", "port-disable", "gpu-crash", "gpu-hang",
                                          "gpu-stall", "gpu-declared", "server-down", "nic-down", "partition"]},
                        "target": {"type": "string"},
                        "workload": {"type": "string"},     # `at` counts from this workload's start
                        "duration": {"type": "number", "exclusiveMinimum": 0},
                        "count": {"type": "integer", "minimum": 1, "maximum": 100}}}
CAPTURE = {"type": "object", "additionalProperties": False, "required": ["point"],
           "properties": {"point": {"type": "string"}, "filter": {"type": "string"},
                          "snaplen": {"type": "integer", "minimum": 64, "maximum": 262144},
                          "max_packets": {"type": "integer", "minimum": 1}}}

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["name", "fabric", "workloads"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"},
        "description": {"type": "string"},
        "fabric": FABRIC,
        "routing": {"type": "object", "additionalProperties": False,
                    "properties": {"mode": {"type": "string"}, "failover": {"type": "boolean"}}},
        "workloads": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["type"],
            "properties": {"type": {"enum": list(REGISTRY)}},
            "allOf": [{"if": {"properties": {"type": {"const": t}}}, "then": w.SCHEMA} for t, w in REGISTRY.items()]}},
        "faults": {"type": "array", "items": FAULT},
        "capture": {"type": "array", "items": CAPTURE},
        "hosts": {"enum": ["netns", "docker"]},        # emulated hosts: network namespaces or Docker containers
        "host_limits": {"type": "object", "additionalProperties": False,      # per Docker host
                        "properties": {"cpus": {"type": "number", "exclusiveMinimum": 0, "maximum": 64},
                                       "memory": SIZE}},
    },
}
MIN_HOST_MEMORY, MAX_HOST_MEMORY = 32 * 2**20, 64 * 2**30


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "top level"


def validate(doc) -> dict:
    if not isinstance(doc, dict):
        raise ScenarioError("a scenario must be a YAML mapping with name, fabric and workloads")
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc))
    if err is not None:
        raise ScenarioError(f"{_where(err)}: {err.message}")
    mode = doc.get("routing", {}).get("mode", "ecmp")
    if mode not in ("single", "ecmp", "spray", "rr") and not re.fullmatch(r"split:([2-9]|1[0-6])", mode):
        raise ScenarioError(f"routing.mode: {mode!r} is not a routing mode; choose single, ecmp, spray, rr "
                            f"or split:K with K from 2 to 16")
    for i, w in enumerate(doc["workloads"]):
        for key in ("size", "sizes", "sweep"):
            values = w.get(key)
            values = values if isinstance(values, list) else list(values.values())[:2] \
                if isinstance(values, dict) else [values]
            for v in values:
                if v is None:
                    continue
                try:
                    parse_size(v)
                except ScenarioError as exc:
                    raise ScenarioError(f"workloads.{i}.{key}: {exc}") from None
        if w.get("pattern") == "pairs" and "pairs" not in w:
            raise ScenarioError(f"workloads.{i}: pattern 'pairs' needs a 'pairs' list")
    if "host_limits" in doc:
        if doc.get("hosts", "netns") != "docker":
            raise ScenarioError("host_limits: CPU and memory limits are for Docker hosts; set hosts: docker")
        if "memory" in doc["host_limits"]:
            try:
                parse_size(doc["host_limits"]["memory"], MIN_HOST_MEMORY, MAX_HOST_MEMORY)
            except ScenarioError as exc:
                raise ScenarioError(f"host_limits.memory: {exc}") from None
    return doc


def host_limits(doc: dict) -> dict:
    """Per-host limits of a Docker-hosts scenario, as the backend takes them: {cpus, memory (bytes)}."""
    limits = dict(doc.get("host_limits", {}))
    if "memory" in limits:
        limits["memory"] = parse_size(limits["memory"], MIN_HOST_MEMORY, MAX_HOST_MEMORY)
    return limits


def apply_set(doc: dict, assignment: str) -> None:
    """Apply one `key.sub=value` override; list items are addressed by index (workloads.0.size)."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: expected key=value")
    path, raw = assignment.split("=", 1)
    keys = path.strip().split(".")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    node = doc
    for key in keys[:-1]:
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict):
            node = node.setdefault(key, {})
        else:
            raise ScenarioError(f"--set {path}: no such key {key!r}")
    last = keys[-1]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ScenarioError(f"--set {path}: no such key {last!r}")


def load(path: str, overrides: list[str] = ()) -> dict:
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not a text file (byte {exc.start} is not UTF-8): a scenario is YAML") from None
    except yaml.reader.ReaderError as exc:        # decodes, but holds control characters (NUL, ...)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise ScenarioError(f"{path}: not a text file (control character #x{code:04x} at character {exc.position}): "
                            f"a scenario is YAML") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise ScenarioError(f"{path}: malformed YAML{where}: {problem}") from None
    doc = copy.deepcopy(doc)
    for assignment in overrides:
        if not isinstance(doc, dict):
            break
        apply_set(doc, assignment)
    try:
        return validate(doc)
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
