"""One rank of a training iteration, as a library; its program is hosts/agents/training_rank.py (with the SPEC).

The rank joins three groups (hosts.collectives.layout): its TP group in the HB domain, its DP group and its
pipeline neighbours. Each micro-batch pass of the schedule receives its input from the neighbouring stage, then
per layer alternates emulated compute (a sleep of the GPU model's time, 2 units forward, 2 recomputation, 4
backward per layer) with a TP AllReduce of the activations (2 per layer and pass, as Megatron's attention and MLP
blocks), then sends its output on; the DP AllReduce of the gradients ends the iteration. Pipeline sends are
separate from receives: messages fit the receiver's pre-posted slots, so a send completes without the receiver
(its duration is the transfer) and a receive's duration is waiting plus transfer.

Every payload is integer-valued and derived from (what, iteration, index, sender), so every rank knows what it
must receive: TP and DP AllReduce results are compared with numpy's sum of the members' inputs, activations and
gradients with what the sender sent. Prints {"rank", "stage", "iterations": [per-phase seconds, start, end],
"correct", "sent": {"tp"|"pp"|"dp": {peer: payload bytes}}, "wire_sent": {peer: IP bytes}, "counters"}
or {"rank", "error"}.
"""
from __future__ import annotations

import time
import zlib

import numpy as np

from hosts.collectives import algorithms
from hosts.collectives.layout import Layout
from hosts.collectives.schedule import SCHEDULES
from hosts.collectives.store import FileStore
from hosts.collectives.subcomm import SubComm
from hosts.spec.rank import TrainingRankSpec

SPREAD = 4096          # payloads are windows into one random array, at offsets derived from their key


class Payloads:
    """Deterministic integer-valued arrays every rank can recompute: no array is ever built twice the hard way."""

    def __init__(self, count: int, dtype):
        self.base = np.random.default_rng(20).integers(-8, 8, count + SPREAD).astype(dtype)

    def get(self, count: int, *key) -> np.ndarray:
        off = zlib.crc32(repr(key).encode()) % SPREAD
        return self.base[off: off + count]


class TrainingRank:
    def __init__(self, spec: TrainingRankSpec, comm):
        self.spec, self.comm = spec, comm
        self.layout = Layout(tp=spec.plan.tp, pp=spec.plan.pp, dp=spec.plan.dp)
        me = comm.rank
        self.stage = self.layout.coords(me)[2]
        self.sent = {"tp": {}, "pp": {}, "dp": {}}
        self.tp = SubComm(comm, self.layout.tp_group(me), "tp", self.sent["tp"])
        self.dp = SubComm(comm, self.layout.dp_group(me), "dp", self.sent["dp"])
        self.prev, self.next = self.layout.prev_stage(me), self.layout.next_stage(me)
        self.m = spec.micro_batches
        self.steps = SCHEDULES[spec.schedule](self.stage, self.layout.pp, self.m)
        self.recompute = spec.recompute
        self.unit_s = spec.compute_s / (spec.layers * (6 + 2 * self.recompute))
        self.act_n, self.grad_n = spec.activation_count, spec.gradient_count
        self.dtype = np.dtype(spec.dtype)
        self.data = Payloads(max(self.act_n, self.grad_n), self.dtype)
        self.check = spec.check
        self.correct = {"tp": None, "pp": None, "dp": None}

    # -- bookkeeping --------------------------------------------------------------------------
    def _verdict(self, what: str, ok: bool) -> None:
        self.correct[what] = ok and self.correct[what] is not False

    def connect(self) -> None:
        """Open the queue pairs to every peer before the clock starts, in ascending peer order on every rank
        (a global order of the pairs, so no two ranks wait on each other's rendezvous in a cycle)."""
        self.comm.op = "connect"
        for q in self.layout.peers(self.comm.rank):
            self.comm.channel(q)

    # -- the passes ---------------------------------------------------------------------------
    def compute(self, units: int) -> None:
        t0 = time.monotonic()
        time.sleep(units * self.unit_s)
        self.t["compute_s"] += time.monotonic() - t0

    def tp_allreduce(self) -> None:
        if self.layout.tp == 1:
            return
        k, self.tp_ops = self.tp_ops, self.tp_ops + 1
        x = self.data.get(self.act_n, "tp", self.it, k, self.comm.rank).copy()
        t0 = time.monotonic()
        algorithms.allreduce(self.tp, x, "sum", self.spec.tp_algo)
        t1 = time.monotonic()
        self.t["tp_s"] += t1 - t0
        if self.check:
            want = np.sum([self.data.get(self.act_n, "tp", self.it, k, g) for g in self.tp.members], axis=0,
                          dtype=self.dtype)
            self._verdict("tp", bool(np.array_equal(x, want)))
            self.t["check_s"] += time.monotonic() - t1

    def receive(self, peer: int, what: str, mb: int) -> None:
        self.comm.op = f"pp receive {what} of micro-batch {mb}"
        buf = np.empty(self.act_n, dtype=self.dtype)
        t0 = time.monotonic()
        self.comm.exchange(recvs=[(peer, buf)])
        t1 = time.monotonic()
        self.t["pp_recv_s"] += t1 - t0
        if self.check:
            self._verdict("pp", bool(np.array_equal(buf, self.data.get(self.act_n, what, self.it, mb, peer))))
            self.t["check_s"] += time.monotonic() - t1

    def send(self, peer: int, what: str, mb: int) -> None:
        self.comm.op = f"pp send {what} of micro-batch {mb}"
        arr = self.data.get(self.act_n, what, self.it, mb, self.comm.rank)
        t0 = time.monotonic()
        self.comm.exchange(sends=[(peer, arr)])
        dt = time.monotonic() - t0
        self.t["pp_send_s"] += dt
        self.t["activation_sends" if what == "activation" else "gradient_sends"].append(dt)
        self.sent["pp"][peer] = self.sent["pp"].get(peer, 0) + arr.nbytes

    def forward(self, mb: int) -> None:
        if self.prev is not None:
            self.receive(self.prev, "activation", mb)
        for _ in range(self.spec.layers):
            for _block in ("attention", "mlp"):
                self.compute(1)
                self.tp_allreduce()
        if self.next is not None:
            self.send(self.next, "activation", mb)

    def backward(self, mb: int) -> None:
        if self.next is not None:
            self.receive(self.next, "gradient", mb)
        for _ in range(self.spec.layers):
            if self.recompute:                        # the forward again, its activations were not kept
                for _block in ("attention", "mlp"):
                    self.compute(1)
                    self.tp_allreduce()
            for _block in ("mlp", "attention"):
                self.compute(2)
                self.tp_allreduce()
        if self.prev is not None:
            self.send(self.prev, "gradient", mb)

    def dp_allreduce(self) -> None:
        if self.layout.dp == 1:
            return
        x = self.data.get(self.grad_n, "dp", self.it, self.comm.rank).copy()
        t0 = time.monotonic()
        algorithms.allreduce(self.dp, x, "sum", self.spec.dp_algo)
        t1 = time.monotonic()
        self.t["dp_s"] += t1 - t0
        if self.check:
            want = np.sum([self.data.get(self.grad_n, "dp", self.it, g) for g in self.dp.members], axis=0,
                          dtype=self.dtype)
            self._verdict("dp", bool(np.array_equal(x, want)))
            self.t["check_s"] += time.monotonic() - t1

    def iteration(self, it: int) -> dict:
        self.it, self.tp_ops = it, 0
        self.t = {"compute_s": 0.0, "tp_s": 0.0, "pp_send_s": 0.0, "pp_recv_s": 0.0, "dp_s": 0.0, "check_s": 0.0,
                  "activation_sends": [], "gradient_sends": []}
        start = time.monotonic()
        for kind, mb in self.steps:
            (self.forward if kind == "F" else self.backward)(mb)
        self.dp_allreduce()
        end = time.monotonic()
        return {"start": start, "end": end, "tp_allreduces": self.tp_ops, **self.t}

    def wire_sent(self) -> dict[int, int]:
        return {q: sum(qp.counters.get("tx_bytes", 0) for qp in ch.qps) for q, ch in self.comm.channels.items()}


def run_rank(spec: TrainingRankSpec, comm, store: FileStore) -> dict:
    """Connect, then run the iterations between barriers; returns this rank's measurements."""
    rank = TrainingRank(spec, comm)
    rank.connect()
    out = []
    for it in range(spec.iterations):
        store.barrier(f"it{it}", comm.rank, comm.world)
        out.append(rank.iteration(it))
    return {"rank": comm.rank, "stage": rank.stage, "iterations": out, "correct": rank.correct,
            "sent": rank.sent, "wire_sent": rank.wire_sent(), "counters": comm.counters()}
