"""The parts of a rank program's spec (hosts/spec/rank.py) that every workload running ranks fills the same
way: the peers (one rank per GPU host, in order) and the transport the fabric and routing mode call for."""
from __future__ import annotations

from hosts.spec.peers import Peer
from hosts.spec.rank import PortMtus, PortRates
from testbed.fabric.links import rank_transport


def peers(hosts) -> tuple[Peer, ...]:
    """Rank r is hosts[r]; its local rank is its GPU's number in its server."""
    return tuple(Peer(rank=r, name=h.name, ip=h.ip, hb_ip=h.hb_ip, server=h.server, local_rank=h.rank)
                 for r, h in enumerate(hosts))


def transport(fabric, routing: str) -> dict:
    """RankSpec's transport fields (links.rank_transport, typed), to pass as keyword arguments."""
    t = rank_transport(fabric, routing)
    return {**t, "roce_mtu": PortMtus(**t["roce_mtu"]), "rate_limit_bps": PortRates(**t["rate_limit_bps"])}
