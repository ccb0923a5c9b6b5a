"""The fabric model: switches, hosts and links of a scaled-down GPU cluster.

Pure data, no root and no Mininet: `testbed topo`, the controller and the planner all use it, and
`testbed.fabric.network` turns it into namespaces and Open vSwitch bridges.

Naming (deterministic, see the README):
  GPU host     s{i}g{j}   server i, local rank j      NIC 10.11.i.(j+1)/16   HB 10.12.i.(j+1)/24
  CPU host     cpu{c}                                  NIC 10.11.250.(c+1)/16
  rail switch  rail{j}    all GPUs with local rank j (rail-only, rail-optimized)
  ToR switch   tor{i}     all GPUs of server i (clos)
  spine        spine{s}   rail-optimized and clos
  front-end    fe0        CPU hosts; cabled to every rail / ToR switch
  HB domain    hb{i}      server i's NVLink domain (a Linux bridge, not SDN-managed)
  spare GPU    s{i}spare{k}  in server i's HB domain   NIC 10.11.i.(129+k)/16  HB 10.12.i.(129+k)/24
  spare server s{N+m}g{j}    servers after the N active ones, cabled like them
Host interfaces: eth0 is the NIC, eth1 the HB port. Switch ports are numbered from 1 in cabling order;
spares are cabled last, so they do not move the other ports.

Spares (kind "spare") are idle: their NIC links are `standby` (cabled, port disabled at bring-up) and
they are in no job until testbed.fabric.spares brings one onto a rail. A spare GPU's NIC goes through an optical
circuit switch that can connect it to a reserved port on any of its server's leaves (`circuits`); it is
parked on the first one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from testbed.fabric import kinds, sites
from testbed.fabric.kinds.base import DPID_BASE
from testbed.fabric.links import Link, default_queue, interface, new_link, ofport, overlong_names
from testbed.fabric.params import FabricParams, TopologyError

SPARE_HOST_BASE = 129        # spare GPU k of a server: host address .(129 + k)
CPU_SUBNET = 250
NIC_PREFIX = "10.11"
HB_PREFIX = "10.12"


@dataclass(frozen=True)
class Host:
    name: str
    kind: str              # "gpu" or "cpu"
    ip: str                # NIC address (eth0)
    mac: str
    server: int | None = None
    rank: int | None = None      # local rank = rail index
    hb_ip: str | None = None     # HB-domain address (eth1)
    hb_mac: str | None = None
    site: str | None = None      # fabric.sites: the host's site (testbed.fabric.sites)


@dataclass(frozen=True)
class Switch:
    name: str
    kind: str              # rail | spine | tor | frontend | hb
    dpid: int | None = None     # None for the HB domain, which is not SDN-managed
    site: str | None = None     # fabric.sites: the switch's site

    @property
    def sdn(self) -> bool:
        return self.dpid is not None


@dataclass
class Fabric:
    params: FabricParams
    switches: dict[str, Switch] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    circuits: dict[str, list[Link]] = field(default_factory=dict)   # spare GPU -> its NIC's possible links
    _next_port: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def kind(self) -> str:
        return self.params.kind

    @property
    def design(self) -> kinds.FabricKind:
        """The kind's object: cabling, leaves, spines and paths."""
        return self.params.design

    # -- construction -------------------------------------------------------------------------
    def add_switch(self, name: str, kind: str, dpid: int | None = None) -> None:
        self.switches[name] = Switch(name, kind, dpid)
        self._next_port[name] = 1

    def add_host(self, host: Host) -> None:
        self.hosts[host.name] = host
        self._next_port[host.name] = 0

    def add_link(self, a: str, b: str, mbps: float, kind: str, standby: bool = False) -> Link:
        link = new_link(self.params, a, b, mbps, self._take_port(a), self._take_port(b), kind, standby)
        self.links.append(link)
        return link

    def add_circuits(self, host: str, leaves: list[str], mbps: float) -> None:
        """A spare GPU's NIC (eth0) behind an optical circuit switch: a reserved port on every leaf,
        one connected at a time. It is cabled (parked, disabled) to the first."""
        self.circuits[host] = [new_link(self.params, host, leaf, mbps, 0, self._take_port(leaf), "nic", True)
                               for leaf in leaves]
        self.links.append(self.circuits[host][0])
        self._next_port[host] = 1

    def _take_port(self, node: str) -> int:
        port = self._next_port[node]
        self._next_port[node] = port + 1
        return port

    # -- queries ------------------------------------------------------------------------------
    def gpus(self) -> list[Host]:
        return [h for h in self.hosts.values() if h.kind == "gpu"]

    def spares(self) -> list[Host]:
        """Idle spare GPUs: those of servers' HB domains and those of spare servers."""
        return [h for h in self.hosts.values() if h.kind == "spare"]

    def sdn_switches(self) -> list[Switch]:
        return [s for s in self.switches.values() if s.sdn]

    def attachment(self, host: str, kind: str = "nic") -> Link:
        """The link that attaches a host's NIC (or HB port) to its switch."""
        for link in self.links:
            if link.kind == kind and host in (link.a, link.b):
                return link
        raise KeyError(f"{host} has no {kind} link")

    def switch_graph(self) -> dict[str, list[tuple[str, int]]]:
        """Adjacency between SDN switches: name -> [(neighbour, local port)]."""
        graph: dict[str, list[tuple[str, int]]] = {s.name: [] for s in self.sdn_switches()}
        for l in self.links:
            if l.a in graph and l.b in graph:
                graph[l.a].append((l.b, l.a_port))
                graph[l.b].append((l.a, l.b_port))
        return graph

    def nic_reachable(self, src: Host, dst: Host) -> bool:
        """Whether the network (not the HB domain) should carry src -> dst: within a site, as its kind joins
        them; across sites, over the WAN."""
        if src.name == dst.name or "spare" in (src.kind, dst.kind):
            return False               # an idle spare's NIC is disabled
        if src.site != dst.site:
            return True
        return (self.params._sites[src.site].design if src.site else self.design).reachable(src, dst)

    def site_of(self, node: str) -> str | None:
        """The site of a host or switch; None on a fabric without sites (testbed.fabric.sites)."""
        return sites.site_of(self, node)

    def wan_links(self) -> list[Link]:
        return [l for l in self.links if l.kind == "wan"]

    def counts(self) -> dict:
        return {"kind": self.kind, "servers": self.params.servers,
                "gpus_per_server": self.params.gpus_per_server,
                "switches": len(self.switches), "hosts": len(self.hosts), "links": len(self.links),
                "spares": len(self.spares())}

    def to_json(self) -> dict:
        """The `testbed topo --json` form. Per link, each end's port (a host's port N is ethN), device name
        and OpenFlow port number (null off OpenFlow); `circuits`: the other leaf ports each spare GPU's NIC
        can be switched to; `ports`: every OpenFlow switch port by its counter name (results.json `links`,
        "SWITCH:PORT") with the link behind it."""
        circuits = {h: [self._link_json(c) for c in cs[1:]] for h, cs in self.circuits.items()}
        ports = {}
        for l in self.links + [c for cs in self.circuits.values() for c in cs[1:]]:
            for end, peer in (("a", "b"), ("b", "a")):
                node, port = getattr(l, end), getattr(l, f"{end}_port")
                if ofport(self, node, port) is not None:
                    ports[f"{node}:{port}"] = {"intf": interface(self, node, port), "kind": l.kind,
                                               "peer": getattr(l, peer), "peer_port": getattr(l, f"{peer}_port")}
        return {"kind": self.kind,
                **({"sites": {name: {"kind": p.kind, "hosts": sites.hosts_by_site(self)[name],
                                     "switches": [s.name for s in self.switches.values() if s.site == name]}
                              for name, p in self.params._sites.items()}} if self.params.sites else {}),
                "switches": list(self.switches),
                "hosts": list(self.hosts),
                "links": [self._link_json(l) for l in self.links],
                "circuits": circuits,
                "ports": ports}

    def _link_json(self, l: Link) -> list:
        return [l.a, l.b, {"mbps": l.mbps, "kind": l.kind, "standby": l.standby,
                           "a_port": l.a_port, "b_port": l.b_port,
                           "a_intf": interface(self, l.a, l.a_port), "b_intf": interface(self, l.b, l.b_port),
                           "a_ofport": ofport(self, l.a, l.a_port), "b_ofport": ofport(self, l.b, l.b_port)}]

    def to_controller(self) -> dict:
        """Everything the SDN controller needs to route proactively. Spares' links, and every circuit a
        spare GPU could be switched to, are listed down: the controller routes to a spare once its
        port comes up."""
        links = [l for l in self.links if l.kind != "hb" and l.a not in self.circuits] + \
            [c for circuits in self.circuits.values() for c in circuits]
        return {
            "kind": self.kind,
            "switches": [{"name": s.name, "kind": s.kind, "dpid": s.dpid, "site": s.site}
                         for s in self.sdn_switches()],
            "hosts": [{"name": h.name, "kind": h.kind, "ip": h.ip, "mac": h.mac, "rank": h.rank, "site": h.site}
                      for h in self.hosts.values()],
            "links": [{"a": l.a, "b": l.b, "a_port": l.a_port, "b_port": l.b_port, "kind": l.kind}
                      | ({"down": True} if l.standby else {}) for l in links],
        }


# -- builders ---------------------------------------------------------------------------------

def gpu_host(i: int, j: int) -> Host:
    return Host(name=f"s{i}g{j}", kind="gpu", server=i, rank=j,
                ip=f"{NIC_PREFIX}.{i}.{j + 1}", mac=f"02:0b:00:{i:02x}:{j:02x}:00",
                hb_ip=f"{HB_PREFIX}.{i}.{j + 1}", hb_mac=f"02:0c:00:{i:02x}:{j:02x}:00")


def spare_gpu(i: int, k: int) -> Host:
    return Host(name=f"s{i}spare{k}", kind="spare", server=i,
                ip=f"{NIC_PREFIX}.{i}.{SPARE_HOST_BASE + k}", mac=f"02:0b:00:{i:02x}:{0x80 + k:02x}:00",
                hb_ip=f"{HB_PREFIX}.{i}.{SPARE_HOST_BASE + k}", hb_mac=f"02:0c:00:{i:02x}:{0x80 + k:02x}:00")


def cpu_host(c: int) -> Host:
    return Host(name=f"cpu{c}", kind="cpu", ip=f"{NIC_PREFIX}.{CPU_SUBNET}.{c + 1}",
                mac=f"02:0b:fa:00:{c:02x}:00")


def build(kind: str, servers: int, gpus_per_server: int, **values) -> Fabric:
    """Build the fabric model of a kind (testbed.fabric.kinds) with these parameters (FabricParams' fields,
    defaults for the others); raises TopologyError naming a bad parameter."""
    return build_from(FabricParams(kind, servers, gpus_per_server, **values))


def build_from(params: FabricParams) -> Fabric:
    """The fabric of checked parameters. spares_per_server: idle GPUs in every server's HB domain (recovery
    `spare`); spare_servers: idle servers (recovery `migrate`). Cabling order fixes port numbers: leaves,
    spines, HB domains, CPU hosts, spares. fabric.links' overrides must name links of this fabric."""
    try:
        fabric = _placed_sites(params) if params.sites else _cabled(params)
    except ValueError as exc:           # a link's own property (links.new_link)
        raise TopologyError(str(exc)) from None
    names = {l.name for l in fabric.links + [c for cs in fabric.circuits.values() for c in cs]}
    unknown = [name for name in params.links or {} if name not in names]
    if unknown:
        raise TopologyError(f"links: no link named {unknown[0]!r} in this fabric (`testbed topo` lists them, "
                            f"e.g. {sorted(names)[0]})")
    return fabric


def _cabled(params: FabricParams) -> Fabric:
    fabric = Fabric(params)
    p = params
    for i in range(p.servers):
        for j in range(p.gpus_per_server):
            fabric.add_host(gpu_host(i, j))
    leaves = p.design.cable_leaves(fabric, p.nic_mbps)
    leaf_down = p.design.groups(p.servers, p.gpus_per_server)[1]
    uplink = leaf_down * p.nic_mbps / (p.spines * p.oversubscription) if p.spines else 0.0
    _cable_spines(fabric, leaves, uplink)
    for i in range(p.servers):
        _cable_hb_domain(fabric, i)
    _cable_cpu_hosts(fabric, leaves)
    _cable_spares(fabric, leaves, uplink)
    return fabric


def _cable_spines(fabric: Fabric, leaves: list[str], uplink: float) -> None:
    """Every leaf to every spine; each leaf's uplinks carry its downlink capacity / oversubscription."""
    spines = fabric.params.spines
    for x in range(spines):
        fabric.add_switch(f"spine{x}", "spine", DPID_BASE["spine"] + x)
    for leaf in leaves:
        for x in range(spines):
            fabric.add_link(leaf, f"spine{x}", uplink, "uplink")


def _cable_hb_domain(fabric: Fabric, server: int) -> None:
    """The server's HB domain: each GPU's second port."""
    fabric.add_switch(f"hb{server}", "hb")
    for j in range(fabric.params.gpus_per_server):
        fabric.add_link(f"s{server}g{j}", f"hb{server}", fabric.params.hb_mbps, "hb")


def _cable_cpu_hosts(fabric: Fabric, leaves: list[str]) -> None:
    """Remote CPU hosts on a front-end switch cabled to every leaf."""
    cpus, nic = fabric.params.cpu_hosts, fabric.params.nic_mbps
    if not cpus:
        return
    fabric.add_switch("fe0", "frontend", DPID_BASE["frontend"])
    for c in range(cpus):
        fabric.add_host(cpu_host(c))
        fabric.add_link(f"cpu{c}", "fe0", nic, "nic")
    for leaf in leaves:
        fabric.add_link("fe0", leaf, nic * cpus, "frontend")


def _cable_spares(fabric: Fabric, leaves: list[str], uplink: float) -> None:
    """Spares, cabled last. A spare GPU can be switched onto the leaves its kind allows; a spare server is
    cabled as its kind cables the others, its NIC ports disabled."""
    p = fabric.params
    for i in range(p.servers):
        for x in range(p.spares_per_server):
            host = spare_gpu(i, x)
            fabric.add_host(host)
            fabric.add_circuits(host.name, p.design.circuit_leaves(i, leaves), p.nic_mbps)
            fabric.add_link(host.name, f"hb{i}", p.hb_mbps, "hb")
    for i in range(p.servers, p.servers + p.spare_servers):
        for j in range(p.gpus_per_server):
            fabric.add_host(Host(**{**vars(gpu_host(i, j)), "kind": "spare"}))
        p.design.cable_spare_server(fabric, i, uplink)
        _cable_hb_domain(fabric, i)


# -- sites ------------------------------------------------------------------------------------

def _placed_sites(params: FabricParams) -> Fabric:
    """Each site built as a fabric of its own, placed in the whole (servers numbered on, switches named after
    their site: testbed.fabric.sites), then the WAN links between their gateways."""
    whole = Fabric(params)
    server = cpu = 0
    for index, (site, p) in enumerate(sites.site_params(params).items()):
        part = _cabled(p)
        names = {}
        for h in part.hosts.values():
            moved = gpu_host(h.server + server, h.rank) if h.kind == "gpu" else cpu_host(int(h.name[3:]) + cpu)
            names[h.name] = moved.name
            whole.add_host(dataclasses.replace(moved, site=site))
        for s in part.switches.values():
            names[s.name] = f"hb{int(s.name[2:]) + server}" if s.dpid is None else sites.switch_name(site, s.name)
            dpid = None if s.dpid is None else s.dpid + sites.DPID_STEP * (index + 1)
            whole.switches[names[s.name]] = Switch(names[s.name], s.kind, dpid, site)
        whole.links += [dataclasses.replace(l, a=names[l.a], b=names[l.b]) for l in part.links]
        whole._next_port.update({names[node]: port for node, port in part._next_port.items()})
        server, cpu = server + p.servers, cpu + p.cpu_hosts
    for n, w in enumerate(sites.wan_links(params)):
        _cable_wan(whole, n, w)
    long = overlong_names(whole)
    if long:
        raise TopologyError(f"sites: device name {long[0]} is longer than the kernel's 15 characters; use "
                            "shorter site names or fewer ports per switch")
    return whole


def _cable_wan(whole: Fabric, n: int, w: sites.Wan) -> None:
    """One WAN link between two sites' gateways: shaped at both ends, with its delay, loss and queue."""
    ends = []
    for site, switch, key in ((w.a, w.a_switch, "a"), (w.b, w.b_switch, "b")):
        mine = {s.name.removeprefix(site): s for s in whole.switches.values() if s.site == site}
        ends.append(sites.switch_name(site, sites.gateway(whole.params, site, switch, mine, f"wan[{n}].{key}")))
    mtu = whole.params.nic_mtu
    queue = int(w.queue_kb * 1024) if w.queue_kb else default_queue(w.mbps, mtu, whole.params.time_scale)
    if queue < mtu:
        raise TopologyError(f"wan[{n}]: a queue of {queue} bytes holds no {mtu}-byte frame")
    whole.links.append(Link(ends[0], ends[1], w.mbps, whole._take_port(ends[0]), whole._take_port(ends[1]), "wan",
                            mtu=mtu, queue_bytes=queue, delay_us=w.delay_us, loss=w.loss))
