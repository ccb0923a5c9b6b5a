"""The `program` workload's schemas: its part of the scenario schema (SCHEMA, a `workloads:` item of its type)
and its keys in results.json's workload record (RESULT_SCHEMA)."""
from __future__ import annotations

from testbed.schema_words import BOOL, INT, NUM, PORT_COUNTERS, STR, arr, at, d, dur, nullable, obj

FIGURE = {"type": "object", "additionalProperties": False,
          "description": "A number the program prints, read from one rank's stdout; min and max make it a check.",
          "properties": {"regex": {"type": "string", "minLength": 1,
                                   "description": "The last match of this regular expression (its group `value`, "
                                                  "else its first group, else the match). Default: none (give "
                                                  "regex or json)."},
                         "json": {"type": "string", "minLength": 1,
                                  "description": "The key (a dotted path) of the last JSON line that has it. "
                                                 "Default: none (give regex or json)."},
                         "rank": {"type": "integer", "minimum": 0, "default": 0,
                                  "description": "The rank whose stdout is read."},
                         "unit": {"type": "string", "description": "Shown after the figure. Default: none."},
                         "min": {"type": "number", "description": "The figure must be at least this. Default: no "
                                                                  "bound."},
                         "max": {"type": "number", "description": "The figure must be at most this. Default: no "
                                                                  "bound."}}}
# This workload's part of the scenario schema (the scenario file's `workloads:` items of its type).
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type", "command"],
    "description": "A user's own distributed program (torch.distributed, tf.distribute, MPI) as the ranks of a job "
                   "on the emulated hosts; it passes when every rank exits 0 and every figure is within its bounds.",
    "properties": {
        "type": {"const": "program", "description": "A user's own program."},
        "name": {"type": "string", "description": "The workload's name in the results and for a fault's `workload`; "
                 "letters, digits, '.', '_', '-' (it names the ranks' log folder, programs/NAME/). "
                 "Default: TYPE#INDEX (its logs in programs/program/)."},
        "command": {"anyOf": [{"type": "string", "minLength": 1},
                              {"type": "array", "minItems": 1, "items": {"type": "string"}}],
                    "description": "What every rank runs: a string (split as a shell would) or a list of words; "
                                   "{python} stands for the hosts' Python."},
        "launcher": {"enum": ["env", "mpirun"], "default": "env",
                     "description": "env: each rank started in its host with the environment torchrun and "
                                    "tf.distribute expect (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TF_CONFIG, "
                                    "...); mpirun: one Open MPI job, a rank per host, its daemons started "
                                    "by the hosts' remote shell (ssh on Docker hosts)."},
        "hosts": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string"},
                  "description": "The job's hosts in rank order. Default: every GPU host, server by server."},
        "port": {"type": "integer", "minimum": 1024, "maximum": 65535, "default": 29500,
                 "description": "MASTER_PORT and TF_CONFIG's port (launcher env)."},
        "env": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}, "default": {},
                "description": "More environment variables for every rank."},
        "mpirun_args": {"type": "array", "items": {"type": "string"}, "default": [],
                        "description": "More arguments to mpirun (launcher mpirun)."},
        "timeout_s": {"type": "number", "minimum": 1, "maximum": 3600, "default": 300,
                      "description": "Seconds the job may take before its ranks are killed."},
        "figures": {"type": "object", "additionalProperties": FIGURE, "default": {},
                    "description": "Numbers the program prints, by name."},
        "expect": {"enum": ["success", "failure", "hang"], "default": "success",
                   "description": "success: every rank exits 0; failure: the job ends on its own with an error (how "
                                  "a library takes a crashed peer); hang: it is still running at timeout_s (how a "
                                  "library takes a peer it can no longer reach and never gives up on)."},
    },
}

# Its keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {
    "launcher": {"enum": ["env", "mpirun"]}, "command": {"type": ["string", "array"]}, "world": INT,
    "hosts": arr(STR),
    "ranks": arr(obj({"rank": INT, "host": STR, "ip": STR, "stdout": STR, "stderr": STR,
                      "exit": d({"type": ["integer", "null"]}, "Exit status; -N: killed by signal N."),
                      "ended": STR, "seconds": dur("from the job's start to this rank's end."),
                      "last_error": STR}, ["rank", "host"], closed=False)),
    "figures": d({"type": "object", "additionalProperties": nullable(NUM)}, "What the program printed, by name."),
    "units": {"type": "object"}, "seconds": dur("the job's completion time."),
    "logs": d(STR, "The ranks' logs folder, relative to the results folder."),
    "started_at": at("when the job was launched."), "output": arr(STR),
    "mpirun": {"type": "object"}, "reaction": d(STR, "How the library took a failure, in its words."),
    "fabric_bytes": INT, "nic_bytes": INT, "link_bytes": PORT_COUNTERS,
    "silences": arr({"type": "array", "prefixItems": [d(NUM, "seconds from the job's launch (started_at)."),
                                                      dur("how long it lasted."), d(BOOL, "traffic resumed.")],
                     "items": False, "minItems": 3},
                    "Stretches in which the job's NICs received nothing: [start, length, resumed]."),
    "longest_silence_s": dur("the longest of them."), "traffic_samples": INT,
}
