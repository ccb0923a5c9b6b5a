"""How the fabric's links are made, named and shaped, and what each routing mode asks of switches and hosts.

Pure functions of the fabric model: no root, no Mininet. `network.py` applies them at bring-up; faults,
captures and the report use the same names.

A Link carries everything about one cable; `new_link` is the one place that works its properties out from
the fabric's parameters. Adding a link property is a Link field, its line in `new_link`, and the code in
network.py that applies it.
"""
from __future__ import annotations

import os
import string
from dataclasses import dataclass

from hosts.rdma.mtu import NIC_MTU, roce_mtu
from hosts.recovery.beats import PORT as BEAT_PORT
from testbed import PREFIX

ROUTING_MODES = ("single", "ecmp", "spray", "rr", "split:K")
PACE = 1.0              # ranks send at their links' shaped rates, as a NIC at line rate
TAG_VARIABLE = "TESTBED_FABRIC_TAG"
TAG_CHARS = string.ascii_lowercase + string.digits
IFNAMSIZ = 15           # the kernel's limit on a device name


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    mbps: float
    a_port: int            # switch port number, or host interface index (0 = eth0)
    b_port: int
    kind: str              # nic | hb | uplink | frontend | wan
    standby: bool = False  # cabled but disabled at bring-up: a spare's NIC
    mtu: int = NIC_MTU
    shaped: bool = True    # tbf at both ends; False (front-end links, ideal_uplinks): no rate limit
    queue_bytes: int | None = None     # each shaped end's queue (tbf limit)
    delay_us: float = 0.0  # one-way propagation delay, each direction once
    loss: float = 0.0      # share of frames lost in each direction (WAN links)

    @property
    def name(self) -> str:
        """The link's name in scenarios (fabric.links, faults) and results: "A-B"."""
        return f"{self.a}-{self.b}"


def link_mtu(params, kind: str) -> int:
    """The MTU of a link of this kind: the fabric's hb_mtu on HB links, its nic_mtu on every other link."""
    return params.hb_mtu if kind == "hb" else params.nic_mtu


def new_link(params, a: str, b: str, mbps: float, a_port: int, b_port: int, kind: str,
             standby: bool = False) -> Link:
    """A link with every property worked out from the fabric's parameters: its tier's (kind's) rate, delay and
    queue, then fabric.links' overrides for it by name. Every link is shaped at both ends, uplinks too,
    except front-end links (sized for all their CPU hosts) and, with ideal_uplinks, uplinks without an
    override."""
    mtu = link_mtu(params, kind)
    override = params.link_override(f"{a}-{b}")
    mbps = float(override.get("mbps", mbps))
    shaped = "mbps" in override or not (kind == "frontend" or (kind == "uplink" and params.ideal_uplinks))
    delay = override.get("delay_us", params.tier_value("delay_us", kind, 0.0))
    queue_kb = override.get("queue_kb", params.tier_value("queue_kb", kind))
    queue = int(queue_kb * 1024) if queue_kb else default_queue(mbps, mtu, params.time_scale)
    if shaped and queue < mtu:
        raise ValueError(f"the queue of {a}-{b}, {queue} bytes, holds no {mtu}-byte frame"
                         + (" (lower fabric.hb_mtu, or give the hb tier a queue_kb of its own)" if kind == "hb" else ""))
    return Link(a, b, mbps, a_port, b_port, kind, standby, mtu, shaped, queue if shaped else None, float(delay))


def fabric_tag() -> str:
    """The tag that sets this fabric's names apart from another on the same machine: empty (the default,
    one fabric per machine) or one lowercase letter or digit from TESTBED_FABRIC_TAG (the two-at-a-time
    test run gives each test worker its own, docs/testing.md). One character only: a spine's port device,
    tb-spine63-p64, leaves room for one."""
    tag = os.environ.get(TAG_VARIABLE, "")
    if tag and (len(tag) != 1 or tag not in TAG_CHARS):
        raise ValueError(f"{TAG_VARIABLE}={tag!r}: must be empty or one lowercase letter or digit")
    return tag


def sysname(node: str) -> str:
    """Name of a switch on the machine (bridge name, port-name stem), or of a Docker host's container."""
    return PREFIX + fabric_tag() + node


def node_of(name: str, tag: str) -> str:
    """The model's name of a switch from its name on the machine, in a run that had this tag."""
    return name.removeprefix(PREFIX + tag)


def overlong_names(fabric) -> list[str]:
    """Device names of this fabric the kernel would refuse (longer than IFNAMSIZ)."""
    links = fabric.links + [l for circuit in fabric.circuits.values() for l in circuit]
    ends = [(l.a, l.a_port) for l in links] + [(l.b, l.b_port) for l in links]
    names = {switch_port(node, port) for node, port in ends if node not in fabric.hosts}
    return sorted(n for n in names | {sysname(s) for s in fabric.switches} if len(n) > IFNAMSIZ)


def switch_port(switch: str, port: int) -> str:
    """A switch's port device on the machine (a host's end of a link is ethN inside the host)."""
    return f"{sysname(switch)}-p{port}"


def interface(fabric, node: str, port: int) -> str:
    """The device at one end of a link: ethN inside a host, the switch's port device otherwise."""
    return f"eth{port}" if node in fabric.hosts else switch_port(node, port)


def ofport(fabric, node: str, port: int) -> int | None:
    """The OpenFlow port number of a link end: bring-up requests the cabling port number as the OVS
    ofport (ofport_request), so the controller's and the counters' numbers are the model's. None for a
    host end and for an HB domain (a Linux bridge, no OpenFlow)."""
    switch = fabric.switches.get(node)
    return port if switch is not None and switch.sdn else None


def is_patch(fabric, link) -> bool:
    """Whether the model makes this link an OVS patch port: an unshaped switch-to-switch link without delay."""
    return not link.shaped and not link.delay_us and not link.loss


def roce_mtus(fabric) -> dict[str, int]:
    """What the ranks' RoCE devices use on their NIC and HB ports."""
    return {kind: roce_mtu(link_mtu(fabric.params, kind), large=kind == "hb") for kind in ("nic", "hb")}


def tbf_burst(mbps: float, mtu: int) -> int:
    return max(2 * (mtu + 100), int(mbps * 1e6 / 8 / 250))      # ~4 ms of traffic, at least 2 frames


PORT_BUFFER_US = 32     # a switch's packet buffer per port, in time at the port's rate (docs/fabrics.md)


def default_queue(mbps: float, mtu: int, time_scale: float = 1.0) -> int:
    """A shaped end's queue when the scenario gives none: a data-centre switch's buffer per port, 32 us of the
    port's real rate (mbps x time_scale; the bytes are the real ones, as time scaling keeps byte counts), and
    never less than tbf_limit."""
    return max(tbf_limit(mbps, mtu), int(PORT_BUFFER_US * mbps * time_scale / 8))


def tbf_limit(mbps: float, mtu: int) -> int:
    """Queue bytes: deep, like a lossless (PFC) RoCE fabric's buffers, and larger than a socket send
    buffer, so that paced senders block rather than lose packets at their own NIC."""
    return max(4 * tbf_burst(mbps, mtu), 1 << 20)


def tbf(dev: str, mbps: float, mtu: int = 1500, limit: int | None = None) -> str:
    """A tbf qdisc holding `mbps`, with a queue of `limit` bytes (default tbf_limit)."""
    return f"tc qdisc replace dev {dev} root handle 1: tbf rate {mbps}mbit burst {tbf_burst(mbps, mtu)} " \
           f"limit {limit or tbf_limit(mbps, mtu)}"


def tbf_of(dev: str, link: Link) -> str:
    """The tbf qdisc at one end of a shaped link."""
    return tbf(dev, link.mbps, link.mtu, link.queue_bytes)


# classic BPF (cls_bpf): IPv4, UDP, not a later fragment, destination port BEAT_PORT -> -1 (the filter's class)
BEAT_MATCH = ",".join(["11", "40 0 0 12", "21 0 8 2048", "48 0 0 23", "21 0 6 17", "40 0 0 20", "69 4 0 8191",
                       "177 0 0 14", "72 0 0 16", f"21 0 1 {BEAT_PORT}", "6 0 0 4294967295", "6 0 0 0"])


GATE_OPEN = "32gbit"        # a paused port's gate when open: far above any link's rate (tbf's rate is 32 bits, bytes/s)
GATE_BURST = 65536          # and its bucket: any frame, GSO ones too


def beats_first(dev: str, mbps: float, mtu: int = 1500, limit: int | None = None,
                gate_limit: int | None = None) -> list[str]:
    """Heartbeats ahead of the bulk queue of a tbf (handle 1:): as a real NIC gives its control traffic a
    traffic class of its own, a beat must not wait behind a full data queue (1 MiB is 1.7 s at 5 Mbit/s,
    longer than the heartbeat timeout). There is no prio qdisc here, so tbf's child is an htb with two
    classes far above the link's rate (tbf alone sets the rate), served by priority: beats (a cls_bpf
    match on their UDP port) first, everything else in a byte FIFO of the link's queue size. Added once,
    after the tbf, on a device that has no child qdisc yet. With a gate_limit (fabric.pfc), the data class's FIFO,
    of that many bytes, sits under a tbf of its own (handle 12:) that PFC closes to pause the port
    (testbed.fabric.pfc)."""
    quantum, limit = mtu + 100, limit or tbf_limit(mbps, mtu)
    classes = [f"tc class add dev {dev} parent 10: classid 10:{band} htb rate 100gbit quantum {quantum} "
               f"prio {band - 1}" for band in (1, 2)]
    queue = f"tbf rate {GATE_OPEN} burst {GATE_BURST} limit {gate_limit}" if gate_limit else f"bfifo limit {limit}"
    return [f"tc qdisc add dev {dev} parent 1:1 handle 10: htb default 2", *classes,
            f"tc qdisc add dev {dev} parent 10:2 handle 12: {queue}",
            f"tc filter add dev {dev} parent 10: protocol all pref 1 handle 1 bpf bytecode '{BEAT_MATCH}' "
            f"classid 10:1"]


def shape(dev: str, link: Link, gate_limit: int | None = None) -> list[str]:
    """The commands that shape one end of a shaped link: its tbf, heartbeats first (the data queue gated: PFC)."""
    return [tbf_of(dev, link), *beats_first(dev, link.mbps, link.mtu, link.queue_bytes, gate_limit)]


def worst_queueing_delay(fabric) -> float:
    """Seconds a packet can wait on the longest path, and its acknowledgement come back: full queues at the
    host NIC out, two shaped uplink hops where there are spines, a WAN link between sites, and the switch
    port into the destination host, plus the round trip's propagation delays. Transport timers must outlast
    it, or they retransmit packets that are only queued or on the wire."""
    def worst(kind: str) -> tuple[float, float]:
        found = [(2 * l.queue_bytes * 8 / (l.mbps * 1e6) if l.shaped else 0.0, 2 * l.delay_us / 1e6)
                 for l in fabric.links if l.kind == kind]
        return max(found, default=(0.0, 0.0))
    (nic_queue, nic_delay), (up_queue, up_delay) = worst("nic"), worst("uplink")
    wan_queue, wan_delay = worst("wan")
    return nic_queue + up_queue + wan_queue + 2 * (nic_delay + up_delay + wan_delay)


def controller_mode(routing: str) -> str:
    """What the switches do for a routing mode: spray and split:K are ECMP in the switches, with the
    entropy added by the hosts (a new UDP source port per packet, or K sub-flows per message)."""
    return routing if routing in ("single", "rr") else "ecmp"


def transport_options(routing: str) -> dict:
    """What the hosts' transport does for a routing mode."""
    if routing == "spray":
        return {"sport_mode": "packet", "split": 1}
    if routing.startswith("split:"):
        return {"sport_mode": "qp", "split": int(routing.split(":", 1)[1])}
    return {"sport_mode": "qp", "split": 1}


def rank_transport(fabric, routing: str) -> dict:
    """What every rank's RoCE transport is told: the routing mode's options, a retransmission timeout that
    outlasts full queues, the RoCE MTU of each port, and pacing at the shaped rates (a NIC sends at line rate; the
    link's tbf is the wire, and what a port sends besides, ACKs and beats, waits in its queue)."""
    return {**transport_options(routing), "rc_timeout": 0.05 + 2 * worst_queueing_delay(fabric),
            "roce_mtu": roce_mtus(fabric),
            "rate_limit_bps": {"nic": PACE * fabric.params.nic_mbps * 1e6,
                               "hb": PACE * fabric.params.hb_mbps * 1e6}}
