"""OpenFlow port-state helpers shared by the controller apps."""


def port_is_up(msg) -> bool:
    """Whether a PORT_STATUS message says the port can carry traffic: not deleted (a cut patch link),
    not administratively down, and with a link."""
    ofp, desc = msg.datapath.ofproto, msg.desc
    return msg.reason != ofp.OFPPR_DELETE and not (desc.config & ofp.OFPPC_PORT_DOWN) \
        and not (desc.state & ofp.OFPPS_LINK_DOWN)


def port_change(topo, msg):
    """(switch name, port number, up) for a PORT_STATUS on one of our fabric's switch ports, or None
    (another datapath, or a reserved port such as LOCAL)."""
    dp, desc = msg.datapath, msg.desc
    name = topo.by_dpid(dp.id)
    if name is None or desc.port_no > dp.ofproto.OFPP_MAX:
        return None
    return name, desc.port_no, port_is_up(msg)
