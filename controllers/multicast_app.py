"""IGMP snooping and multicast trees, a second Ryu-API app next to fabric_app in the same process.

Each SDN switch sends IGMP (v1/v2/v3) arriving on host-facing ports to the controller; reports and
leaves update the groups' members (hosts). Each group gets shared trees (controllers/mcast_trees.py)
installed as flows `ipv4_dst=GROUP, in_port=P` -> an OpenFlow `all` group over the other tree ports,
recomputed on every join, leave and PORT_STATUS. A rule whose ports change gets a new flow and group (at the
other of two priorities, so that it takes over at once) before the old flow goes: every flow copies to one set
of ports all its life, and its byte count says what each of them sent. Traffic to a group without members, or from a port
off the tree, hits fabric_app's lowest-priority drop.

Coexistence with fabric_app: this app's flows carry COOKIE and are deleted by cookie mask only; its
group ids start at GROUP_BASE. State goes to the state file + ".mcast" (controllers/state.py): groups, members,
trees, members they cannot reach, events and errors.

A tree's flows go with the tree, and their byte counters with them; so the tree flows ask for a FLOW_REMOVED
message, whose byte count the state keeps per switch as "removed_bytes", keyed as the testbed keys a live flow
(testbed/fabric/ovs.py dump_flow_bytes: "GROUP>all:OUT,OUT"), with the hosts that ever joined each group
("group_hosts"): the bytes of every tree, gone or not, can then be told by job (testbed/workloads/concurrent_bytes.py).

A host is untrusted: it may join at most MAX_GROUPS_PER_HOST groups (TESTBED_MCAST_GROUPS_PER_HOST, default 64),
so that its joins cannot grow the flow and group tables without bound; joins past the cap, joins of addresses
that are not multicast, and messages that do not parse are ignored and counted per host in the state ("ignored").
"""
from __future__ import annotations

import ipaddress
import os
import sys
import time

try:
    from os_ken.base import app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib import hub
    from os_ken.lib.packet import igmp, packet
    from os_ken.ofproto import ofproto_v1_5
except ImportError:  # pragma: no cover - exercised only under ryu-manager
    from ryu.base import app_manager
    from ryu.controller import ofp_event
    from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from ryu.lib import hub
    from ryu.lib.packet import igmp, packet
    from ryu.ofproto import ofproto_v1_5

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from controllers import mcast_trees, settings, state  # noqa: E402
from controllers.ofport import port_change  # noqa: E402
from controllers.routes import Topology  # noqa: E402

COOKIE, COOKIE_MASK = 0x4D43000000000000, 0xFFFF000000000000     # "MC"
GROUP_BASE = 100000
PRIO_IGMP, PRIO_GROUP = 300, 200          # tree flows take PRIO_GROUP or PRIO_GROUP + 1, alternately
LINK_LOCAL = ipaddress.ip_network("224.0.0.0/24")
JOIN_RECORDS = (igmp.MODE_IS_EXCLUDE, igmp.CHANGE_TO_EXCLUDE_MODE)
MULTICAST = ipaddress.ip_network("224.0.0.0/4")
MAX_GROUPS_PER_HOST = int(os.environ.get("TESTBED_MCAST_GROUPS_PER_HOST", "64"))
MAX_ERRORS = 100                       # the errors kept in the state (a hostile host can send any number)
MAX_REMOVED_KEYS = 4096                # removed flows' byte records kept (joins and leaves can churn groups)


def flow_key(group: str, outs) -> str:
    """A tree flow's key, as testbed/fabric/ovs.py dump_flow_bytes keys the live ones: its group address and the
    ports its `all` group copies to."""
    return f"{group}>all:{','.join(str(p) for p in sorted(outs))}"


def igmp_changes(data: bytes) -> list[tuple[str, bool]]:
    """[(group, joined)] that an IGMP message announces (empty for queries and anything else)."""
    pkt = packet.Packet(data)
    msg = pkt.get_protocol(igmp.igmpv3_report) or pkt.get_protocol(igmp.igmp)
    if msg is None:
        return []
    if isinstance(msg, igmp.igmpv3_report):
        out = []
        for rec in msg.records or []:
            if rec.type_ in JOIN_RECORDS:
                out.append((rec.address, True))
            elif rec.type_ in (igmp.MODE_IS_INCLUDE, igmp.CHANGE_TO_INCLUDE_MODE, igmp.ALLOW_NEW_SOURCES):
                out.append((rec.address, bool(rec.srcs)))   # INCLUDE {} is a leave
        return out
    if msg.msgtype in (igmp.IGMP_TYPE_REPORT_V1, igmp.IGMP_TYPE_REPORT_V2):
        return [(msg.address, True)]
    if msg.msgtype == igmp.IGMP_TYPE_LEAVE:
        return [(msg.address, False)]
    return []


class MulticastTrees(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        conf = settings.load()
        self.topo = Topology(conf.topology)         # our own copy: fabric_app's is its business
        routing_state = conf.state_path
        self.state_path = state.multicast_path(routing_state) if routing_state else None
        self.dps: dict[str, object] = {}
        self.members: dict[str, set[str]] = {}              # group -> hosts
        self.installed: dict[str, dict[tuple[str, int], tuple[int, ...]]] = {}   # switch -> {(group, in_port): outs}
        self.gids: dict[str, dict[tuple[str, int], int]] = {}                    # switch -> {(group, in_port): gid}
        self.prios: dict[str, dict[tuple[str, int], int]] = {}                   # ... -> the flow's priority
        self.next_gid: dict[str, int] = {}
        self.history: list[dict] = []
        self.errors: list[str] = []
        self.ignored: dict[str, dict[str, int]] = {}     # host -> {"over_cap", "not_multicast", "malformed": count}
        self.awaiting: set[tuple[int, int]] = set()     # (dpid, xid) of barriers sent after the last changes
        self.removing: dict[tuple[str, str, int, int], tuple[int, ...]] = {}   # (switch, group, in_port, prio) -> outs
        self.removed: dict[str, dict[str, int]] = {}     # switch -> flow_key -> bytes its deleted tree flows sent
        self.removed_dropped = 0                         # deleted flows' bytes past MAX_REMOVED_KEYS
        self.group_hosts: dict[str, set[str]] = {}       # group -> every host that joined it
        self.unsaved = False                            # ignored messages counted since the last save
        self.threads.append(hub.spawn(self.flush))

    # -- switches ---------------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        dp.id = ev.msg.datapath_id          # os-ken's handler sets it too, possibly after us
        name = self.topo.by_dpid(dp.id)
        if name is None:
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        for (group, in_port), outs in self.installed.get(name, {}).items():     # their bytes come in FLOW_REMOVED
            self.removing[(name, group, in_port, self.prios[name][(group, in_port)])] = outs
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, cookie=COOKIE,
                                      cookie_mask=COOKIE_MASK, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        for gid in self.gids.get(name, {}).values():         # ours from an earlier connection
            dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=gid))
        self.dps[name], self.installed[name], self.gids[name], self.prios[name] = dp, {}, {}, {}
        self.next_gid[name] = GROUP_BASE
        punt = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        for host, (sw, port) in sorted(self.topo.host_port.items()):
            if sw == name:
                self.add_flow(dp, PRIO_IGMP, parser.OFPMatch(in_port=port, eth_type=0x0800, ip_proto=2), punt)
        self.sync()

    def add_flow(self, dp, priority, match, actions, command=None, flags=0):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        dp.send_msg(parser.OFPFlowMod(dp, cookie=COOKIE, command=ofp.OFPFC_ADD if command is None else command,
                                      priority=priority, match=match, instructions=inst, flags=flags))

    # -- membership ---------------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        name = self.topo.by_dpid(msg.datapath.id)
        data = msg.data
        if name is None or len(data) < 34 or data[12:14] != b"\x08\x00" or data[23] != 2:
            return                                           # not IGMP: fabric_app's business
        in_port = msg.match["in_port"]
        host = next((h for h, at in self.topo.host_port.items() if at == (name, in_port)), None)
        if host is None:
            return
        try:
            changes = igmp_changes(data)
        except Exception as exc:  # a malformed report must not stop the app
            self.ignore(host, "malformed", f"{name}:{in_port}: bad IGMP message: {exc!r}")
            return
        changed = False
        for group, joined in changes:
            try:
                address = ipaddress.ip_address(group)
            except ValueError:
                address = None
            if address is None or address not in MULTICAST:
                self.ignore(host, "not_multicast")         # a unicast "group" would shadow its routes
                continue
            if address in LINK_LOCAL:
                continue                                      # link-local groups are never routed
            if joined and host not in self.members.get(group, ()) and self.groups_of(host) >= MAX_GROUPS_PER_HOST:
                self.ignore(host, "over_cap")
                continue
            members = self.members.setdefault(group, set())
            if joined != (host in members):
                (members.add if joined else members.discard)(host)
                if joined and (group in self.group_hosts or len(self.group_hosts) < MAX_REMOVED_KEYS):
                    self.group_hosts.setdefault(group, set()).add(host)
                self.history.append({"at": time.time(), "group": group, "host": host,
                                    "event": "join" if joined else "leave"})
                changed = True
            if not members:
                del self.members[group]
        if changed:
            self.sync()

    def groups_of(self, host: str) -> int:
        return sum(1 for members in self.members.values() if host in members)

    def ignore(self, host: str, why: str, error: str | None = None) -> None:
        counts = self.ignored.setdefault(host, {})
        counts[why] = counts.get(why, 0) + 1
        if error and len(self.errors) < MAX_ERRORS:
            self.errors.append(error)
        self.unsaved = True

    def flush(self) -> None:
        """Save ignored-message counts twice a second, not once per message of a flood."""
        while True:
            hub.sleep(0.5)
            if self.unsaved:
                self.save_state()

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev):
        change = port_change(self.topo, ev.msg)
        if change is None:
            return
        name, port, up = change
        if self.topo.set_port(name, port, up):
            self.history.append({"at": time.time(), "switch": name, "port": port,
                                "event": "port_up" if up else "port_down"})
            self.sync()

    # -- installing ----------------------------------------------------------------------------------
    def wanted(self) -> dict[str, dict[tuple[str, int], tuple[int, ...]]]:
        table: dict[str, dict] = {}
        for group, members in self.members.items():
            for sw, rules in mcast_trees.forwarding(self.topo, members).items():
                for in_port, outs in rules.items():
                    table.setdefault(sw, {})[(group, in_port)] = outs
        return table

    def sync(self) -> None:
        """Bring every connected switch to the wanted rules, changing only what differs."""
        wanted = self.wanted()
        for name, dp in self.dps.items():
            try:
                if self.apply(dp, name, wanted.get(name, {})):
                    barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
                    dp.send_msg(barrier)                 # sets its xid: the reply says this switch is done
                    self.awaiting.add((dp.id, barrier.xid))
            except Exception as exc:
                self.errors.append(f"{name}: installing multicast rules failed: {exc!r}")
                self.logger.exception(self.errors[-1])
        self.save_state()

    def apply(self, dp, name: str, rules: dict) -> bool:
        """Send the switch what changed; returns whether anything did."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        current, gids, prios = self.installed[name], self.gids[name], self.prios[name]
        before = dict(current)
        for key, outs in sorted(rules.items()):
            if current.get(key) == outs:
                continue
            group, in_port = key
            buckets = [parser.OFPBucket(bucket_id=i, actions=[parser.OFPActionOutput(p)])
                       for i, p in enumerate(outs)]
            old = (gids[key], prios[key], current[key]) if key in gids else None
            gids[key] = gid = self.next_gid[name]
            prios[key] = PRIO_GROUP + 1 if old and old[1] == PRIO_GROUP else PRIO_GROUP
            self.next_gid[name] += 1
            dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_ALL,
                                           group_id=gid, buckets=buckets))
            self.add_flow(dp, prios[key], parser.OFPMatch(in_port=in_port, eth_type=0x0800, ipv4_dst=group),
                          [parser.OFPActionGroup(gid)], flags=ofp.OFPFF_SEND_FLOW_REM)
            if old:                                          # the new flow has taken over: the old one goes
                self.remove(dp, name, key, *old)
            current[key] = outs
        for key in sorted(set(current) - set(rules)):
            self.remove(dp, name, key, gids.pop(key), prios.pop(key), current.pop(key))
        return current != before

    def remove(self, dp, name: str, key: tuple[str, int], gid: int, priority: int, outs: tuple[int, ...]) -> None:
        """Delete a tree flow and its group; its bytes come back in FLOW_REMOVED."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        group, in_port = key
        self.removing[(name, group, in_port, priority)] = outs
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE_STRICT, priority=priority,
                                      cookie=COOKIE, cookie_mask=COOKIE_MASK,
                                      match=parser.OFPMatch(in_port=in_port, eth_type=0x0800, ipv4_dst=group),
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=gid))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    def flow_removed(self, ev):
        msg = ev.msg
        name = self.topo.by_dpid(msg.datapath.id)
        if name is None or msg.cookie & COOKIE_MASK != COOKIE or msg.priority not in (PRIO_GROUP, PRIO_GROUP + 1):
            return
        group, in_port = msg.match.get("ipv4_dst"), msg.match.get("in_port")
        outs = self.removing.pop((name, group, in_port, msg.priority), None)
        if outs is None:
            self.errors.append(f"{name}: removed flow {group} in_port={in_port} was not one this app deleted")
        else:
            self.record_removed(name, flow_key(group, outs), msg.stats.get("byte_count", 0))    # OpenFlow 1.5
        self.save_state()

    def record_removed(self, switch: str, key: str, nbytes: int) -> None:
        """Add a deleted tree flow's bytes to its record (kept so long as the records stay few)."""
        if not nbytes:
            return
        per_switch = self.removed.setdefault(switch, {})
        if key not in per_switch and sum(len(r) for r in self.removed.values()) >= MAX_REMOVED_KEYS:
            self.removed_dropped += nbytes
            return
        per_switch[key] = per_switch.get(key, 0) + nbytes

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev):
        key = (ev.msg.datapath.id, ev.msg.xid)
        if key in self.awaiting:
            self.awaiting.discard(key)
            if not self.awaiting:
                self.save_state()                        # every switch has the groups' current rules

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev):
        msg = ev.msg
        self.errors.append(f"switch {msg.datapath.id:016x}: OpenFlow error type={msg.type} code={msg.code}")
        self.save_state()

    def save_state(self) -> None:
        self.unsaved = False
        if not self.state_path:
            return
        groups = {}
        for group, members in sorted(self.members.items()):
            groups[group] = {
                "members": sorted(members),
                "trees": [{sw: sorted(ports) for sw, ports in sorted(t.items())}
                          for t in mcast_trees.trees(self.topo, members)],
                "unreachable": mcast_trees.unreachable(self.topo, members)}
        state.write(self.state_path, {"groups": groups, "installed": not self.awaiting,
                                      "rules": sum(len(r) for r in self.installed.values()),
                                      "events": self.history[-1000:], "errors": self.errors,
                                      "ignored": self.ignored, "max_groups_per_host": MAX_GROUPS_PER_HOST,
                                      "removed_bytes": self.removed, "removed_pending": len(self.removing),
                                      "removed_dropped": self.removed_dropped,
                                      "group_hosts": {g: sorted(h) for g, h in sorted(self.group_hosts.items())}})
