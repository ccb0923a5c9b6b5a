"""Which job's bytes each switch and link carried while jobs ran together, from the routes' own counters.

The controller installs one route per destination address on every switch (controllers/fabric_app.py), and
OpenFlow counts the bytes each route forwarded. Jobs hold disjoint GPUs (and an offload job its own CPU hosts),
so a route's destination names its job, whatever the protocol: RoCE, a traffic job's UDP or TCP, an offload job's
tf.data.service gRPC over TCP (both ways: to its trainer and to its CPU hosts). A switch's bytes split by job
exactly. A route with one output port names the link too; a multi-path route
(ECMP, spraying, flow splitting, a fast-failover route) sends through a group of its own, whose buckets count
what each port sent (testbed/fabric/ovs.py dump_flow_bytes): either way each port's transmitted bytes split by
job, under every routing mode. A multicast tree flow (controllers/multicast_app.py) matches a group address and
copies what it receives to each of its tree ports: the group's job is the one whose hosts joined it, the flow's
bytes count once for the switch and in full on each of its ports. Its counter survives the tree: the controller
keeps the last count of every tree flow it deleted (Network.flow_bytes adds them). A group several destinations
share (none of ours) splits only the switch's total. The check: every switch's flows forwarded what its ports received, and every split link's bytes by job
add up to what its port sent (within 2%).
"""
from __future__ import annotations

from testbed.fabric import ovs

TOLERANCE = 0.02


def _grown(before: dict, after: dict, key: str) -> int:
    now, then = after.get(key, 0), before.get(key, 0)
    return now - then if now >= then else now


def attribute(fabric, jobs: dict[str, list[str]], flows: tuple[dict, dict], ports: tuple[dict, dict],
              groups: dict[str, list[str]] | None = None) -> dict:
    """jobs: name -> hosts; flows: Network.flow_bytes() before and after; ports: Network.counters() before and
    after; groups: multicast group -> the hosts that joined it (Network.multicast_group_hosts()). Returns bytes by
    job per switch and per link (SWITCH:PORT, what it sent),
    and how far each switch's flow bytes are from its ports' received bytes."""
    host_job = {h: name for name, hosts in jobs.items() for h in hosts}
    ip_job = {fabric.hosts[h].ip: name for h, name in host_job.items()}
    for group, members in (groups or {}).items():
        owners = {host_job.get(h, "other") for h in members}
        ip_job[group] = owners.pop() if len(owners) == 1 else "other"
    switches: dict[str, dict[str, int]] = {}
    links: dict[str, dict[str, int]] = {}
    shared: set[str] = set()          # switches whose traffic went through groups several destinations share
    for sw, after in flows[1].items():
        before = flows[0].get(sw, {})
        per_job = switches.setdefault(sw, {})
        for key in after:
            grown = _grown(before, after, key)
            if not grown:
                continue
            dst, actions = key.split(">", 1)
            job = ip_job.get(dst, "other")
            per_job[job] = per_job.get(job, 0) + grown
            outs = actions[7:].split(",") if actions.startswith("output:") else \
                actions[4:].split(",") if actions.startswith("all:") else []     # all: a copy out of each
            for port in filter(str.isdigit, outs):
                link = links.setdefault(f"{sw}:{port}", {})
                link[job] = link.get(job, 0) + grown
            if actions.startswith("group:"):
                shared.add(sw)
    deviation = {}
    for sw, per_job in switches.items():
        received = sum(ovs.growth(ports[0], ports[1], p, "rx_bytes") for p in ports[1] if p.split(":")[0] == sw)
        counted = sum(per_job.values())
        if received or counted:
            deviation[sw] = round(abs(counted - received) / max(received, 1), 4)
    for port, per_job in links.items():      # each link's bytes by job against what its port sent
        sent = ovs.growth(ports[0], ports[1], port, "tx_bytes")
        if port.split(":")[0] not in shared and (sent or sum(per_job.values())):
            deviation[port] = round(abs(sum(per_job.values()) - sent) / max(sent, 1), 4)
    return {"switches": switches, "links": links, "max_deviation": max(deviation.values(), default=0.0),
            "deviation": deviation}


def check(attributed: dict) -> dict:
    worst = attributed["max_deviation"]
    where = max(attributed["deviation"], key=attributed["deviation"].get, default="-")
    return {"name": "job bytes", "ok": worst <= TOLERANCE,
            "detail": f"bytes by job add up to the switches' and links' port counters within {worst:.2%} "
                      f"({where}; allowed {TOLERANCE:.0%})"}


def uplinks_by_job(fabric, attributed: dict) -> dict[str, dict[str, int]]:
    """The spine uplinks' share of `links`: "LEAF>SPINE" or "SPINE>LEAF" (the sending end first) -> job -> bytes."""
    out = {}
    for l in fabric.links:
        if l.kind != "uplink":
            continue
        for node, port, peer in ((l.a, l.a_port, l.b), (l.b, l.b_port, l.a)):
            if f"{node}:{port}" in attributed["links"]:
                out[f"{node}>{peer}"] = attributed["links"][f"{node}:{port}"]
    return out
