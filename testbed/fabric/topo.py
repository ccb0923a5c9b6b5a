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

from dataclasses import dataclass, field

from testbed.fabric.links import NIC_MTU, ROCE_HEADERS, interface, ofport

KINDS = ("rail-only", "rail-optimized", "clos")

# Addressing limits: server index and local rank go into one address byte each.
MAX_SERVERS = 200
MAX_GPUS_PER_SERVER = 64
MAX_SPINES = 64
MAX_CPU_HOSTS = 200
MAX_SPARES_PER_SERVER = 16
MIN_NIC_MTU, MAX_NIC_MTU = 1024 + ROCE_HEADERS, 9216     # RoCE MTU 1024 at least; jumbo frames at most
SPARE_HOST_BASE = 129        # spare GPU k of a server: host address .(129 + k)
CPU_SUBNET = 250
NIC_PREFIX = "10.11"
HB_PREFIX = "10.12"


class TopologyError(ValueError):
    """A fabric that cannot be built; the message names the bad parameter."""


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


@dataclass(frozen=True)
class Switch:
    name: str
    kind: str              # rail | spine | tor | frontend | hb
    dpid: int | None = None     # None for the HB domain, which is not SDN-managed

    @property
    def sdn(self) -> bool:
        return self.dpid is not None


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    mbps: float
    a_port: int            # switch port number, or host interface index (0 = eth0)
    b_port: int
    kind: str              # nic | hb | uplink | frontend
    standby: bool = False  # cabled but disabled at bring-up: a spare's NIC


@dataclass
class Fabric:
    kind: str
    params: dict
    switches: dict[str, Switch] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    circuits: dict[str, list[Link]] = field(default_factory=dict)   # spare GPU -> its NIC's possible links
    _next_port: dict[str, int] = field(default_factory=dict, repr=False)

    # -- construction -------------------------------------------------------------------------
    def add_switch(self, name: str, kind: str, dpid: int | None = None) -> None:
        self.switches[name] = Switch(name, kind, dpid)
        self._next_port[name] = 1

    def add_host(self, host: Host) -> None:
        self.hosts[host.name] = host
        self._next_port[host.name] = 0

    def add_link(self, a: str, b: str, mbps: float, kind: str, standby: bool = False) -> Link:
        link = Link(a, b, float(mbps), self._take_port(a), self._take_port(b), kind, standby)
        self.links.append(link)
        return link

    def add_circuits(self, host: str, leaves: list[str], mbps: float) -> None:
        """A spare GPU's NIC (eth0) behind an optical circuit switch: a reserved port on every leaf,
        one connected at a time. It is cabled (parked, disabled) to the first."""
        self.circuits[host] = [Link(host, leaf, float(mbps), 0, self._take_port(leaf), "nic", True) for leaf in leaves]
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
        """Whether the network (not the HB domain) should carry src -> dst."""
        if src.name == dst.name or "spare" in (src.kind, dst.kind):
            return False               # an idle spare's NIC is disabled
        if self.kind == "rail-only" and src.kind == dst.kind == "gpu":
            return src.rank == dst.rank          # no spine: only within a rail
        return True

    def counts(self) -> dict:
        return {"kind": self.kind, "servers": self.params["servers"],
                "gpus_per_server": self.params["gpus_per_server"],
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
            "switches": [{"name": s.name, "kind": s.kind, "dpid": s.dpid} for s in self.sdn_switches()],
            "hosts": [{"name": h.name, "kind": h.kind, "ip": h.ip, "mac": h.mac, "rank": h.rank}
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


# Parameters a fabric kind has no use for: given anyway, they are ignored (and a scenario is warned).
IGNORED = {"rail-only": ("spines", "oversubscription")}


def ignored_params(kind: str, given) -> list[str]:
    """The given parameters that a fabric of this kind ignores, in the order given."""
    return [k for k in given if k in IGNORED.get(kind, ())]


DPID_BASE = {"rail": 0x100, "tor": 0x200, "spine": 0x300, "frontend": 0x400}


def _check_int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise TopologyError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _check_rate(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100_000:
        raise TopologyError(f"{name} must be a rate in Mbit/s in (0, 100000], got {value!r}")
    return float(value)


def build(kind: str, servers: int, gpus_per_server: int, spines: int = 2,
          oversubscription: float = 1.0, nic_mbps: float = 5.0, hb_mbps: float | None = None,
          cpu_hosts: int = 0, spares_per_server: int = 0, spare_servers: int = 0, nic_mtu: int = NIC_MTU) -> Fabric:
    """Build the fabric model of one of KINDS; raises TopologyError naming a bad parameter.

    spares_per_server: idle GPUs in every server's HB domain (recovery `spare`); spare_servers: idle
    servers (recovery `migrate`); nic_mtu: the MTU of every link but the HB ones (9000: jumbo frames that
    carry RoCE MTU 4096, as AI fabrics run). Cabling order fixes port numbers: leaves, spines, HB domains, CPU hosts,
    spares."""
    if kind not in KINDS:
        raise TopologyError(f"unknown fabric kind {kind!r}; choose one of {', '.join(KINDS)}")
    fabric = Fabric(kind, _checked(kind, servers, gpus_per_server, spines, oversubscription, nic_mbps, hb_mbps,
                                   cpu_hosts, spares_per_server, spare_servers, nic_mtu))
    p = fabric.params
    for i in range(p["servers"]):
        for j in range(p["gpus_per_server"]):
            fabric.add_host(gpu_host(i, j))
    leaves, leaf_down = _cable_leaves(fabric)
    uplink = leaf_down * p["nic_mbps"] / (p["spines"] * p["oversubscription"]) if p["spines"] else 0.0
    _cable_spines(fabric, leaves, uplink)
    for i in range(p["servers"]):
        _cable_hb_domain(fabric, i)
    _cable_cpu_hosts(fabric, leaves)
    _cable_spares(fabric, leaves, uplink)
    return fabric


def _checked(kind, servers, gpus_per_server, spines, oversubscription, nic_mbps, hb_mbps, cpu_hosts,
             spares_per_server, spare_servers, nic_mtu) -> dict:
    n = _check_int("servers", servers, 1, MAX_SERVERS)      # checked in the order of the parameters
    params = {"servers": n, "gpus_per_server": _check_int("gpus_per_server", gpus_per_server, 1, MAX_GPUS_PER_SERVER),
              "spines": _check_int("spines", spines, 1, MAX_SPINES) if kind != "rail-only" else 0}
    cpus = _check_int("cpu_hosts", cpu_hosts, 0, MAX_CPU_HOSTS)
    spare_k = _check_int("spares_per_server", spares_per_server, 0, MAX_SPARES_PER_SERVER)
    spare_n = _check_int("spare_servers", spare_servers, 0, MAX_SERVERS - n)
    nic = _check_rate("nic_mbps", nic_mbps)
    hb = _check_rate("hb_mbps", 9 * nic if hb_mbps is None else hb_mbps)
    if isinstance(oversubscription, bool) or not isinstance(oversubscription, (int, float)) \
            or not 1 <= oversubscription <= 64:
        raise TopologyError(f"oversubscription must be a ratio between 1 and 64, got {oversubscription!r}")
    params.update(oversubscription=float(oversubscription), nic_mbps=nic, hb_mbps=hb, cpu_hosts=cpus,
                  spares_per_server=spare_k, spare_servers=spare_n,
                  nic_mtu=_check_int("nic_mtu", nic_mtu, MIN_NIC_MTU, MAX_NIC_MTU))
    return params


def _cable_leaves(fabric: Fabric) -> tuple[list[str], int]:
    """The network's leaves: rails (one switch per local rank) or ToRs (one switch per server); returns
    them and the number of GPUs under each."""
    n, k, nic = fabric.params["servers"], fabric.params["gpus_per_server"], fabric.params["nic_mbps"]
    if fabric.kind == "clos":
        leaves = [f"tor{i}" for i in range(n)]
        for i, name in enumerate(leaves):
            fabric.add_switch(name, "tor", DPID_BASE["tor"] + i)
            for j in range(k):
                fabric.add_link(f"s{i}g{j}", name, nic, "nic")
        return leaves, k
    leaves = [f"rail{j}" for j in range(k)]
    for j, name in enumerate(leaves):
        fabric.add_switch(name, "rail", DPID_BASE["rail"] + j)
        for i in range(n):
            fabric.add_link(f"s{i}g{j}", name, nic, "nic")
    return leaves, n


def _cable_spines(fabric: Fabric, leaves: list[str], uplink: float) -> None:
    """Every leaf to every spine; each leaf's uplinks carry its downlink capacity / oversubscription."""
    spines = fabric.params["spines"]
    for x in range(spines):
        fabric.add_switch(f"spine{x}", "spine", DPID_BASE["spine"] + x)
    for leaf in leaves:
        for x in range(spines):
            fabric.add_link(leaf, f"spine{x}", uplink, "uplink")


def _cable_hb_domain(fabric: Fabric, server: int) -> None:
    """The server's HB domain: each GPU's second port."""
    fabric.add_switch(f"hb{server}", "hb")
    for j in range(fabric.params["gpus_per_server"]):
        fabric.add_link(f"s{server}g{j}", f"hb{server}", fabric.params["hb_mbps"], "hb")


def _cable_cpu_hosts(fabric: Fabric, leaves: list[str]) -> None:
    """Remote CPU hosts on a front-end switch cabled to every leaf."""
    cpus, nic = fabric.params["cpu_hosts"], fabric.params["nic_mbps"]
    if not cpus:
        return
    fabric.add_switch("fe0", "frontend", DPID_BASE["frontend"])
    for c in range(cpus):
        fabric.add_host(cpu_host(c))
        fabric.add_link(f"cpu{c}", "fe0", nic, "nic")
    for leaf in leaves:
        fabric.add_link("fe0", leaf, nic * cpus, "frontend")


def _cable_spares(fabric: Fabric, leaves: list[str], uplink: float) -> None:
    """Spares, cabled last. A spare GPU can be switched onto any leaf of its server; a spare server is cabled
    as the others (on clos with its own ToR), its NIC ports disabled."""
    p, clos = fabric.params, fabric.kind == "clos"
    n, k, nic, hb = p["servers"], p["gpus_per_server"], p["nic_mbps"], p["hb_mbps"]
    for i in range(n):
        for x in range(p["spares_per_server"]):
            host = spare_gpu(i, x)
            fabric.add_host(host)
            fabric.add_circuits(host.name, [f"tor{i}"] if clos else leaves, nic)
            fabric.add_link(host.name, f"hb{i}", hb, "hb")
    for i in range(n, n + p["spare_servers"]):
        if clos:
            fabric.add_switch(f"tor{i}", "tor", DPID_BASE["tor"] + i)
            for x in range(p["spines"]):
                fabric.add_link(f"tor{i}", f"spine{x}", uplink, "uplink")
        for j in range(k):
            fabric.add_host(Host(**{**vars(gpu_host(i, j)), "kind": "spare"}))
            fabric.add_link(f"s{i}g{j}", f"tor{i}" if clos else f"rail{j}", nic, "nic", standby=True)
        _cable_hb_domain(fabric, i)
