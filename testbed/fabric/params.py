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
from dataclasses import dataclass, field
from typing import Callable

from hosts.rdma.mtu import NIC_MTU, ROCE_HEADERS
from testbed.fabric import kinds

# Addressing limits: server index and local rank go into one address byte each.
MAX_SERVERS = 200
MAX_GPUS_PER_SERVER = 64
MAX_SPINES = 64
MAX_CPU_HOSTS = 200
MAX_SPARES_PER_SERVER = 16
MIN_NIC_MTU, MAX_NIC_MTU = 1024 + ROCE_HEADERS, 9216     # RoCE MTU 1024 at least; jumbo frames at most
MAX_MBPS = 100_000
MAX_OVERSUBSCRIPTION = 64


class TopologyError(ValueError):
    """A fabric that cannot be built; the message names the bad parameter."""


@dataclass(frozen=True)
class Param:
    """How one fabric parameter is written, checked and shown.

    check: "count" (an integer in [low, high]), "rate" (Mbit/s in (0, MAX_MBPS]) or "ratio" (a number in
    [low, high]); high may depend on the other values (spare_servers: what servers leave free)."""
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
        result="MTU of every link but the HB ones (9000 on HB links).")
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

    def __post_init__(self):
        try:
            design = kinds.get(self.kind)
        except kinds.UnknownKind as exc:
            raise TopologyError(str(exc)) from None
        values: dict = {}
        for f, p in fields():
            value = getattr(self, f.name)
            if p.needs and not getattr(design, p.needs):
                value = 0
            else:
                value = _checked(f.name, p, p.derived(values) if value is None and p.derived else value, values)
            values[f.name] = value
            object.__setattr__(self, f.name, value)

    @property
    def design(self) -> kinds.FabricKind:
        """The kind's object, which answers cabling and path questions."""
        return kinds.get(self.kind)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def results_values(self) -> dict:
        """The parameters the results' fabric block records."""
        return {"kind": self.kind} | {f.name: getattr(self, f.name) for f, p in fields() if p.result is not None}


def fields() -> list[tuple[dataclasses.Field, Param]]:
    """Every parameter but the kind, in declaration order, with its Param."""
    return [(f, f.metadata["param"]) for f in dataclasses.fields(FabricParams) if "param" in f.metadata]


def _checked(name: str, p: Param, value, values: dict):
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


# -- what the fields generate ------------------------------------------------------------------------

def _plain(value):
    """A default as the schema and help show it: 5, not 5.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _schema_of(f: dataclasses.Field, p: Param) -> dict:
    if p.check == "count":
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
            props[f.name] = ({"type": "integer", "minimum": 0} if p.check == "count" else {"type": "number"}) \
                | {"description": p.result}
    return props, ["kind"] + [f.name for f, p in fields() if p.result_required]


def add_flags(parser) -> None:
    """`testbed topo`'s kind and parameter flags; their defaults are the model's (None: not given)."""
    parser.add_argument("kind", help=" | ".join(kinds.NAMES))
    for f, p in fields():
        names = ([f"--{p.flag}"] if p.flag else []) + ["--" + f.name.replace("_", "-")]
        shown = "" if p.required_flag or f.default is None else f" (default {_plain(f.default)})"
        parser.add_argument(*names, dest=f.name, type=int if p.check == "count" else float, default=None,
                            required=p.required_flag, metavar="N" if p.check == "count" else "X",
                            help=(p.help or p.description) + shown)


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
