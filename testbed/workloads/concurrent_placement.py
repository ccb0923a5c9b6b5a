"""Where the jobs of a `concurrent` workload run: each job's `placement:` turned into its GPU hosts, and the
views of the fabric and the network a job's workload runs on (only its GPUs are ranks).

Placement forms:
  {hosts: [s0g0, s1g0]}              these hosts
  {servers: [0, 1], rails: [0]}      the GPUs on these servers and rails (either key alone: all of the other)
  {count: 4, policy: P}              4 GPUs not placed by an earlier job, by policy P:
      packed        server by server (fewest servers: the HB domain carries most)
      spread        one GPU per server in turn, each server's lowest free rail (most servers)
      rail-aligned  a block: the same rails on every server it uses (as many servers as divide count), so its
                    NIC traffic stays on its rails' switches
"""
from __future__ import annotations

import os

from testbed.scenario.schema import ScenarioError

POLICIES = ("packed", "spread", "rail-aligned")

SCHEMA = {
    "type": "object", "additionalProperties": False, "minProperties": 1,
    "description": "The job's GPUs, in one of three forms: {hosts: [s0g0, s1g0]}; {servers: [0, 1], rails: [0]} "
                   "(either key alone: all of the other); {count: 4, policy: packed | spread | rail-aligned} (GPUs "
                   "no earlier job took).",
    "properties": {
        "hosts": {"type": "array", "minItems": 1, "items": {"type": "string"},
                  "description": "The job's GPU hosts by name."},
        "servers": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0},
                    "description": "Server numbers. Default: all."},
        "rails": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0},
                  "description": "Rails (local GPU numbers). Default: all."},
        "count": {"type": "integer", "minimum": 1, "description": "How many GPUs."},
        "policy": {"enum": list(POLICIES), "default": "packed",
                   "description": "How count GPUs are chosen among the free ones."},
    },
}
FORMS = ({"hosts"}, {"servers", "rails"}, {"count", "policy"})


def gpu_grid(fabric) -> list:
    """The fabric's GPU hosts, server-major (s0g0, s0g1, ..., s1g0, ...)."""
    return sorted(fabric.gpus(), key=lambda h: (h.server, h.rank))


def place(fabric, placement: dict, taken: set[str]) -> list[str]:
    """The host names of one placement (server-major order); `taken`: hosts earlier jobs hold, which a count
    placement avoids."""
    gpus = gpu_grid(fabric)
    if not any(set(placement) <= form for form in FORMS) or set(placement) == {"policy"}:
        raise ScenarioError(f"placement: {', '.join(sorted(placement))} do not go together; give hosts, or "
                            f"servers and/or rails, or count (with a policy)")
    if "hosts" in placement:
        known = {h.name for h in gpus}
        for name in placement["hosts"]:
            if name not in known:
                raise ScenarioError(f"placement.hosts: {name!r} is not a GPU host of this fabric "
                                    f"({gpus[0].name} .. {gpus[-1].name})")
        if len(set(placement["hosts"])) != len(placement["hosts"]):
            raise ScenarioError("placement.hosts: a host is listed twice")
        wanted = set(placement["hosts"])
        return [h.name for h in gpus if h.name in wanted]
    if "count" in placement:
        return _by_policy(fabric, gpus, placement["count"], placement.get("policy", "packed"), taken)
    servers, rails = placement.get("servers"), placement.get("rails")
    for key, values, limit in (("servers", servers, fabric.params.servers),
                               ("rails", rails, fabric.params.gpus_per_server)):
        bad = [v for v in values or [] if v >= limit]
        if bad:
            raise ScenarioError(f"placement.{key}: {bad[0]} is out of range (this fabric has {limit}: 0..{limit - 1})")
    return [h.name for h in gpus if (servers is None or h.server in servers) and (rails is None or h.rank in rails)]


def _by_policy(fabric, gpus: list, count: int, policy: str, taken: set[str]) -> list[str]:
    free = [h for h in gpus if h.name not in taken]
    if count > len(free):
        raise ScenarioError(f"placement: count {count} but only {len(free)} GPUs are free")
    if policy == "packed":
        chosen = free[:count]
    elif policy == "spread":
        by_server: dict[int, list] = {}
        for h in free:
            by_server.setdefault(h.server, []).append(h)
        chosen, queues = [], list(by_server.values())
        while len(chosen) < count:
            for q in queues:
                if q and len(chosen) < count:
                    chosen.append(q.pop(0))
    else:
        chosen = _rail_block(fabric, free, count)
    return [h.name for h in sorted(chosen, key=lambda h: (h.server, h.rank))]


def _rail_block(fabric, free: list, count: int) -> list:
    """count GPUs as servers x rails, the same free rails on each server; the most servers that divide count."""
    names = {(h.server, h.rank): h for h in free}
    for n_servers in range(min(count, fabric.params.servers), 0, -1):
        if count % n_servers:
            continue
        n_rails = count // n_servers
        for first in range(fabric.params.servers - n_servers + 1):
            servers = range(first, first + n_servers)
            rails = [r for r in range(fabric.params.gpus_per_server) if all((s, r) in names for s in servers)]
            if len(rails) >= n_rails:
                return [names[(s, r)] for s in servers for r in rails[:n_rails]]
    raise ScenarioError(f"placement: no rail-aligned block of {count} free GPUs (the same rails on every server "
                        f"it uses)")


def place_jobs(fabric, jobs: list[dict], allow_overlap: bool = False) -> list[list[str]]:
    """Every job's hosts, in job order; jobs that share a GPU are refused unless allow_overlap."""
    taken: dict[str, str] = {}
    out = []
    for i, job in enumerate(jobs):
        try:
            hosts = place(fabric, job["placement"], set(taken))
        except ScenarioError as exc:
            raise ScenarioError(f"jobs.{i} ({job['name']}): {exc}") from None
        if not hosts:
            raise ScenarioError(f"jobs.{i} ({job['name']}): its placement selects no GPU")
        shared = [h for h in hosts if h in taken]
        if shared and not allow_overlap:
            raise ScenarioError(f"jobs.{i} ({job['name']}): {', '.join(shared)} already placed for job "
                                f"{taken[shared[0]]!r}; jobs must not share GPUs (or set allow_overlap: true)")
        for h in hosts:
            taken.setdefault(h, job["name"])
        out.append(hosts)
    return out


class JobFabric:
    """The fabric as one job sees it: its GPUs are the job's hosts; every other question goes to the fabric."""

    def __init__(self, fabric, hosts: list[str]):
        self._fabric, self._hosts = fabric, [fabric.hosts[h] for h in hosts]

    def gpus(self) -> list:
        return list(self._hosts)

    def __getattr__(self, name):
        return getattr(self._fabric, name)


class JobNet:
    """The running network as one job sees it: the job's fabric view, and its host programs' output kept under
    RESULTS/jobs/NAME/hosts/ (testbed/runtime/hostlogs.py)."""

    def __init__(self, net, hosts: list[str], name: str):
        self._net, self.fabric = net, JobFabric(net.fabric, hosts)
        out = getattr(net, "out_dir", None)
        self.out_dir = os.path.join(out, "jobs", name) if isinstance(out, (str, os.PathLike)) else None

    def __getattr__(self, name):
        return getattr(self._net, name)
