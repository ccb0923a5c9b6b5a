"""What every rank program does to take part in a job: its transport (a Communicator over its NIC and HB
devices), its heartbeats, and an orderly teardown. Used by hosts/agents/collective_rank.py and
hosts/agents/training_rank.py.
"""
from __future__ import annotations

import os
import time

from hosts.collectives.comm import Communicator, Peer
from hosts.collectives.heartbeat import Heartbeat
from hosts.collectives.store import FileStore, StoreTimeout
from hosts.rdma import open_device
from hosts.rdma.mtu import DEFAULT_ROCE_MTU


def build_comm(spec: dict, peers: list[Peer], me: Peer, store: FileStore, heartbeat=None) -> Communicator:
    # the RoCE MTU each port's link carries (the testbed derives it from the link MTUs, as rxe from its netdev's)
    roce_mtu = spec.get("roce_mtu", DEFAULT_ROCE_MTU)
    mtu = {me.ip: roce_mtu["nic"], me.hb_ip: roce_mtu["hb"]}
    # multicast needs uroce (pyverbs does not expose multicast attach); everything else takes rxe where it exists
    backend = "uroce" if spec.get("algo") == "multicast" else "auto"
    comm = Communicator(me, peers, store, lambda ip: open_device(ip, backend=backend, mtu=mtu.get(ip, 1024)),
                        timeout=spec.get("timeout_s", 60), chunk=spec.get("chunk", 64 * 1024),
                        rate_limit_bps=spec.get("rate_limit_bps"), sport_mode=spec.get("sport_mode", "qp"),
                        split=spec.get("split", 1),
                        ring=list(range(len(peers))) if spec.get("ring") == "rank" else None,
                        rc_timeout=spec.get("rc_timeout", 0.05), heartbeat=heartbeat)
    comm.multicast_scope = spec.get("multicast_scope", "fabric")
    comm.trees_confirmed = spec.get("multicast_trees_confirmed", False)    # the testbed reports installed trees
    comm.group_hold_s = spec.get("multicast_hold_s", 0)       # how long to stay in multicast groups after the job
    comm.congestion = spec.get("congestion")
    comm.pieces = spec.get("pieces")            # hierarchical-pipelined: how many pieces (pipeline.py)
    return comm


def start_heartbeat(spec: dict, me: dict):
    """This rank's heartbeats over the network (None if the spec turns them off); me: its member entry."""
    options = spec.get("heartbeat", {})
    if options is False:
        return None
    return Heartbeat(os.path.join(spec["store"], "heartbeats"), me, period=options.get("period_s", 0.15),
                     timeout=options.get("timeout_s", 1.0), join_grace=spec.get("timeout_s", 60),
                     stall=options.get("stall_s", 2.0)).start()


def finish(comm: Communicator, store: FileStore, rank: int, world: int) -> None:
    """Tear down only once every rank's last work request has completed: a rank that left early
    could not re-ACK a peer's retransmission after a lost final ACK (that peer would then fail
    with RETRY_EXC_ERR although its data had arrived). Once every rank has arrived, no request of the job
    is outstanding anywhere, so nothing can still need an answer and the devices close at once. A peer
    that never arrives (it failed at the very end; the results are complete by now) only delays the
    teardown, and then the devices linger as after any other end (Device.close). A multicast job's
    ranks stay in their groups for `group_hold_s` first (set by the testbed: the switches count the
    last multicast bytes only while the groups' trees are still in place)."""
    try:
        store.barrier("done", rank, world, timeout=10)
    except StoreTimeout:
        comm.close()
        return
    time.sleep(comm.group_hold_s)
    comm.close(linger=0)
