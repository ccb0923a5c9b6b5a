"""Proactive L3 routing for the emulated GPU fabric, written against the Ryu API.

Runs under os-ken (`python -m controllers.run`) or Ryu (`ryu-manager controllers/fabric_app.py` with
TESTBED_TOPOLOGY and TESTBED_ROUTING set). No flooding and no learning: the testbed hands over the
topology, hosts use static neighbour entries, and every switch gets, as soon as it connects:
  - one flow per destination IPv4 address: output to a port (`single`) or to a select group over
    all equal-cost ports (`ecmp`);
  - a lowest-priority drop for everything else (so unroutable pairs are really unconnected).
ECMP groups carry Open vSwitch's selection-method property `dp_hash`: OVS's default select hash
ignores UDP ports, which would put every RoCEv2 flow of a host pair on one path.
Installed state is written to TESTBED_STATE (JSON) so the testbed knows when routing is ready.
"""
from __future__ import annotations

import json
import os
import struct
import sys

try:  # os-ken is the maintained fork; Ryu has the same API under another name
    from os_ken.base import app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.ofproto import ofproto_v1_5
except ImportError:  # pragma: no cover - exercised only under ryu-manager
    from ryu.base import app_manager
    from ryu.controller import ofp_event
    from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from ryu.ofproto import ofproto_v1_5

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from controllers.routes import Topology  # noqa: E402

NTR_VENDOR_ID = 0x0000154D       # Open vSwitch's "Nicira extension" vendor id for OpenFlow 1.5
NTRT_SELECTION_METHOD = 1
PRIO_ROUTE, PRIO_DROP = 100, 0


def selection_method(name: str = "dp_hash") -> list[int]:
    """Body of OVS's ntr_group_prop_selection_method as 32-bit words: pad, name[16], param."""
    body = bytes(4) + name.encode().ljust(16, b"\0") + bytes(8)
    return list(struct.unpack("!7I", body))


class FabricRouting(app_manager.OSKenApp if hasattr(app_manager, "OSKenApp") else app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.environ["TESTBED_TOPOLOGY"]) as f:
            self.topo = Topology(json.load(f))
        self.mode = os.environ.get("TESTBED_ROUTING", "ecmp")
        self.table = self.topo.routes(self.mode)
        self.state_path = os.environ.get("TESTBED_STATE")
        self.installed: dict[str, dict] = {}
        self.pending: dict[int, tuple[str, dict]] = {}
        self.errors: list[str] = []

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        name = self.topo.by_dpid(dp.id)
        if name is None:
            self.logger.warning("unknown switch dpid %016x: left without flows", dp.id)
            return
        try:
            self.install(dp, name)
        except Exception as exc:  # the event loop would swallow it: make it visible to the testbed
            self.errors.append(f"{name}: installing routes failed: {exc!r}")
            self.logger.exception(self.errors[-1])
            self.save_state()

    def install(self, dp, name: str) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))
        groups: dict[tuple[int, ...], int] = {}
        for ip, ports in sorted(self.table[name].items()):
            if len(ports) == 1:
                action = parser.OFPActionOutput(ports[0])
            else:
                key = tuple(ports)
                if key not in groups:
                    groups[key] = len(groups) + 1
                    self.add_select_group(dp, groups[key], ports)
                action = parser.OFPActionGroup(groups[key])
            match = parser.OFPMatch(eth_type=0x0800, ipv4_dst=ip)
            self.add_flow(dp, PRIO_ROUTE, match, [action])
        self.add_flow(dp, PRIO_DROP, parser.OFPMatch(), [])
        # Reported as installed only once the switch has processed everything (barrier reply).
        self.pending[dp.id] = (name, {"dpid": dp.id, "routes": len(self.table[name]),
                                      "groups": {str(g): list(p) for p, g in groups.items()}})
        dp.send_msg(parser.OFPBarrierRequest(dp))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev):
        done = self.pending.pop(ev.msg.datapath.id, None)
        if done:
            name, info = done
            self.installed[name] = info
            self.save_state()
            self.logger.info("%s: %d routes, %d groups (%s)", name, info["routes"], len(info["groups"]),
                             self.mode)

    def add_flow(self, dp, priority, match, actions):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        dp.send_msg(parser.OFPFlowMod(dp, priority=priority, match=match, instructions=inst))

    def add_select_group(self, dp, group_id: int, ports: list[int]) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        buckets = [parser.OFPBucket(bucket_id=i, actions=[parser.OFPActionOutput(p)],
                                    properties=[parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=1)])
                   for i, p in enumerate(ports)]
        prop = parser.OFPGroupPropExperimenter(type_=ofp.OFPGPT_EXPERIMENTER, experimenter=NTR_VENDOR_ID, exp_type=NTRT_SELECTION_METHOD,
                                               data=selection_method("dp_hash"))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_SELECT,
                                       group_id=group_id, buckets=buckets, properties=[prop]))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev):
        msg = ev.msg
        self.errors.append(f"switch {msg.datapath.id:016x}: OpenFlow error type={msg.type} code={msg.code}")
        self.logger.error(self.errors[-1])
        self.save_state()

    def save_state(self) -> None:
        if not self.state_path:
            return
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"mode": self.mode, "switches": self.installed, "errors": self.errors}, f)
        os.replace(tmp, self.state_path)
