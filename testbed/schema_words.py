"""The words results.json's JSON Schema is written in: types, a described key, a time by its base (Unix time,
seconds from timings.workloads_start, or a duration), objects and arrays. testbed/results/results_schema.py
assembles the schema; each workload type describes its own record with these (its RESULT_SCHEMA), and the fault
kinds theirs (testbed/faults/record.py).
"""
from __future__ import annotations

NUM = {"type": "number"}
INT = {"type": "integer", "minimum": 0}
STR = {"type": "string"}
BOOL = {"type": "boolean"}


def nullable(schema: dict) -> dict:
    return {**schema, "type": [schema["type"], "null"]} if "type" in schema else {"anyOf": [schema, {"type": "null"}]}


def d(schema: dict, text: str) -> dict:
    return {**schema, "description": text}


def at(text: str) -> dict:
    """A moment as Unix time (the hosts' wall clock)."""
    return d(nullable(NUM), f"Unix time: {text}")


def rel(text: str) -> dict:
    """A moment in seconds from timings.workloads_start."""
    return d(nullable(NUM), f"Seconds from timings.workloads_start: {text}")


def dur(text: str) -> dict:
    return d(nullable(NUM), f"Seconds (a duration): {text}")


def obj(props: dict, required=(), closed: bool = True, text: str | None = None) -> dict:
    out = {"type": "object", "properties": props, "required": list(required), "additionalProperties": not closed}
    return d(out, text) if text else out


def arr(items: dict, text: str | None = None) -> dict:
    out = {"type": "array", "items": items}
    return d(out, text) if text else out


BYTES_BY_PORT = d({"type": "object", "additionalProperties": INT}, "Bytes per switch port (SWITCH:PORT) or link.")
PORT_COUNTERS = {"type": "object", "additionalProperties": obj({"tx_bytes": INT, "rx_bytes": INT},
                                                               ["tx_bytes", "rx_bytes"])}
