"""Workload `wan_transfer`: one transfer across a long fat pipe over 1, 2, ... N parallel connections, as PCCL
fills a WAN link (docs/sites.md, "Long fat pipes").

A host of one site writes `size` bytes into a host of another site with RDMA WRITEs striped over N RC queue pairs
(hosts/agents/wan_transfer.py), for each N of `connections` in turn. Each queue pair's sender keeps at most
`window` packets in flight, so one queue pair moves at most window x MTU per round trip: throughput is bound by
min(N x window x MTU / RTT, the WAN's payload rate). Reported per N: the throughput, its share of the WAN's rate,
that prediction with the round trip measured just before, and whether the receiver's bytes are exact.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time

from hosts.rdma.qp import PACKET_OVERHEAD
from hosts.spec.wan import WanTransferSpec
from testbed.fabric.links import rank_transport
from testbed.runtime.launch import run_on_hosts
from testbed.scenario.schema import NAME, POSITIVE_INT, SIZE, ScenarioError, parse_size
from testbed.workloads.wan_transfer_report import (  # noqa: F401 (its part of the report)
    RESULT_SCHEMA, comparable, headline, report_plots, report_section, summary, tables)

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type"],
    "description": "A transfer between two sites over 1 to N parallel RC queue pairs of a fixed window: one is "
                   "bound by its window per round trip, several fill the WAN link (PCCL).",
    "properties": {
        "type": {"const": "wan_transfer", "description": "Multi-connection transfer across a WAN link."},
        "name": NAME,
        "from": {"type": "string", "description": "The sending GPU host. Default: the first site's first."},
        "to": {"type": "string", "description": "The receiving GPU host, in another site, joined to the sender's "
                                                "by a WAN link. Default: the second site's first."},
        "size": {**SIZE, "default": "512KiB", "description": "Bytes moved for each connection count."},
        "connections": {"type": "array", "minItems": 1, "uniqueItems": True,
                        "items": {**POSITIVE_INT, "maximum": 64}, "default": [1, 2, 4, 8],
                        "description": "The parallel queue pairs of each transfer, run in turn."},
        "window": {**POSITIVE_INT, "maximum": 4096, "default": 6,
                   "description": "Packets (of the RoCE MTU) in flight per queue pair."},
        "chunk": {**SIZE, "default": "64KiB", "description": "Bytes per RDMA WRITE; the WRITEs go to the queue "
                                                             "pairs in turn (striping)."},
        "pings": {**POSITIVE_INT, "maximum": 100, "default": 9,
                  "description": "1-byte WRITEs that measure the round trip before each transfer (their median)."},
        "seed": {"type": "integer", "minimum": 0, "default": 0, "description": "The payload's bytes."},
        "timeout_s": {"type": "number", "minimum": 1, "maximum": 3600, "default": 60,
                      "description": "Seconds an end waits on the other before failing."},
    },
}
DEFAULTS = {k: v["default"] for k, v in SCHEMA["properties"].items() if "default" in v}


def settings(spec: dict) -> dict:
    return {**DEFAULTS, **spec}


def payload_bps(wan_mbps: float, mtu: int) -> float:
    """The payload bits/s the WAN link carries at most in full packets: its rate x MTU / (MTU + headers)."""
    return wan_mbps * 1e6 * mtu / (mtu + PACKET_OVERHEAD)


def window_bps(connections: int, window: int, mtu: int, rtt_s: float) -> float:
    """What `connections` windows of `window` packets carry per round trip."""
    return connections * window * mtu * 8 / rtt_s


def predicted_bps(connections: int, window: int, mtu: int, rtt_s: float, wan_mbps: float) -> float:
    """min(N x window / RTT, the WAN's payload rate): window-bound below the bandwidth-delay product, rate-bound
    above it."""
    return min(window_bps(connections, window, mtu, rtt_s), payload_bps(wan_mbps, mtu))


def connections_to_fill(window: int, mtu: int, rtt_s: float, wan_mbps: float) -> int:
    """The fewest connections whose windows cover the bandwidth-delay product."""
    return max(1, -(-int(payload_bps(wan_mbps, mtu) * rtt_s) // (window * mtu * 8)))


def ends(fabric, s: dict):
    """(sender, receiver, the WAN link between their sites), checked: GPU hosts of two sites joined directly."""
    by_site = {}
    for h in fabric.gpus():
        by_site.setdefault(fabric.site_of(h.name), []).append(h)
    if None in by_site or len(by_site) < 2:
        raise ScenarioError("wan_transfer needs a fabric with sites joined by WAN links (fabric.sites, fabric.wan)",
                            key="type")
    first = [hosts[0].name for hosts in by_site.values()]
    names = {h.name: h for h in fabric.gpus()}
    a, b = s.get("from", first[0]), s.get("to", first[1])
    for key, name in (("from", a), ("to", b)):
        if name not in names:
            raise ScenarioError(f"wan_transfer {key}: unknown GPU host {name!r} (e.g. {', '.join(first)})", key=key)
    sa, sb = fabric.site_of(a), fabric.site_of(b)
    if sa == sb:
        raise ScenarioError(f"wan_transfer: {a} and {b} are both in site {sa!r}; `to` must be in another site",
                            key="to")
    link = next((l for l in fabric.wan_links() if {fabric.site_of(l.a), fabric.site_of(l.b)} == {sa, sb}), None)
    if link is None:
        raise ScenarioError(f"wan_transfer: no WAN link joins sites {sa!r} and {sb!r} directly", key="to")
    return names[a], names[b], link


def validate(fabric, spec: dict, scenario: dict | None = None) -> None:
    s = settings(spec)
    ends(fabric, s)
    size = parse_size(s["size"])
    chunk = parse_size(s["chunk"])
    if max(s["connections"]) > -(-size // chunk):
        raise ScenarioError(f"wan_transfer: {max(s['connections'])} connections need at least as many chunks: size "
                            f"{s['size']} is {-(-size // chunk)} chunk(s) of {s['chunk']}", key="connections")


def warnings(fabric, spec: dict) -> list[str]:
    return []


def run(net, spec: dict) -> dict:
    fabric, s = net.fabric, settings(spec)
    validate(fabric, spec)
    sender, receiver, link = ends(fabric, s)
    t = rank_transport(fabric, net.routing)
    mtu, size = t["roce_mtu"]["nic"], parse_size(s["size"])
    store = os.path.join(net.run_dir, "store", f"wan_transfer-{time.monotonic_ns()}")
    os.makedirs(store)
    common = WanTransferSpec(role="send", ip=sender.ip, store=store, size=size, connections=tuple(s["connections"]),
                             window=s["window"], chunk=parse_size(s["chunk"]), mtu=mtu,
                             rate_limit_bps=t["rate_limit_bps"]["nic"], rc_timeout=t["rc_timeout"],
                             rto_min=0.05 + 4 * link.delay_us / 1e6,       # twice the WAN's round trip
                             pings=s["pings"], seed=s["seed"], timeout_s=s["timeout_s"])
    commands = {}
    for h, role in ((sender, "send"), (receiver, "recv")):
        path = os.path.join(store, f"{role}.json")
        dataclasses.replace(common, role=role, ip=h.ip).save(path)
        commands[h.name] = ["hosts.agents.wan_transfer", path]
    # the slowest run, one window per round trip of a second at worst, bounds the time
    budget = len(s["connections"]) * (s["timeout_s"] + size / (s["window"] * mtu)) + 30
    try:
        out, failed = run_on_hosts(net, commands, timeout=budget, partial=True)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    failed += [f"{name}: {o['error']}" for name, o in out.items() if "error" in o]
    result = {"type": "wan_transfer", "from": sender.name, "to": receiver.name,
              "sites": [fabric.site_of(sender.name), fabric.site_of(receiver.name)], "wan_link": link.name,
              "wan_mbps": link.mbps, "wan_payload_mbps": payload_bps(link.mbps, mtu) / 1e6,
              "delay_us": link.delay_us, "mtu": mtu, "window": s["window"], "window_bytes": s["window"] * mtu,
              "size": size, "errors": failed[:4],
              "runs": [] if failed else rows(out[sender.name]["runs"], out[receiver.name]["runs"], s["window"], mtu,
                                            size, link.mbps)}
    if result["runs"]:
        rtt = min(r["rtt_ms"] for r in result["runs"]) / 1e3
        result["bdp_bytes"] = payload_bps(link.mbps, mtu) * rtt / 8
        result["connections_to_fill"] = connections_to_fill(s["window"], mtu, rtt, link.mbps)
    result["checks"] = checks(result)
    result["ok"] = all(c["ok"] for c in result["checks"])
    return result


def rows(sent: list[dict], received: list[dict], window: int, mtu: int, size: int, wan_mbps: float) -> list[dict]:
    """One row per connection count: the sender's timing and round trip beside the receiver's check."""
    out = []
    for snd, rcv in zip(sent, received):
        n, rtt = snd["connections"], snd["rtt_s"]
        bps, pred = size * 8 / snd["seconds"], predicted_bps(snd["connections"], window, mtu, rtt, wan_mbps)
        out.append({"connections": n, "seconds": snd["seconds"], "mbps": bps / 1e6,
                    "of_rate": bps / (wan_mbps * 1e6), "rtt_ms": rtt * 1e3, "window_mbps": window_bps(
                        n, window, mtu, rtt) / 1e6, "predicted_mbps": pred / 1e6, "of_predicted": bps / pred,
                    "window_bound": window_bps(n, window, mtu, rtt) < payload_bps(wan_mbps, mtu),
                    "exact": rcv["exact"], "wrong_bytes": rcv["wrong_bytes"], "retransmits": snd["retransmits"],
                    "timeouts": snd["timeouts"]})
    return out


def checks(result: dict) -> list[dict]:
    runs = result["runs"]
    wrong = [f"{r['connections']} connections: {r['wrong_bytes']} bytes differ" for r in runs if not r["exact"]]
    return [{"name": "completed", "ok": bool(runs), "detail": "; ".join(result["errors"]) or
             f"{len(runs)} transfers of {result['size']} B, {result['from']} -> {result['to']}"},
            {"name": "data exact", "ok": bool(runs) and not wrong, "detail": "; ".join(wrong) or
             "every transfer's bytes equal at the receiver"}]


def start_line(spec: dict) -> str:
    s = settings(spec)
    return f"wan_transfer {s['size']} over {'/'.join(map(str, s['connections']))} connections, window {s['window']}"
