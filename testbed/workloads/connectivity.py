"""Workload `connectivity`: every pair the fabric should connect reaches each other; no other pair does.

Pairs are checked over the network (NIC addresses, as the fabric model says: rail-only has no path
between rails) and inside each HB domain (HB addresses of the same server).
"""
from __future__ import annotations

import time

from hosts.spec.flows import ProbeSpec
from testbed.runtime.launch import run_on_hosts
from testbed.scenario.schema import NAME
from testbed.schema_words import INT, arr, d

# This workload's part of the scenario schema (the scenario file's `workloads:` items of its type).
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["type"],
    "description": "Every pair the fabric should connect reaches each other; no other pair does.",
    "properties": {"type": {"const": "connectivity", "description": "A reachability check."}, "name": NAME,
                   "timeout_s": {"type": "number", "minimum": 0.5, "maximum": 60, "default": 3.0,
                                 "description": "Seconds the probes have to reach every address (they stop "
                                                "earlier once every pair is settled)."}},
}

# Its keys in results.json's workload record (the runner adds the common ones).
RESULT_SCHEMA = {"pairs": INT, "expected_reachable": INT, "reachable_ok": INT,
                 "missing": d(arr({}), "Pairs that should reach each other and did not."),
                 "leaked": d(arr({}), "Pairs that reached each other and should not.")}



def expected_pairs(fabric) -> dict[tuple[str, str], bool]:
    """(source host, destination address) -> whether it should be reachable."""
    pairs = {}
    hosts = list(fabric.hosts.values())
    for src in hosts:
        for dst in hosts:
            if src.name == dst.name:
                continue
            pairs[(src.name, dst.ip)] = fabric.nic_reachable(src, dst)
            if src.hb_ip and dst.hb_ip:
                pairs[(src.name, dst.hb_ip)] = src.server == dst.server
    return pairs


def run(net, spec: dict) -> dict:
    fabric = net.fabric
    pairs = expected_pairs(fabric)
    timeout = float(spec.get("timeout_s", 3.0))
    # Every probe has started by `started` (~50 ms each here); the probes stop together at `started + timeout`
    # at the latest, each earlier once its own pairs are settled (hosts/agents/probe.py).
    started = time.time() + 1.0 + 0.06 * len(fabric.hosts)
    targets: dict[str, list[str]] = {h: [] for h in fabric.hosts}
    for (src, ip) in pairs:
        targets[src].append(ip)
    probes = {h: ProbeSpec(targets=tuple(ips), expected=tuple(ip for ip in ips if pairs[(h, ip)]),
                           not_before=started, until=started + timeout) for h, ips in targets.items()}
    # a probe that starts late (seconds of Python start-up under software emulation) gets its whole window
    out = run_on_hosts(net, {h: ["hosts.agents.probe", *p.to_argv()] for h, p in probes.items()},
                       timeout=started + timeout - time.time() + max(15.0, timeout + 120))
    missing, unexpected = [], []
    for (src, ip), should in sorted(pairs.items()):
        reached = ip in out[src]["reached"]
        if should and not reached:
            missing.append(f"{src}->{ip}")
        elif reached and not should:
            unexpected.append(f"{src}->{ip}")
    should_n = sum(pairs.values())
    ok = not missing and not unexpected
    detail = (f"{should_n - len(missing)}/{should_n} expected pairs reachable, "
              f"{len(unexpected)}/{len(pairs) - should_n} isolated pairs leaked")
    if missing:
        detail += f"; unreachable: {', '.join(missing[:5])}"
    if unexpected:
        detail += f"; leaked: {', '.join(unexpected[:5])}"
    return {"type": "connectivity", "ok": ok, "pairs": len(pairs), "expected_reachable": should_n,
            "reachable_ok": should_n - len(missing), "missing": missing, "leaked": unexpected,
            "checks": [{"name": "connectivity", "ok": ok, "detail": detail}]}


def validate(fabric, spec: dict, scenario: dict) -> None:
    """Any fabric can be checked."""


def warnings(fabric, spec: dict) -> list[str]:
    return []


def summary(w: dict) -> str:
    return f"{w['reachable_ok']}/{w['expected_reachable']} pairs reachable, {len(w['leaked'])} leaked"


def tables(w: dict) -> list[str]:
    return []


def start_line(spec: dict) -> str:
    return "connectivity"


def report_section(workloads: list[dict]) -> list[str]:
    return []


def report_plots(workloads: list[dict], plots_dir: str) -> list[str]:
    return []
