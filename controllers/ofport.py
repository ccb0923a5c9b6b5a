"""OpenFlow port-state helpers shared by the controller apps."""


def port_is_up(msg) -> bool:
    """Whether a PORT_STATUS message says the port can carry traffic: not deleted (a cut patch link),
    not administratively down, and with a link."""
    ofp, desc = msg.datapath.ofproto, msg.desc
    return msg.reason != ofp.OFPPR_DELETE and not (desc.config & ofp.OFPPC_PORT_DOWN) \
        and not (desc.state & ofp.OFPPS_LINK_DOWN)
