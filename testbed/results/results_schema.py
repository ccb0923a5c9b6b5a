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
listed fails validation. A workload's record lists its type's keys and stays open (a type may add rows).
`python -m testbed.results.results_schema` prints the schema (docs/results.schema.json is that output).
"""
from __future__ import annotations

import json
import sys

from testbed.fabric import params as fabric_params

SCHEMA_VERSION = "1.0"
MAJOR = SCHEMA_VERSION.split(".")[0]
ID = f"https://testbed.invalid/results-{SCHEMA_VERSION}.schema.json"

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

FAULT = obj({
    "kind": d(STR, "The fault's kind (link-down, link-flap, switch-down, gpu-crash, ...)."),
    "target": d(STR, "What it struck: a link, switch, GPU host or server."),
    "at_s": rel("when it was injected (null: never)."),
    "detected_s": rel("when the controller saw the port change, or (GPU faults) the first peer noticed."),
    "computed_s": rel("when the controller had computed new routes."),
    "installed_s": rel("when every switch it changed had acknowledged the new rules."),
    "recovered_s": rel("routed around (link faults) or the communicator re-formed (GPU faults)."),
    "resumed_s": rel("when the last flow the fault cut was heard again (receivers' view)."),
    "flows_cut": d(INT, "Flows that fell silent across the fault."),
    "restored_s": rel("when the fault was undone."),
    "first_success_s": rel("when the first collective after the recovery had completed on every member."),
    "lost_steps": d(nullable(INT), "Started steps run again after the recovery."),
    "processes": d(INT, "GPU faults: rank processes signalled (0: it hit none)."),
    "waited_s": dur("a GPU fault timed from a workload: how long it waited, past its `at`, for a rank to start on "
                    "its target."),
    "detected_by": d(nullable(STR), "What noticed a GPU fault first (heartbeat, transport, watchdog ...)."),
    "recovery": d(nullable(STR), "The recovery policy that acted (abort, shrink, spare, migrate)."),
    "replaced_by": d(nullable({"type": "object", "additionalProperties": STR}), "Failed host -> the spare that "
                                                                               "took its rank."),
    "jobs": arr(obj({"workload": STR, "ended": d({"enum": ["completed", "failed", "hung"]}, "How the job ended."),
                     "exits": d(arr({"type": ["integer", "null"]}), "Exit codes (mpirun's, or each rank's)."),
                     "ended_s": rel("when the job ended."),
                     "error_after_s": dur("from the fault to the library's first error (null: none)."),
                     "stall_s": dur("the silence of the job's traffic that began with the fault (null: none)."),
                     "stall_from_s": rel("when that silence began."),
                     "resumed_s": rel("when the job's traffic resumed (null: never)."),
                     "longest_silence_s": dur("the job's longest silence over its run.")},
                    ["workload", "ended"], closed=False),
                "Program jobs running when it struck: how each took it (testbed/faults/program_jobs.py)."),
}, ["kind", "target", "at_s", "detected_s", "recovered_s", "restored_s"])

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
}, ["file", "period_s", "ports", "samples", "sampler_cpu", "drops", "drops_by_port", "fullest"])

BYTES_BY_PORT = d({"type": "object", "additionalProperties": INT}, "Bytes per switch port (SWITCH:PORT) or link.")
PORT_COUNTERS = {"type": "object", "additionalProperties": obj({"tx_bytes": INT, "rx_bytes": INT},
                                                               ["tx_bytes", "rx_bytes"])}

# Every workload record: what the runner adds around the type's own result.
WORKLOAD_COMMON = {
    "name": d(STR, "The workload's name (TYPE#INDEX by default)."), "type": STR, "ok": BOOL,
    "started_s": rel("when the workload started."), "wall_s": dur("the workload's wall-clock time."),
    "cpu_idle_min_pct": d(nullable(NUM), "The fidelity guard: least CPU idle sampled, %."),
    "cpu_idle_mean_pct": d(nullable(NUM), "Mean CPU idle during the workload, %."),
    "cpu_bound": d(BOOL, "Taken without CPU headroom: the figure measures the machine, not the links."),
    "capacity_used": d(nullable(NUM), "CPU busy time over the most a link-bound run may use (1 = the fidelity "
                                      "guard's threshold; above 1 the run is cpu_bound)."),
    "first_error_at": at("when the first rank reported an error (null: none)."),
}

PHASE = obj({"name": STR, "link": STR, "seconds": dur("the phase's mean time."), "samples": INT,
             "bound_seconds": dur("its link's bound."), "ratio": d(nullable(NUM), "bound / measured.")},
            ["name", "link", "seconds"], closed=False)

COLLECTIVE_ROW = obj({
    "op": STR, "algo": STR, "ranks": INT, "bytes": d(INT, "Bytes per rank's buffer (nccl-tests' size)."),
    "requested_bytes": d(INT, "The size asked for (bytes ran in whole elements)."), "count": INT, "dtype": STR,
    "seconds": dur("mean time of the operation (slowest rank per iteration)."),
    "algbw_MBps": NUM, "busbw_MBps": NUM, "bound_busbw_MBps": d(NUM, "The links' bound on busbw."),
    "bus_ratio": d(NUM, "busbw / bound."), "correct": d(BOOL, "Equal to numpy's result on every rank."),
    "fabric_bytes": INT, "uplink_bytes": BYTES_BY_PORT, "uplink_imbalance": d(nullable(NUM), "max / mean uplink."),
    "out_of_order": INT, "retransmits": INT, "send_nic_bytes": INT, "recovered_chunks": INT, "drops": INT,
    "transport": d({"type": "object"}, "Non-zero transport counters."),
    "hb_bytes": d(INT, "Bytes over the HB links, both ways (warm-up included, as every byte counter)."),
    "link_bytes": d(INT, "Bytes on all links (SPCL): NIC sends + switch egress + hb_bytes."),
    "tree_min_bytes": d(INT, "algo multicast: each shard once over each link of its minimal tree, per operation run."),
    "tree_ratio": d(nullable(NUM), "algo multicast: (NIC sends + switch egress) / tree_min_bytes; 1 is the minimum."),
    "phases": arr(PHASE, "Hierarchical algorithms: each phase against its own link's bound."),
    "sequential_bound_busbw_MBps": d(NUM, "Pipelined variant: the sequential algorithm's bound it beats."),
}, ["op", "algo", "bytes", "seconds", "algbw_MBps", "busbw_MBps", "bound_busbw_MBps", "bus_ratio"], closed=False)

RECOVERY = obj({
    "epoch": INT, "policy": STR, "failed": d(nullable(arr(STR)), "The hosts declared failed."),
    "replaced": d({"type": ["object", "null"]}, "Failed host -> spare."), "world": d(nullable(INT), "Ranks after."),
    "lost_steps": d(nullable(INT), "Started steps run again."),
    "detected_at": at("when the first rank noticed the failure."), "detected_by": nullable(STR),
    "decided_at": at("when the verdict was reached."), "reformed_at": at("when every member of the new epoch was in."),
    "first_success_at": at("when the first collective after it completed on every member."),
    "activation_s": dur("how long the manager took to activate a spare."), "error": nullable(STR),
}, ["epoch", "policy"], closed=False)

COLLECTIVE = {
    "op": STR, "algo": STR, "ranks": INT, "rows": arr(COLLECTIVE_ROW, "One row per size, as nccl-tests prints."),
    "loss_dropped_packets": d(INT, "With `loss`: the packets the ranks' random-loss rules dropped."),
    "first_recovered_at": at("when the communicator first re-formed after a failure."),
    "recoveries": arr(RECOVERY, "One record per re-formed epoch."),
    "heartbeat": obj({"period_s": dur("heartbeat period."), "timeout_s": dur("heartbeat timeout."),
                      "max_peer_silence_s": dur("longest silence of a live peer."),
                      "max_own_gap_s": dur("longest gap between a rank's own beats.")}, closed=False),
}

FLOW = obj({
    "flow": INT, "proto": {"enum": ["udp", "tcp"]}, "src": STR, "dst": STR, "bytes": d(INT, "Bytes received."),
    "expected_bytes": INT, "seconds": dur("the flow's transfer time."), "mbps": NUM,
    "lost_packets": nullable(INT), "error": nullable(STR), "reordered": nullable(INT),
    "max_gap_s": dur("the longest silence between two arrivals."),
    "gap_start_s": rel("when that longest silence began."),
    "silences": arr({"type": "array", "prefixItems": [rel("when it began."), dur("how long it lasted.")],
                     "items": False, "minItems": 2},
                    "Every silence of over 1.5 packet times: [start, length]."),
}, ["flow", "proto", "src", "dst", "bytes", "expected_bytes"], closed=False)

TRAFFIC = {
    "pattern": STR, "protocol": STR, "flows": INT, "flow_bytes": INT, "rate_mbps": nullable(NUM),
    "mbps_min": NUM, "mbps_mean": NUM, "mbps_max": NUM, "delivered_bytes": INT,
    "max_gap_s": dur("the longest silence of any flow."), "lost_packets": INT, "reordered_packets": INT,
    "uplink_bytes": BYTES_BY_PORT, "uplinks_used": INT, "uplink_imbalance": d(nullable(NUM), "max / mean uplink."),
    "per_flow": arr(FLOW),
}

CONNECTIVITY = {"pairs": INT, "expected_reachable": INT, "reachable_ok": INT,
                "missing": d(arr({}), "Pairs that should reach each other and did not."),
                "leaked": d(arr({}), "Pairs that reached each other and should not.")}

TRAINING = {
    "plan": obj({"tp": INT, "pp": INT, "dp": INT}), "micro_batches": INT, "schedule": STR, "gpus": INT,
    "fabric": STR, "model": {"type": "object"}, "hardware": {"type": "object"}, "layout": arr({"type": "object"}),
    "rail_aligned": BOOL, "algorithms": {"type": "object"}, "scale": d(NUM, "Model size scale-down."),
    "dilation_link": d(NUM, "Real / emulated NIC rate."), "dilation": d(NUM, "Emulated / real time."), "activation_bytes": NUM, "gradient_bytes": NUM,
    "predicted": d({"type": "object"}, "Seconds per iteration and phase, as the model predicts (durations)."),
    "measured": d({"type": "object"}, "Seconds per iteration and phase, measured (durations)."),
    "ratio": {"type": "object"}, "per_iteration": arr({"type": "object"}), "bubble_ratio": {"type": "object"},
    "full_scale": {"type": "object"}, "correct": {"type": "object"}, "per_rank": arr({"type": "object"}),
    "traffic": d({"type": "object"}, "Bytes between GPU pairs per phase (traffic matrix)."),
    "fabric_bytes": INT, "nic_bytes": INT, "spine_bytes": nullable(INT),
}

SPREAD = obj({"median": NUM, "min": NUM, "max": NUM, "runs": INT}, ["median", "min", "max", "runs"])
OFFLOAD = {
    "rows": arr(obj({"pipeline": STR, "policy": STR, "throughput_eps": NUM, "steps_per_s": NUM,
                     "profile_s": dur("FastFlow's profiling."), "epoch_s_with_profiling": dur("the epoch's time."),
                     "off_ratio": NUM, "candidate": nullable(STR), "seed": INT, "metrics": {"type": "object"}},
                    ["pipeline", "policy", "steps_per_s", "off_ratio"], closed=False), "One trainer run each."),
    "policies": arr(obj({"pipeline": STR, "policy": STR, "candidate": nullable(STR), "off_ratio": SPREAD,
                         "steps_per_s": SPREAD, "epoch_s": d(SPREAD, "Seconds (a duration): the epoch's time, "
                                                                     "profiling included (median, min, max)."),
                         "speedup_vs_tf_no": NUM},
                        ["pipeline", "policy"], closed=False), "Medians and spreads per policy."),
    "cpu_bound_runs": INT, "candidates": arr(STR), "epoch_steps": INT,
}

PROGRAM = {
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

CHURN = {
    "duration_s": dur("how long the job ran."), "seed": INT, "ranks": INT, "final_world": d(INT, "Ranks at the end."),
    "steps_completed": INT, "steps_lost": d(INT, "Started steps run again after failures."),
    "recovery_s": dur("summed over failures: from the fault to the first step completed after the job re-formed."),
    "rejoin_s": dur("summed over rejoins: from the admission to the first step completed with the newcomers."),
    "failures": INT, "rejoins": INT,
    "divergence": d(nullable({"type": "object"}), "State parity: divergent step states and mismatched copies."),
    "epochs": arr(RECOVERY, "One record per re-formed epoch (policy rejoin: a growth)."),
    "events": arr(FAULT, "The seeded faults and their outcomes."),
}

TYPES = {"collective": COLLECTIVE, "traffic": TRAFFIC, "connectivity": CONNECTIVITY,
         "training_iteration": TRAINING, "offload": OFFLOAD, "program": PROGRAM, "churn": CHURN}


def workload() -> dict:
    """A workload record: the common keys, then its type's (open: a type may add keys within 1.x)."""
    cases = [{"if": {"properties": {"type": {"const": t}}},
              "then": {"properties": props}} for t, props in TYPES.items()]
    return {"type": "object", "properties": {**WORKLOAD_COMMON, "type": {"enum": list(TYPES)}},
            "required": ["name", "type", "ok", "started_s", "wall_s", "cpu_bound"], "allOf": cases}


def schema() -> dict:
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
