"""One rank of a collective benchmark, run inside an emulated GPU host by the testbed's launcher.

    python -m hosts.collectives.run SPEC.json

SPEC: {"rank": r, "peers": [{"rank", "name", "ip", "hb_ip", "server", "local_rank"}], "store": DIR,
       "op": "allreduce", "algo": "ring", "bytes": N, "dtype": "float32", "reduce": "sum",
       "iterations": 5, "warmup": 1, "check": true, "timeout_s": 60, "chunk": 65536,
       "rate_limit_bps": {"nic": 9.7e6, "hb": 87e6},   (pace each queue pair below its link's rate)
       "sport_mode": "qp" | "packet", "split": 1,      (spraying: a source port per packet; split:K lanes)
       "multicast_scope": "fabric" | "rail"}           (algo multicast: where the switches replicate)
Inputs are integer-valued, drawn from a seed per rank, so every rank can compute the exact expected
result with numpy. Prints {"rank", "times": [s per iteration], "correct", "counters"} or {"rank", "error"}.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from hosts.collectives import algorithms, mcast_allgather
from hosts.collectives.comm import CollectiveError, Communicator, Peer
from hosts.collectives.store import FileStore, StoreTimeout
from hosts.rdma import open_device


def elements(op: str, nbytes: int, itemsize: int, world: int) -> int:
    """Element count per rank for a message of nbytes (nccl-tests: the op's total size)."""
    count = max(1, nbytes // itemsize)
    if op in ("allgather", "alltoall"):
        count = max(1, count // world) * (1 if op == "allgather" else world)
    return count


def make_input(rank: int, count: int, dtype) -> np.ndarray:
    return np.random.default_rng(1000 + rank).integers(-8, 8, count).astype(dtype)


def run_op(comm, spec: dict, x: np.ndarray) -> np.ndarray:
    op, algo = spec["op"], spec["algo"]
    if op == "allreduce":
        return algorithms.allreduce(comm, x, spec.get("reduce", "sum"), algo)
    if op == "allgather":
        return algorithms.allgather(comm, x, algo)
    if op == "reduce_scatter":
        return algorithms.reduce_scatter(comm, x, spec.get("reduce", "sum"), algo)
    if op == "broadcast":
        return algorithms.broadcast(comm, x, spec.get("root", 0), algo)
    if op == "alltoall":
        return algorithms.alltoall(comm, x, algo)
    raise ValueError(f"unknown operation {op!r}")


def expected(spec: dict, world: int, rank: int, count: int, dtype) -> np.ndarray:
    inputs = [make_input(r, count, dtype) for r in range(world)]
    op = spec["op"]
    if op in ("allreduce", "reduce_scatter"):
        total = (np.max if spec.get("reduce") == "max" else np.sum)(np.stack(inputs), axis=0).astype(dtype)
        if op == "allreduce":
            return total
        lo, hi = algorithms.bounds(count, world)[rank]
        return total[lo:hi]
    if op == "allgather":
        return np.concatenate(inputs)
    if op == "broadcast":
        return inputs[spec.get("root", 0)]
    m = count // world
    return np.concatenate([inputs[src][rank * m:(rank + 1) * m] for src in range(world)])


def build_comm(spec: dict, peers: list[Peer], me: Peer, store: FileStore) -> Communicator:
    # RoCE MTU 1024 on the NIC (its link MTU is 1500) and 4096 in the HB domain (link MTU 9000)
    mtu = {me.ip: 1024, me.hb_ip: 4096}
    comm = Communicator(me, peers, store, lambda ip: open_device(ip, mtu=mtu.get(ip, 1024)),
                        timeout=spec.get("timeout_s", 60), chunk=spec.get("chunk", 64 * 1024),
                        rate_limit_bps=spec.get("rate_limit_bps"), sport_mode=spec.get("sport_mode", "qp"),
                        split=spec.get("split", 1),
                        ring=list(range(len(peers))) if spec.get("ring") == "rank" else None,
                        rc_timeout=spec.get("rc_timeout", 0.05))
    comm.multicast_scope = spec.get("multicast_scope", "fabric")
    return comm


def shrink(spec: dict, store: FileStore, epoch: int, members: list[int], me: int) -> list[int]:
    """Survivors of a failure agree on who is left: each announces itself; whoever has not
    announced within a grace period after the first announcement (longer than the time a peer
    needs to notice the failure) is out."""
    grace = spec.get("timeout_s", 60) + 2.0
    store.set(f"epoch{epoch}/alive/{me}", time.time())
    decided = f"epoch{epoch}/members"
    while not store.exists(decided):
        announced = {r: store.get(f"epoch{epoch}/alive/{r}") for r in members
                     if store.exists(f"epoch{epoch}/alive/{r}")}
        if len(announced) == len(members) or time.time() > min(announced.values()) + grace:
            if me == min(announced):          # one survivor decides, so that all agree
                store.set(decided, sorted(announced))
                break
        time.sleep(0.05)
    return store.get(decided, timeout=grace + 5, what="the survivors' membership decision")


def finish(comm: Communicator, store: FileStore, rank: int, world: int) -> None:
    """Tear down only once every rank's last work request has completed: a rank that left early
    could not re-ACK a peer's retransmission after a lost final ACK (that peer would then fail
    with RETRY_EXC_ERR although its data had arrived). The results are complete by now, so a
    peer that never arrives (it failed at the very end) only delays the teardown."""
    try:
        store.barrier("done", rank, world, timeout=10)
    except StoreTimeout:
        pass
    comm.close()


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    original = [Peer(**p) for p in spec["peers"]]
    me = spec["rank"]
    dtype = np.dtype(spec.get("dtype", "float32"))
    steps = spec.get("warmup", 1) + spec.get("iterations", 5)
    members = [p.rank for p in original]             # original ranks still in the job
    result = {"rank": me, "recoveries": [], "lost_steps": 0}
    times, correct, step, epoch = [], True, 0, 0
    while True:
        # ranks are renumbered 0..n-1 among the members; each epoch has its own rendezvous
        peers = [Peer(**{**vars(original[r]), "rank": k}) for k, r in enumerate(members)]
        rank, world = members.index(me), len(members)
        store = FileStore(os.path.join(spec["store"], f"epoch{epoch}"), timeout=spec.get("timeout_s", 60))
        count = elements(spec["op"], spec["bytes"], dtype.itemsize, world)
        comm = build_comm(spec, peers, peers[rank], store)
        try:
            want = expected(spec, world, rank, count, dtype) if spec.get("check", True) else None
            while step < steps:
                x = make_input(rank, count, dtype)
                store.barrier(f"it{step}", rank, world)
                t0 = time.monotonic()
                out = run_op(comm, spec, x)
                if step >= spec.get("warmup", 1):
                    times.append(time.monotonic() - t0)
                if want is not None:
                    correct = correct and bool(np.array_equal(out, want))
                step += 1
            result.update(count=count, times=times, correct=correct if want is not None else None,
                          counters=comm.counters(), world=world,
                          recovered_chunks=mcast_allgather.stats(comm).get("recovered_chunks", 0))
            finish(comm, store, rank, world)
            break
        except (CollectiveError, StoreTimeout) as exc:
            detected = time.time()
            comm.close(linger=0)
            if spec.get("recovery", "abort") != "shrink":
                result.update(error=str(exc), error_at=detected)
                break
            epoch += 1
            members = shrink(spec, FileStore(spec["store"], timeout=spec.get("timeout_s", 60)),
                             epoch, members, me)
            result["lost_steps"] += 1
            step += 1                                  # the step in progress is lost
            result["recoveries"].append({"error": str(exc), "detected_at": detected, "reformed_at": time.time(),
                                         "world": len(members)})
            if len(members) < 2 or me not in members:
                result.update(error=f"cannot shrink further: {exc}", error_at=detected)
                break
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
