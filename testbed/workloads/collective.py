"""Workload `collective`: one rank per GPU host, a size sweep of one operation and algorithm, measured
like nccl-tests (time, algbw, busbw) against the analytical bound of the configured link rates.

Ranks are the GPU hosts in order s0g0, s0g1, ..., s1g0, ... (server-major). Every size is a separate
launch, so each row's `fabric_bytes` is the switch counters' sum over that size alone.
"""
from __future__ import annotations

import json
import os
import shutil
import time

from hosts.collectives.algorithms import ALGOS
from hosts.collectives.benchmark import elements
from hosts.collectives.comm import rail_order
from hosts.collectives.membership import peer_entry
from testbed.fabric import hb_counters, ovs
from testbed.fabric.links import transport_options, worst_queueing_delay
from testbed.results import models, multicast_minimum
from testbed.runtime import progress, recovery
from testbed.runtime.launch import run_on_hosts
from testbed.schema import NAME, SIZE, ScenarioError, parse_size
from testbed.workloads import collective_phases, state_parity, traffic

# This workload's part of the scenario schema (the scenario file's `workloads:` items of its type).
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type", "op", "algo"],
    "description": "A collective (allreduce, allgather, ...) on one rank per GPU host, swept over sizes and "
                   "measured like nccl-tests (time, algbw, busbw) against the link-rate bound.",
    "properties": {
        "type": {"const": "collective", "description": "A collective benchmark."}, "name": NAME,
        "op": {"enum": list(ALGOS), "description": "The collective operation."},
        "algo": {"type": "string", "examples": sorted({a for algos in ALGOS.values() for a in algos}),
                 "description": "The algorithm; by op: " + "; ".join(f"{op}: {', '.join(a)}" for op, a in ALGOS.items())
                 + ". hierarchical, hierarchical-pipelined (its phases overlapped) and two-step go through the HB "
                 "domain first (rail-only has no cross-rail path)."},
        "sizes": {"type": "array", "minItems": 1, "items": SIZE,
                  "description": "Message sizes (4096, 64KiB, 1MiB, 10MB), each a separate launch. "
                                 "Default: the sweep, else 1MiB."},
        "sweep": {"type": "object", "additionalProperties": False, "required": ["min", "max"],
                  "description": "Sizes from min to max, times factor each step (used when sizes is absent). "
                                 "Default: none.",
                  "properties": {"min": {**SIZE, "description": "The first size."},
                                 "max": {**SIZE, "description": "The largest size."},
                                 "factor": {"type": "integer", "minimum": 2, "default": 2,
                                            "description": "Each size is the previous one times this."}}},
        "dtype": {"enum": ["float32", "float16"], "default": "float32", "description": "The element type."},
        "reduce": {"enum": ["sum", "max"], "default": "sum", "description": "The reduction (allreduce, "
                   "reduce_scatter)."},
        "root": {"type": "integer", "minimum": 0, "default": 0, "description": "The root rank (broadcast)."},
        "iterations": {"type": "integer", "minimum": 1, "maximum": 100, "default": 3,
                       "description": "Measured iterations per size; a row reports their mean."},
        "warmup": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1,
                   "description": "Unmeasured iterations before them."},
        "check": {"type": "boolean", "default": True, "description": "Check every rank's result against numpy's."},
        "timeout_s": {"type": "number", "minimum": 1, "maximum": 3600, "default": 60,
                      "description": "Seconds a rank waits on its peers before the collective fails."},
        "loss": {"type": "number", "minimum": 0, "maximum": 0.5, "default": 0,
                 "description": "Probability that a rank drops each packet it sends (iptables), to exercise "
                                "retransmission."},
        "congestion": {"enum": ["delay", "none"], "default": "none",
                       "description": "delay: delay-based congestion control in the transport (Swift-like)."},
        "ring": {"enum": ["rail", "rank"], "default": "rail",
                 "description": "The ring's order: rail (rail-aware: down each rail, across the HB domain) or "
                                "rank (rank order, whose server-crossing hops use the spines)."},
        "recovery": {"enum": ["abort", "shrink", "spare", "migrate"], "default": "abort",
                     "description": "After a GPU failure: abort (the workload fails), shrink (the survivors go "
                                    "on), spare (a spare GPU of the HB domain takes over; fabric.spares_per_server) "
                                    "or migrate (a spare server takes over; fabric.spare_servers)."},
        "state": {"type": "boolean", "default": False,
                  "description": "allreduce: keep a shared state (the sum of every step's result) on every rank, "
                                 "copied over the network to a rank that joins (a spare, a restarted GPU) and checked "
                                 "bit for bit against numpy's and across the ranks."},
        "heartbeat": {"anyOf": [{"const": False}, {     # false: detection by transport timeouts only
            "type": "object", "additionalProperties": False,
            "properties": {"period_s": {"type": "number", "minimum": 0.01, "maximum": 5, "default": 0.15,
                                        "description": "Seconds between a rank's heartbeats."},
                           "timeout_s": {"type": "number", "minimum": 0.1, "maximum": 60, "default": 1.0,
                                         "description": "A peer silent this long is failed."},
                           "stall_s": {"type": "number", "minimum": 0.2, "maximum": 600, "default": 2.0,
                                       "description": "The progress watchdog's bound: a peer that beats but has "
                                                      "not progressed this long is stalled."}}}],
                      "default": {}, "description": "Failure detection by heartbeats over the network; false: "
                                                    "by transport timeouts only."},
        "multicast_scope": {"enum": ["fabric", "rail"], "default": "fabric",
                            "description": "algo multicast: replicate across the fabric, or in each rail and then "
                                           "the HB domain (always rail on rail-only)."},
        "expect": {"type": "object", "additionalProperties": False, "default": {},
                   "description": "Checks on the figures.",
                   "properties": {"min_bus_ratio": {"type": "number", "minimum": 0,
                                                    "description": "Fail if any size's busbw / bound is lower. "
                                                                   "Default: no such check."},
                                  "max_tree_ratio": {"type": "number", "minimum": 1,
                                                     "description": "algo multicast: fail if any size's network "
                                                                    "bytes (NIC sends + switch egress) exceed this "
                                                                    "many times the minimal trees' bytes. Default: "
                                                                    "no such check."}}},
    },
}
PACE = 0.97
ALL_PAIRS = {"rhd", "rd", "direct"}            # algorithms that may pair any two ranks
HIERARCHICAL = ("hierarchical", "hierarchical-pipelined", "two-step")   # HB domain first: no cross-rail path


def ranks(fabric) -> list:
    return sorted(fabric.gpus(), key=lambda h: (h.server, h.rank))


def sizes(spec: dict) -> list[int]:
    if "sizes" in spec:
        return [parse_size(s) for s in spec["sizes"]]
    sweep = spec.get("sweep", {"min": "1MiB", "max": "1MiB", "factor": 2})
    lo, hi, f = parse_size(sweep["min"]), parse_size(sweep["max"]), sweep.get("factor", 2)
    if lo > hi or f < 2:
        raise ScenarioError("collective sweep needs min <= max and factor >= 2")
    out = []
    while lo <= hi:
        out.append(lo)
        lo *= f
    return out


def rail_ring(hosts) -> list:
    """The ranks' rail ring (hosts.collectives.comm.rail_order) on the fabric's hosts, for the path check."""
    return [hosts[i] for i in rail_order([(h.server, h.rank) for h in hosts])]


def check_paths(fabric, spec: dict) -> None:
    """Refuse an algorithm that needs a pair of GPUs the fabric does not connect (rail-only)."""
    hosts = ranks(fabric)
    algo = spec["algo"]
    if algo in HIERARCHICAL:
        return
    if algo == "multicast" and multicast_scope(fabric, spec) == "rail":
        if spec["op"] == "broadcast" and fabric.kind == "rail-only":
            raise ScenarioError("broadcast/multicast needs multicast across rails, which a rail-only fabric "
                                "does not have; use algo chain")
        if spec["op"] == "allgather":
            return                          # multicast inside each rail, then the HB domain
    if algo in ALL_PAIRS:
        pairs = [(a, b) for a in hosts for b in hosts if a is not b]
    else:
        ring = hosts if spec.get("ring") == "rank" else rail_ring(hosts)
        pairs = list(zip(ring, ring[1:] + ring[:1]))
    for a, b in pairs:
        if a.server != b.server and not fabric.nic_reachable(a, b):
            hint = "hierarchical" if spec["op"] in ("allreduce", "allgather") else "two-step"
            raise ScenarioError(f"{spec['op']}/{algo} needs a path between {a.name} and {b.name}, which a "
                                f"{fabric.kind} fabric does not have; use algo {hint}")


def multicast_scope(fabric, spec: dict | None = None) -> str:
    """Where multicast AllGather replicates: over the whole fabric, or per rail followed by the HB
    domain ("rail", forced on rail-only fabrics, which have no path between rails)."""
    return "rail" if fabric.kind == "rail-only" else (spec or {}).get("multicast_scope", "fabric")


def model_algo(fabric, spec: dict) -> str:
    """The analytical model for an algorithm: multicast is receive-bound like a ring, or hierarchical."""
    if spec["algo"] == "multicast" and multicast_scope(fabric, spec) == "rail":
        return "hierarchical"
    return spec["algo"]


def validate(fabric, spec: dict, scenario: dict | None = None) -> None:
    if spec["algo"] not in ALGOS[spec["op"]]:
        raise ScenarioError(f"{spec['op']} has no algorithm {spec['algo']!r}; choose one of "
                            f"{', '.join(ALGOS[spec['op']])}")
    if model_algo(fabric, spec) in HIERARCHICAL and fabric.params["servers"] * \
            fabric.params["gpus_per_server"] != len(fabric.gpus()):
        raise ScenarioError("hierarchical algorithms need whole servers")
    check_paths(fabric, spec)
    sizes(spec)
    if "max_tree_ratio" in spec.get("expect", {}) and spec["algo"] != "multicast":
        raise ScenarioError(f"expect.max_tree_ratio is a check of algo multicast, not {spec['algo']}")
    policy, beat = spec.get("recovery", "abort"), spec.get("heartbeat", {})
    if policy == "spare" and not fabric.params.get("spares_per_server"):
        raise ScenarioError("recovery spare needs spare GPUs in the HB domains: set fabric.spares_per_server")
    if policy == "migrate" and not fabric.params.get("spare_servers"):
        raise ScenarioError("recovery migrate needs spare servers: set fabric.spare_servers")
    if spec.get("state") and (spec["op"] != "allreduce" or spec.get("dtype", "float32") != "float32"):
        raise ScenarioError("state needs op allreduce with dtype float32 (its sums are exact)")
    if beat and beat.get("period_s", 0.15) >= beat.get("timeout_s", 1.0):
        raise ScenarioError(f"heartbeat period_s {beat.get('period_s', 0.15)} must be shorter than its "
                            f"timeout_s {beat.get('timeout_s', 1.0)}")


def ran_bytes(op: str, size: int, itemsize: int, world: int) -> int:
    """The bytes a collective of `size` really moves: whole elements, split evenly where the op splits."""
    return elements(op, size, itemsize, world) * itemsize * (world if op == "allgather" else 1)


def warnings(fabric, spec: dict) -> list[str]:
    """A size that is not whole elements (per rank, for allgather and alltoall) runs rounded: say so."""
    itemsize, world = (2 if spec.get("dtype") == "float16" else 4), len(ranks(fabric))
    out = []
    for size in sizes(spec):
        ran = ran_bytes(spec["op"], size, itemsize, world)
        if ran != size:
            per = f" per rank of {world}" if spec["op"] in ("allgather", "alltoall") else ""
            out.append(f"size {size} B is not a whole number of {spec.get('dtype', 'float32')} elements{per}: "
                       f"{ran} B will run (and be reported)")
    return out


def cluster(fabric) -> models.Cluster:
    p = fabric.params
    return models.Cluster(x=p["gpus_per_server"], y=p["servers"], c_s=p["nic_mbps"] * 1e6 / 8,
                          c_f=p["hb_mbps"] * 1e6 / 8)


def random_loss(net, hosts, probability: float, on: bool) -> None:
    """Drop outgoing packets at random in every rank's namespace (there is no netem here)."""
    action = "-A" if on else "-D"
    for h in hosts:
        for dev in ("eth0", "eth1"):
            net.host(h.name).cmd(f"iptables {action} OUTPUT -o {dev} -m statistic --mode random "
                                 f"--probability {probability} -j DROP")


def run(net, spec: dict) -> dict:
    fabric = net.fabric
    validate(fabric, spec)
    hosts = ranks(fabric)
    loss = spec.get("loss", 0)
    if loss:
        random_loss(net, hosts, loss, on=True)
    try:
        return _run(net, spec, hosts)
    finally:
        if loss:
            random_loss(net, hosts, loss, on=False)


def _run(net, spec: dict, hosts: list) -> dict:
    fabric = net.fabric
    peers = [peer_entry(r, h.name, h.ip, h.hb_ip, h.server, h.rank) for r, h in enumerate(hosts)]
    policy = spec.get("recovery", "abort")
    rows, errors, error_times, recoveries, beats = [], [], [], [], []
    sweep = _Sweep(fabric, spec, len(hosts))
    for size in sweep.sizes:
        sweep.starting(size)
        label = f"{spec['op']}-{spec['algo']}-{size}-{time.monotonic_ns()}"
        store = os.path.join(net.run_dir, "store", label)
        os.makedirs(store)
        base = _base_spec(net, spec, peers, store, size)
        commands = rank_commands(store, base, hosts)
        # Worst case: every iteration at 1/4 of the bound, plus start-up and the collective's own timeout.
        budget = (spec.get("iterations", 3) + spec.get("warmup", 1)) * \
            4 * models.time_model(spec["op"], model_algo(fabric, spec), size, cluster(fabric)) + spec.get("timeout_s", 60) + 30
        manager = recovery.JobManager(net, base, store, [{k: v for k, v in p.items() if k != "rank"} for p in peers],
                                      budget).start() if policy != "abort" else None
        before, hb_before = net.counters(), hb_counters.read(fabric)
        try:
            out, failed = run_on_hosts(net, commands, timeout=budget, partial=True)
        finally:
            if manager is not None:
                manager.stop()
                out.update(manager.outputs)
                failed += manager.errors
            after, hb_after = net.counters(), hb_counters.read(fabric)
            shutil.rmtree(store, ignore_errors=True)
        fenced = manager.fenced if manager is not None else set()
        done = [o for o in out.values() if "times" in o]
        epochs = recovery_records(out.values(), policy, manager)
        recoveries += epochs
        error_times += [o["error_at"] for o in out.values() if "error_at" in o] + \
            [r["detected_at"] for r in epochs if r["detected_at"]]
        beats += [o["heartbeat"] for o in out.values() if o.get("heartbeat")]
        # ranks lost to a GPU failure are no error if the job re-formed without them and finished
        failed = [e for e in failed if e.split(":", 1)[0] not in fenced] + \
            [o["error"] for o in out.values() if "error" in o and o.get("host") not in fenced]
        world = done[0].get("world", len(hosts)) if done else len(hosts)
        if not failed and len(done) < world:
            failed.append(f"only {len(done)} of the {world} ranks of the last epoch finished")
        if failed:
            errors.append(f"{size} B: " + "; ".join(failed[:4]) + (f" (+{len(failed) - 4} more)" if len(failed) > 4 else ""))
            break
        rows.append(row(fabric, spec, size, done, before, after, hb_counters.growth(hb_before, hb_after)))
        if spec.get("state"):          # every rank's shared state, bit for bit against numpy's
            parity = rows[-1]["state"] = state_parity.check(done, done[0]["count"])
            rows[-1]["correct"] &= parity["ranks"] == len(done) and not parity["divergent"] \
                and not parity["sync_mismatches"]
        sweep.measured(rows[-1])
    return _summarize_run(spec, len(hosts), rows, errors, error_times, recoveries, beats)


class _Sweep:
    """Reports the sweep as it goes (testbed/runtime/progress.py): each size as it starts, its nccl-tests row
    as soon as it is measured. Sizes are weighted by the analytical model's time (plus start-up) for the ETA."""

    def __init__(self, fabric, spec: dict, world: int):
        self.report, self.spec, self.world = progress.current(), spec, world
        self.sizes = sizes(spec)
        runs = spec.get("iterations", 3) + spec.get("warmup", 1)
        self.weights = [runs * models.time_model(spec["op"], model_algo(fabric, spec), size, cluster(fabric)) + 2.0
                        for size in self.sizes]
        self.done = 0

    def starting(self, size: int) -> None:
        frac = sum(self.weights[:self.done]) / sum(self.weights)
        self.report.step(self.done, len(self.sizes), f"size {self.done + 1}/{len(self.sizes)} ({size} B)", frac=frac)

    def measured(self, r: dict) -> None:
        self.done += 1
        self.report.row(table_row(r), header=table_header(self.spec["op"], self.spec["algo"], self.world))
        self.report.step(self.done, len(self.sizes), f"{self.done}/{len(self.sizes)} sizes done",
                         frac=sum(self.weights[:self.done]) / sum(self.weights))


def rank_commands(store: str, base: dict, hosts) -> dict[str, list[str]]:
    """Every rank's spec file in the job's store (the base spec and its rank), and the command that runs it."""
    commands = {}
    for r, h in enumerate(hosts):
        path = os.path.join(store, f"rank{r}.json")
        with open(path, "w") as f:
            json.dump({**base, "rank": r}, f)
        commands[h.name] = ["hosts.agents.collective_rank", path]
    return commands


def _base_spec(net, spec: dict, peers: list[dict], store: str, size: int) -> dict:
    """What every rank of one size's launch is told (its own rank added per host)."""
    fabric = net.fabric
    return {"peers": peers, "store": store, "op": spec["op"], "algo": spec["algo"],
            "bytes": size, "dtype": spec.get("dtype", "float32"), "reduce": spec.get("reduce", "sum"),
            "root": spec.get("root", 0), "iterations": spec.get("iterations", 3),
            "warmup": spec.get("warmup", 1), "check": spec.get("check", True), "recovery": spec.get("recovery", "abort"),
            "heartbeat": spec.get("heartbeat", {}),
            "admit": spec.get("recovery", "abort") != "abort", "state": bool(spec.get("state")),
            "timeout_s": spec.get("timeout_s", 60), **transport_options(net.routing),
            "ring": "rank" if spec.get("ring") == "rank" else "rail",
            "multicast_scope": multicast_scope(fabric, spec),
            "rc_timeout": 0.05 + 2 * worst_queueing_delay(fabric),
            # opt-in delay-based congestion control (hosts/rdma/cc.py)
            "congestion": "delay" if spec.get("congestion", "none") == "delay" else None,
            # senders pace just below the shaped rates, so queues do not build up
            "rate_limit_bps": {"nic": PACE * fabric.params["nic_mbps"] * 1e6,
                               "hb": PACE * fabric.params["hb_mbps"] * 1e6},
            **collective_phases.rank_options(spec, size, cluster(fabric))}


def _summarize_run(spec: dict, world: int, rows: list, errors: list, error_times: list, recoveries: list,
                   beats: list) -> dict:
    result = summarize(spec, world, rows, errors)
    result["first_error_at"] = min(error_times) if error_times else None
    result["first_recovered_at"] = min((r["reformed_at"] for r in recoveries if r.get("reformed_at")), default=None)
    result["recoveries"] = recoveries
    if beats:        # the margin the heartbeats had: longest silence of a live peer, against the timeout
        result["heartbeat"] = {"period_s": beats[0]["period_s"], "timeout_s": beats[0]["timeout_s"],
                               "max_peer_silence_s": max(h["max_peer_silence_s"] for h in beats),
                               "max_own_gap_s": max(h["max_own_gap_s"] for h in beats)}
    return result


def recovery_records(outputs, policy: str, manager) -> list[dict]:
    """One record per re-formed epoch, from what the ranks reported (wall-clock times): detected (first
    rank to notice), decided (the verdict), re-formed (every member of the new epoch in), first success
    (the first collective after it completed on every member), and what the manager did."""
    by_epoch: dict[int, list[dict]] = {}
    for o in outputs:
        for r in o.get("recoveries", []) + ([o["joined"]] if "joined" in o else []):
            by_epoch.setdefault(r["epoch"], []).append(r)
    events = {e["epoch"]: e for e in manager.events} if manager is not None else {}
    records = []
    for epoch, rs in sorted(by_epoch.items()):
        first = [r["first_success_at"] for r in rs if r.get("first_success_at")]
        some = next((r for r in rs if r.get("failed") is not None), {})
        records.append({
            "epoch": epoch, "policy": "rejoin" if some.get("joined") and not some.get("failed") else policy,
            "failed": some.get("failed"), "replaced": some.get("replaced"),
            "world": some.get("world"), "lost_steps": some.get("lost_steps"),
            "detected_at": min((r["detected_at"] for r in rs if r.get("detected_at")), default=None),
            "detected_by": min(((r["detected_at"], r.get("detected_by")) for r in rs if r.get("detected_at")),
                               default=(None, None))[1],
            "decided_at": some.get("decided_at"),
            "reformed_at": min((r["reformed_at"] for r in rs if r.get("reformed_at")), default=None),
            "first_success_at": max(first) if first else None,
            "activation_s": events.get(epoch, {}).get("activation_s"),
            "joined": some.get("joined") or None,
            "error": next((r["error"] for r in rs if r.get("error")), None)})
    return records


def row(fabric, spec: dict, size: int, outs: list[dict], before: dict, after: dict, hb_bytes: int = 0) -> dict:
    n = outs[0].get("world", len(outs))
    iters = min(len(o["times"]) for o in outs)
    # an iteration takes as long as its slowest rank (of those that ran it: a spare joins late);
    # report the mean over iterations
    per_iter = [max(o["times"][i] for o in outs if o["times"][i] is not None) for i in range(iters)]
    seconds = sum(per_iter) / iters
    itemsize = 2 if spec.get("dtype") == "float16" else 4
    nbytes = outs[0]["count"] * itemsize * (n if spec["op"] == "allgather" else 1)
    algbw = nbytes / seconds / 1e6
    busbw = algbw * models.bus_factor(spec["op"], n)
    bound = models.bound_busbw(spec["op"], model_algo(fabric, spec), nbytes, cluster(fabric)) / 1e6
    counters = {}
    for o in outs:
        for k, v in o.get("counters", {}).items():
            counters[k] = counters.get(k, 0) + v
    return {"type": "collective", "op": spec["op"], "algo": spec["algo"], "ranks": n, "bytes": nbytes,
            "requested_bytes": size,
            "count": outs[0]["count"], "dtype": spec.get("dtype", "float32"), "seconds": round(seconds, 6),
            "algbw_MBps": round(algbw, 4), "busbw_MBps": round(busbw, 4), "bound_busbw_MBps": round(bound, 4),
            "bus_ratio": round(busbw / bound, 4), "correct": all(o["correct"] is not False for o in outs),
            "fabric_bytes": sum(ovs.growth(before, after, p) for p in after),
            "uplink_bytes": (up := traffic.uplink_bytes(fabric, before, after)),
            "uplink_imbalance": round(max(up.values()) / (sum(up.values()) / len(up)), 3)
            if up and sum(up.values()) else None,
            "out_of_order": counters.get("out_of_order", 0),
            "retransmits": counters.get("retransmits", 0),
            "send_nic_bytes": send_nic_bytes(fabric, before, after),
            "recovered_chunks": sum(o.get("recovered_chunks", 0) for o in outs),
            "drops": sum(v for k, v in counters.items() if k.startswith("drop")),
            "transport": {k: v for k, v in sorted(counters.items()) if v and not k.endswith(("packets", "bytes"))},
            **collective_phases.extra_fields(spec["op"], spec["algo"], nbytes, cluster(fabric), outs),
            **link_traffic(fabric, spec, outs, before, after, hb_bytes)}


def link_traffic(fabric, spec: dict, outs: list[dict], before: dict, after: dict, hb_bytes: int) -> dict:
    """Bytes on all links as SPCL counts them (NIC sends + switch egress, and the HB links' both ways),
    over the warm-up and measured iterations; multicast rows add the minimal trees' bytes for as many
    operations and the ratio of the network's bytes to them (1 = every shard once over each tree link)."""
    network = send_nic_bytes(fabric, before, after) + sum(ovs.growth(before, after, p) for p in after)
    out = {"hb_bytes": hb_bytes, "link_bytes": network + hb_bytes}
    hosts = [h.name for h in ranks(fabric)]
    n = outs[0].get("world", len(outs))
    if spec["algo"] != "multicast" or n != len(hosts):
        return out                          # a re-formed job has other members than the fabric's GPUs
    itemsize = 2 if spec.get("dtype") == "float16" else 4
    ops = spec.get("warmup", 1) + min(len(o["times"]) for o in outs)
    if spec["op"] == "allgather":
        per_op = multicast_minimum.allgather_minimum(fabric, hosts, outs[0]["count"] * itemsize,
                                                     multicast_scope(fabric, spec))
    else:
        per_op = multicast_minimum.broadcast_minimum(fabric, hosts, hosts[spec.get("root", 0)],
                                                     outs[0]["count"] * itemsize)
    out.update(tree_min_bytes=ops * per_op, tree_ratio=round(network / (ops * per_op), 4) if per_op else None)
    return out


def send_nic_bytes(fabric, before: dict, after: dict) -> int:
    """Bytes the GPUs' NICs sent: what the switches received on their GPU-facing ports."""
    ports = [f"{l.b}:{l.b_port}" if l.a in fabric.hosts else f"{l.a}:{l.a_port}"
             for l in fabric.links if l.kind == "nic"]
    return sum(after[p]["rx_bytes"] - before[p]["rx_bytes"] for p in ports if p in after)


def summarize(spec: dict, n: int, rows: list[dict], errors: list[str]) -> dict:
    checks = []
    if errors:
        checks.append({"name": "completed", "ok": False, "detail": errors[0]})
    wrong = [r["bytes"] for r in rows if not r["correct"]]
    if spec.get("check", True):
        checks.append({"name": "correct", "ok": not wrong and bool(rows),
                       "detail": f"{len(rows) - len(wrong)}/{len(rows)} sizes equal numpy's result on every rank"})
    ceiling = spec.get("expect", {}).get("max_tree_ratio")
    if ceiling is not None and rows:
        worst = max((r.get("tree_ratio") or 0 for r in rows), default=0)
        checks.append({"name": "tree_minimum", "ok": worst <= ceiling and all(r.get("tree_ratio") for r in rows),
                       "detail": f"network bytes / minimal trees' bytes <= {worst:.2f} (expected <= {ceiling})"})
    floor = spec.get("expect", {}).get("min_bus_ratio")
    if floor is not None and rows:
        worst = min(r["bus_ratio"] for r in rows)
        checks.append({"name": "busbw", "ok": worst >= floor,
                       "detail": f"busbw/bound >= {worst:.2f} (expected >= {floor})"})
    return {"type": "collective", "ok": all(c["ok"] for c in checks), "op": spec["op"], "algo": spec["algo"],
            "ranks": n, "rows": rows, "checks": checks}


def table(result: dict) -> str:
    """nccl-tests style rows."""
    return "\n".join([table_header(result["op"], result["algo"], result["ranks"])] +
                     [table_row(r) for r in result["rows"]])


def table_header(op: str, algo: str, ranks: int) -> str:
    return (f"#  {op} / {algo}, {ranks} ranks\n"
            f"# {'size':>10} {'count':>10} {'type':>8} {'time(us)':>12} {'algbw MB/s':>11} {'busbw MB/s':>11} "
            f"{'bound':>8} {'ratio':>6} {'check':>6}")


def table_row(r: dict) -> str:
    """One size's row (after a note if the size ran rounded)."""
    note = f"# note: {r['requested_bytes']} B asked, {r['bytes']} B ran (whole {r['dtype']} elements)\n" \
        if r.get("requested_bytes", r["bytes"]) != r["bytes"] else ""
    return (f"{note}  {r['bytes']:>10} {r['count']:>10} {r['dtype']:>8} {r['seconds'] * 1e6:>12.0f} "
            f"{r['algbw_MBps']:>11.3f} {r['busbw_MBps']:>11.3f} {r['bound_busbw_MBps']:>8.3f} "
            f"{r['bus_ratio']:>6.2f} {'ok' if r['correct'] else 'WRONG':>6}") + \
        (f"\n{phases}" if (phases := collective_phases.table_lines(r)) else "") + \
        (f"\n#   network {r['link_bytes'] - r['hb_bytes']} B, minimal trees {r['tree_min_bytes']} B, "
         f"ratio {r['tree_ratio']:.2f}" if r.get("tree_ratio") else "")


def summary(w: dict) -> str:
    best = max((r["bus_ratio"] for r in w["rows"]), default=0)
    what = f"{w['op']}/{w['algo']} on {w['ranks']} ranks, {len(w['rows'])} sizes, best busbw/bound {best:.2f}"
    trees = [r["tree_ratio"] for r in w["rows"] if r.get("tree_ratio")]
    if trees:                       # how close the multicast came to each shard once over each tree link
        what += f", network bytes / tree minimum {min(trees):.2f}" + (f"-{max(trees):.2f}" if len(trees) > 1 else "")
    rounded = [r for r in w["rows"] if r.get("requested_bytes", r["bytes"]) != r["bytes"]]
    if rounded:                     # what ran is not what was asked: say so where the figures are read
        what += "; ROUNDED: " + ", ".join(f"{r['requested_bytes']} B asked, {r['bytes']} B ran" for r in rounded)
    for rec in w.get("recoveries", []):
        if rec["policy"] == "rejoin":
            what += f"; {', '.join(rec['joined'])} rejoined" if rec.get("reformed_at") else "; a rejoin did not complete"
            continue
        what += (f"; recovered ({rec['policy']}) from the failure of {', '.join(rec['failed'] or ['?'])}"
                 if rec.get("reformed_at") else f"; {rec['policy']} recovery did not complete")
    return what


def tables(w: dict) -> list[str]:
    return [table(w)]
