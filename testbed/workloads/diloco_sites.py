"""The sites of a `diloco` workload: groups of GPU hosts, each a data-parallel replica, whose only traffic with
each other is what crosses sites (the WAN's bytes). They are the fabric's own sites (`fabric.sites`,
docs/sites.md), or the workload's `sites:` key, which also partitions one fabric into sites by hand.

    fabric_sites(fabric)            the fabric's own sites' GPU hosts, if it has sites: the default of `sites:`
    sites_of(fabric, spec)          the sites' hosts, checked: known GPU hosts, none in two sites, at least two
    server_sites_scenario(...)      a scenario of one rail-optimized fabric whose every server is a site
"""
from __future__ import annotations

from testbed.fabric import sites
from testbed.fabric.kinds import RAIL_OPTIMIZED
from testbed.scenario.schema import ScenarioError


def fabric_sites(fabric) -> list[list[str]] | None:
    """The fabric's sites as groups of GPU host names, in the order declared; None on a fabric without sites (a
    workload without `sites:` then says so)."""
    return [hosts for hosts in sites.hosts_by_site(fabric, "gpu").values() if hosts] or None


def sites_of(fabric, spec: dict) -> list[list]:
    """The Host objects of each site, in the order given (a site's first host is its leader)."""
    groups = spec.get("sites") or fabric_sites(fabric)
    if groups is None:
        raise ScenarioError("diloco needs `sites:`, groups of GPU host names (e.g. [[s0g0, s0g1], [s1g0, s1g1]]):"
                            " this fabric declares no sites", key="sites")
    gpus = {h.name: h for h in fabric.gpus()}
    seen: dict[str, int] = {}
    for i, group in enumerate(groups):
        for name in group:
            if name not in gpus:
                raise ScenarioError(f"diloco sites[{i}]: unknown GPU host {name!r} (the fabric has "
                                    f"{', '.join(sorted(gpus)[:6])}{', ...' if len(gpus) > 6 else ''})", key="sites")
            if name in seen:
                raise ScenarioError(f"diloco sites[{i}]: {name} is already in sites[{seen[name]}] (sites may not "
                                    "overlap)", key="sites")
            seen[name] = i
    if len(groups) < 2:
        raise ScenarioError(f"diloco needs at least 2 sites, got {len(groups)}", key="sites")
    return [[gpus[name] for name in group] for group in groups]


def server_sites_scenario(name: str, servers: int, gpus: int, nic_mbps: float, **spec) -> dict:
    """A `diloco` run on rail-optimized servers x gpus, each server a site, its first GPU the leader: the leaders'
    NIC links are what crosses sites (benchmarks/diloco.py and `testbed paper diloco` share it)."""
    site_hosts = [[f"s{s}g{g}" for g in range(gpus)] for s in range(servers)]
    return {"name": name, "fabric": {"kind": RAIL_OPTIMIZED.name, "servers": servers, "gpus_per_server": gpus,
                                     "nic_mbps": nic_mbps},
            "workloads": [{"type": "diloco", "sites": site_hosts, **spec}]}
