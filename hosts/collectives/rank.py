"""What every rank program does to take part in a job: its transport (a Communicator over its NIC and HB
devices), its heartbeats, and an orderly teardown. Used by hosts/agents/collective_rank.py, and run whole
(`run_agent`) by hosts/agents/training_rank.py and hosts/agents/diloco_rank.py.
"""
from __future__ import annotations

import json
import os
import sys
import time

from hosts.collectives.comm import CollectiveError, Communicator, Peer
from hosts.collectives.store import FileStore, StoreTimeout
from hosts.rdma import open_device
from hosts.recovery.heartbeat import Heartbeat
from hosts.spec.rank import CollectiveRankSpec, RankSpec


def build_comm(spec: RankSpec, peers: list[Peer], me: Peer, store: FileStore, heartbeat=None) -> Communicator:
    mtu = {me.ip: spec.roce_mtu.nic, me.hb_ip: spec.roce_mtu.hb}
    comm = Communicator(me, peers, store, lambda ip: open_device(ip, backend=spec.backend, mtu=mtu.get(ip, 1024)),
                        timeout=spec.timeout_s, chunk=spec.chunk,
                        rate_limit_bps=spec.rate_limit_bps.to_dict() if spec.rate_limit_bps else None,
                        sport_mode=spec.sport_mode, split=spec.split,
                        ring=list(range(len(peers))) if spec.ring == "rank" else None,
                        rc_timeout=spec.rc_timeout, heartbeat=heartbeat)
    comm.multicast_scope = spec.multicast_scope
    comm.trees_confirmed = spec.multicast_trees_confirmed
    comm.group_hold_s = spec.multicast_hold_s
    comm.congestion = spec.congestion
    comm.time_scale = spec.time_scale
    comm.rto = spec.rc_rto
    comm.pieces = spec.pieces
    return comm


def news_dir(store: str) -> str:
    """Where a job's heartbeats share their news (hosts/recovery/heartbeat.py), in its store."""
    return os.path.join(store, "heartbeats")


def start_heartbeat(spec: CollectiveRankSpec, me: dict):
    """This rank's heartbeats over the network (None if the spec turns them off); me: its member entry."""
    beat = spec.heartbeat
    if beat is False:
        return None
    return Heartbeat(news_dir(spec.store), me, period=beat.period_s, timeout=beat.timeout_s,
                     join_grace=spec.timeout_s, stall=beat.stall_s).start()


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


def run_agent(spec_type, run_rank) -> None:
    """The main of a rank program that runs one job on one communicator without recovery: the spec from the file
    named by argv[1], run_rank(spec, comm, store) -> its result, printed as one JSON line; a failure is printed
    as {"rank", "error", "error_at"} after the devices close at once."""
    spec = spec_type.load(sys.argv[1])
    peers, me = list(spec.peers), spec.rank
    store = FileStore(spec.store, timeout=spec.timeout_s)
    comm = build_comm(spec, peers, peers[me], store)
    try:
        result = run_rank(spec, comm, store)
    except (CollectiveError, StoreTimeout) as exc:
        comm.close(linger=0)
        result = {"rank": me, "error": str(exc), "error_at": time.time()}
    else:
        finish(comm, store, me, len(peers))
    print(json.dumps(result), flush=True)
