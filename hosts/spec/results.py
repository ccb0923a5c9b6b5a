"""What each agent prints back: one JSON line on stdout, described here as a JSON Schema per program (by its
`python -m` module name). The testbed checks the line it reads against it (testbed/runtime/agent_results.py);
the hosts only print, so they need no validator.

Each schema lists every key the program can print, with its type; a key it does not list is an error (a
program that grows a key adds it here). Nested figures that only the testbed's report reads (counters, phases,
per-flow silences) are typed loosely.
"""
from __future__ import annotations

INT = {"type": "integer"}
NUM = {"type": "number"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
OBJ = {"type": "object"}
NUM_OR_NULL = {"type": ["number", "null"]}
STRS = {"type": "array", "items": STR}


def obj(properties: dict, required: tuple = (), **more) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "required": list(required), **more}


COLLECTIVE_RANK = obj({
    "rank": INT, "host": STR, "recoveries": {"type": "array", "items": OBJ}, "lost_steps": INT,
    "joined": OBJ,                                   # a spare's or a returning rank's epoch, when it came in
    "count": INT, "times": {"type": "array", "items": NUM_OR_NULL},
    "phases": {"type": "array", "items": {"type": ["array", "null"]}},
    "windows": {"type": "array", "items": {"type": ["array", "null"]}},     # wall-clock [start, end] per step
    "cpu": {"type": "array", "items": {"type": ["array", "null"]}},         # [user, system] s per measured step
    "correct": {"type": ["boolean", "null"]}, "counters": OBJ, "world": INT, "epoch": INT,
    "recovered_chunks": INT, "steps": INT, "state": OBJ, "heartbeat": OBJ,
    "error": STR, "error_at": NUM, "detected_by": STR, "left": STR,
}, ("rank", "host", "recoveries", "lost_steps"),
    anyOf=[{"required": ["count", "times", "phases", "correct", "counters", "world", "epoch", "steps"]},
           {"required": ["error"]}, {"required": ["left"]}])

RANK_HOST = obj({"ranks": {"type": "array", "items": COLLECTIVE_RANK, "minItems": 1}}, ("ranks",))

TRAINING_RANK = {"anyOf": [
    obj({"rank": INT, "stage": INT, "iterations": {"type": "array", "items": OBJ},
         "correct": obj({k: {"type": ["boolean", "null"]} for k in ("tp", "pp", "dp")}, ("tp", "pp", "dp")),
         "sent": obj({k: OBJ for k in ("tp", "pp", "dp")}, ("tp", "pp", "dp")), "wire_sent": OBJ, "counters": OBJ},
        ("rank", "stage", "iterations", "correct", "sent", "wire_sent", "counters")),
    obj({"rank": INT, "error": STR, "error_at": NUM}, ("rank", "error", "error_at"))]}

FLOW_ERROR = obj({"flow": INT, "error": STR}, ("flow", "error"))
RECEIVED = obj({"flow": INT, "proto": {"enum": ["udp", "tcp"]}, "bytes": INT, "expected_bytes": INT,
                "seconds": NUM_OR_NULL, "mbps": NUM, "packets": INT, "lost_packets": INT, "max_gap_s": NUM,
                "gap_at": NUM_OR_NULL, "silences": {"type": "array"}, "reordered": INT},
               ("flow", "proto", "bytes", "expected_bytes", "seconds", "mbps"))
SENT = obj({"flow": INT, "bytes": INT, "seconds": NUM}, ("flow", "bytes", "seconds"))
FLOWS = obj({"received": {"type": "array", "items": {"anyOf": [RECEIVED, FLOW_ERROR]}},
             "sent": {"type": "array", "items": {"anyOf": [SENT, FLOW_ERROR]}}}, ("received", "sent"))

PROBE = obj({"reached": STRS, "unreached": STRS}, ("reached", "unreached"))

TFDATA_TRAINER = {"anyOf": [
    obj({"ready": {"const": True}}, ("ready",)),             # the line before the go (start_signal)
    obj({"policy": {"enum": ["fastflow", "profile", "fixed"]}, "pipeline": STR, "config": OBJ,
         "profile": OBJ, "decision": OBJ, "off_ratio": NUM, "candidate": {"type": ["string", "null"]},
         "steps": INT, "seconds": NUM, "steps_per_s": NUM, "cpu_s": NUM, "cpu_per_step": NUM, "cpu_cores": NUM,
         "local_batches": INT, "remote_batches": INT, "measured_ratio": NUM, "throughput_eps": NUM,
         "epoch_seconds": NUM},
        ("policy", "pipeline", "config"))]}

DILOCO_RANK = {"anyOf": [
    obj({"rank": INT, "site": INT, "steps": {"type": "array", "items": OBJ}, "theta": STR, "outer": STR,
         "loss": NUM, "counters": OBJ, "membership": obj({
             "members": {"type": "array", "items": {"type": "array", "items": INT}},
             "resyncs": {"type": "array", "items": {"type": "array", "items": INT}},
             "events": {"type": "array", "items": OBJ}, "resync_bytes": INT},
             ("members", "resyncs", "events", "resync_bytes"))},
        ("rank", "site", "steps", "theta", "outer", "loss", "counters")),
    obj({"rank": INT, "error": STR, "error_at": NUM}, ("rank", "error", "error_at"))]}

WAN_TRANSFER = obj({
    "role": {"enum": ["send", "recv"]}, "error": STR,
    "runs": {"type": "array", "items": obj({
        "connections": INT, "seconds": NUM, "rtt_s": NUM, "retransmits": INT, "timeouts": INT, "exact": BOOL,
        "wrong_bytes": INT}, ("connections",))}}, ("role",), anyOf=[{"required": ["runs"]}, {"required": ["error"]}])

TFDATA_SERVICE = obj({"role": {"enum": ["dispatcher", "worker"]}, "pid": INT, "port": INT}, ("role", "pid", "port"))

# program (its `python -m` module) -> the schema of the line it prints last
RESULTS = {"hosts.agents.collective_rank": COLLECTIVE_RANK, "hosts.agents.rank_host": RANK_HOST,
           "hosts.agents.training_rank": TRAINING_RANK,
           "hosts.agents.diloco_rank": DILOCO_RANK, "hosts.agents.flows": FLOWS, "hosts.agents.probe": PROBE,
           "hosts.agents.tfdata_trainer": TFDATA_TRAINER, "hosts.agents.tfdata_service": TFDATA_SERVICE,
           "hosts.agents.wan_transfer": WAN_TRANSFER}
