"""Workload `traffic`: concurrent UDP, TCP or RoCEv2 flows between GPU hosts, measured per flow, with the
spread of bytes over the spine uplinks read from the switch counters.

Patterns (GPU hosts only):
  permutation  s{i}g{j} -> s{i+1}g{j+1} (next server, next rail: it crosses the spine layer);
               on rail-only, where rails are not connected, s{i}g{j} -> s{i+1}g{j} (same rail)
  all-to-all   every pair the network connects
  incast       every other host to one `target` (default: the first host), N-to-1
  pairs        an explicit list of [source, destination] host names
`load` paces each sender (UDP and TCP) at that fraction of its NIC rate, shared by its flows (elephants: a large
`size`).
protocol roce: the flows are RC SENDs of the project's RoCEv2 transport between the pattern's hosts, one rank each
(hosts/agents/roce_flows.py), paced the same way by their queue pairs, with `congestion` as a collective's; the
receivers check every byte.
"""
from __future__ import annotations

import os
import time

from hosts.spec.flows import FlowsSpec, Listen, Send
from hosts.spec.peers import Peer
from hosts.spec.rank import PortRates, RoceFlow, RoceFlowsRankSpec

from testbed.fabric import ovs, pfc
from testbed.fabric.links import transport_options
from testbed.runtime.launch import run_on_hosts
from testbed.scenario.schema import NAME, RATE, SIZE, ScenarioError, parse_size
from testbed.workloads import rank_setup
from testbed.schema_words import BYTES_BY_PORT, INT, NUM, STR, arr, d, dur, nullable, obj, rel

# This workload's part of the scenario schema (the scenario file's `workloads:` items of its type).
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type"],
    "description": "Concurrent UDP, TCP or RoCEv2 flows between GPU hosts, measured per flow, with the bytes each "
                   "spine uplink carried.",
    "properties": {
        "type": {"const": "traffic", "description": "Flows between GPU hosts."}, "name": NAME,
        "pattern": {"enum": ["permutation", "all-to-all", "incast", "pairs"], "default": "permutation",
                    "description": "permutation: s{i}g{j} -> s{i+1}g{j+1} (s{i+1}g{j} on rail-only); all-to-all: "
                                   "every pair the network connects; incast: every other host to `target`; "
                                   "pairs: the `pairs` list."},
        "target": {"type": "string", "description": "The receiver of pattern incast: one of the pattern's hosts "
                                                    "(a job's: its placement). Default: the first of them."},
        "pairs": {"type": "array", "minItems": 1,
                  "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
                  "description": "[source, destination] host names (pattern: pairs). Default: none."},
        "protocol": {"enum": ["udp", "tcp", "both", "roce"], "default": "udp",
                     "description": "The flows' transport. both: a UDP and a TCP flow per pair and flows_per_pair; "
                                    "roce: RC SENDs over RoCEv2 (UDP port 4791), a rank per host, data checked."},
        "congestion": {"enum": ["delay", "dcqcn", "none"], "default": "none",
                       "description": "protocol roce: the queue pairs' congestion control, as a collective's: delay "
                                      "(Swift-like) or dcqcn (ECN marks answered with CNPs; the switches mark with "
                                      "fabric.ecn)."},
        "size": {**SIZE, "default": "1MiB", "description": "Bytes per flow."},
        "flows_per_pair": {"type": "integer", "minimum": 1, "maximum": 64, "default": 1,
                           "description": "Flows per pair (and per protocol)."},
        "rate_mbps": {**RATE, "description": "UDP senders' pacing in Mbit/s. Default: 0.9 x nic_mbps / the "
                                             "busiest host's flow count."},
        "load": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
                 "description": "Offered load instead of rate_mbps: each sender paces its flows (UDP and TCP) at "
                                "this fraction of its NIC rate, shared between them. Default: none (rate_mbps)."},
        "expect": {
            "type": "object", "additionalProperties": False, "default": {},
            "description": "Checks on the figures.",
            "properties": {
                "max_loss": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.01,
                             "description": "The fraction of a UDP flow's bytes that may be lost."},
                "all_uplinks_used": {"type": "boolean", "description": "Whether every spine uplink must carry "
                                     ">= 10% of a fair share (true) or some must not (false). Default: no such check."},
                "uplinks_used": {"type": "integer", "minimum": 0, "description": "The number of uplinks that must "
                                 "carry >= 10% of a fair share. Default: no such check."},
            },
        },
    },
}

FLOW = obj({
    "flow": INT, "proto": {"enum": ["udp", "tcp", "roce"]}, "src": STR, "dst": STR, "bytes": d(INT, "Bytes received."),
    "expected_bytes": INT, "seconds": dur("the flow's transfer time."), "mbps": NUM,
    "lost_packets": nullable(INT), "error": nullable(STR), "reordered": nullable(INT),
    "max_gap_s": dur("the longest silence between two arrivals."),
    "gap_start_s": rel("when that longest silence began."),
    "silences": arr({"type": "array", "prefixItems": [rel("when it began."), dur("how long it lasted.")],
                     "items": False, "minItems": 2},
                    "Every silence of over 1.5 packet times: [start, length]."),
    "retransmits": d(nullable(INT), "roce: packets the flow's queue pair sent again."),
    "timeouts": d(nullable(INT), "roce: its queue pair's retransmission timeouts."),
    "correct": d(nullable({"type": "boolean"}), "roce: every byte received equals the byte sent."),
}, ["flow", "proto", "src", "dst", "bytes", "expected_bytes"], closed=False)

# Its keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {
    "pattern": STR, "protocol": STR, "flows": INT, "flow_bytes": INT, "rate_mbps": nullable(NUM),
    "load": d(nullable(NUM), "The offered load asked for (fraction of a sender's NIC rate)."),
    "mbps_min": NUM, "mbps_mean": NUM, "mbps_max": NUM, "delivered_bytes": INT,
    "max_gap_s": dur("the longest silence of any flow."), "lost_packets": INT, "reordered_packets": INT,
    "pfc_pauses": d(INT, "Pauses of the fabric's upstream ports while the flows ran (fabric.pfc; 0 without it)."),
    "pfc_paused_s": dur("the time the fabric's ports were paused, summed over the ports (fabric.pfc)."),
    "uplink_bytes": BYTES_BY_PORT, "uplinks_used": INT, "uplink_imbalance": d(nullable(NUM), "max / mean uplink."),
    "per_flow": arr(FLOW),
    "congestion": d(nullable(STR), "protocol roce: the queue pairs' congestion control (none: null)."),
    "retransmits": d(nullable(INT), "protocol roce: packets sent again, over all flows."),
    "ecn_marked_packets": d(nullable(INT), "protocol roce: CE-marked packets the receivers got (fabric.ecn)."),
    "cnp_received": d(nullable(INT), "protocol roce: CNPs the senders got (congestion: dcqcn)."),
    "data_exact": d(nullable({"type": "boolean"}), "protocol roce: every flow's bytes arrived as sent."),
}


LISTEN_BASE, SOURCE_BASE = 20000, 30000


def flow_pairs(fabric, spec: dict) -> list[tuple[str, str]]:
    pattern = spec.get("pattern", "permutation")
    gpus = fabric.gpus()
    if "target" in spec and pattern != "incast":
        raise ScenarioError(f"traffic target is for pattern incast, not {pattern!r}")
    if pattern == "incast":
        return incast_pairs(fabric, spec)
    if pattern == "pairs":
        pairs = [tuple(p) for p in spec["pairs"]]
        for src, dst in pairs:
            for h in (src, dst):
                if h not in fabric.hosts:
                    raise ScenarioError(f"traffic pair names unknown host {h!r}")
            if src == dst:
                raise ScenarioError(f"traffic pair {src}->{dst} sends to itself")
        return pairs
    by_server: dict[int, list] = {}
    for h in sorted(gpus, key=lambda h: (h.server, h.rank)):
        by_server.setdefault(h.server, []).append(h.name)
    servers = list(by_server.values())         # the GPUs' servers (all of them, or a job's: JobFabric)
    if len(servers) < 2:
        raise ScenarioError(f"traffic pattern {pattern!r} needs at least 2 servers")
    if pattern == "all-to-all":
        return [(a.name, b.name) for a in gpus for b in gpus if fabric.nic_reachable(a, b)]
    step = 1 if fabric.design.cross_rail else 0     # to the next rail where rails are joined
    n = len(servers)
    return [(src, servers[(i + 1) % n][(j + step) % len(servers[(i + 1) % n])])
            for i, names in enumerate(servers) for j, src in enumerate(names)]


def incast_pairs(fabric, spec: dict) -> list[tuple[str, str]]:
    """N-to-1: every other host (the job's, or all GPUs) that the network connects to the target sends to it."""
    names = [h.name for h in sorted(fabric.gpus(), key=lambda h: (h.server, h.rank))]
    if len(names) < 2:
        raise ScenarioError(f"traffic pattern 'incast' needs at least 2 hosts, has {len(names)}")
    target = spec.get("target", names[0])
    if target not in fabric.hosts:
        raise ScenarioError(f"traffic incast target names unknown host {target!r}")
    if target not in names:
        raise ScenarioError(f"traffic incast target {target!r} is not one of its GPUs ({', '.join(names)})")
    dst = fabric.hosts[target]
    pairs = [(n, target) for n in names if n != target and fabric.nic_reachable(fabric.hosts[n], dst)]
    if not pairs:
        raise ScenarioError(f"traffic incast: no other host reaches {target} (rails not joined)")
    return pairs


def plan_flows(fabric, spec: dict) -> list[dict]:
    size = parse_size(spec.get("size", "1MiB"))
    protos = {"udp": ["udp"], "tcp": ["tcp"], "both": ["udp", "tcp"], "roce": ["roce"]}[spec.get("protocol", "udp")]
    if spec.get("congestion", "none") != "none" and spec.get("protocol", "udp") != "roce":
        raise ScenarioError(f"traffic congestion is for protocol roce, not {spec.get('protocol', 'udp')}")
    per_pair = spec.get("flows_per_pair", 1)
    flows = []
    for src, dst in flow_pairs(fabric, spec):
        for proto in protos:
            for _ in range(per_pair):
                flows.append({"flow": len(flows), "proto": proto, "src": src, "dst": dst, "bytes": size})
    # UDP senders pace to a fair share of the busiest NIC, so the fabric, not the NIC queue, decides.
    fan = max(max(sum(f["src"] == h for f in flows), sum(f["dst"] == h for f in flows))
              for h in fabric.hosts)
    if "load" in spec and "rate_mbps" in spec:
        raise ScenarioError("traffic takes rate_mbps or load, not both")
    rate = spec.get("rate_mbps") or 0.9 * fabric.params.nic_mbps / fan
    for f in flows:
        # an offered load is the sender's: its NIC rate's fraction, shared by its flows
        f["rate_mbps"] = (spec["load"] * fabric.params.nic_mbps / sum(g["src"] == f["src"] for g in flows)
                          if "load" in spec else rate)
    return flows


def uplink_bytes(fabric, before: dict, after: dict) -> dict[str, int]:
    """Bytes carried by each leaf-spine link during the workload (both directions)."""
    out = {}
    for l in fabric.links:
        if l.kind != "uplink":
            continue
        a, b = f"{l.a}:{l.a_port}", f"{l.b}:{l.b_port}"
        out[f"{l.a}-{l.b}"] = sum(ovs.growth(before, after, p) for p in (a, b))
    return out


def run(net, spec: dict) -> dict:
    fabric = net.fabric
    flows = plan_flows(fabric, spec)
    if spec.get("protocol") == "roce":
        return run_roce(net, spec, flows)
    hosts = {f["src"] for f in flows} | {f["dst"] for f in flows}
    start_at = time.time() + 1.0 + 0.06 * len(hosts)
    longest = max(f["bytes"] * 8 / (f["rate_mbps"] * 1e6) for f in flows)
    deadline = start_at + 3 * longest + 10
    listen: dict[str, list[Listen]] = {h: [] for h in hosts}
    send: dict[str, list[Send]] = {h: [] for h in hosts}
    for f in flows:
        port = LISTEN_BASE + len(listen[f["dst"]])
        sport = SOURCE_BASE + len(send[f["src"]])
        listen[f["dst"]].append(Listen(flow=f["flow"], proto=f["proto"], port=port, bytes=f["bytes"],
                                       rate_mbps=f["rate_mbps"]))          # silences are measured against it
        send[f["src"]].append(Send(flow=f["flow"], proto=f["proto"], dst=fabric.hosts[f["dst"]].ip, dport=port,
                                   sport=sport, bytes=f["bytes"], rate_mbps=f["rate_mbps"], pace_tcp="load" in spec,
                                   **transport_options(net.routing)))
    commands = {}
    for h in hosts:
        path = os.path.join(net.run_dir, f"flows-{h}.json")
        FlowsSpec(start_at=start_at, deadline=deadline, listen=tuple(listen[h]), send=tuple(send[h])).save(path)
        commands[h] = ["hosts.agents.flows", path]

    before, pfc_before = net.counters(), net.pfc_totals()
    out = run_on_hosts(net, commands, timeout=deadline - time.time() + 20)
    after, pfc_after = net.counters(), net.pfc_totals()

    received = {r["flow"]: r for h in out for r in out[h]["received"]}
    per_flow = []
    for f in flows:
        r = received.get(f["flow"], {})
        per_flow.append({"flow": f["flow"], "proto": f["proto"], "src": f["src"], "dst": f["dst"],
                         "bytes": r.get("bytes", 0), "expected_bytes": f["bytes"],
                         "seconds": r.get("seconds"), "mbps": round(r.get("mbps", 0.0), 3),
                         "lost_packets": r.get("lost_packets"), "error": r.get("error"),
                         "max_gap_s": r.get("max_gap_s"), "gap_at": r.get("gap_at"),
                         "silences": r.get("silences", []),
                         "reordered": r.get("reordered")})
    return summarize(fabric, spec, per_flow, uplink_bytes(fabric, before, after)) | pfc.growth(pfc_before, pfc_after)


def roce_ranks(fabric, flows: list[dict], routing: str, store: str, start_at: float,
               congestion: str | None) -> dict[str, RoceFlowsRankSpec]:
    """A rank per host of the flows: its sends and receives (ordered by flow, the same on both ends), its queue
    pairs paced at its flows' offered rate (at most the ranks' usual pace), every peer reached over its NIC."""
    names = sorted({f["src"] for f in flows} | {f["dst"] for f in flows},
                   key=lambda n: (fabric.hosts[n].server, fabric.hosts[n].rank, n))
    # no server in the peers: same-server flows take the NICs too, as the UDP and TCP flows do
    peers = tuple(Peer(rank=r, name=n, ip=fabric.hosts[n].ip) for r, n in enumerate(names))
    rank = {n: r for r, n in enumerate(names)}
    transport = rank_setup.transport(fabric, routing)
    pace = transport.pop("rate_limit_bps")
    out = {}
    for n in names:
        offered = sum(f["rate_mbps"] for f in flows if f["src"] == n) * 1e6
        out[n] = RoceFlowsRankSpec(
            rank=rank[n], peers=peers, store=store, start_at=start_at, congestion=congestion,
            time_scale=fabric.params.time_scale, rate_limit_bps=PortRates(nic=min(offered or pace.nic, pace.nic),
                                                                          hb=pace.hb), **transport,
            sends=tuple(RoceFlow(f["flow"], rank[f["dst"]], f["bytes"]) for f in flows if f["src"] == n),
            recvs=tuple(RoceFlow(f["flow"], rank[f["src"]], f["bytes"]) for f in flows if f["dst"] == n))
    return out


def run_roce(net, spec: dict, flows: list[dict]) -> dict:
    fabric = net.fabric
    store = os.path.join(net.run_dir, "store", f"traffic-roce-{time.monotonic_ns()}")
    os.makedirs(store)
    congestion = None if spec.get("congestion", "none") == "none" else spec["congestion"]
    hosts = {f["src"] for f in flows} | {f["dst"] for f in flows}
    start_at = time.time() + 3.0 + 0.2 * len(hosts)        # the programs start and connect their queue pairs
    ranks = roce_ranks(fabric, flows, net.routing, store, start_at, congestion)
    commands = {}
    for h, rank_spec in ranks.items():
        path = os.path.join(store, f"rank{rank_spec.rank}.json")
        rank_spec.save(path)
        commands[h] = ["hosts.agents.roce_flows", path]
    longest = max(f["bytes"] * 8 / (f["rate_mbps"] * 1e6) for f in flows)
    before, pfc_before = net.counters(), net.pfc_totals()
    out = run_on_hosts(net, commands, timeout=start_at - time.time() + 4 * longest + 90)
    after, pfc_after = net.counters(), net.pfc_totals()
    received = {r["flow"]: r for o in out.values() for r in o.get("received", [])}
    sent = {s["flow"]: s for o in out.values() for s in o.get("sent", [])}
    errors = {h: o["error"] for h, o in out.items() if o.get("error")}
    per_flow = []
    for f in flows:
        r, s = received.get(f["flow"], {}), sent.get(f["flow"], {})
        error = errors.get(f["dst"]) or errors.get(f["src"])
        if r and not r["correct"]:
            error = error or "data differs from what was sent"
        per_flow.append({"flow": f["flow"], "proto": "roce", "src": f["src"], "dst": f["dst"],
                         "bytes": r.get("bytes", 0) if r.get("correct") else 0, "expected_bytes": f["bytes"],
                         "seconds": r.get("seconds"), "mbps": round(r.get("mbps") or 0.0, 3),
                         "lost_packets": None, "error": error, "max_gap_s": None, "silences": [],
                         "reordered": None, "retransmits": s.get("retransmits"), "timeouts": s.get("timeouts"),
                         "correct": r.get("correct")})
    counters = [o.get("counters", {}) for o in out.values()]
    result = summarize(fabric, spec, per_flow, uplink_bytes(fabric, before, after))
    return {**result, "congestion": congestion, "retransmits": sum(f["retransmits"] or 0 for f in per_flow),
            "ecn_marked_packets": sum(c.get("ecn_ce_received", 0) for c in counters),
            "cnp_received": sum(c.get("cnp_received", 0) for c in counters),
            "data_exact": all(f["correct"] for f in per_flow)} | pfc.growth(pfc_before, pfc_after)


def summarize(fabric, spec: dict, per_flow: list[dict], uplinks: dict[str, int]) -> dict:
    expect = spec.get("expect", {})
    max_loss = expect.get("max_loss", 0.01)
    checks = []
    failed = [f for f in per_flow if f["error"] or
              (f["proto"] in ("tcp", "roce") and f["bytes"] < f["expected_bytes"]) or
              (f["proto"] == "udp" and f["bytes"] < (1 - max_loss) * f["expected_bytes"])]
    sent = sum(f["expected_bytes"] for f in per_flow)
    got = sum(f["bytes"] for f in per_flow)
    checks.append({"name": "traffic-delivered", "ok": not failed,
                   "detail": f"{len(per_flow) - len(failed)}/{len(per_flow)} flows delivered "
                             f"(loss allowed {max_loss:.1%}); {got}/{sent} bytes"
                             + (f"; failed: flow {failed[0]['flow']} {failed[0]['src']}->{failed[0]['dst']}"
                                if failed else "")})
    total = sum(uplinks.values())
    fair = total / len(uplinks) if uplinks else 0
    used = sum(1 for b in uplinks.values() if fair and b >= 0.1 * fair)
    imbalance = (max(uplinks.values()) / fair) if fair else None
    if "all_uplinks_used" in expect:
        ok = (used == len(uplinks)) == expect["all_uplinks_used"]
        checks.append({"name": "uplinks-all-used", "ok": ok,
                       "detail": f"{used}/{len(uplinks)} uplinks carried >= 10% of a fair share"})
    if "uplinks_used" in expect:
        checks.append({"name": "uplinks-used", "ok": used == expect["uplinks_used"],
                       "detail": f"{used} uplinks used, expected {expect['uplinks_used']}"})
    mbps = [f["mbps"] for f in per_flow]
    gaps = [f["max_gap_s"] for f in per_flow if f.get("max_gap_s") is not None]
    return {"type": "traffic", "ok": all(c["ok"] for c in checks), "pattern": spec.get("pattern", "permutation"),
            "protocol": spec.get("protocol", "udp"), "flows": len(per_flow),
            "flow_bytes": per_flow[0]["expected_bytes"], "rate_mbps": per_flow and spec.get("rate_mbps"),
            "load": spec.get("load"),
            "mbps_min": min(mbps), "mbps_mean": sum(mbps) / len(mbps), "mbps_max": max(mbps),
            "delivered_bytes": got, "max_gap_s": max(gaps) if gaps else None,
            "lost_packets": sum(f["lost_packets"] or 0 for f in per_flow),
            "reordered_packets": sum(f["reordered"] or 0 for f in per_flow), "uplink_bytes": uplinks, "uplinks_used": used,
            "uplink_imbalance": round(imbalance, 3) if imbalance else None,
            "per_flow": per_flow, "checks": checks}


def validate(fabric, spec: dict, scenario: dict) -> None:
    plan_flows(fabric, spec)          # raises ScenarioError for pairs or patterns this fabric cannot carry


def warnings(fabric, spec: dict) -> list[str]:
    return []


def summary(w: dict) -> str:
    what = (f"{w['flows']} {w['protocol']} flows, {w['mbps_mean']:.2f} Mbit/s mean "
            f"({w['mbps_min']:.2f}-{w['mbps_max']:.2f}), uplinks used {w['uplinks_used']}/"
            f"{len(w['uplink_bytes'])}, imbalance {w['uplink_imbalance']}")
    if w.get("max_gap_s") is not None:
        what += f", longest gap {w['max_gap_s'] * 1e3:.1f} ms, {w['lost_packets']} lost"
    if w.get("protocol") == "roce":
        what += (f", {w.get('retransmits')} retransmitted, {w.get('ecn_marked_packets')} ECN-marked, "
                 f"data {'exact' if w.get('data_exact') else 'WRONG'}")
    return what


def tables(w: dict) -> list[str]:
    return []


def start_line(spec: dict) -> str:
    return " ".join(["traffic"] + [str(spec[k]) for k in ("pattern", "protocol", "congestion") if k in spec])


def headline(w: dict) -> str:
    return f"{w['name']} {w.get('mbps_mean', 0):.2f} Mbit/s"


def comparable(w: dict) -> dict[tuple, dict]:
    return {(w["name"], "traffic", w.get("flow_bytes")): {"Mbit/s": w.get("mbps_mean"),
                                                         "longest gap s": w.get("max_gap_s")}}


def relative_times(w: dict, t0: float | None) -> None:
    """The agents report their flows' silences as Unix time: put them on the run's relative base (after the
    faults' outcomes, which match them against the faults, were computed)."""
    for f in w.get("per_flow", []):
        gap_at = f.pop("gap_at", None)
        f["gap_start_s"] = round(gap_at - t0, 4) if gap_at is not None and t0 is not None else None
        f["silences"] = [[round(start - t0, 4), length] for start, length in f.get("silences") or []] \
            if t0 is not None else []


def report_section(workloads: list[dict]) -> list[str]:
    return []


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    return []
