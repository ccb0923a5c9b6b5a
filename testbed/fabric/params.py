"""The fabric's parameters, declared once: FabricParams, whose fields carry their default, type, range and
description.

Everything that names a fabric parameter is generated from the fields: the scenario schema's `fabric` section
(`scenario_schema`), the `testbed topo` flags (`add_flags`), the `testbed up --topo KEY=VALUE` keys (`topo_keys`),
the results' fabric block and its schema (`results_values`, `results_schema`). Adding a parameter is one field
here, plus the code that uses it.

A FabricParams is checked when it is made (TopologyError naming the parameter) and holds every value resolved:
defaults filled in, rates as floats, hb_mbps worked out from nic_mbps, spines 0 on a kind without spines.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Callable

from hosts.rdma.mtu import HB_MTU, HB_ROCE_MTU, NIC_MTU, ROCE_HEADERS
from testbed.fabric import kinds

# Addressing limits: server index and local rank go into one address byte each.
MAX_SERVERS = 200
MAX_GPUS_PER_SERVER = 64
MAX_SPINES = 64
MAX_CPU_HOSTS = 200
MAX_SPARES_PER_SERVER = 16
MIN_NIC_MTU, MAX_NIC_MTU = 1024 + ROCE_HEADERS, 9216     # RoCE MTU 1024 at least; jumbo frames at most
MACHINES_HB_MTU = NIC_MTU       # hb_mtu of a fabric spread over machines: HB links that cross ride VXLAN, jumbo at most
MAX_MBPS = 100_000
MAX_OVERSUBSCRIPTION = 64
MAX_DELAY_US = 10_000_000               # a link's one-way delay: 10 s at most
MAX_QUEUE_KB = 1 << 20                  # a queue: 1 GiB at most
MAX_TIME_SCALE = 1e9
TIERS = ("nic", "uplink", "hb")         # what fabric.delay_us and fabric.queue_kb may give per tier
SITE_KEYS = ("kind", "servers", "spines", "oversubscription", "cpu_hosts", "delay_us", "queue_kb", "ecn", "pfc",
             "links", "ideal_uplinks")      # what a site may set for itself (fabric.sites)
FABRIC_WIDE = ("gpus_per_server", "nic_mbps", "hb_mbps", "nic_mtu", "time_scale")   # every site has the fabric's
WAN_KEYS = ("a", "b", "mbps", "delay_us", "loss", "queue_kb")
SITE_NAME = "^[a-z][a-z0-9]{0,2}$"     # short: a switch's port device, tb- + tag + site + spine0-p12, fits IFNAMSIZ


class TopologyError(ValueError):
    """A fabric that cannot be built; the message names the bad parameter."""


@dataclass(frozen=True)
class Param:
    """How one fabric parameter is written, checked and shown.

    check: "count" (an integer in [low, high]), "rate" (Mbit/s in (0, MAX_MBPS]), "ratio" (a number in
    [low, high]; high may depend on the other values: spare_servers, what servers leave free), "delay" (us,
    >= 0) or "queue" (KiB, > 0), each a number or a per-tier map {nic, uplink, hb}, "links" (per-link
    overrides by link name), "ecn" (marking thresholds, or a per-tier map of them), "pfc" (pause thresholds, likewise)
    or "flag" (true or false)."""
    check: str
    description: str                       # the scenario schema's (and docs/scenario-reference.md's)
    low: float = 0
    high: float | Callable[[dict], float] = 0
    help: str = ""                         # the topo flag's, where the description is too long
    flag: str = ""                         # the topo flag's and up --topo key's short name, if any
    required_flag: bool = False            # `testbed topo` needs it (a scenario has a default)
    low_in_schema: bool = True             # the schema holds the lower bound (else only the model checks it)
    derived: Callable[[dict], float] | None = None      # the default, worked out from the values before it
    needs: str = ""                        # a kind attribute without which the value is 0 and unchecked
    result: str | None = None              # the results' fabric block has it, with this description
    result_required: bool = False


def _param(default, **spec) -> dataclasses.Field:
    return field(default=default, metadata={"param": Param(**spec)})


@dataclass(frozen=True)
class FabricParams:
    kind: str
    servers: int = _param(
        2, check="count", low=1, high=MAX_SERVERS, required_flag=True, help="servers (HB domains)",
        description=f"Servers, each an HB domain of gpus_per_server GPUs (up to {MAX_SERVERS}).",
        result="Active servers (HB domains); spare servers aside.", result_required=True)
    gpus_per_server: int = _param(
        2, check="count", low=1, high=MAX_GPUS_PER_SERVER, flag="gpus", required_flag=True,
        help="GPUs per server (= rails)",
        description=f"GPUs per server: the HB-domain size, and the number of rails (up to {MAX_GPUS_PER_SERVER}).",
        result="GPUs per server (the HB-domain size).", result_required=True)
    spines: int = _param(
        2, check="count", low=1, high=MAX_SPINES, needs="spines", help="spine switches, none on rail-only",
        description=f"Spine switches over the leaves (up to {MAX_SPINES}); a rail-only fabric has none.")
    oversubscription: float = _param(
        1.0, check="ratio", low=1, high=MAX_OVERSUBSCRIPTION, help="leaf down:up capacity ratio",
        description=f"Leaf down:up capacity ratio (1 to {MAX_OVERSUBSCRIPTION}): each uplink runs at the leaf's "
                    "downlinks x nic_mbps / (spines x oversubscription). Not on rail-only.")
    nic_mbps: float = _param(
        5.0, check="rate", help="each GPU NIC's link rate, Mbit/s",
        description=f"Each GPU NIC's link rate in Mbit/s (up to {MAX_MBPS}), scaled down so that the machine's "
                    "CPUs are never the bottleneck.",
        result="A NIC link's rate, Mbit/s.", result_required=True)
    hb_mbps: float = _param(
        None, check="rate", derived=lambda v: 9 * v["nic_mbps"], help="HB-domain port rate, Mbit/s (default 9 x NIC)",
        description="Each GPU's HB-domain (NVLink) port rate in Mbit/s. Default: 9 x nic_mbps (NVLink 3.6 Tbit/s "
                    "to a 400 Gbit/s NIC).",
        result="An HB-domain link's rate, Mbit/s.", result_required=True)
    nic_mtu: int = _param(
        NIC_MTU, check="count", low=MIN_NIC_MTU, high=MAX_NIC_MTU, low_in_schema=False,
        help="MTU of every link but the HB ones, jumbo frames by default; 1500: standard frames",
        description=f"MTU of every link but the HB ones ({MIN_NIC_MTU} to {MAX_NIC_MTU}). The default, {NIC_MTU}: "
                    "jumbo frames carrying RoCE MTU 4096, as AI fabrics run; 1500 (RoCE MTU 1024) sends four times "
                    "the packets.",
        result="MTU of every link but the HB ones.")
    hb_mtu: int = _param(
        HB_MTU, check="count", low=MIN_NIC_MTU, high=HB_MTU, low_in_schema=False,
        help=f"MTU of the HB-domain links ({HB_MTU}: {HB_ROCE_MTU // 1024} KiB RoCE packets)",
        description=f"MTU of the HB-domain (NVLink) links ({MIN_NIC_MTU} to {HB_MTU}). The default, {HB_MTU}, "
                    f"carries RoCE packets of {HB_ROCE_MTU // 1024} KiB, beyond RoCE's 4096: NVLink has no Ethernet "
                    "MTU, and the emulation's cost is per packet (kernel rxe stops at 4096). 9000 when the fabric is spread "
                    "over machines, whose VXLAN underlay carries the HB links that cross.",
        result="MTU of the HB-domain links.")
    cpu_hosts: int = _param(
        0, check="count", low=0, high=MAX_CPU_HOSTS, help="CPU hosts on a front-end switch",
        description="CPU hosts cpu0, cpu1, ... on a front-end switch cabled to every leaf (for the offload "
                    "workload's tf.data.service).")
    spares_per_server: int = _param(
        0, check="count", low=0, high=MAX_SPARES_PER_SERVER, help="idle spare GPUs per HB domain",
        description="Idle spare GPUs in every server's HB domain (for recovery: spare).")
    spare_servers: int = _param(
        0, check="count", low=0, high=lambda v: MAX_SERVERS - v["servers"], help="idle spare servers",
        description="Idle spare servers (for recovery: migrate).")
    delay_us: float | dict = _param(
        0, check="delay", help="one-way propagation delay of a link, us: a number, or per tier nic=X,uplink=Y,hb=Z",
        description="A link's one-way propagation delay in microseconds; each direction gets it once. A number for "
                    "every link, or a map by tier {nic, uplink, hb} (tiers left out: 0). Scaled by time_scale.",
        result="The links' one-way delay, us (a number, or per tier), after time_scale.")
    queue_kb: float | dict | None = _param(
        None, check="queue", help="each shaped link end's queue, KiB: a number, or per tier nic=X,uplink=Y,hb=Z "
                                  "(default: a switch port's buffer at the rate)",
        description="Each shaped link end's queue in KiB (a number, or a map by tier {nic, uplink, hb}). Default: "
                    "a data-centre switch's buffer per port, 32 us of its rate before time scaling, and never "
                    "less than 1 MiB or 16 ms of traffic (a lossless RoCE fabric's pause headroom stands in for "
                    "the rest). Not scaled: time scaling keeps byte counts.",
        result="The shaped ends' queue, KiB (a number, or per tier); null: the default per link.")
    ecn: dict | None = _param(
        None, check="ecn", help="ECN marking at the switch ports, JSON: {kmin_kb, kmax_kb, pmax}, or per tier "
                                "{nic: {...}, uplink: {...}, hb: {...}}",
        description="ECN marking at every shaped switch port's egress queue, as a RED queue with ECN (DCQCN's "
                    "congestion point): ECN-capable packets get CE with probability 0 below kmin_kb KiB of queue, "
                    "rising linearly to pmax at kmax_kb, and 1 from kmax_kb on; Not-ECT packets are never marked. "
                    "{kmin_kb, kmax_kb, pmax} for every tier, or a map by tier {nic, uplink, hb} (tiers left out: "
                    "no marking). Needs clang, bpftool and tc with BPF (docs/ecn.md). Default: off.",
        result="ECN marking thresholds (a map, or per tier); null: off.")
    pfc: dict | None = _param(
        None, check="pfc", help="lossless links, priority flow control at the switch ports, JSON: {xoff_kb, xon_kb}, "
                                "or per tier {nic: {...}, uplink: {...}, hb: {...}}",
        description="Priority flow control (a lossless fabric): when a shaped switch port's egress queue passes "
                    "xoff_kb KiB, the switch pauses the upstream ports that feed that queue (host NICs, neighbour "
                    "switches' ports) until it falls below xon_kb. {xoff_kb, xon_kb} for every tier, or a map by "
                    "tier {nic, uplink, hb} (tiers left out: no pauses); emulated (docs/pfc.md). Default: off.",
        result="PFC thresholds (a map, or per tier); null: off.")
    links: dict | None = _param(
        None, check="links", help="per-link overrides, JSON: {LINK: {mbps, delay_us, queue_kb}}",
        description="Per-link overrides by link name (as `testbed topo` lists them, e.g. rail0-spine1): "
                    "{mbps, delay_us, queue_kb}, each optional; rates and delays in the figures time_scale scales. "
                    "Default: none.")
    ideal_uplinks: bool = _param(
        False, check="flag", help="leave 1:1 uplinks unshaped (patch ports): not a faithful fabric",
        description="Leave the leaf-spine uplinks unshaped OVS patch ports, which never limit (the fastest "
                    "path, and not a faithful fabric: results and the summary say so). Default: every link is "
                    "shaped at both ends.",
        result="Uplinks left unshaped: the fabric is not faithful.")
    time_scale: float = _param(
        1.0, check="ratio", low=1, high=MAX_TIME_SCALE, help="K: rates / K and delays x K (the figures given are a "
                                                              "real fabric's)",
        description="K: the fabric's rates and delays are a real fabric's, emulated with rates divided by K and "
                    "delays multiplied by K, which keeps bandwidth-delay products (in packets) the real ones. "
                    "E.g. nic_mbps: 400000, delay_us: 2, time_scale: 40000 runs 10 Mbit/s NICs with 80 ms per "
                    "hop. The derived figures are printed and kept in results.json.",
        result="K: rates divided and delays multiplied by it.")
    sites: dict | None = _param(
        None, check="sites", help="sites, JSON: {NAME: {kind, servers, ...}}, each a fabric of its own",
        description="Sites, each a fabric of its own joined to the others by `wan` links: a map of site name "
                    "(1-3 lowercase letters or digits, a letter first) to the site's keys, which override this "
                    f"section's for that site: {', '.join(SITE_KEYS)}. gpus_per_server, the rates, the MTU and "
                    "time_scale are the whole fabric's; servers and cpu_hosts become the sites' totals. Servers "
                    "are numbered on across sites (s0g0, ...), switches take their site's name first (euspine0). "
                    "Default: one site, no WAN (docs/sites.md).",
        result="The sites as given: name -> the site's keys (null: one site).")
    wan: list | None = _param(
        None, check="wan", help="WAN links between sites, JSON: [{a: SITE[:SWITCH], b: ..., mbps, delay_us, loss, "
                                "queue_kb}]",
        description="Links between sites' gateway switches: a list of {a, b, mbps, delay_us, loss, queue_kb}. a "
                    "and b are SITE:SWITCH (a switch of that site, e.g. eu:spine1, us:fe0) or SITE (its spine0, "
                    "else its fe0); mbps is the rate (required), delay_us the one-way delay (default 0), loss the "
                    "share of frames dropped in each direction, in [0, 1) (default 0), queue_kb each end's "
                    "queue (default: the rate's, as any link). Rates and delays are scaled by time_scale. Default: none "
                    "(with sites, each site needs one).",
        result="The WAN links as given (null: none).")

    def __post_init__(self):
        try:
            design = kinds.get(self.kind)
        except kinds.UnknownKind as exc:
            raise TopologyError(str(exc)) from None
        scale = _checked("time_scale", next(p for f, p in fields() if f.name == "time_scale"), self.time_scale, {})
        values: dict = {}
        given: dict = {}        # as given, before time scaling: what to_json keeps, so that it builds the same
        for f, p in fields():
            value = getattr(self, f.name)
            if p.needs and not getattr(design, p.needs):
                value = 0
            elif value is None and p.derived:
                given[f.name] = p.derived(given)
                value = _checked(f.name, p, p.derived(values), values)
            else:
                given[f.name] = value
                value = _checked(f.name, p, _scaled(p.check, value, scale), values)
            values[f.name] = value
            object.__setattr__(self, f.name, value)
        object.__setattr__(self, "_given", {k: given[k] for k in SCALED} if scale != 1 else {})
        object.__setattr__(self, "_sites", {})
        if self.sites:
            _resolve_sites(self)

    def tier_value(self, name: str, tier: str, default=None):
        """delay_us or queue_kb for a link of this tier (nic, uplink, hb; another: the default)."""
        value = getattr(self, name)
        if isinstance(value, dict):
            return value.get(tier, default)
        return default if value is None or tier not in TIERS else value

    def ecn_thresholds(self, tier: str) -> dict | None:
        """fabric.ecn's {kmin_kb, kmax_kb, pmax} for the switch ports of this tier's links (None: no marking)."""
        if not self.ecn or tier not in TIERS:
            return None
        return self.ecn.get(tier) if "pmax" not in self.ecn else self.ecn

    def pfc_thresholds(self, tier: str) -> dict | None:
        """fabric.pfc's {xoff_kb, xon_kb} for the switch ports of this tier's links (None: no pauses)."""
        if not self.pfc or tier not in TIERS:
            return None
        return self.pfc.get(tier) if "xoff_kb" not in self.pfc else self.pfc

    def link_override(self, link_name: str) -> dict:
        """fabric.links' overrides for this link, after time scaling (empty: none)."""
        return (self.links or {}).get(link_name, {})

    @property
    def faithful(self) -> bool:
        """Whether every link is a real link: shaped, none left ideal."""
        return not self.ideal_uplinks

    @property
    def design(self) -> kinds.FabricKind:
        """The kind's object, which answers cabling and path questions."""
        return kinds.get(self.kind)

    def to_json(self) -> dict:
        """The parameters as given (before time scaling): FabricParams(**to_json()) is the same."""
        return dataclasses.asdict(self) | self._given

    def results_values(self) -> dict:
        """The parameters the results' fabric block records (rates and delays after time scaling), and with a
        time scale the figures given."""
        out = {"kind": self.kind} | {f.name: getattr(self, f.name) for f, p in fields() if p.result is not None}
        return out | {"link_overrides": self.links, "faithful": self.faithful} \
            | ({"time_scaled_from": self._given} if self._given else {})

    def time_scaling(self) -> list[str]:
        """What time_scale derived, one line per figure (empty without a time scale)."""
        if not self._given:
            return []
        k = _plain(self.time_scale)
        lines = [f"time_scale {k}: rates / {k}, delays x {k}"]
        for name in SCALED:
            if self._given[name] not in (None, 0, {}):
                lines.append(f"  {name}: {_shown(self._given[name])} -> {_shown(getattr(self, name))}")
        return lines


SCALED = ("nic_mbps", "hb_mbps", "delay_us", "links", "wan")       # what time_scale changes


def _shown(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    return f"{value:.10g}" if isinstance(value, float) else str(value)


def _scaled(check: str, value, k: float):
    """A given value after time scaling by k: rates / k, delays x k (what is not a number is left for the
    checks to refuse)."""
    if k == 1:
        return value
    number = lambda v: not isinstance(v, bool) and isinstance(v, (int, float))
    if check == "rate" and number(value):
        return value / k
    if check == "delay":
        return {t: v * k if number(v) else v for t, v in value.items()} if isinstance(value, dict) \
            else value * k if number(value) else value
    if check == "wan" and isinstance(value, list):
        return [{key: v / k if key == "mbps" and number(v) else v * k if key == "delay_us" and number(v) else v
                 for key, v in w.items()} if isinstance(w, dict) else w for w in value]
    if check == "links" and isinstance(value, dict):
        return {name: {key: v / k if key == "mbps" and number(v) else v * k if key == "delay_us" and number(v) else v
                       for key, v in o.items()} if isinstance(o, dict) else o for name, o in value.items()}
    return value


def fields() -> list[tuple[dataclasses.Field, Param]]:
    """Every parameter but the kind, in declaration order, with its Param."""
    return [(f, f.metadata["param"]) for f in dataclasses.fields(FabricParams) if "param" in f.metadata]


def _checked(name: str, p: Param, value, values: dict):
    if p.check in ("delay", "queue"):
        return _checked_tiers(name, p.check, value)
    if p.check == "links":
        return _checked_links(value)
    if p.check == "ecn":
        return _checked_ecn(value)
    if p.check == "pfc":
        return _checked_pfc(value)
    if p.check in ("sites", "wan"):
        return _checked_sites(value) if p.check == "sites" else _checked_wan(value)
    if p.check == "flag":
        if not isinstance(value, bool):
            raise TopologyError(f"{name} must be true or false, got {value!r}")
        return value
    high = p.high(values) if callable(p.high) else p.high
    if p.check == "count":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TopologyError(f"{name} must be an integer, got {value!r}")
        if not p.low <= value <= high:
            raise TopologyError(f"{name} must be between {p.low} and {high}, got {value}")
        return value
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if p.check == "rate":
        if not number or not 0 < value <= MAX_MBPS:
            raise TopologyError(f"{name} must be a rate in Mbit/s in (0, {MAX_MBPS}], got {value!r}")
        return float(value)
    if not number or not p.low <= value <= high:
        raise TopologyError(f"{name} must be a ratio between {p.low} and {high}, got {value!r}")
    return float(value)


def _number(name: str, check: str, value):
    """A delay (us, >= 0) or a queue (KiB, > 0), as a float."""
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if check == "delay" and not (number and 0 <= value <= MAX_DELAY_US):
        raise TopologyError(f"{name} must be a delay in us in [0, {MAX_DELAY_US}], got {value!r}")
    if check == "queue" and not (number and 0 < value <= MAX_QUEUE_KB):
        raise TopologyError(f"{name} must be a queue in KiB in (0, {MAX_QUEUE_KB}], got {value!r}")
    if check == "rate" and not (number and 0 < value <= MAX_MBPS):
        raise TopologyError(f"{name} must be a rate in Mbit/s in (0, {MAX_MBPS}], got {value!r}")
    return float(value)


def _checked_tiers(name: str, check: str, value):
    """A number for every tier, or a map by tier."""
    if value is None and check == "queue":
        return None
    if isinstance(value, dict):
        unknown = [t for t in value if t not in TIERS]
        if unknown:
            raise TopologyError(f"{name}: unknown tier {unknown[0]!r}; tiers are {', '.join(TIERS)}")
        return {t: _number(f"{name}.{t}", check, v) for t, v in value.items()}
    return _number(name, check, value)


def _checked_links(value):
    """Per-link overrides: link name -> {mbps, delay_us, queue_kb}; the names are checked against the fabric
    when it is built (topo.build_from)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TopologyError(f"links must be a map of link name to {{{', '.join(OVERRIDES)}}}, got {value!r}")
    out = {}
    for link, o in value.items():
        if not isinstance(o, dict) or not o:
            raise TopologyError(f"links.{link} must be a map with some of {', '.join(OVERRIDES)}, got {o!r}")
        unknown = [k for k in o if k not in OVERRIDES]
        if unknown:
            raise TopologyError(f"links.{link}: unknown key {unknown[0]!r}; keys are {', '.join(OVERRIDES)}")
        out[str(link)] = {k: _number(f"links.{link}.{k}", OVERRIDES[k][0], v) for k, v in o.items()}
    return out


ECN_KEYS = ("kmin_kb", "kmax_kb", "pmax")
PFC_KEYS = ("xoff_kb", "xon_kb")


def _per_tier(what: str, value, thresholds):
    """A map of thresholds for every tier, or a map by tier of them; None: off."""
    if value is None:
        return None
    if isinstance(value, dict) and value and all(k in TIERS for k in value):
        return {t: thresholds(f"{what}.{t}", v) for t, v in value.items()}
    return thresholds(what, value)


def _threshold_map(name: str, value, keys: tuple[str, ...]) -> None:
    """Check that value is a map with exactly these keys (or tiers of such maps), and its queues in KiB."""
    if not isinstance(value, dict):
        raise TopologyError(f"{name} must be a map {{{', '.join(keys)}}}, got {value!r}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise TopologyError(f"{name}: unknown key {unknown[0]!r}; keys are {', '.join(keys)} (or tiers "
                            f"{', '.join(TIERS)})")
    absent = [k for k in keys if k not in value]
    if absent:
        raise TopologyError(f"{name} needs {absent[0]}")
    for k in keys:
        if k.endswith("_kb") and (not _is_number(value[k]) or not 0 <= value[k] <= MAX_QUEUE_KB):
            raise TopologyError(f"{name}.{k} must be a queue in KiB in [0, {MAX_QUEUE_KB}], got {value[k]!r}")


def _is_number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float))


def _checked_ecn(value):
    """ECN thresholds {kmin_kb, kmax_kb, pmax} for every tier, or a map by tier of them; None: off."""
    return _per_tier("ecn", value, _ecn_thresholds)


def _ecn_thresholds(name: str, value) -> dict:
    _threshold_map(name, value, ECN_KEYS)
    if value["kmin_kb"] > value["kmax_kb"]:
        raise TopologyError(f"{name}: kmin_kb ({value['kmin_kb']}) is above kmax_kb ({value['kmax_kb']})")
    if not _is_number(value["pmax"]) or not 0 < value["pmax"] <= 1:
        raise TopologyError(f"{name}.pmax must be a probability in (0, 1], got {value['pmax']!r}")
    return {k: float(value[k]) for k in ECN_KEYS}


def _checked_pfc(value):
    """PFC thresholds {xoff_kb, xon_kb} for every tier, or a map by tier of them; None: off."""
    return _per_tier("pfc", value, _pfc_thresholds)


def _pfc_thresholds(name: str, value) -> dict:
    _threshold_map(name, value, PFC_KEYS)
    if value["xon_kb"] >= value["xoff_kb"]:
        raise TopologyError(f"{name}: xon_kb ({value['xon_kb']}) must be below xoff_kb ({value['xoff_kb']})")
    return {k: float(value[k]) for k in PFC_KEYS}


# -- sites (testbed.fabric.sites places them in the whole fabric) ----------------------------------------

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


def _checked_sites(value):
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


def _checked_wan(value):
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


def _resolve_sites(params: "FabricParams") -> None:
    """Make each site's FabricParams (params._sites), then set the whole fabric's servers and CPU hosts to the
    sites' totals and params.sites to the sites' keys with their counts filled in (to_json builds the same)."""
    if params.links:
        raise TopologyError("links: with sites, each site gives its own (sites.NAME.links, by the site's link "
                            "names, e.g. rail0-spine1)")
    if params.spares_per_server or params.spare_servers:
        raise TopologyError("spares_per_server and spare_servers: spares are not made in a fabric of sites")
    given = params.to_json()        # the values before time scaling: each site scales its own
    unused = [f.name for f, p in fields() if p.needs and not getattr(params.design, p.needs)]   # 0 here: not passed on
    inherited = {k: given[k] for k in SITE_KEYS + FABRIC_WIDE if k != "links" and k not in unused}
    made, filled = {}, {}
    for name, keys in params.sites.items():
        values = inherited | {"kind": params.kind} | keys
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


# -- what the fields generate ------------------------------------------------------------------------

def _plain(value):
    """A default as the schema and help show it: 5, not 5.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _tiers_schema(check: str) -> dict:
    default = "0" if check == "delay" else "a switch port's buffer at the link's rate"
    tier = {t: NUMBERS[check] | {"description": f"On {t} links. Default: {default}."} for t in TIERS}
    return {"anyOf": [NUMBERS[check], {"type": "object", "additionalProperties": False, "minProperties": 1,
                                       "properties": tier}]}


NUMBERS = {"delay": {"type": "number", "minimum": 0, "maximum": MAX_DELAY_US},
           "queue": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_QUEUE_KB},
           "rate": {"type": "number", "exclusiveMinimum": 0}}
OVERRIDES = {"mbps": ("rate", "The link's rate in Mbit/s, at both ends. Default: its tier's."),
             "delay_us": ("delay", "The link's one-way delay in us. Default: its tier's."),
             "queue_kb": ("queue", "Each end's queue in KiB. Default: its tier's.")}


def _ecn_schema() -> dict:
    queue = {"type": "number", "minimum": 0, "maximum": MAX_QUEUE_KB}
    keys = {"kmin_kb": queue | {"description": "Queue (KiB) below which nothing is marked."},
            "kmax_kb": queue | {"description": "Queue (KiB) from which every ECN-capable packet is marked."},
            "pmax": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
                     "description": "Marking probability at kmax_kb."}}
    thresholds = {"type": "object", "additionalProperties": False, "required": list(ECN_KEYS), "properties": keys}
    tiers = {t: thresholds | {"description": f"On {t} links' switch ports. Default: no marking."} for t in TIERS}
    return {"anyOf": [thresholds, {"type": "object", "additionalProperties": False, "minProperties": 1,
                                   "properties": tiers}]}


def _pfc_schema() -> dict:
    queue = {"type": "number", "minimum": 0, "maximum": MAX_QUEUE_KB}
    keys = {"xoff_kb": queue | {"description": "Queue (KiB) above which the port's upstream ports are paused."},
            "xon_kb": queue | {"description": "Queue (KiB) below which they are resumed; below xoff_kb."}}
    thresholds = {"type": "object", "additionalProperties": False, "required": list(PFC_KEYS), "properties": keys}
    tiers = {t: thresholds | {"description": f"On {t} links' switch ports. Default: no pauses."} for t in TIERS}
    return {"anyOf": [thresholds, {"type": "object", "additionalProperties": False, "minProperties": 1,
                                   "properties": tiers}]}


def _schema_of(f: dataclasses.Field, p: Param) -> dict:
    if p.check in ("delay", "queue"):
        out = _tiers_schema(p.check)
    elif p.check == "links":
        override = {"type": "object", "additionalProperties": False, "minProperties": 1,
                    "properties": {k: NUMBERS[check] | {"description": text} for k, (check, text) in OVERRIDES.items()}}
        out = {"type": "object", "additionalProperties": override}
    elif p.check == "ecn":
        out = _ecn_schema()
    elif p.check == "pfc":
        out = _pfc_schema()
    elif p.check == "sites":
        site = {"type": "object", "additionalProperties": False,
                "properties": {f2.name: _schema_of(f2, p2) for f2, p2 in fields() if f2.name in SITE_KEYS}
                | {"kind": {"enum": list(kinds.NAMES), "description": "The site's design. Default: the "
                                                                       "fabric section's."}}}
        for key in ("servers", "cpu_hosts"):
            site["properties"][key].pop("default", None)        # the fabric section's, unless the site gives it
        out = {"type": "object", "minProperties": 2, "additionalProperties": False,
               "patternProperties": {SITE_NAME: site}}
    elif p.check == "wan":
        end = {"type": "string", "pattern": f"{SITE_NAME[:-1]}(:[a-z0-9]+)?$",
               "description": "SITE:SWITCH, or SITE (its spine0, else its fe0)."}
        out = {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["a", "b", "mbps"],
            "properties": {"a": end, "b": end,
                           "mbps": NUMBERS["rate"] | {"description": "The link's rate in Mbit/s, both ways."},
                           "delay_us": NUMBERS["delay"] | {"description": "One-way delay in us. Default: 0."},
                           "loss": {"type": "number", "minimum": 0, "exclusiveMaximum": 1,
                                    "description": "Share of frames lost each way, in [0, 1). Default: 0."},
                           "queue_kb": NUMBERS["queue"] | {"description": "Each end's queue in KiB. Default: "
                                                                          "the rate's, as any link."}}}}
    elif p.check == "flag":
        out = {"type": "boolean"}
    elif p.check == "count":
        out = {"type": "integer"} | ({"minimum": p.low} if p.low_in_schema else {})
    elif p.check == "rate":
        out = {"type": "number", "exclusiveMinimum": 0}
    else:
        out = {"type": "number", "minimum": p.low}
    return out | ({"default": _plain(f.default)} if f.default is not None else {}) | {"description": p.description}


def scenario_schema() -> dict:
    """The scenario's `fabric` section."""
    kind = {"enum": list(kinds.NAMES), "description": f"The design: {kinds.described()}."}
    return {"type": "object", "additionalProperties": False, "required": ["kind"],
            "description": "The emulated cluster: GPU servers (HB domains), the switches between them, spares, "
                           "CPU hosts.",
            "properties": {"kind": kind} | {f.name: _schema_of(f, p) for f, p in fields()}}


def results_schema() -> tuple[dict, list[str]]:
    """The properties the parameters give the results' fabric block, and which of them it requires."""
    props = {"kind": {"enum": list(kinds.NAMES), "description": "The fabric's topology."}}
    for f, p in fields():
        if p.result is not None:
            props[f.name] = RESULT_TYPES.get(p.check, {"type": "number"}) | {"description": p.result}
    props["link_overrides"] = {"type": ["object", "null"], "description": "fabric.links: per-link overrides by "
                                                                          "link name, after time_scale."}
    props["faithful"] = {"type": "boolean", "description": "Every link shaped as a real link (false: "
                                                           "ideal_uplinks)."}
    props["time_scaled_from"] = {"type": "object", "description": "With a time scale: the rates and delays as "
                                                                  "given (a real fabric's), before scaling."}
    return props, ["kind"] + [f.name for f, p in fields() if p.result_required]


RESULT_TYPES = {"count": {"type": "integer", "minimum": 0}, "flag": {"type": "boolean"},
                "delay": {"type": ["number", "object"]}, "queue": {"type": ["number", "object", "null"]},
                "links": {"type": ["object", "null"]}, "ecn": {"type": ["object", "null"]},
                "pfc": {"type": ["object", "null"]}, "sites": {"type": ["object", "null"]},
                "wan": {"type": ["array", "null"]}}


def add_flags(parser) -> None:
    """`testbed topo`'s kind and parameter flags; their defaults are the model's (None: not given)."""
    parser.add_argument("kind", help=" | ".join(kinds.NAMES))
    for f, p in fields():
        names = ([f"--{p.flag}"] if p.flag else []) + ["--" + f.name.replace("_", "-")]
        shown = "" if p.required_flag or f.default is None else f" (default {_plain(f.default)})"
        parser.add_argument(*names, dest=f.name, type=FLAG_TYPES.get(p.check, float), default=None,
                            required=p.required_flag, metavar="N" if p.check == "count" else "X",
                            help=(p.help or p.description) + shown)


def _tiers_flag(text: str):
    """A topo flag's delay or queue: a number, or TIER=X,TIER=Y."""
    if "=" not in text:
        return float(text)
    pairs = [part.partition("=") for part in text.split(",")]
    return {tier.strip(): float(v) for tier, _, v in pairs}


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(text)
    return text.lower() in ("true", "1", "yes")


FLAG_TYPES = {"count": int, "delay": _tiers_flag, "queue": _tiers_flag, "links": json.loads, "ecn": json.loads,
              "pfc": json.loads, "flag": _flag, "sites": json.loads, "wan": json.loads}


def given(args) -> dict:
    """The parameters given on the command line (add_flags), in declaration order."""
    return {f.name: getattr(args, f.name) for f, _ in fields() if getattr(args, f.name) is not None}


def topo_keys() -> dict[str, str]:
    """`up --topo` keys: each parameter's name, and its short name where it has one -> the parameter."""
    return {key: f.name for f, p in fields() for key in ([p.flag] if p.flag else []) + [f.name]}


def shown_topo_keys() -> list[str]:
    """The keys `up --topo` lists: the short name where there is one."""
    return [p.flag or f.name for f, p in fields()]


def ignored_params(kind: str, given) -> list[str]:
    """The given parameters that a fabric of this kind ignores, in the order given."""
    return [k for k in given if k in kinds.get(kind).ignored]
