"""One rank of a collective benchmark, run inside an emulated GPU host by the testbed's launcher.

    python -m hosts.agents.collective_rank SPEC.json

SPEC: a CollectiveRankSpec as JSON (hosts/spec/rank.py: its fields, their meaning and defaults): the peers and
the job's store, the operation, algorithm and size, the transport (pacing, spraying, multicast scope), the
recovery policy and heartbeats, and, for a rank the job manager starts later, whom it replaces (join) or that it
came back (rejoin).
Inputs are integer-valued, drawn from a seed per rank, so every rank can compute the exact expected
result with numpy. Prints {"rank", "host", "times": [s per measured step], "windows": [[wall-clock start, end]
per measured step], "cpu": [[CPU seconds in user space, in the kernel] per measured step], "phases": [per measured step
[(phase, s), ...] of hierarchical algorithms, else None], "correct", "counters",
"recoveries", "heartbeat"}, or {"rank", "host", "error"}, or {"rank", "host", "left"} (a rank moved away).

A failed peer fails the collective: found by the heartbeats over the network (hosts/recovery/heartbeat.py:
a crash, a hang, a dead NIC or cable, a partition), by the progress watchdog (watchdog.py: a rank that beats on
but stalled), or by the transport. With `abort` the rank reports the error. Otherwise the survivors agree on who failed and where to resume (agree()), and the job
re-forms as a new epoch with its own rendezvous; the step in progress is run again. `shrink`: the
survivors go on alone, renumbered. `spare` / `migrate`: the testbed's job manager (testbed/runtime/recovery.py)
puts spare GPUs in the failed ranks' places; they join with the failed ranks' numbers and inputs, so
results still equal numpy's.

A rank that comes back (`rejoin`: its GPU restarted or its NIC mended, after the job dropped it) asks to be
admitted in the job's store; the leader (rank 0 of the epoch) writes its plan for each step boundary (who
grows the job, whether it stops) before it arrives at the step's barrier, so every member reads the same
plan once the barrier is passed; growing is a re-formation like a recovery's (agree()): a new epoch, the
newcomers in it, no step lost, the shared state copied to them from a live member.

Signals: SIGUSR1, the GPU is declared failed (the rank tells its peers and leaves); SIGUSR2, the GPU hangs (a
kernel that never returns: the main loop blocks at its next kernel, the heartbeat thread goes on); SIGCONT
ends such a hang.
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
from hosts.collectives.rank import build_comm, finish, start_heartbeat
from hosts.collectives.store import FileStore, StoreTimeout
from hosts.spec.rank import CollectiveRankSpec
from hosts.recovery import beats
from hosts.recovery.membership import Membership, admit, decide, epoch_dir
from hosts.recovery.shared_state import SharedState


MAX_RETRIES = 2       # re-formations in a row with every rank alive


SETTLE = 0.3          # seconds a peer known failed has to announce itself anyway (its path was cut, not the rank)



def cpu_seconds() -> tuple[float, float]:
    """This process's CPU time so far, its threads' included: user, system."""
    t = os.times()
    return t.user, t.system

class Grow(Exception):
    """The leader's plan at this step boundary admits ranks that came back: the job re-forms with them."""

    def __init__(self, joining: dict):
        super().__init__(f"{', '.join(joining)} rejoining")
        self.joining = joining


def agree(spec: CollectiveRankSpec, job: Membership, hb, epoch: int, members: list[dict], me: str, step: int,
          in_op: bool, links_down: list[str], joining: dict | None = None) -> dict:
    """Survivors of a failure agree on who failed and where the job resumes; returns the new epoch's
    membership {"members", "step", "failed", "lost_steps", ...} or {"error"}.

    Each survivor announces itself with its step, the peers it found failed itself, the peers it still hears
    and its own ports without carrier, and announces again while it waits whenever the peers it hears or found
    failed change. Once every member of the old epoch has announced or has been known failed for SETTLE
    seconds with no sign of life (no announced member still hears it, and it wrote no news
    since it fell silent: a rank cut off is alive and will announce; without heartbeats: has not announced within a grace period longer than the
    no-progress timeout), the
    first survivor writes the verdict (membership.decide). With `shrink` it writes the new membership too;
    with `spare` and `migrate` the testbed's job manager writes it, with spares in the failed ranks' places.
    `joining` (name -> member entry): ranks that come back, admitted into the new epoch (the verdict's "joined")."""
    names = [m["name"] for m in members]
    server = next((m.get("server") for m in members if m["name"] == me), None)
    mine = {"at": time.time(), "step": step, "in_op": in_op, "links_down": links_down, "server": server,
            "suspects": hb.suspects() if hb is not None else {}, "hears": hb.hears() if hb is not None else []}
    job.announce(epoch, me, mine)
    grace = spec.timeout_s + 2.0
    wait = grace + spec.timeout_s + 30
    deadline = time.monotonic() + wait
    while not job.has_members(epoch):
        if not job.has_verdict(epoch):
            if hb is not None:
                # what this rank hears changes while it waits: a survivor that announced within half a timeout of
                # a peer's death still heard it, and the others, judging on that, would wait for it to the deadline
                heard_now = {"suspects": hb.suspects(), "hears": hb.hears()}
                if any(mine[k] != v for k, v in heard_now.items()):
                    mine = {**mine, **heard_now}
                    job.announce(epoch, me, mine)
            announced = job.announced(epoch, names)
            if hb is not None:        # known failed, and no announced member still hears it (a cut path, not a death)
                heard = {n for a in announced.values() for n in a.get("hears", [])}
                gone = {n for n, (_, at) in hb.failed().items() if time.time() - at > SETTLE
                        and n not in heard and not hb.alive_since_failed(n)}
            else:
                gone = set(names) - set(announced) if time.time() > min(
                    a["at"] for a in announced.values()) + grace else set()
            if all(n in announced or n in gone for n in names) and me == next(n for n in names if n in announced):
                verdict = {**decide(names, announced, spec.recovery), "joined": list(joining or {}),
                           "joining": joining or {}}
                job.set_verdict(epoch, verdict)
                if spec.recovery == "shrink" or not verdict["failed"]:
                    kept = [m for m in members if m["name"] not in verdict["failed"]]
                    order = [p.name for p in spec.peers]
                    job.set_members(epoch, {**verdict, "members": admit(kept, list(verdict["joining"].values()), order)})
                    for name in verdict["joined"]:
                        job.answer_join(name, {"epoch": epoch})
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

    def __init__(self, spec: CollectiveRankSpec, signals: bool = True, cpu_share: int = 1):
        self.spec = spec
        self.cpu_share = cpu_share     # ranks in this process (rank_host.py): each reports its share of its CPU
        self.policy, self.timeout = spec.recovery, spec.timeout_s
        self.job = Membership(FileStore(spec.store, timeout=self.timeout))   # the job's rendezvous, across epochs
        join = spec.join or spec.rejoin
        self.entry = join.me.to_dict() if join else spec.peers[spec.rank].entry()
        self.me = self.entry["name"]
        self.hb = start_heartbeat(spec, self.entry)
        self.stalled = False
        if signals:       # a rank of its own process; ranks sharing one (rank_host.py) take no GPU faults
            signal.signal(signal.SIGUSR1, lambda *_: declared_failed(self.hb))
            signal.signal(signal.SIGUSR2, lambda *_: setattr(self, "stalled", True))
            signal.signal(signal.SIGCONT, lambda *_: setattr(self, "stalled", False))
        self.dtype = np.dtype(spec.dtype)
        self.warmup = spec.warmup
        measured = 0 if spec.until is not None else spec.iterations      # until: steps until the leader stops
        self.steps = 10 ** 9 if spec.until is not None else self.warmup + measured
        self.times: list[float | None] = [None] * measured
        self.phases: list[list | None] = [None] * measured
        self.windows: list[list | None] = [None] * measured     # wall clock: the fidelity guard's timed window
        self.cpu: list[list | None] = [None] * measured         # this process's CPU seconds [user, system]
        self.admits = spec.admit
        self.state: SharedState | None = None
        self.result = {"rank": spec.rank, "host": self.me, "recoveries": [], "lost_steps": 0}
        self.correct, self.retries, self.in_op = True, 0, False

    def start(self) -> bool:
        """Where this rank begins: epoch 0 with the spec's peers or, for a spare taking over a failed rank, the
        epoch it joins, where and from which step the manager's membership says. False: not needed."""
        join = {"epoch": self.spec.join.epoch} if self.spec.join else None
        if self.spec.rejoin:
            self.job.request_join(self.me, self.entry)
            wait = self.spec.rejoin_wait_s if self.spec.rejoin_wait_s is not None else self.timeout + 30
            try:
                join = self.job.joined(self.me, timeout=wait)
            except StoreTimeout as exc:
                join = {"error": str(exc)}
            if "error" in join:
                self.result["left"] = f"not admitted: {join['error']}"
                return False
        if not join:
            self.epoch, self.step, self.forming = 0, 0, None
            self.members = [p.entry() for p in self.spec.peers]
            return True
        self.epoch = join["epoch"]
        decision = self.job.members(self.epoch, timeout=self.timeout + 30, what="the job's new membership")
        if "error" in decision:
            self.result["left"] = f"not needed: {decision['error']}"
            return False
        self.members, self.step = decision["members"], decision["step"]
        self.forming = self.result["joined"] = {"epoch": self.epoch, "at": time.time(),
                                                "rejoined": self.spec.rejoin is not None}
        return True

    def run_epoch(self) -> bool:
        """The remaining steps in the current epoch's membership; True when the job goes on in a new epoch."""
        # ranks are numbered 0..n-1 in the epoch's membership; each epoch has its own rendezvous
        spec = self.spec
        peers = [Peer(rank=k, **m) for k, m in enumerate(self.members)]
        rank, world = next(p.rank for p in peers if p.name == self.me), len(peers)
        store = FileStore(epoch_dir(spec.store, self.epoch), timeout=self.timeout)
        count = elements(spec.op, spec.bytes, self.dtype.itemsize, world)
        if self.hb is not None:
            self.hb.meet(self.members)            # where each member's beats come from
        comm = build_comm(spec, peers, peers[rank], store, self.hb)
        store.interrupt = comm.peer_failure
        self.in_op = False
        try:
            want = expected(spec, world, rank, count, self.dtype) if spec.check else None
            if spec.state:
                if self.state is None:     # a spare or a rank that came back must be sent the state
                    self.state = SharedState(count, fresh=spec.join is None and spec.rejoin is None)
                if self.epoch > 0:
                    fresh = not self.state.held
                    past = self.state.sync(comm, store, rank, [m["name"] for m in self.members],
                                           [r for r in self.result["recoveries"] if r["epoch"] < self.epoch])
                    if fresh:          # the job's history before this rank came in, from a live member
                        self.result["recoveries"] = past + self.result["recoveries"]
            self._run_steps(comm, store, rank, world, count, want)
            if self.hb is not None:
                self.hb.watch(())                 # done: peers that leave from now on have not failed
            self._progress(waiting=True)          # on the others, in the teardown's barrier: not stalled
            self.result.update(count=count, times=self.times, phases=self.phases, windows=self.windows, cpu=self.cpu,
                               correct=self.correct if want is not None else None,
                               counters=comm.counters(), world=world, epoch=self.epoch,
                               recovered_chunks=mcast_allgather.stats(comm).get("recovered_chunks", 0),
                               steps=self.step)
            if self.state is not None:
                self.result["state"] = {"history": self.state.history, "worlds": self.state.worlds,
                                        "diverged": self.state.diverged, "synced": self.state.synced}
            finish(comm, store, rank, world)
            return False
        except (CollectiveError, StoreTimeout) as exc:
            return self._recover(exc, comm)
        except Grow as grow:
            return self._recover(grow, comm)

    def _run_steps(self, comm, store: FileStore, rank: int, world: int, count: int, want) -> None:
        while self.step < self.steps:
            self._kernel()
            x = make_input(rank, count, self.dtype)
            self._progress(waiting=True)
            if self.admits and rank == 0:      # before arriving: once the barrier is passed, every member reads it
                self.job.set_plan(self.epoch, self.step, self._plan())
            formed = store.barrier(f"it{self.step}", rank, world)
            if self.forming is not None and "reformed_at" not in self.forming:
                self.forming["reformed_at"] = formed          # every member of the new epoch is in
            plan = self.job.plan(self.epoch, self.step) if self.admits else {}
            if plan.get("stop"):
                break
            if plan.get("grow"):
                raise Grow(plan["grow"])
            self._progress(waiting=True)
            comm.phase_log = []                   # per-phase times of hierarchical algorithms (phases.py)
            self.in_op, t0, wall0, cpu0 = True, time.monotonic(), time.time(), cpu_seconds()
            out = run_op(comm, self.spec, x)
            self.in_op = False
            self._progress(waiting=False)
            if self.warmup <= self.step < self.warmup + len(self.times):
                self.times[self.step - self.warmup] = time.monotonic() - t0
                self.windows[self.step - self.warmup] = [wall0, time.time()]
                self.cpu[self.step - self.warmup] = [round((b - a) / self.cpu_share, 6)
                                                     for a, b in zip(cpu0, cpu_seconds())]
                if comm.phase_log:
                    self.phases[self.step - self.warmup] = comm.phase_log
            if want is not None:
                self.correct = self.correct and bool(np.array_equal(out, want))
            if self.state is not None:
                self.state.apply(self.step, world, out)
            if self.forming is not None and "first_success_at" not in self.forming:
                self.forming["first_success_at"] = time.time()
            self.step += 1

    def _plan(self) -> dict:
        """The leader's plan for this step boundary: stop (the run's time is up), or admit the ranks that
        came back (asked to rejoin and are not members)."""
        if self.spec.until is not None and time.time() >= self.spec.until:
            return {"stop": True}
        members = {m["name"] for m in self.members}
        return {"grow": {n: r["me"] for n, r in self.job.join_requests().items() if n not in members}}

    def _kernel(self) -> None:
        """Where the rank's compute kernels run (a step's input is made here). A GPU hang (SIGUSR2, the fault
        gpu-stall) blocks the main loop here, as a kernel that never returns blocks its stream; the heartbeat
        thread goes on beating, so only the peers' progress watchdog can tell."""
        while self.stalled:
            time.sleep(0.05)

    def _progress(self, waiting: bool) -> None:
        if self.hb is not None:
            self.hb.progress(waiting)

    def _detection(self) -> tuple[float, str]:
        """When the first failure was found (wall time) and how: heartbeats, watchdog, declared, or transport."""
        failed = self.hb.failed() if self.hb is not None else {}
        if not failed:
            return time.time(), "transport"
        first = min(failed, key=lambda n: failed[n][1])
        return failed[first][1], self.hb.detected_by(first) or "heartbeats"

    def _recover(self, exc: Exception, comm) -> bool:
        """After a failed step: abort, or agree on a new epoch's membership; True when this rank goes on in it.
        Growing (exc a Grow) takes the same way, with no failure: the new epoch admits the newcomers."""
        hb, result = self.hb, self.result
        self._progress(waiting=True)
        growing = isinstance(exc, Grow)
        detected, by = self._detection()
        comm.close(linger=0)
        if self.policy == "abort" and not growing:
            result.update(error=str(exc), error_at=detected, detected_by=by)
            return False
        self.epoch += 1
        self.forming = {"epoch": self.epoch, "policy": self.policy, "error": str(exc), "detected_at": detected,
                        "detected_by": by}
        if growing:            # not a failure: no detection (the testbed matches failures by it)
            self.forming = {"epoch": self.epoch, "policy": "rejoin", "requested_at": time.time()}
        result["recoveries"].append(self.forming)
        decision = agree(self.spec, self.job, hb, self.epoch, self.members, self.me, self.step, self.in_op,
                         beats.links_down(self.entry), exc.joining if growing else None)
        if "error" in decision:
            result.update(error=f"{self.policy} recovery after [{exc}] failed: {decision['error']}", error_at=detected)
            return False
        self.forming.update({k: decision.get(k) for k in ("decided_at", "failed", "cut_off", "replaced", "lost_steps",
                                                          "joined")}, world=len(decision["members"]))
        self.members, self.step = decision["members"], decision["step"]
        if self.state is not None:
            self.state.resume_at(self.step)
        if not any(m["name"] == self.me for m in self.members):
            result["left"] = decision.get("moved", {}).get(self.me, "left the job, declared failed by its peers")
            return False
        if len(self.members) < 2:
            result.update(error=f"cannot shrink further: {exc}", error_at=detected)
            return False
        # every rank alive: a network failure, not a GPU's; the step is retried, but not forever
        self.retries = self.retries + 1 if not decision["failed"] and not decision.get("joined") else 0
        if self.retries > MAX_RETRIES:
            result.update(error=f"no rank failed but the step failed {self.retries} times: {exc}", error_at=detected)
            return False
        result["lost_steps"] += decision["lost_steps"]
        return True

    def stop_heartbeat(self) -> None:
        if self.hb is not None:
            self.result["heartbeat"] = self.hb.stats()
            self.hb.stop(left="error" not in self.result)


def run(spec: CollectiveRankSpec, signals: bool = True, cpu_share: int = 1) -> dict:
    """One rank's whole run; its result."""
    rank = CollectiveRank(spec, signals, cpu_share)
    if rank.start():
        while rank.run_epoch():
            pass
        rank.stop_heartbeat()
    return rank.result


def main() -> None:
    print(json.dumps(run(CollectiveRankSpec.load(sys.argv[1]))), flush=True)


if __name__ == "__main__":
    main()
