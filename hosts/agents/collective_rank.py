"""One rank of a collective benchmark, run inside an emulated GPU host by the testbed's launcher.

    python -m hosts.agents.collective_rank SPEC.json

SPEC: {"rank": r, "peers": [{"rank", "name", "ip", "hb_ip", "server", "local_rank"}], "store": DIR,
       "op": "allreduce", "algo": "ring", "bytes": N, "dtype": "float32", "reduce": "sum",
       "iterations": 5, "warmup": 1, "check": true, "timeout_s": 60, "chunk": 65536,
       "rate_limit_bps": {"nic": 9.7e6, "hb": 87e6},   (pace each queue pair below its link's rate)
       "sport_mode": "qp" | "packet", "split": 1,      (spraying: a source port per packet; split:K lanes)
       "multicast_scope": "fabric" | "rail",           (algo multicast: where the switches replicate)
       "recovery": "abort" | "shrink" | "spare" | "migrate",
       "heartbeat": {"period_s": 0.15, "timeout_s": 1.0} | false,
       "join": {"epoch": E, "me": {peer}}}             (a spare taking over a failed rank from epoch E)
Inputs are integer-valued, drawn from a seed per rank, so every rank can compute the exact expected
result with numpy. Prints {"rank", "host", "times": [s per measured step], "correct", "counters",
"recoveries", "heartbeat"}, or {"rank", "host", "error"}, or {"rank", "host", "left"} (a rank moved away).

A failed peer (heartbeats, hosts/collectives/heartbeat.py; or the transport) fails the collective. With `abort` the rank
reports the error. Otherwise the survivors agree on who failed and where to resume (agree()), and the job
re-forms as a new epoch with its own rendezvous; the step in progress is run again. `shrink`: the
survivors go on alone, renumbered. `spare` / `migrate`: the testbed's job manager (testbed/runtime/recovery.py)
puts spare GPUs in the failed ranks' places; they join with the failed ranks' numbers and inputs, so
results still equal numpy's.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np

from hosts.collectives import mcast_allgather
from hosts.collectives.benchmark import elements, expected, make_input, run_op
from hosts.collectives.comm import CollectiveError, Peer
from hosts.collectives.membership import Membership, epoch_dir
from hosts.collectives.rank import build_comm, finish, start_heartbeat
from hosts.collectives.store import FileStore, StoreTimeout


MAX_RETRIES = 2       # re-formations in a row with every rank alive


def agree(spec: dict, job: Membership, hb, epoch: int, members: list[dict], me: str, step: int,
          in_op: bool) -> dict:
    """Survivors of a failure agree on who failed and where the job resumes; returns the new epoch's
    membership {"members", "step", "failed", "lost_steps", ...} or {"error"}.

    Each survivor announces itself with its step. Once every member of the old epoch has announced or
    been declared failed by the heartbeats (without heartbeats: has not announced within a grace
    period longer than the no-progress timeout), the first survivor writes the verdict: who failed, the
    step to resume from (the earliest one a survivor had not completed; it is run again) and how many
    started steps are lost. With `shrink` it writes the new membership too; with `spare` and `migrate`
    the testbed's job manager writes it, with spares in the failed ranks' places."""
    names = [m["name"] for m in members]
    job.announce(epoch, me, {"at": time.time(), "step": step, "in_op": in_op})
    grace = spec.get("timeout_s", 60) + 2.0
    wait = grace + spec.get("timeout_s", 60) + 30
    deadline = time.monotonic() + wait
    while not job.has_members(epoch):
        if not job.has_verdict(epoch):
            announced = job.announced(epoch, names)
            if hb is not None:
                gone = set(hb.failed())
            else:
                gone = set(names) - set(announced) if time.time() > min(
                    a["at"] for a in announced.values()) + grace else set()
            if all(n in announced or n in gone for n in names) and me == next(n for n in names if n in announced):
                verdict = {"failed": [n for n in names if n not in announced],
                           "step": min(a["step"] for a in announced.values()),
                           "decided_at": time.time(), "policy": spec.get("recovery", "abort")}
                last_started = max(a["step"] if a["in_op"] else a["step"] - 1 for a in announced.values())
                verdict["lost_steps"] = max(0, last_started - verdict["step"] + 1)
                job.set_verdict(epoch, verdict)
                if spec.get("recovery") == "shrink":
                    job.set_members(epoch, {**verdict, "members": [m for m in members if m["name"] in announced]})
        if time.monotonic() > deadline:
            return {"error": f"no membership decision for epoch {epoch} within {wait:.0f} s"}
        time.sleep(0.01)
    return job.members(epoch)


def declared_failed(hb) -> None:
    """SIGUSR1: the testbed declared this rank's GPU failed. Tell the peers through the heartbeats
    (they fail it at once) and leave, as a GPU taken out of service would."""
    if hb is not None:
        hb.declare_failed()
    os._exit(3)


class CollectiveRank:
    """One rank's run of the benchmark across epochs: its measured steps, and re-forming the job after a failure."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.policy, self.timeout = spec.get("recovery", "abort"), spec.get("timeout_s", 60)
        self.job = Membership(FileStore(spec["store"], timeout=self.timeout))   # the job's rendezvous, across epochs
        join = spec.get("join")
        self.me = join["me"]["name"] if join else spec["peers"][spec["rank"]]["name"]
        self.hb = start_heartbeat(spec, self.me)
        signal.signal(signal.SIGUSR1, lambda *_: declared_failed(self.hb))
        self.dtype = np.dtype(spec.get("dtype", "float32"))
        self.warmup = spec.get("warmup", 1)
        self.steps = self.warmup + spec.get("iterations", 5)
        self.times: list[float | None] = [None] * (self.steps - self.warmup)
        self.result = {"rank": spec["rank"], "host": self.me, "recoveries": [], "lost_steps": 0}
        self.correct, self.retries, self.in_op = True, 0, False

    def start(self) -> bool:
        """Where this rank begins: epoch 0 with the spec's peers or, for a spare taking over a failed rank, the
        epoch it joins, where and from which step the manager's membership says. False: not needed."""
        join = self.spec.get("join")
        if not join:
            self.epoch, self.step, self.forming = 0, 0, None
            self.members = [{k: v for k, v in p.items() if k != "rank"} for p in self.spec["peers"]]
            return True
        self.epoch = join["epoch"]
        decision = self.job.members(self.epoch, timeout=self.timeout + 30, what="the job's new membership")
        if "error" in decision:
            self.result["left"] = f"not needed: {decision['error']}"
            return False
        self.members, self.step = decision["members"], decision["step"]
        self.forming = self.result["joined"] = {"epoch": self.epoch, "at": time.time()}
        return True

    def run_epoch(self) -> bool:
        """The remaining steps in the current epoch's membership; True when the job goes on in a new epoch."""
        # ranks are numbered 0..n-1 in the epoch's membership; each epoch has its own rendezvous
        spec = self.spec
        peers = [Peer(rank=k, **m) for k, m in enumerate(self.members)]
        rank, world = next(p.rank for p in peers if p.name == self.me), len(peers)
        store = FileStore(epoch_dir(spec["store"], self.epoch), timeout=self.timeout)
        count = elements(spec["op"], spec["bytes"], self.dtype.itemsize, world)
        comm = build_comm(spec, peers, peers[rank], store, self.hb)
        store.interrupt = comm.peer_failure
        self.in_op = False
        try:
            want = expected(spec, world, rank, count, self.dtype) if spec.get("check", True) else None
            self._run_steps(comm, store, rank, world, count, want)
            if self.hb is not None:
                self.hb.watch(())                 # done: peers that leave from now on have not failed
            self.result.update(count=count, times=self.times, correct=self.correct if want is not None else None,
                               counters=comm.counters(), world=world, epoch=self.epoch,
                               recovered_chunks=mcast_allgather.stats(comm).get("recovered_chunks", 0))
            finish(comm, store, rank, world)
            return False
        except (CollectiveError, StoreTimeout) as exc:
            return self._recover(exc, comm)

    def _run_steps(self, comm, store: FileStore, rank: int, world: int, count: int, want) -> None:
        while self.step < self.steps:
            x = make_input(rank, count, self.dtype)
            formed = store.barrier(f"it{self.step}", rank, world)
            if self.forming is not None and "reformed_at" not in self.forming:
                self.forming["reformed_at"] = formed          # every member of the new epoch is in
            self.in_op, t0 = True, time.monotonic()
            out = run_op(comm, self.spec, x)
            self.in_op = False
            if self.step >= self.warmup:
                self.times[self.step - self.warmup] = time.monotonic() - t0
            if want is not None:
                self.correct = self.correct and bool(np.array_equal(out, want))
            if self.forming is not None and "first_success_at" not in self.forming:
                self.forming["first_success_at"] = time.time()
            self.step += 1

    def _recover(self, exc: Exception, comm) -> bool:
        """After a failed step: abort, or agree on a new epoch's membership; True when this rank goes on in it."""
        hb, result = self.hb, self.result
        detected = min([time.time()] + [at for _, at in (hb.failed().values() if hb else [])])
        comm.close(linger=0)
        if self.policy == "abort":
            result.update(error=str(exc), error_at=detected)
            return False
        self.epoch += 1
        self.forming = {"epoch": self.epoch, "policy": self.policy, "error": str(exc), "detected_at": detected}
        result["recoveries"].append(self.forming)
        decision = agree(self.spec, self.job, hb, self.epoch, self.members, self.me, self.step, self.in_op)
        if "error" in decision:
            result.update(error=f"{self.policy} recovery after [{exc}] failed: {decision['error']}", error_at=detected)
            return False
        self.forming.update({k: decision.get(k) for k in ("decided_at", "failed", "replaced", "lost_steps")},
                            world=len(decision["members"]))
        self.members, self.step = decision["members"], decision["step"]
        if not any(m["name"] == self.me for m in self.members):
            result["left"] = decision.get("moved", {}).get(self.me, "left the job, declared failed by its peers")
            return False
        if len(self.members) < 2:
            result.update(error=f"cannot shrink further: {exc}", error_at=detected)
            return False
        # every rank alive: a network failure, not a GPU's; the step is retried, but not forever
        self.retries = self.retries + 1 if not decision["failed"] else 0
        if self.retries > MAX_RETRIES:
            result.update(error=f"no rank failed but the step failed {self.retries} times: {exc}", error_at=detected)
            return False
        result["lost_steps"] += decision["lost_steps"]
        return True

    def stop_heartbeat(self) -> None:
        if self.hb is not None:
            self.result["heartbeat"] = self.hb.stats()
            self.hb.stop(left="error" not in self.result)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    rank = CollectiveRank(spec)
    if rank.start():
        while rank.run_epoch():
            pass
        rank.stop_heartbeat()
    print(json.dumps(rank.result), flush=True)


if __name__ == "__main__":
    main()
