"""Proactive L3 routing for the emulated GPU fabric, written against the Ryu API.

Runs under os-ken (`python -m controllers.run`) or Ryu (`ryu-manager controllers/fabric_app.py` with
its settings from controllers/settings.py). No flooding and no learning:
the testbed hands over the topology, hosts use static neighbour entries, and every switch gets, as soon
as it connects:
  - one flow per destination IPv4 address: output to a port (`single`) or to a select group over all
    equal-cost ports (`ecmp`);
  - a lowest-priority drop for everything else (so unroutable pairs are really unconnected).
ECMP groups carry Open vSwitch's selection-method property `dp_hash`: OVS's default select hash
ignores UDP ports, which would put every RoCEv2 flow of a host pair on one path. Routes with the same ports
share a group; with --route-groups every multi-path route has a group of its own, so that its buckets count
what each port sent to that destination: the bytes on each link by destination (and so by job) under ECMP and
spraying (testbed/workloads/concurrent_bytes.py). That costs a group per route, and bring-up time.

Mode `rr` instead sends multi-path traffic to the controller, which forwards packet by packet in
round robin: exact per-packet spraying of UDP (and RoCEv2) for small demonstrations, a few thousand
packets/s at most.

Failures: with data-plane failover (--failover) select-group buckets watch their port, and
single-path routes become fast-failover groups over the equal-cost ports, so a switch moves traffic
off a dead port by itself. In every case the controller recomputes the routes on each PORT_STATUS and
updates the switches whose routes changed; on link up it restores them. With a delay (--delay-ms) it acts
on each port change that long after hearing of it, as a remote controller or a switch slow to update its
rules would: the time data-plane failover saves.
Installed state is written to the state file (controllers/state.py) so the testbed knows when routing is ready.
"""
from __future__ import annotations

import os
import struct
import sys
import time

try:  # os-ken is the maintained fork; Ryu has the same API under another name
    from os_ken.base import app_manager
    from os_ken.controller import event as app_event, ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib import hub
    from os_ken.ofproto import ofproto_v1_5
except ImportError:  # pragma: no cover - exercised only under ryu-manager
    from ryu.base import app_manager
    from ryu.controller import event as app_event, ofp_event
    from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from ryu.lib import hub
    from ryu.ofproto import ofproto_v1_5

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from controllers import settings, state  # noqa: E402
from controllers.ofport import port_change  # noqa: E402
from controllers.routes import Topology  # noqa: E402

NTR_VENDOR_ID = 0x0000154D       # Open vSwitch's "Nicira extension" vendor id for OpenFlow 1.5
NTRT_SELECTION_METHOD = 1
PRIO_ROUTE, PRIO_DROP = 100, 0
# Our flows carry this cookie and we delete by cookie mask, so other apps' flows (multicast) survive;
# our group ids count from 1, theirs from 100000.
COOKIE, COOKIE_MASK = 0x4641000000000000, 0xFFFF000000000000     # "FA"


def selection_method(name: str = "dp_hash") -> list[int]:
    """Body of OVS's ntr_group_prop_selection_method as 32-bit words: pad, name[16], param."""
    body = bytes(4) + name.encode().ljust(16, b"\0") + bytes(8)
    return list(struct.unpack("!7I", body))


class PortChangeDue(app_event.EventBase):
    """A port change whose reaction was put off (--delay-ms): it comes back through the app's own event queue,
    so it is handled in order with every other event, as an immediate one is."""

    def __init__(self, name: str, port: int, up: bool, heard_at: float):
        super().__init__()
        self.name, self.port, self.up, self.heard_at = name, port, up, heard_at


class FabricRouting(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        conf = settings.load()
        self.topo = Topology(conf.topology)
        self.mode, self.failover, self.delay_s = conf.routing, conf.failover, conf.delay_s
        self.route_groups = conf.route_groups
        if self.mode not in ("single", "ecmp", "rr"):
            raise ValueError(f"unknown routing mode {self.mode!r}; choose single, ecmp or rr")
        self.rr_next: dict[tuple[str, str], int] = {}     # round robin position per (switch, dst IP)
        self.state_path = conf.state_path
        self.dps: dict[str, object] = {}
        self.groups: dict[str, dict[tuple, int]] = {}     # switch -> {(dst IP or None, type, ports): group id}
        self.current: dict[str, dict[str, tuple]] = {}    # switch -> {dst IP: (type, ports)}
        self.installed: dict[str, dict] = {}
        self.pending: dict[int, tuple[int, str, dict]] = {}    # dpid -> (barrier xid, switch, what it got)
        self.errors: list[str] = []
        self.port_events: list[dict] = []                      # port changes and the route updates they caused
        self.awaited: dict[tuple[int, int], dict] = {}       # (dpid, barrier xid) -> the port event it completes

    # -- what to install --------------------------------------------------------------------------
    def wanted(self) -> dict[str, dict[str, tuple]]:
        """switch -> {dst IP: ("out", (port,)) | ("select", ports) | ("ff", ports)}."""
        table = {}
        for sw, routes in self.topo.ordered_routes().items():
            table[sw] = {}
            for ip, ports in routes.items():
                if len(ports) == 1 or (self.mode == "single" and not self.failover):
                    table[sw][ip] = ("out", (ports[0],))
                elif self.mode == "rr":
                    table[sw][ip] = ("rr", tuple(sorted(ports)))   # per-packet, by the controller
                elif self.mode == "single":
                    table[sw][ip] = ("ff", tuple(ports))           # preferred port first
                else:
                    table[sw][ip] = ("select", tuple(sorted(ports)))
        return table

    # -- switch connection --------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        # os-ken's own handler sets dp.id from this message, but apps run in their own threads and
        # with a second app (multicast) this one can run first
        dp.id = ev.msg.datapath_id
        name = self.topo.by_dpid(dp.id)
        if name is None:
            self.logger.warning("unknown switch dpid %s: left without flows", dp.id)
            return
        self.logger.info("%s connected (dpid %016x)", name, dp.id)    # a switch missing at bring-up: which step
        self.guarded(name, self.install, dp, name)

    def guarded(self, name, fn, *args):
        try:
            fn(*args)
        except Exception as exc:  # the event loop would swallow it: make it visible to the testbed
            self.errors.append(f"{name}: installing routes failed: {exc!r}")
            self.logger.exception(self.errors[-1])
            self.save_state()

    def install(self, dp, name: str) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, cookie=COOKIE,
                                      cookie_mask=COOKIE_MASK, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        for gid in self.groups.get(name, {}).values():           # ours from an earlier connection
            dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=gid))
        self.dps[name] = dp
        self.groups[name] = {}
        self.current[name] = {}
        self.apply(name, self.wanted()[name])
        self.add_flow(dp, PRIO_DROP, parser.OFPMatch(), [])
        self.barrier(dp, name)

    def apply(self, name: str, routes: dict[str, tuple]) -> int:
        """Bring switch `name` to `routes`; returns how many flows changed."""
        dp = self.dps[name]
        ofp, parser = dp.ofproto, dp.ofproto_parser
        changed = 0
        for ip, route in sorted(routes.items()):
            if self.current[name].get(ip) == route:
                continue
            kind, ports = route
            if kind == "out":
                action = parser.OFPActionOutput(ports[0])
            elif kind == "rr":
                action = parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
            else:
                action = parser.OFPActionGroup(self.group(dp, name, ip, kind, ports))
            self.add_flow(dp, PRIO_ROUTE, parser.OFPMatch(eth_type=0x0800, ipv4_dst=ip), [action])
            self.current[name][ip] = route
            changed += 1
        for ip in set(self.current[name]) - set(routes):          # destinations now unreachable
            dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE_STRICT, priority=PRIO_ROUTE,
                                          cookie=COOKIE, cookie_mask=COOKIE_MASK,
                                          match=parser.OFPMatch(eth_type=0x0800, ipv4_dst=ip),
                                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
            del self.current[name][ip]
            changed += 1
        return changed

    def group(self, dp, name: str, ip: str, kind: str, ports: tuple) -> int:
        """The group id of the route to `ip` as (kind, ports) on this switch, created on first use: shared by the
        routes with the same ports, or (route_groups) one per route, whose bucket counters are then that
        destination's bytes per port."""
        key = (ip if self.route_groups else None, kind, ports)
        if key in self.groups[name]:
            return self.groups[name][key]
        gid = len(self.groups[name]) + 1
        self.groups[name][key] = gid
        ofp, parser = dp.ofproto, dp.ofproto_parser
        buckets = []
        for i, port in enumerate(ports):
            props = [parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT, watch=port)] \
                if kind == "ff" or self.failover else []
            if kind == "select":
                props.append(parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=1))
            buckets.append(parser.OFPBucket(bucket_id=i, actions=[parser.OFPActionOutput(port)],
                                            properties=props))
        if kind == "select":
            props = [parser.OFPGroupPropExperimenter(type_=ofp.OFPGPT_EXPERIMENTER, experimenter=NTR_VENDOR_ID,
                                                     exp_type=NTRT_SELECTION_METHOD,
                                                     data=selection_method("dp_hash"))]
            gtype = ofp.OFPGT_SELECT
        else:
            props, gtype = [], ofp.OFPGT_FF
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=gtype, group_id=gid,
                                       buckets=buckets, properties=props))
        return gid

    def add_flow(self, dp, priority, match, actions):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        dp.send_msg(parser.OFPFlowMod(dp, cookie=COOKIE, priority=priority, match=match, instructions=inst))

    def barrier(self, dp, name: str) -> int:
        """Report the switch as installed only once it has processed everything (barrier reply); returns
        the barrier's xid."""
        request = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.send_msg(request)                # sets its xid: another app's barrier reply is not ours
        self.pending[dp.id] = (request.xid, name, {"dpid": dp.id, "routes": len(self.current[name]),
                                                   "groups": len(self.groups[name])})
        return request.xid

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev):
        now, key = time.time(), (ev.msg.datapath.id, ev.msg.xid)
        done = self.pending.get(ev.msg.datapath.id)
        if done and done[0] == ev.msg.xid:
            del self.pending[ev.msg.datapath.id]
            _, name, info = done
            self.installed[name] = {**info, "at": now}
            self.logger.info("%s: rules installed (barrier %d)", name, ev.msg.xid)
        event = self.awaited.pop(key, None)
        if event is not None and not any(e is event for e in self.awaited.values()):
            event["installed_at"] = now        # the last switch this port change touched has its new rules
        if done or event is not None:
            self.save_state()

    # -- controller round robin (mode "rr"): exact per-packet spraying, at a few thousand packets/s --
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        name = self.topo.by_dpid(dp.id)
        if name is None or len(msg.data) < 34 or msg.data[12:14] != b"\x08\x00":
            return
        dst = ".".join(str(b) for b in msg.data[30:34])            # IPv4 destination of the frame
        route = self.current.get(name, {}).get(dst)
        if not route or route[0] != "rr":
            return
        k = self.rr_next.get((name, dst), 0)
        self.rr_next[(name, dst)] = k + 1
        ofp, parser = dp.ofproto, dp.ofproto_parser
        out = route[1][k % len(route[1])]
        data = bytearray(msg.data)
        if data[23] == 17:
            # The sender's UDP checksum may have been left to offload, which a packet-out loses;
            # 0 means "no checksum" in IPv4 UDP (and is what RoCEv2 sends anyway).
            off = 14 + (data[14] & 0x0F) * 4
            data[off + 6: off + 8] = b"\0\0"
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, match=parser.OFPMatch(
            in_port=msg.match["in_port"]), actions=[parser.OFPActionOutput(out)], data=bytes(data)))

    # -- failures ---------------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev):
        change = port_change(self.topo, ev.msg)
        if change is None:
            return
        name, port, up = change
        if self.delay_s:        # the reaction waits; other events (barrier replies, the cable's other end) do not
            hub.spawn_after(self.delay_s, self.send_event, self.name, PortChangeDue(name, port, up, time.time()))
        else:
            self.react(name, port, up, time.time())

    @set_ev_cls(PortChangeDue)
    def port_change_due(self, ev):
        self.react(ev.name, ev.port, ev.up, ev.heard_at)

    def react(self, name: str, port: int, up: bool, t0: float) -> None:
        """Reroute around (or back onto) a port whose state changed; t0 is when the controller heard of it."""
        if not self.topo.set_port(name, port, up):
            return
        wanted = self.wanted()
        event = {"at": t0, "switch": name, "port": port, "up": up}
        changed = 0
        for sw in list(self.dps):
            n = self.apply(sw, wanted[sw])
            if n:
                changed += n
                self.awaited[(self.dps[sw].id, self.barrier(self.dps[sw], sw))] = event
        event.update(flows_changed=changed, computed_s=round(time.time() - t0, 6))
        if not changed:
            event["installed_at"] = time.time()          # nothing to install
        self.port_events.append(event)
        self.logger.info("%s port %d %s: %d flows changed", name, port, "up" if up else "down", changed)
        self.save_state()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev):
        msg = ev.msg
        self.errors.append(f"switch {msg.datapath.id:016x}: OpenFlow error type={msg.type} code={msg.code}")
        self.logger.error(self.errors[-1])
        self.save_state()

    def save_state(self) -> None:
        if not self.state_path:
            return
        state.write(self.state_path, {"mode": self.mode, "failover": self.failover, "switches": self.installed,
                                      "down": sorted(self.topo.down), "port_events": self.port_events,
                                      "errors": self.errors})
