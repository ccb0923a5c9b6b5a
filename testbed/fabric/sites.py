"""Sites: several fabrics, each of any kind and size, joined by WAN links between gateway switches.

`fabric.sites` maps a site's name to its own keys (params.SITE_KEYS), which override the fabric section's for
that site; `fabric.wan` lists the links between sites. Each site is a FabricParams of its own (`site_params`),
built as any fabric and then placed in the whole (topo.build_from):

  - servers are numbered on across sites, in the order the sites are given: with eu: {servers: 2} and
    us: {servers: 2}, eu holds s0g*, s1g* and us s2g*, s3g* (addresses and HB domains hb{i} follow the
    server); CPU hosts likewise (cpu0, cpu1, ...), so every host keeps the one-site name and address scheme;
  - a site's switches take its name first (euspine0, eurail1, usfe0), their datapath ids its index;
  - a WAN link is a link of kind "wan" between two gateways, named as any link (euspine0-usspine0).

`site_of(fabric, node)` is the one mapping from an emulated host (or switch) to its site; `hosts_by_site`
lists each site's hosts. A fabric without sites answers None and {}.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from testbed.fabric.params import (MAX_CPU_HOSTS, MAX_SERVERS, SITE_KEYS, SITE_NAME, FabricParams,
                                   TopologyError, _number)

FABRIC_WIDE = ("gpus_per_server", "nic_mbps", "hb_mbps", "nic_mtu", "time_scale")   # every site has the fabric's
WAN_KEYS = ("a", "b", "mbps", "delay_us", "loss", "queue_kb")
DPID_STEP = 0x1000          # site n's switches: their one-site datapath id + n x DPID_STEP (n from 1)


@dataclass(frozen=True)
class Wan:
    """One WAN link as the scenario gives it: a gateway switch of each site (one-site names), after time
    scaling."""
    a: str
    a_switch: str | None        # None: the site's default gateway
    b: str
    b_switch: str | None
    mbps: float
    delay_us: float = 0.0
    loss: float = 0.0
    queue_kb: float | None = None


def switch_name(site: str, switch: str) -> str:
    """A site's switch in the whole fabric: the site's name first."""
    return f"{site}{switch}"


def checked_sites(value):
    """fabric.sites' shape: site name -> a map of SITE_KEYS (the values are checked as the site is made)."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) < 2:
        raise TopologyError(f"sites must be a map of two or more site names to their keys, got {value!r}")
    for name, keys in value.items():
        if not isinstance(name, str) or not re.fullmatch(SITE_NAME, name):
            raise TopologyError(f"sites: site name {name!r} must be 1-3 lowercase letters or digits, a letter "
                                "first (it starts each of its switches' names)")
        if not isinstance(keys, dict):
            raise TopologyError(f"sites.{name} must be a map of the site's keys, got {keys!r}")
        unknown = [k for k in keys if k not in SITE_KEYS]
        if unknown:
            wide = " (the whole fabric's, not a site's)" if unknown[0] in FABRIC_WIDE else ""
            raise TopologyError(f"sites.{name}: unknown key {unknown[0]!r}{wide}; a site may set "
                                f"{', '.join(SITE_KEYS)}")
    return {name: dict(keys) for name, keys in value.items()}


def checked_wan(value):
    """fabric.wan's shape and numbers; the sites and gateways it names are checked against the sites."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise TopologyError(f"wan must be a list of {{{', '.join(WAN_KEYS)}}}, got {value!r}")
    out = []
    for n, w in enumerate(value):
        where = f"wan[{n}]"
        if not isinstance(w, dict):
            raise TopologyError(f"{where} must be a map with {', '.join(WAN_KEYS)}, got {w!r}")
        unknown = [k for k in w if k not in WAN_KEYS]
        if unknown:
            raise TopologyError(f"{where}: unknown key {unknown[0]!r}; keys are {', '.join(WAN_KEYS)}")
        for key in ("a", "b", "mbps"):
            if key not in w:
                raise TopologyError(f"{where} needs {key}")
        for key in ("a", "b"):
            if not isinstance(w[key], str) or not re.fullmatch(r"[a-z0-9]+(:[a-z0-9]+)?", w[key]):
                raise TopologyError(f"{where}.{key} must be SITE or SITE:SWITCH, got {w[key]!r}")
        loss = w.get("loss", 0)
        if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 <= loss < 1:
            raise TopologyError(f"{where}.loss must be a share of frames in [0, 1), got {loss!r}")
        queue = w.get("queue_kb")
        out.append({"a": w["a"], "b": w["b"], "mbps": _number(f"{where}.mbps", "rate", w["mbps"]),
                    "delay_us": _number(f"{where}.delay_us", "delay", w.get("delay_us", 0)), "loss": float(loss),
                    "queue_kb": None if queue is None else _number(f"{where}.queue_kb", "queue", queue)})
    return out


def resolve(params: FabricParams) -> None:
    """Make each site's FabricParams (params._sites), then set the whole fabric's servers and CPU hosts to the
    sites' totals and params.sites to the sites' keys with their counts filled in (to_json builds the same)."""
    if params.links:
        raise TopologyError("links: with sites, each site gives its own (sites.NAME.links, by the site's link "
                            "names, e.g. rail0-spine1)")
    if params.spares_per_server or params.spare_servers:
        raise TopologyError("spares_per_server and spare_servers: spares are not made in a fabric of sites")
    given = params.to_json()        # the values before time scaling: each site scales its own
    made, filled = {}, {}
    for name, keys in params.sites.items():
        values = {k: given[k] for k in SITE_KEYS + FABRIC_WIDE if k != "links"} | {"kind": params.kind} | keys
        try:
            made[name] = FabricParams(**values)
        except TopologyError as exc:
            raise TopologyError(f"sites.{name}: {exc}") from None
        filled[name] = keys | {"servers": made[name].servers, "cpu_hosts": made[name].cpu_hosts}
    servers, cpus = sum(p.servers for p in made.values()), sum(p.cpu_hosts for p in made.values())
    if servers > MAX_SERVERS or cpus > MAX_CPU_HOSTS:
        raise TopologyError(f"sites: {servers} servers and {cpus} CPU hosts in all; at most {MAX_SERVERS} and "
                            f"{MAX_CPU_HOSTS}")
    for n, w in enumerate(wan_links(params)):
        for key in ("a", "b"):
            if getattr(w, key) not in made:
                raise TopologyError(f"wan[{n}].{key}: no site {getattr(w, key)!r} (sites: {', '.join(made)})")
        if w.a == w.b:
            raise TopologyError(f"wan[{n}]: joins site {w.a!r} to itself; a WAN link joins two sites")
    alone = _unjoined(list(made), wan_links(params))
    if alone:
        raise TopologyError(f"sites: {alone[0]!r} is joined to no other site by the WAN links (fabric.wan)")
    for key, value in (("servers", servers), ("cpu_hosts", cpus), ("sites", filled)):
        object.__setattr__(params, key, value)
    object.__setattr__(params, "_sites", made)


def _unjoined(names: list[str], wans: list[Wan]) -> list[str]:
    """The sites the WAN links leave apart from the first."""
    joined, grew = {names[0]}, True
    while grew:
        grew = False
        for w in wans:
            if (w.a in joined) != (w.b in joined):
                joined |= {w.a, w.b}
                grew = True
    return [n for n in names if n not in joined]


def wan_links(params: FabricParams) -> list[Wan]:
    """fabric.wan, one Wan each (after time scaling)."""
    out = []
    for w in params.wan or []:
        (a, _, a_switch), (b, _, b_switch) = w["a"].partition(":"), w["b"].partition(":")
        out.append(Wan(a, a_switch or None, b, b_switch or None, w["mbps"], w["delay_us"], w["loss"],
                       w["queue_kb"]))
    return out


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


def hosts_by_site(fabric) -> dict[str, list[str]]:
    """Each site's hosts (GPU and CPU), in fabric order; empty on a fabric without sites."""
    out: dict[str, list[str]] = {name: [] for name in fabric.params.sites or {}}
    for host in fabric.hosts.values():
        if host.site is not None:
            out[host.site].append(host.name)
    return out

