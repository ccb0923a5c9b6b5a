"""The JSON Schema of results.json, versioned (`schema_version`), and its one time base.

Versions: 1.x. A minor version adds keys (readers ignore keys they do not know); a changed or removed key is a
new major version. The runner writes SCHEMA_VERSION; `testbed ls` flags a folder of another major version.

Times (docs/results.md#times), by the key's name:
  *_at                     Unix time (seconds since 1970, wall clock): the moments hosts reported
  timings.workloads_start  Unix time: the origin of every relative time below
  other *_s, times_s       seconds: a moment counted from timings.workloads_start (at_s, started_s, detected_s ...)
                           or a duration (wall_s, seconds, bring_up_s ...): each key's description says which
  *_per_s                  a rate (steps_per_s)
  started                  the run's start, ISO 8601 with its UTC offset
The runner (`relative_times`) puts the traffic agents' silences and longest gap on the relative base.

What the runner owns (the top level, fabric, timings, faults, captures, checks) is described closed: a key not
listed fails validation. A workload's record lists the common keys here and its type's own (the type's
RESULT_SCHEMA, in its module of testbed/workloads/) and stays open (a type may add rows). A fault's record is
testbed/faults/record.py's; the words all of them are written in, testbed/schema_words.py's.
`python -m testbed.results.results_schema` prints the schema (docs/results.schema.json is that output).
"""
from __future__ import annotations

import json
import sys

from testbed.fabric import params as fabric_params
from testbed.schema_words import BOOL, INT, NUM, PORT_COUNTERS, STR, arr, at, d, dur, nullable, obj, rel

SCHEMA_VERSION = "1.0"
MAJOR = SCHEMA_VERSION.split(".")[0]
ID = f"https://testbed.invalid/results-{SCHEMA_VERSION}.schema.json"

CHECK = obj({"name": d(STR, "What was checked (a workload's checks are prefixed with its name)."),
             "ok": BOOL, "detail": d(STR, "What was found, in a sentence.")}, ["name", "ok"])

PARAMS, PARAMS_REQUIRED = fabric_params.results_schema()       # kind, sizes, rates, MTU: from the fabric model
FABRIC = obj({
    **PARAMS, "switches": INT, "hosts": INT, "links": INT,
    "spares": d(INT, "Spare GPUs and servers (parked, not ranks)."),
    "routing": d(STR, "routing.mode: ecmp, single, spray ..."), "failover": d(BOOL, "Data-plane fast failover."),
    "controller_delay_ms": d(NUM, "How late the controller acts on a port change."),
    "datapath": d(STR, "Open vSwitch datapath: kernel (system) or user (netdev)."),
    "host_backend": d({"enum": ["netns", "docker"]}, "What the emulated hosts are."),
    "transport": d(STR, "The RDMA transport the hosts used: uroce (user space) or rxe (kernel); set at bring-up."),
    "roce_mtu": d(obj({"nic": INT, "hb": INT}, ["nic", "hb"]), "RoCE path MTU the ranks used on their NIC and HB ports."),
    "placement": d({"type": "object"}, "With machines: each machine's switches and hosts, and the links between "
                                       "machines (VXLAN) with their summed rate."),
}, [*PARAMS_REQUIRED, "switches", "hosts", "links", "routing", "failover", "datapath", "host_backend"])

TIMINGS = obj({
    "workloads_start": d(NUM, "Unix time: when the workloads (and the fault schedule) started, the origin of every "
                              "relative time in this file."),
    "bring_up_s": dur("bringing the fabric up (routes installed on every switch)."),
    "image_s": dur("checking or rebuilding the Docker host image, within bring-up."),
    "tear_down_s": dur("tearing the fabric down."),
}, ["tear_down_s"])

CAPTURE = obj({
    "point": d(STR, "HOST/nic, HOST/hb or SWITCH:PORT."), "file": d(STR, "The pcap, relative to the folder."),
    "filter": STR, "snaplen": INT, "bytes": INT, "packets": INT, "roce_packets": INT, "truncated": INT,
    "bad_icrc": INT, "icrc_checked": INT, "malformed": INT,
    "error": d(STR, "Why the pcap could not be read."),
    "ended_early": d(STR, "tcpdump ended before the run did (a failed check)."),
}, ["point", "file", "filter", "snaplen", "bytes"])

LINK_USAGE = obj({
    "file": d(STR, "The samples: link_usage.json, relative to the folder."),
    "hottest": arr(obj({"link": STR, "tier": STR, "peak": NUM, "mean": NUM}, ["link", "tier", "peak", "mean"]),
                   "The busiest links, by peak utilisation."),
}, ["file", "hottest"])

DROPS = {"overflow": INT, "fault": INT, "other": INT}
QUEUES = obj({
    "file": d(STR, "The samples: queues.json, relative to the folder."),
    "period_s": d(NUM, "Seconds (a duration): the mean interval between samples (the period asked, or longer to stay within the sampler's CPU budget)."),
    "ports": d(INT, "Shaped ports sampled."),
    "samples": d(INT, "Samples taken."),
    "sampler_cpu": d(nullable(NUM), "The sampler thread's CPU time over its wall time (1 = a core)."),
    "drops": d(obj(DROPS, list(DROPS)), "Drops over all ports by reason: overflow (a full queue), fault (a device's "
                                        "drops while a fault held its link), other."),
    "drops_by_port": arr(obj({"port": STR, "link": STR, **DROPS}, ["port", "link", *DROPS]),
                         "Per port that dropped any (NODE>PEER: the queue of what NODE sends to PEER)."),
    "fullest": arr(obj({"port": STR, "link": STR, "tier": STR, "limit_bytes": nullable(INT), "peak_bytes": INT,
                        "peak_fraction": nullable(NUM), "overflow_drops": INT},
                       ["port", "link", "tier", "limit_bytes", "peak_bytes", "peak_fraction", "overflow_drops"]),
                   "The ports with the highest peak backlog, as a fraction of their configured queue."),
    "ecn": d(obj({"ports": INT, "ect_packets": INT, "marked_packets": INT,
                  "most_marked": arr(obj({"port": STR, "link": STR, "ect_packets": INT, "marked_packets": INT},
                                         ["port", "link", "ect_packets", "marked_packets"]),
                                     "The switch ports that marked most.")},
                 ["ports", "ect_packets", "marked_packets", "most_marked"]),
             "With fabric.ecn: ECN-capable packets the marking switch ports saw and those they marked CE (per port "
             "in queues.json)."),
    "pfc": d(obj({"ports": INT, "ports_paused": INT, "pauses": INT, "paused_s": dur("paused, summed over the ports."),
                  "most_paused": arr(obj({"port": STR, "link": STR, "pauses": INT, "paused_s": dur("the port's paused time.")},
                                         ["port", "link", "pauses", "paused_s"]), "The ports paused longest.")},
                 ["ports", "ports_paused", "pauses", "paused_s", "most_paused"]),
             "With fabric.pfc: the upstream ports PFC can pause, how many it paused, how often and how long in all "
             "(per port in queues.json)."),
}, ["file", "period_s", "ports", "samples", "sampler_cpu", "drops", "drops_by_port", "fullest"])

# Every workload record: what the runner adds around the type's own result.
WORKLOAD_COMMON = {
    "name": d(STR, "The workload's name (TYPE#INDEX by default)."), "type": STR, "ok": BOOL,
    "started_s": rel("when the workload started."), "wall_s": dur("the workload's wall-clock time."),
    "cpu_idle_min_pct": d(nullable(NUM), "The fidelity guard: least CPU idle sampled, %."),
    "cpu_idle_mean_pct": d(nullable(NUM), "Mean CPU idle during the workload (its timed operations where "
                                          "cpu_window is timed), %."),
    "cpu_window": d({"enum": ["timed", "whole"]}, "What the guard judged: the timed operations (the workload "
                                                  "named them, start-up and tear-down left out) or the whole "
                                                  "workload (none named, or too short to hold a sample)."),
    "cpu_idle_whole_pct": d(NUM, "Mean CPU idle over the whole workload, start-up included, %."),
    "cpu_bound": d(BOOL, "Taken without CPU headroom: the figure measures the machine, not the links."),
    "capacity_used": d(nullable(NUM), "CPU busy time over the most a link-bound run may use (1 = the fidelity "
                                      "guard's threshold; above 1 the run is cpu_bound)."),
    "first_error_at": at("when the first rank reported an error (null: none)."),
}

def workload() -> dict:
    """A workload record: the common keys, then its type's RESULT_SCHEMA (open: a type may add keys within 1.x)."""
    from testbed.workloads import REGISTRY      # the workloads load the runtime: only when the schema is asked for
    cases = [{"if": {"properties": {"type": {"const": t}}},
              "then": {"properties": kind.RESULT_SCHEMA}} for t, kind in REGISTRY.items()]
    return {"type": "object", "properties": {**WORKLOAD_COMMON, "type": {"enum": list(REGISTRY)}},
            "required": ["name", "type", "ok", "started_s", "wall_s", "cpu_bound"], "allOf": cases}


def schema() -> dict:
    from testbed.faults.record import RECORD as FAULT        # the fault kinds: only when the schema is asked for
    top = obj({
        "schema_version": d({"type": "string", "pattern": rf"^{MAJOR}\.[0-9]+$"},
                            "This file's schema version (1.x: this schema)."),
        "scenario": d(STR, "The scenario's name."), "testbed_version": STR,
        "started": d({"type": "string", "format": "date-time"}, "The run's start, ISO 8601 with its UTC offset."),
        "ok": d(BOOL, "Every check passed."),
        "fabric": FABRIC, "workloads": arr(workload(), "The workloads' results, in order."),
        "links": d(PORT_COUNTERS, "Switch port counters over the workloads (SWITCH:PORT, OpenFlow port numbers)."),
        "checks": arr(CHECK), "timings": TIMINGS,
        "warnings": arr(STR, "What ran otherwise than the scenario reads."),
        "faults": arr(FAULT, "Per scenario fault, in scenario order."),
        "captures": arr(CAPTURE, "Per capture point."),
        "link_usage": LINK_USAGE,
        "queues": QUEUES,
        "report": arr(STR, "The files the report wrote, relative to the folder."),
    }, ["schema_version", "scenario", "testbed_version", "started", "ok", "fabric", "workloads", "links", "checks",
        "timings", "warnings", "report"])
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": ID,
            "title": f"testbed results.json, schema {SCHEMA_VERSION}", **top}


def errors(results: dict) -> list[str]:
    """What in results does not follow the schema, one line each ("" when it does)."""
    import jsonschema
    validator = jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker())
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
            for e in sorted(validator.iter_errors(results), key=lambda e: list(map(str, e.absolute_path)))]


def known_version(results: dict) -> bool:
    """Whether this schema reads the file: the same major version (files before 1.0 carry none)."""
    return str(results.get("schema_version", "")).split(".")[0] == MAJOR


def relative_times(results: dict) -> None:
    """Put the Unix times the workloads' agents report (the traffic flows' silences) on the relative base: each
    type's `relative_times`, after the faults' outcomes, which match them against the faults, were computed."""
    from testbed.workloads import hook      # the workloads load the runtime: not at every `testbed runs`
    t0 = results.get("timings", {}).get("workloads_start")
    for w in results.get("workloads", []):
        hook(w.get("type"), "relative_times")(w, t0)


if __name__ == "__main__":
    json.dump(schema(), sys.stdout, indent=1)
    sys.stdout.write("\n")
