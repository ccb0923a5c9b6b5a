"""The multicast app keeps what its deleted tree flows forwarded (FLOW_REMOVED's byte count), keyed as the testbed
keys a live tree flow, and who joined each group: a tree's bytes outlive the tree."""
import types

from controllers import multicast_app
from controllers.multicast_app import COOKIE, PRIO_GROUP, MulticastTrees


def app():
    a = object.__new__(MulticastTrees)
    a.topo = types.SimpleNamespace(by_dpid=lambda dpid: "rail0")
    a.removing, a.removed, a.removed_dropped, a.errors = {}, {}, 0, []
    a.save_state = lambda: None
    return a


def removed(a, group, in_port, nbytes, cookie=COOKIE, priority=PRIO_GROUP):
    msg = types.SimpleNamespace(datapath=types.SimpleNamespace(id=1), cookie=cookie, priority=priority,
                                match={"in_port": in_port, "ipv4_dst": group}, stats={"byte_count": nbytes})
    a.flow_removed(types.SimpleNamespace(msg=msg))


def test_a_deleted_tree_flows_bytes_are_kept_under_its_ports_and_add_up():
    a = app()
    a.removing[("rail0", "239.1.2.3", 1, PRIO_GROUP)] = (10, 2)
    removed(a, "239.1.2.3", 1, 7000)
    assert a.removed == {"rail0": {"239.1.2.3>all:2,10": 7000}} and not a.removing
    a.removing[("rail0", "239.1.2.3", 1, PRIO_GROUP + 1)] = (2, 10)    # its successor, later: the bytes add
    removed(a, "239.1.2.3", 1, 500, priority=PRIO_GROUP + 1)
    assert a.removed == {"rail0": {"239.1.2.3>all:2,10": 7500}}
    assert multicast_app.flow_key("239.1.2.3", (10, 2)) == "239.1.2.3>all:2,10"


def test_other_removals_are_left_alone_and_an_unexpected_one_is_an_error():
    a = app()
    removed(a, "239.1.2.3", 1, 100, cookie=0x4641000000000000)     # fabric_app's
    removed(a, None, 1, 60, priority=multicast_app.PRIO_IGMP)        # the IGMP punt rule
    assert not a.removed and not a.errors
    removed(a, "239.1.2.3", 3, 100)                                  # not one this app deleted
    assert not a.removed and len(a.errors) == 1


def test_the_records_are_bounded():
    a = app()
    for i in range(multicast_app.MAX_REMOVED_KEYS + 5):
        a.record_removed("rail0", f"239.0.{i // 256}.{i % 256}>all:1", 10)
    a.record_removed("rail0", "239.0.0.0>all:1", 10)               # a key it has still counts
    assert len(a.removed["rail0"]) == multicast_app.MAX_REMOVED_KEYS and a.removed_dropped == 50
    assert a.removed["rail0"]["239.0.0.0>all:1"] == 20


def test_a_rule_whose_ports_change_gets_a_new_flow_before_the_old_one_goes():
    """Make before break: the new flow and group at the other priority, then the old flow deleted, its ports kept
    for its FLOW_REMOVED; a rule no tree needs is deleted the same way."""
    from os_ken.ofproto import ofproto_v1_5, ofproto_v1_5_parser
    sent = []
    dp = types.SimpleNamespace(ofproto=ofproto_v1_5, ofproto_parser=ofproto_v1_5_parser, send_msg=sent.append)
    a = app()
    a.installed, a.gids, a.prios, a.next_gid = {"rail0": {}}, {"rail0": {}}, {"rail0": {}}, {"rail0": 100000}
    key = ("239.1.2.3", 1)
    assert a.apply(dp, "rail0", {key: (2,)})
    sent.clear()
    assert a.apply(dp, "rail0", {key: (2, 5)})
    flows = [(m.command, m.priority) for m in sent if isinstance(m, ofproto_v1_5_parser.OFPFlowMod)]
    assert flows == [(ofproto_v1_5.OFPFC_ADD, PRIO_GROUP + 1), (ofproto_v1_5.OFPFC_DELETE_STRICT, PRIO_GROUP)]
    assert a.removing == {("rail0", "239.1.2.3", 1, PRIO_GROUP): (2,)}
    assert a.gids["rail0"][key] == 100001 and a.prios["rail0"][key] == PRIO_GROUP + 1
    assert not a.apply(dp, "rail0", {key: (2, 5)})                 # nothing changed, nothing sent
    assert a.apply(dp, "rail0", {}) and a.removing[("rail0", "239.1.2.3", 1, PRIO_GROUP + 1)] == (2, 5)
    assert not a.installed["rail0"] and not a.gids["rail0"] and not a.prios["rail0"]
