"""A collective on a given fabric: its ranks, its sizes, the GPU pairs its algorithm needs and the analytical
model that bounds it (testbed/model/bounds.py)."""
from __future__ import annotations

from hosts.collectives.benchmark import elements
from hosts.collectives.comm import rail_order
from testbed.model import bounds
from testbed.scenario.schema import ScenarioError, parse_size

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
        if spec["op"] == "broadcast" and not fabric.design.cross_rail:
            raise ScenarioError(f"broadcast/multicast needs multicast across rails, which a {fabric.kind} fabric "
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
            hint = {"allreduce": "hierarchical", "allgather": "hierarchical", "alltoall": "two-step"}.get(spec["op"])
            raise ScenarioError(f"{spec['op']}/{algo} needs a path between {a.name} and {b.name}, which a "
                                f"{fabric.kind} fabric does not have; "
                                + (f"use algo {hint}" if hint else "no algorithm of this op avoids it"))


def multicast_scope(fabric, spec: dict | None = None) -> str:
    """Where multicast AllGather replicates: over the whole fabric, or per rail followed by the HB
    domain ("rail", forced on rail-only fabrics, which have no path between rails)."""
    return (spec or {}).get("multicast_scope", "fabric") if fabric.design.cross_rail else "rail"


def model_algo(fabric, spec: dict) -> str:
    """The analytical model for an algorithm: multicast is receive-bound like a ring, or hierarchical."""
    if spec["algo"] == "multicast" and multicast_scope(fabric, spec) == "rail":
        return "hierarchical"
    return spec["algo"]


def itemsize(spec: dict) -> int:
    """Bytes per element of the collective's dtype (float32 unless float16)."""
    return 2 if spec.get("dtype") == "float16" else 4


def ran_bytes(op: str, size: int, itemsize: int, world: int) -> int:
    """The bytes a collective of `size` really moves: whole elements, split evenly where the op splits."""
    return elements(op, size, itemsize, world) * itemsize * (world if op == "allgather" else 1)


def cluster(fabric) -> bounds.Cluster:
    p = fabric.params
    return bounds.Cluster(x=p.gpus_per_server, y=p.servers, c_s=p.nic_mbps * 1e6 / 8, c_f=p.hb_mbps * 1e6 / 8)
