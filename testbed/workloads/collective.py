"""Workload `collective`: one rank per GPU host, a size sweep of one operation and algorithm, measured
like nccl-tests (time, algbw, busbw) against the analytical bound of the configured link rates.

Ranks are the GPU hosts in order s0g0, s0g1, ..., s1g0, ... (server-major). Every size is a separate
launch, so each row's `fabric_bytes` is the switch counters' sum over that size alone.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time

from hosts.collectives import benchmark
from hosts.collectives.algorithms import ALGOS
from hosts.spec.rank import CollectiveRankSpec
from testbed.fabric import hb_counters, pfc
from testbed.model import bounds
from testbed.faults import gpus, returns
from testbed.runtime import exits, multicast_ready, pace, progress, rank_hosts, recovery
from testbed.runtime.launch import run_on_hosts
from testbed.scenario.schema import NAME, SIZE, ScenarioError
from testbed.workloads import collective_phases, collective_rows, rank_setup, state_parity
from testbed.workloads.collective_fabric import HIERARCHICAL, check_paths, cluster, itemsize, model_algo, \
    multicast_scope, ran_bytes, ranks, sizes
from testbed.workloads.collective_report import (  # noqa: F401 (its part of the report)
    RECOVERY, RESULT_SCHEMA, comparable, headline, report_plots, report_section, report_table)
from testbed.workloads.collective_rows import row, summarize, table_header, table_row

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
                                "retransmission. IGMP membership reports are spared (a lost one would leave a "
                                "multicast tree without its member)."},
        "congestion": {"enum": ["delay", "dcqcn", "none"], "default": "none",
                       "description": "delay: delay-based congestion control in the transport (Swift-like); dcqcn: "
                                      "DCQCN (ECN marks answered with CNPs; the switches mark with fabric.ecn), its "
                                      "timers and rates scaled by fabric.time_scale. uroce only: kernel rxe has "
                                      "neither."},
        "retransmit_timeout": {"enum": ["adaptive", "fixed"], "default": "adaptive",
                               "description": "adaptive: each queue pair's timeout follows its measured round trip "
                                              "(RFC 6298), up to the fixed one; fixed: sized for full queues on the "
                                              "path, as rxe's timeout attribute."},
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
        "ranks_per_process": {"type": "integer", "minimum": 1, "maximum": 64, "default": 1,
                              "description": "Ranks that share one process, a thread each in its own GPU host's "
                                             "network namespace: a large job starts on less CPU, but its ranks "
                                             "take turns at the process's interpreter lock, so its timings are "
                                             "not a process per rank's (docs/collectives.md). Namespace hosts on "
                                             "one machine, and no GPU faults (they signal a rank's process)."},
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


def validate(fabric, spec: dict, scenario: dict | None = None) -> None:
    if spec["algo"] not in ALGOS[spec["op"]]:
        raise ScenarioError(f"{spec['op']} has no algorithm {spec['algo']!r}; choose one of "
                            f"{', '.join(ALGOS[spec['op']])}")
    if model_algo(fabric, spec) in HIERARCHICAL and fabric.params.servers * \
            fabric.params.gpus_per_server != len(fabric.gpus()):
        raise ScenarioError("hierarchical algorithms need whole servers")
    check_paths(fabric, spec)
    sizes(spec)
    if "max_tree_ratio" in spec.get("expect", {}) and spec["algo"] != "multicast":
        raise ScenarioError(f"expect.max_tree_ratio is a check of algo multicast, not {spec['algo']}")
    policy, beat = spec.get("recovery", "abort"), spec.get("heartbeat", {})
    if policy == "spare" and not fabric.params.spares_per_server:
        raise ScenarioError("recovery spare needs spare GPUs in the HB domains: set fabric.spares_per_server")
    if policy == "migrate" and not fabric.params.spare_servers:
        raise ScenarioError("recovery migrate needs spare servers: set fabric.spare_servers")
    if policy in ("spare", "migrate") and (scenario or {}).get("machines"):
        # a spare's fibre is moved between switch ports, which a VXLAN tunnel to another machine cannot follow
        raise ScenarioError(f"recovery {policy} does not work across machines yet; use shrink (or no machines:)")
    if spec.get("ranks_per_process", 1) > 1:
        refuse_shared_processes(scenario or {})
    if spec.get("state") and (spec["op"] != "allreduce" or spec.get("dtype", "float32") != "float32"):
        raise ScenarioError("state needs op allreduce with dtype float32 (its sums are exact)")
    if beat and beat.get("period_s", 0.15) >= beat.get("timeout_s", 1.0):
        raise ScenarioError(f"heartbeat period_s {beat.get('period_s', 0.15)} must be shorter than its "
                            f"timeout_s {beat.get('timeout_s', 1.0)}")


# what signals a rank's process (testbed/faults/signals.py), or starts a crashed GPU's again, and so cannot strike
# one rank of several in a process
PROCESS_FAULTS = {k.name for k in gpus.KINDS} | {k.name for k in returns.KINDS if not k.mend}


def refuse_shared_processes(scenario: dict) -> None:
    """ranks_per_process above 1 runs ranks as threads of a shared process on this machine's namespace hosts:
    what needs a process per rank refuses it, naming itself."""
    if scenario.get("hosts", "netns") != "netns":
        raise ScenarioError("ranks_per_process needs namespace hosts (hosts: netns): a container runs its own ranks")
    if scenario.get("machines"):
        raise ScenarioError("ranks_per_process does not work across machines yet; leave it at 1 (or no machines:)")
    kinds = sorted({f.get("kind") for f in scenario.get("faults", [])} & PROCESS_FAULTS)
    if kinds:
        raise ScenarioError(f"ranks_per_process: the faults {', '.join(kinds)} strike a GPU's own rank process; "
                            f"leave ranks_per_process at 1 with them")


def warnings(fabric, spec: dict) -> list[str]:
    """A size that is not whole elements (per rank, for allgather and alltoall) runs rounded: say so."""
    world = len(ranks(fabric))
    out = []
    for size in sizes(spec):
        ran = ran_bytes(spec["op"], size, itemsize(spec), world)
        if ran != size:
            per = f" per rank of {world}" if spec["op"] in ("allgather", "alltoall") else ""
            out.append(f"size {size} B is not a whole number of {spec.get('dtype', 'float32')} elements{per}: "
                       f"{ran} B will run (and be reported)")
    return out


def random_loss(net, hosts, probability: float, on: bool) -> int:
    """Drop outgoing packets at random in every rank's namespace (there is no netem here): on adds a rule per
    interface; off reads how many packets the rules dropped, removes them and returns that count. A rule that
    does not go in is an error: the run would measure no loss at all. IGMP is spared: the loss exercises the
    transport's repair, and a membership report it took would leave a multicast tree without its member (the
    fabric has no querier to ask again) until the ranks gave up waiting for it."""
    dropped = 0
    for h in hosts:
        node = net.host(h.name)
        if not on:                          # the rules' packet counters, the first column of a verbose listing
            dropped += sum(int(line.split()[0]) for line in node.cmd("iptables -w -L OUTPUT -v -n -x").splitlines()
                           if "statistic mode random" in line and "DROP" in line)
        for dev in ("eth0", "eth1"):
            said = node.cmd(f"iptables -w {'-A' if on else '-D'} OUTPUT -o {dev} ! -p igmp -m statistic --mode random "
                            f"--probability {probability} -j DROP; echo tb-iptables=$?")
            if on and "tb-iptables=0" not in said:
                raise RuntimeError(f"{h.name}: the random-loss rule on {dev} did not go in: {said.strip()}")
    return dropped


def run(net, spec: dict) -> dict:
    fabric = net.fabric
    validate(fabric, spec)
    hosts = ranks(fabric)
    loss = spec.get("loss", 0)
    if not loss:
        return _run(net, spec, hosts)
    try:
        random_loss(net, hosts, loss, on=True)
        result = _run(net, spec, hosts)
    finally:                                  # also the rules that went in before one failed
        dropped = random_loss(net, hosts, loss, on=False)
    return {**result, "loss_dropped_packets": dropped}


def _run(net, spec: dict, hosts: list) -> dict:
    fabric = net.fabric
    peers = rank_setup.peers(hosts)
    policy = spec.get("recovery", "abort")
    rows, errors, error_times, recoveries, beats, timed = [], [], [], [], [], []
    sweep = _Sweep(fabric, spec, len(hosts))
    for size in sweep.sizes:
        sweep.starting(size)
        label = f"{spec['op']}-{spec['algo']}-{size}-{time.monotonic_ns()}"
        store = os.path.join(net.run_dir, "store", label)
        os.makedirs(store)
        base = _base_spec(net, spec, peers, store, size)
        commands, on_exit = rank_commands(store, base, hosts), exits.reporter(store)
        per_process = spec.get("ranks_per_process", 1)
        if per_process > 1:          # several ranks a process (rank_hosts.py); split back into one result per rank
            commands, members = rank_hosts.commands(net, commands, per_process)
            on_exit = rank_hosts.on_exit(on_exit, members)
        # Worst case: every iteration at 1/4 of the bound, plus start-up and the collective's own timeout.
        budget = (spec.get("iterations", 3) + spec.get("warmup", 1)) * \
            4 * bounds.time_model(spec["op"], model_algo(fabric, spec), size, cluster(fabric)) + spec.get("timeout_s", 60) + 30
        manager = recovery.JobManager(net, base, store, [p.entry() for p in peers],
                                      budget).start() if policy != "abort" else None
        before, hb_before, pfc_before = net.counters(), hb_counters.read(fabric), net.pfc_totals()
        trees = multicast_ready.TreesReady(net, store).start() if base.multicast_trees_confirmed else None
        try:
            out, failed = run_on_hosts(net, commands, timeout=budget, partial=True, on_exit=on_exit)
            if per_process > 1:
                out, failed = rank_hosts.split(out, failed, members)
                rank_hosts.keep(net, out)
        finally:
            if trees is not None:
                trees.stop()
            if manager is not None:
                manager.stop()
                out.update(manager.outputs)
                failed += manager.errors
            after, hb_after, pfc_after = net.counters(), hb_counters.read(fabric), net.pfc_totals()
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
        rows.append(row(fabric, spec, size, done, before, after, hb_counters.growth(hb_before, hb_after),
                        pfc.growth(pfc_before, pfc_after)))
        timed += timed_windows(done)
        if spec.get("state"):          # every rank's shared state, bit for bit against numpy's
            parity = rows[-1]["state"] = state_parity.check(done, done[0]["count"])
            rows[-1]["correct"] &= parity["ranks"] == len(done) and not parity["divergent"] \
                and not parity["sync_mismatches"]
        sweep.measured(rows[-1])
    return {**_summarize_run(spec, len(hosts), rows, errors, error_times, recoveries, beats), "timed_windows": timed}


def timed_windows(outs: list[dict]) -> list[list[float]]:
    """Each measured step's wall-clock window, from the first rank in to the last one out (the fidelity guard
    judges these: the ranks' start-up and tear-down are not what the figures time)."""
    steps = [o.get("windows") or [] for o in outs]
    out = []
    for i in range(min(map(len, steps), default=0)):
        spans = [w[i] for w in steps if w[i] is not None]
        if spans:
            out.append([min(a for a, _ in spans), max(b for _, b in spans)])
    return out


class _Sweep:
    """Reports the sweep as it goes (testbed/runtime/progress.py): each size as it starts, its nccl-tests row
    as soon as it is measured. Sizes are weighted by the analytical model's time (plus start-up) for the ETA."""

    def __init__(self, fabric, spec: dict, world: int):
        self.report, self.spec, self.world = progress.current(), spec, world
        self.sizes = sizes(spec)
        runs = spec.get("iterations", 3) + spec.get("warmup", 1)
        self.weights = [runs * bounds.time_model(spec["op"], model_algo(fabric, spec), size, cluster(fabric)) + 2.0
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


def rank_commands(store: str, base: CollectiveRankSpec, hosts) -> dict[str, list[str]]:
    """Every rank's spec file in the job's store (the base spec and its rank), and the command that runs it."""
    commands = {}
    for r, h in enumerate(hosts):
        path = os.path.join(store, f"rank{r}.json")
        dataclasses.replace(base, rank=r).save(path)
        commands[h.name] = ["hosts.agents.collective_rank", path]
    benchmark.save_reduced(base, len(commands))       # made once here rather than once per rank
    return commands


def _base_spec(net, spec: dict, peers: tuple, store: str, size: int) -> CollectiveRankSpec:
    """What every rank of one size's launch is told (rank 0's spec: rank_commands numbers each host's)."""
    fabric = net.fabric
    beat = spec.get("heartbeat", {})
    return CollectiveRankSpec(
        rank=0, peers=tuple(peers), store=store, op=spec["op"], algo=spec["algo"], bytes=size,
        dtype=spec.get("dtype", "float32"), reduce=spec.get("reduce", "sum"), root=spec.get("root", 0),
        iterations=spec.get("iterations", 3), warmup=spec.get("warmup", 1), check=spec.get("check", True),
        recovery=spec.get("recovery", "abort"), heartbeat=pace.heartbeat(beat) if beat is not False else False,
        admit=spec.get("recovery", "abort") != "abort", state=bool(spec.get("state")),
        timeout_s=spec.get("timeout_s", 60), **rank_setup.transport(fabric, net.routing),
        ring="rank" if spec.get("ring") == "rank" else "rail",
        multicast_scope=multicast_scope(fabric, spec),
        multicast_trees_confirmed=spec["algo"] == "multicast",     # testbed/runtime/multicast_ready.py
        multicast_hold_s=multicast_ready.HOLD_S if spec["algo"] == "multicast" else 0,
        # opt-in congestion control: delay-based (hosts/rdma/cc.py) or DCQCN (hosts/rdma/dcqcn.py)
        congestion=None if spec.get("congestion", "none") == "none" else spec["congestion"],
        time_scale=fabric.params.time_scale,
        rc_rto=spec.get("retransmit_timeout", "adaptive"),
        **collective_phases.rank_options(spec, size, cluster(fabric)))


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


summary = collective_rows.summary          # this workload's summary line and tables (testbed.workloads.Workload)
tables = collective_rows.tables


def start_line(spec: dict) -> str:
    if "algo" in spec:
        return f"collective {spec.get('op')}/{spec['algo']}"
    return " ".join(["collective"] + ([str(spec["op"])] if "op" in spec else []))
