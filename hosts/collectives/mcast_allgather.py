"""Multicast AllGather and Broadcast (Khalilov, Di Girolamo, Hoefler et al., SC'24).

Each shard is cut into MTU-sized chunks sent as UD multicast to the group (the switches replicate),
the chunk id in the immediate data. Senders form R concurrent chains along the ring: the first of a
chain starts, every other waits for a zero-byte activation from its predecessor (its left ring
neighbour), multicasts its shard, then activates its successor. R senders share every receiver's
link, so each is paced at the NIC rate / min(R, ranks - 1). The AllGather uses one chain per rank
(R = ranks): every rank sends at once at 1/(ranks - 1) of the rate, so every receiver's link is busy
from start to end and the time is the ring's, (ranks - 1) shards over the NIC; with fewer chains the
current senders' own links idle while they send, and the time grows by ranks / (ranks - 1) at best.
Receivers keep a bitmap of chunks, no per-packet ACKs; after a shard's chunks its sender multicasts
a zero-byte END.
Chunks still missing once their sender is done are read from the right ring neighbour with one RDMA
READ per contiguous gap, once that neighbour reports the shard complete (COMPLETE; it publishes its
buffer's address and rkey at set-up; a shard's owner reports it once all its chunks are out). The
sender is known done when its last chunk, its END or a chunk of the next shard in its chain arrived:
a chunk's path from one sender is first in, first out, so what came before those and is missing was
lost. Only when the last chunk and the END are both lost does a receiver guess: a grace after the
right neighbour's COMPLETE, long enough for the queues ahead of our port to drain (a COMPLETE travels
another path and overtakes chunks still queued for us), then the deadline (derived from size and
link rate) as the last resort. A rank tells its right
neighbour FIN when it needs nothing more from it, and returns once its left neighbour's FIN came:
buffers stay valid while they are read. On a fabric where multicast reaches only the sender's rail (rail-only), the AllGather
is hierarchical: multicast within each rail, then a ring over the HB domain.

Group address: 239.x.y.z from a hash of the communicator's store, the operation and the ranks, so
every rank derives the same one. Control messages and data carry a 4-bit epoch; data of an earlier
operation is ignored (data of a later one is dropped and recovered).
"""
from __future__ import annotations

import time
import zlib

import numpy as np

from hosts.collectives import groups
from hosts.collectives.store import StoreTimeout
from hosts.rdma import GRH_LEN, Access, AddressHandle, QPInfo, QPType, RecvWR, SendWR, WCOpcode, WROpcode

MCAST_QPN, QKEY = 0xFFFFFF, 0x4D434147
RECV_SLOTS, SEND_DEPTH = 512, 64
CHAINS = 2                   # Broadcast's (one sender: any); the AllGather runs one chain per rank
GRACE_CHUNKS = 4             # per-sender chunk times after the right neighbour's COMPLETE that ours may still arrive
ACTIVATE, COMPLETE, FIN = 1, 2, 3
END = (1 << 18) - 1          # the chunk number of a shard's END: its sender sent every chunk before it
K_CTRL_RECV, K_CTRL_SEND, K_DATA, K_READ = 1, 2, 3, 4     # wr_id >> 61


def group_address(*parts) -> str:
    """A deterministic multicast address in 239.0.0.0/8 (never 239.0.0.x)."""
    h = zlib.crc32("|".join(map(str, parts)).encode()) % ((1 << 24) - 256) + 256
    return f"239.{h >> 16 & 255}.{h >> 8 & 255}.{h & 255}"


def installed_key(address: str) -> str:
    """The store key under which the testbed lists the members of `address` whose tree every switch holds."""
    return f"mcast/{address}/installed"


def data_imm(epoch: int, shard: int, chunk: int) -> int:
    return (epoch & 15) << 28 | shard << 18 | chunk          # 1024 shards of 256 Ki - 1 chunks (the last number: END)


def ctrl_imm(kind: int, epoch: int, value: int = 0) -> int:
    return kind << 30 | (epoch & 15) << 26 | value


def gaps(have: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous runs [lo, hi) of missing chunks in a bitmap."""
    edges = np.flatnonzero(np.diff(np.concatenate(([1], have.astype(np.int8), [1]))))
    return [(int(edges[i]), int(edges[i + 1])) for i in range(0, len(edges), 2)]


def deadline_s(receive_bytes: int, rate_bps: float | None) -> float:
    """When to stop waiting for multicast: 1.5x the time to receive everything at the link rate."""
    return 1.5 * receive_bytes * 8 / (rate_bps or 1e9) + 0.2


def chains_of(n: int, r: int) -> list[list[int]]:
    """r contiguous runs of ring positions (each sender's successor is its right neighbour)."""
    return [list(c) for c in np.array_split(np.arange(n), min(r, n)) if len(c)]


class Multicast:
    """A UD QP in one multicast group with RC links to both ring neighbours, kept per communicator."""

    def __init__(self, comm, group: list[int], op: str, chains: int = CHAINS):
        self.comm, self.group, self.chains = comm, group, chains
        self.pos = group.index(comm.rank)
        self.left, self.right = group[self.pos - 1], group[(self.pos + 1) % len(group)]
        dev, pd, _ = comm.device("nic")
        self.pd, self.rate = pd, comm.rate_limit_bps.get("nic")
        self.cq = dev.create_cq(16384)
        self.address = group_address(getattr(comm.store, "path", ""), op, *group)
        self.ud = dev.create_qp(pd, QPType.UD, self.cq, max_send_wr=SEND_DEPTH * 2, max_recv_wr=RECV_SLOTS,
                                rate_limit_bps=self.rate and self.rate / chains, qkey=QKEY)
        self.ah = AddressHandle(self.address, MCAST_QPN, QKEY)
        self.chunk = dev.mtu                     # UD payload: one RoCE MTU of the NIC
        self.slot = GRH_LEN + self.chunk
        self.rbuf = np.zeros(RECV_SLOTS * self.slot, dtype=np.uint8)
        self.rmr = pd.reg_mr(self.rbuf, Access.LOCAL_WRITE)
        self.ctl = np.zeros(4 * 64, dtype=np.uint8)
        self.cmr = pd.reg_mr(self.ctl, Access.LOCAL_WRITE)
        self.ud.attach_mcast(self.address)                        # the kernel sends the IGMP report
        for i in range(RECV_SLOTS):
            self.ud.post_recv(RecvWR([self.rmr.sge(i * self.slot, self.slot)], wr_id=i))
        self.key = f"mcast/{self.address}"
        self.to_right = self._link("right")      # our reads, activations and FIN go right
        self.to_left = self._link("left")        # COMPLETE goes left; the left neighbour reads from us
        for qp, peer, theirs in ((self.to_right, self.right, "left"), (self.to_left, self.left, "right")):
            qp.connect(QPInfo.from_dict(comm.store.get(f"{self.key}/{peer}/{theirs}", what=f"rank {peer} to connect")))
        store = comm.store
        store.set(f"{self.key}/joined/{comm.rank}", 1)
        for r in group:
            store.get(f"{self.key}/joined/{r}", what=f"rank {r} to join {self.address}")
        if comm.trees_confirmed:
            self._await_trees([comm.peers[r].name for r in group])
        else:
            time.sleep(0.3)          # no one reports the switches' rules (in-process runs): give them a moment
        self.epoch, self.buf, self.mr, self.peer_mr, self.gen = 0, None, None, None, 0
        self.stash: list[tuple[int, int]] = []                     # control messages of a later epoch
        self.stats = {"recovered_chunks": 0, "reads": 0, "reads_after_grace": 0, "reads_at_deadline": 0,
                      "multicast_chunks": 0, "dropped_chunks": 0}

    def _await_trees(self, hosts: list[str]) -> None:
        """Until the testbed reports every switch holds this group's tree with all `hosts` in it
        (testbed/runtime/multicast_ready.py): chunks sent while it still changes go partly uncounted."""
        deadline = time.monotonic() + self.comm.timeout
        what = f"the switches to install the multicast tree of {self.address}"
        while not set(hosts) <= set(self.comm.store.get(installed_key(self.address), what=what,
                                                        timeout=max(0.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise StoreTimeout(f"waited {self.comm.timeout:.0f} s for {what}")
            time.sleep(0.02)

    def _link(self, side: str):
        dev, _, _ = self.comm.device("nic")
        qp = dev.create_qp(self.pd, QPType.RC, self.cq, rate_limit_bps=self.rate, timeout=0.2, retry_cnt=7)
        for i in range(64):
            qp.post_recv(RecvWR([self.cmr.sge(0, 4)], wr_id=K_CTRL_RECV << 61))
        self.comm.store.set(f"{self.key}/{self.comm.rank}/{side}", qp.info().to_dict())
        return qp

    def buffer(self, nbytes: int) -> np.ndarray:
        """The registered working buffer (the neighbour reads it); re-registered when it grows."""
        if self.buf is None or len(self.buf) < nbytes:
            self.buf = np.zeros(nbytes, dtype=np.uint8)
            self.mr = self.pd.reg_mr(self.buf, Access.LOCAL_WRITE | Access.REMOTE_READ)
            self.gen += 1
            store = self.comm.store
            store.set(f"{self.key}/mr{self.gen}/{self.comm.rank}", [self.mr.addr, self.mr.rkey])
            self.peer_mr = store.get(f"{self.key}/mr{self.gen}/{self.right}", what=f"rank {self.right}'s buffer")
        return self.buf

    def ctrl(self, qp, kind: int, value: int = 0) -> None:
        qp.post_send(SendWR(WROpcode.SEND_WITH_IMM, [], wr_id=K_CTRL_SEND << 61, imm=ctrl_imm(kind, self.epoch, value)))

    # -- one operation -------------------------------------------------------------------------
    def run(self, shards: list[tuple[int, int, int]]) -> None:
        """shards[i] = (owner position in the group, lo, hi) bytes of the buffer; afterwards every
        rank's buffer holds every shard. Shard i's sender follows shard i-1's in its chain."""
        self.epoch = (self.epoch + 1) & 15
        op = _Operation(self, shards)
        while True:
            op.send_chunks()
            op.read_gaps()
            if op.finished():
                return
            for wc in op.poll():
                op.completed(wc)


class _Operation:
    """The state of one Multicast.run: which chunks this rank has, what it sends and reads, the chains'
    activations and the FIN handshake with both neighbours."""

    def __init__(self, mc: Multicast, shards: list[tuple[int, int, int]]):
        self.mc, self.shards = mc, shards
        self.n = n = len(shards)
        self.counts = counts = [max(1, -(-(hi - lo) // mc.chunk)) for _, lo, hi in shards]
        self.have = [np.full(c, owner == mc.pos) for (owner, _, _), c in zip(shards, counts)]
        self.missing = sum(int((~h).sum()) for h in self.have)
        self.done_sending = [owner == mc.pos for owner, _, _ in shards]    # the sender of the shard is done
        self.right_has: dict[int, float] = {}     # shards the right neighbour said it has (COMPLETE): when
        self.requested = [np.zeros(c, bool) for c in counts]
        self.chain_next: dict[int, int] = {}
        chains = chains_of(n, mc.chains)
        senders = max(1, min(len(chains), len(mc.group) - 1))
        if mc.rate:          # a receiver hears at most one sender per chain, never itself
            mc.ud.set_rate_limit(mc.rate / senders)
        for chain in chains:
            for a, b in zip(chain, chain[1:]):
                self.chain_next[a] = b
        self.chain_prev = {b: a for a, b in self.chain_next.items()}
        self.mine = mine = [i for i, (owner, _, _) in enumerate(shards) if owner == mc.pos]
        self.to_send = [] if not mine or mine[0] in self.chain_prev else self._all_my_chunks()
        self.active = bool(self.to_send)
        self.sends_out = self.reads_out = 0
        self.fin_from_left, self.fin_sent = False, False
        started = time.monotonic()
        self.late = started + deadline_s(sum(hi - lo for _, lo, hi in shards), mc.rate)
        # how long our port's queue may still hold a shard's chunks after the right neighbour had them all:
        # a few chunks at one sender's share of the rate (measured: up to 10 chunks at the full rate)
        self.grace = 0.002 + GRACE_CHUNKS * mc.chunk * 8 * senders / (mc.rate or 1e9)
        self.last_progress = started
        pending_ctrl, mc.stash = mc.stash, []
        for imm, from_left in pending_ctrl:
            self.on_ctrl(imm, from_left)

    def _all_my_chunks(self) -> list[tuple[int, int]]:
        return [(i, c) for i in self.mine for c in [*range(self.counts[i]), END]]

    def on_ctrl(self, imm: int, from_left: bool) -> None:
        mc = self.mc
        kind, epoch, value = imm >> 30, imm >> 26 & 15, imm & ((1 << 26) - 1)
        if epoch != mc.epoch:
            if 0 < (epoch - mc.epoch) & 15 < 8:          # a neighbour already in the next operation
                mc.stash.append((imm, from_left))
        elif kind == ACTIVATE:
            self.to_send = self._all_my_chunks()
            self.active = True
        elif kind == COMPLETE:
            self.right_has.setdefault(value, time.monotonic())
        elif kind == FIN:
            self.fin_from_left = True

    def send_chunks(self) -> None:
        """Multicast this rank's chunks, SEND_DEPTH in flight; once all are out, activate the chain's next sender."""
        mc = self.mc
        while self.to_send and self.sends_out < SEND_DEPTH:
            i, c = self.to_send.pop(0)
            _, lo, hi = self.shards[i]
            off = lo + c * mc.chunk
            sges = [] if c == END else [mc.mr.sge(off, min(mc.chunk, hi - off))]
            mc.ud.post_send(SendWR(WROpcode.SEND_WITH_IMM, sges, wr_id=K_DATA << 61,
                                   imm=data_imm(mc.epoch, i, c), ah=mc.ah))
            self.sends_out += 1
        if self.active and not self.to_send and not self.sends_out:
            self.active = False
            for i in self.mine:           # all out: the left neighbour may read them
                mc.ctrl(mc.to_left, COMPLETE, i)
            if self.mine[-1] in self.chain_next:
                mc.ctrl(mc.to_right, ACTIVATE)

    def read_gaps(self) -> None:
        """Recovery: one READ per gap, from the right neighbour, of shards it has and we still miss."""
        mc = self.mc
        now = time.monotonic()
        for i in range(self.n):
            if i in self.right_has and not self.have[i].all() and (
                    self.done_sending[i] or now > self.late or now - self.right_has[i] > self.grace):
                for lo, hi in gaps(self.have[i] | self.requested[i]):
                    _, slo, shi = self.shards[i]
                    off = slo + lo * mc.chunk
                    length = min(shi, slo + hi * mc.chunk) - off
                    mc.to_right.post_send(SendWR(WROpcode.RDMA_READ, [mc.mr.sge(off, length)],
                                                 wr_id=K_READ << 61 | i << 40 | lo << 20 | hi,
                                                 remote_addr=mc.peer_mr[0] + off, rkey=mc.peer_mr[1]))
                    self.requested[i][lo:hi] = True
                    self.reads_out += 1
                    mc.stats["reads"] += 1
                    if not self.done_sending[i]:     # a guess: the last chunk and the END were both lost
                        mc.stats["reads_at_deadline" if now - self.right_has[i] <= self.grace
                                 else "reads_after_grace"] += 1

    def finished(self) -> bool:
        """Tell the right neighbour FIN once nothing is missing; done when the left one's FIN came too
        and nothing of ours is in flight."""
        if not self.missing and not self.fin_sent:
            self.mc.ctrl(self.mc.to_right, FIN)
            self.fin_sent = True
        return (self.fin_sent and self.fin_from_left and not self.sends_out and not self.reads_out
                and not self.active)

    def poll(self) -> list:
        """The completions now (waiting up to 50 ms); fails the collective after comm.timeout without any."""
        mc, comm = self.mc, self.mc.comm
        wcs = mc.cq.poll(256) or mc.cq.wait(1, timeout=0.05)
        if wcs:
            self.last_progress = time.monotonic()
        else:
            comm.check_peers()                   # a member whose heartbeats stopped
        if not wcs and time.monotonic() - self.last_progress > comm.timeout:
            raise comm.fail(f"multicast {mc.address}: no progress for {comm.timeout:.0f} s "
                            f"({self.missing} chunks missing, FIN from left: {self.fin_from_left})")
        return wcs

    def completed(self, wc) -> None:
        mc = self.mc
        if not wc.ok:
            raise mc.comm.fail(f"multicast {mc.address}: {wc.opcode.name} failed: {wc.status.name}")
        kind = wc.wr_id >> 61
        if wc.qp_num == mc.ud.qpn and wc.opcode == WCOpcode.RECV:
            self.on_chunk(wc)
        elif wc.opcode in (WCOpcode.RECV, WCOpcode.RECV_RDMA_WITH_IMM):
            qp = mc.to_left if wc.qp_num == mc.to_left.qpn else mc.to_right
            qp.post_recv(RecvWR([mc.cmr.sge(0, 4)], wr_id=wc.wr_id))
            self.on_ctrl(wc.imm or 0, qp is mc.to_left)
        elif kind == K_DATA:
            self.sends_out -= 1
        elif kind == K_READ:
            self.reads_out -= 1
            i, lo, hi = wc.wr_id >> 40 & 1023, wc.wr_id >> 20 & 0xFFFFF, wc.wr_id & 0xFFFFF
            got = int((~self.have[i][lo:hi]).sum())
            self.have[i][lo:hi] = True
            self.missing -= got
            mc.stats["recovered_chunks"] += got
            if self.have[i].all():
                mc.ctrl(mc.to_left, COMPLETE, i)

    def on_chunk(self, wc) -> None:
        """A multicast chunk: repost its receive slot, copy it in unless stale or a duplicate."""
        mc = self.mc
        mc.ud.post_recv(RecvWR([mc.rmr.sge(wc.wr_id * mc.slot, mc.slot)], wr_id=wc.wr_id))
        imm = wc.imm or 0
        i, c = imm >> 18 & 1023, imm & END
        if imm >> 28 != mc.epoch or i >= self.n or (c >= self.counts[i] and c != END):
            mc.stats["dropped_chunks"] += 1
            return
        if c >= self.counts[i] - 1:                  # the last chunk or the END: all before it came or was lost
            self.done_sending[i] = True
        if i in self.chain_prev:
            self.done_sending[self.chain_prev[i]] = True
        if c == END:
            return
        if self.have[i][c]:
            return                                   # a duplicate: never copied twice
        _, lo, hi = self.shards[i]
        off = lo + c * mc.chunk
        length = wc.byte_len - GRH_LEN
        src = wc.wr_id * mc.slot + GRH_LEN
        mc.buf[off: off + length] = mc.rbuf[src: src + length]
        self.have[i][c] = True
        self.missing -= 1
        mc.stats["multicast_chunks"] += 1
        if self.have[i].all():
            mc.ctrl(mc.to_left, COMPLETE, i)


def context(comm, group: list[int], op: str, chains: int = CHAINS) -> Multicast:
    """The communicator's multicast set-up for this group of ranks and operation (made once)."""
    cache = comm.__dict__.setdefault("multicast", {})
    key = (op, tuple(group))
    if key not in cache:
        cache[key] = Multicast(comm, group, op, chains)
    return cache[key]


def stats(comm) -> dict:
    total: dict[str, int] = {}
    for m in comm.__dict__.get("multicast", {}).values():
        for k, v in m.stats.items():
            total[k] = total.get(k, 0) + v
    return total


def gather_group(comm, group: list[int], shard: np.ndarray) -> np.ndarray:
    """AllGather over `group` (ring order): block i of the result is the shard of group[i]."""
    m = shard.nbytes
    ctx = context(comm, group, "allgather", chains=len(group))
    buf = ctx.buffer(len(group) * m)
    pos = group.index(comm.rank)
    buf[pos * m:(pos + 1) * m] = shard.view(np.uint8)
    ctx.run([(i, i * m, (i + 1) * m) for i in range(len(group))])
    return buf[:len(group) * m].view(shard.dtype).copy()


def allgather(comm, shard: np.ndarray, scope: str = "fabric") -> np.ndarray:
    """scope "fabric": one group over comm.ring; "rail": multicast per rail, then the HB ring."""
    shard = np.ascontiguousarray(shard)
    n, m = comm.world, len(shard)
    out = np.empty(n * m, dtype=shard.dtype)
    if n == 1:
        out[:] = shard
        return out
    if scope != "rail":
        ring = comm.ring
        blocks = gather_group(comm, ring, shard).reshape(n, m)
        for i, rank in enumerate(ring):
            out[rank * m:(rank + 1) * m] = blocks[i]
        return out
    servers, per = groups.check_grid(comm)
    rail = groups.rail_group(comm)
    mid = gather_group(comm, rail, shard) if len(rail) > 1 else shard.copy()
    return groups.gather_hb_stage(comm, mid, out, servers, per, m)


def broadcast(comm, x: np.ndarray, root: int = 0) -> np.ndarray:
    """The root multicasts x to comm.ring; the others repair losses from their right neighbour."""
    if comm.world == 1:
        return x
    ctx = context(comm, comm.ring, "broadcast")
    buf = ctx.buffer(x.nbytes)
    if comm.rank == root:
        buf[:x.nbytes] = np.ascontiguousarray(x).view(np.uint8).reshape(-1)
    ctx.run([(comm.ring.index(root), 0, x.nbytes)])
    x[...] = buf[:x.nbytes].view(x.dtype).reshape(x.shape)
    return x
