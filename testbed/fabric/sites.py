"""Sites: several fabrics, each of any kind and size, joined by WAN links between gateway switches.

`fabric.sites` maps a site's name to its own keys (params.SITE_KEYS), which override the fabric section's for
that site; `fabric.wan` lists the links between sites. FabricParams checks both when it is made and makes each
site a FabricParams of its own (`site_params`); the fabric model builds each as any fabric and places it in
the whole (topo.build_from):

  - servers are numbered on across sites, in the order the sites are given: with eu: {servers: 2} and
    us: {servers: 2}, eu holds s0g*, s1g* and us s2g*, s3g* (addresses and HB domains hb{i} follow the
    server); CPU hosts likewise (cpu0, cpu1, ...), so every host keeps the one-site name and address scheme;
  - a site's switches take its name first (euspine0, eurail1, usfe0), their datapath ids its index;
  - a WAN link is a link of kind "wan" between two gateways, named as any link (euspine0-usspine0).

`site_of(fabric, node)` is the one mapping from an emulated host (or switch) to its site; `hosts_by_site`
lists each site's hosts. A fabric without sites answers None and {}.
"""
from __future__ import annotations

from testbed.fabric.params import FabricParams, TopologyError, Wan, wan_links

__all__ = ["Wan", "wan_links", "switch_name", "site_params", "gateway", "site_of", "hosts_by_site", "describe", "apart"]

DPID_STEP = 0x1000          # site n's switches: their one-site datapath id + n x DPID_STEP (n from 1)


def switch_name(site: str, switch: str) -> str:
    """A site's switch in the whole fabric: the site's name first."""
    return f"{site}{switch}"


def site_params(params: FabricParams) -> dict[str, FabricParams]:
    """Each site's parameters, by site name, in the order given (empty: a fabric without sites)."""
    return dict(params._sites)


def gateway(params: FabricParams, site: str, switch: str | None, switches, where: str) -> str:
    """A WAN link end's switch, one-site name: the one named, or the site's spine0, else its fe0."""
    if switch is None:
        switch = next((s for s in ("spine0", "fe0") if s in switches), None)
        if switch is None:
            raise TopologyError(f"{where}: site {site!r} has no spine and no front-end switch; name a gateway "
                                f"as {site}:SWITCH (one of {', '.join(sorted(switches))})")
    if switch not in switches or switches[switch].dpid is None:
        sdn = sorted(s for s, sw in switches.items() if sw.dpid is not None)
        raise TopologyError(f"{where}: site {site!r} has no switch {switch!r} (its switches: {', '.join(sdn)})")
    return switch


def site_of(fabric, node: str) -> str | None:
    """The site of an emulated host or a switch (None: a fabric without sites)."""
    found = fabric.hosts.get(node) or fabric.switches.get(node)
    if found is None:
        raise KeyError(f"no host or switch {node!r} in this fabric")
    return found.site


def hosts_by_site(fabric, kind: str | None = None) -> dict[str, list[str]]:
    """Each site's hosts in fabric order (of this kind only, if given: "gpu", "cpu"); empty on a fabric without
    sites."""
    out: dict[str, list[str]] = {name: [] for name in fabric.params.sites or {}}
    for host in fabric.hosts.values():
        if host.site is not None and kind in (None, host.kind):
            out[host.site].append(host.name)
    return out



def describe(fabric) -> list[str]:
    """One line per site and per WAN link, for `testbed topo`, the dry run and the run's notes (none without
    sites)."""
    lines = []
    for site, p in site_params(fabric.params).items():
        hosts = hosts_by_site(fabric)[site]
        lines.append(f"site {site}: {p.kind}, {p.servers} servers x {p.gpus_per_server} GPUs, hosts "
                     f"{hosts[0]}..{hosts[-1]}")
    for l in fabric.wan_links():
        lines.append(f"WAN {l.name}: {l.mbps:g} Mbit/s, {l.delay_us:g} us one way, loss {l.loss:g}, "
                     f"queue {l.queue_bytes // 1024} KiB")
    return lines


def apart(fabric, cut) -> list[list[str]]:
    """The groups of sites that can still reach each other once these links are cut, when there are two or more
    (the WAN split); [] when every site still reaches every other, or on a fabric without sites."""
    names = list(fabric.params.sites or {})
    if not names:
        return []
    joined = {n: {n} for n in names}
    for l in fabric.wan_links():
        if l not in cut:
            group = joined[site_of(fabric, l.a)] | joined[site_of(fabric, l.b)]
            for n in group:
                joined[n] = group
    groups = {tuple(sorted(g, key=names.index)) for g in joined.values()}
    return [list(g) for g in sorted(groups, key=lambda g: names.index(g[0]))] if len(groups) > 1 else []
